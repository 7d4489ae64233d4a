"""The ``--freq`` option: DVFS level of every unit from ``max``, ``min`` or a per-unit list."""
from __future__ import annotations

import dataclasses

from pipeplan.core.errors import InputError
from pipeplan.formulations.mapping.plan import Plan, plan_from_string
from pipeplan.formulations.mapping.problem import MappingProblem


def levels_for(problem: MappingProblem, plan: Plan, freq: str, source: str = "--freq") -> dict[str, str]:
    """unit -> level name. ``max``/``min`` (or a single level name) apply to every unit's PU;
    otherwise a comma-separated list with one level per unit (a level name of that unit's PU,
    e.g. ``5`` or ``4.7``; for the GPU's ``gpu.host`` levels ``4`` means ``4`` with host max)."""
    prof = problem.profile
    place = plan.placement()
    names = [u.name for u in problem.units]
    specs = [s.strip() for s in freq.split(",")]
    if len(specs) == 1:  # max, min, or one level name for every unit
        specs = specs * len(names)
    if len(specs) != len(names):
        raise InputError(source, "", f"{len(specs)} levels given, the instance has {len(names)} units")
    out = {}
    for i, (u, spec) in enumerate(zip(names, specs)):
        pu = place[u][1]
        try:
            out[u] = prof.level(pu, spec)
        except KeyError as exc:
            raise InputError(source, f"level {i + 1}", str(exc.args[0])) from None
    return out


def plan_for(problem: MappingProblem, mapping: str, mode: str = "pipelined", freq: str = "max",
             source: str = "--mapping", freq_source: str = "--freq") -> Plan:
    """The plan of a mapping string with its DVFS levels (``--freq`` syntax); ``source`` and
    ``freq_source`` name where each came from (an option, or a batch file's line)."""
    units = tuple(u.name for u in problem.units)
    plan = plan_from_string(units, problem.pu_names, mapping, mode=mode, instance=problem.name, source=source)
    return dataclasses.replace(plan, levels=levels_for(problem, plan, freq, freq_source))

"""Exact mapping solver on CP-SAT: min period, latency or energy, optionally under epsilon
bounds on the others, with a lexicographic tie-break, warm-started from the best heuristic.

The primary objective is solved first; if it is proven optimal, a second solve minimises the
tie-break objective (by default latency for period, period for latency and energy; any other
objective with ``tie_break=``, or none) with the primary held at its optimum. The returned
plan is re-scored by the evaluator; the bound is CP-SAT's best bound of the primary objective.
"""
from __future__ import annotations

import time

import pipeplan
from pipeplan.registry import register
from pipeplan.result import Quality, SolveResult, Termination
from pipeplan.solvers.mapping.common import scored_result
from pipeplan.solvers.mapping.cpsat_model import AXES, TIE_BREAK, MappingCpModel, from_model, to_model

HEURISTICS = ("pipeline-dp", "heft", "single")


def best_heuristic_plan(problem, objective: str):
    """The best plan of the cheap heuristics for ``objective`` (a warm start), or None."""
    from pipeplan.formulations.mapping.plan import plan_from_dict
    key = AXES[objective]
    results = [pipeplan.solve(problem, h) for h in HEURISTICS]
    ok = [r for r in results if r.plan]
    if not ok:
        return None
    return plan_from_dict(min(ok, key=lambda r: r.objectives[key]).plan)


def lexicographic(model: MappingCpModel, objective: str, *, time_limit, seed, threads, tie_break: str | None):
    """Solve ``objective`` then ``tie_break`` (an axis, or None); returns (outcome, primary
    optimum proven?, bound of the primary)."""
    began = time.perf_counter()
    first = model.solve(objective, time_limit=time_limit, seed=seed, threads=threads)
    if first.status != "optimal" or not tie_break:
        return first, first.status == "optimal", first.bound
    model.add_upper_bound(objective, first.values[objective])
    model.hint(first.plan)
    left = None if time_limit is None else max(0.05, time_limit - (time.perf_counter() - began))
    second = model.solve(tie_break, time_limit=left, seed=seed, threads=threads)
    if second.status in ("optimal", "feasible"):
        return second, True, first.bound
    return first, True, first.bound


@register("mapping", "cpsat", exact=True, requires=("ortools",),
          description="CP-SAT: stages, PU sets, placement and intra-stage schedule, proven optimal")
def solve_cpsat(problem, *, time_limit=None, seed=0, threads=1, warm_start=None, objective: str = "period",
                bounds: dict | None = None, shared_pus: bool = False, max_stages: int | None = None,
                tie_break: str | None = "default", **_):
    began = time.perf_counter()      # the time limit covers the model, the warm start and both solves
    if objective not in AXES:
        raise ValueError(f"unknown objective {objective!r}")
    tie_break = TIE_BREAK[objective] if tie_break == "default" else tie_break
    if tie_break is not None and (tie_break not in AXES or tie_break == objective):
        raise ValueError(f"tie_break must be another objective among {', '.join(AXES)}, or None")
    model = MappingCpModel(problem, shared_pus=shared_pus, max_stages=max_stages)
    for axis, value in (bounds or {}).items():
        name = axis.split("_")[0]
        if name not in AXES:
            raise ValueError(f"unknown bound {axis!r} (use period_ms, latency_ms, energy_mj)")
        model.add_upper_bound(name, to_model(name, value))
    start_plan = warm_start or best_heuristic_plan(problem, objective)
    if start_plan is not None and not shared_pus:
        model.hint(start_plan)
    left = None if time_limit is None else max(0.05, time_limit - (time.perf_counter() - began))
    outcome, proven, bound = lexicographic(model, objective, time_limit=left, seed=seed, threads=threads,
                                           tie_break=tie_break)
    params = {"objective": objective, "bounds": bounds or {}, "shared_pus": shared_pus,
              "max_stages": model.S, "tie_break": tie_break}
    if outcome.plan is None and outcome.status != "infeasible" and start_plan is not None and not bounds:
        # nothing better within the limit: the warm start is the best plan this run holds
        return scored_result(problem, "cpsat", start_plan, objective=objective, termination=Termination.TIME_LIMIT,
                             quality=Quality.FEASIBLE, params=params,
                             message="no CP-SAT solution within the time limit; returning the warm start")
    if outcome.plan is None:
        termination = Termination.INFEASIBLE if outcome.status == "infeasible" else Termination.TIME_LIMIT
        why = ("no plan meets the constraints" + (f" {bounds}" if bounds else "")
               if outcome.status == "infeasible" else "no plan found within the time limit")
        return SolveResult("mapping", problem.name, "cpsat", termination, Quality.NONE, params=params, message=why)
    key = AXES[objective]
    bound_dict = {key: from_model(objective, bound)} if bound is not None else None
    return scored_result(problem, "cpsat", outcome.plan, objective=objective,
                         termination=Termination.OPTIMAL if proven else Termination.TIME_LIMIT,
                         quality=Quality.PROVEN_OPTIMAL if proven else Quality.FEASIBLE,
                         bound=bound_dict, params=params)

"""Baseline: the whole network on the single best PU (one stage)."""
from __future__ import annotations

from pipeplan.formulations.mapping.evaluator import evaluate
from pipeplan.formulations.mapping.plan import Plan, Stage
from pipeplan.registry import register
from pipeplan.solvers.mapping.common import objective_key, scored_result


@register("mapping", "single", description="best single PU for the whole network (one stage)")
def solve_single(problem, *, objective: str = "period", freq: str = "max", **_):
    units = tuple(u.name for u in problem.units)
    key = objective_key(objective)
    best = None
    for pu in problem.profile.pus.values():
        level = pu.max_level if freq == "max" else pu.min_level
        if any(problem.profile.time(i, pu.name, level) is None for i in range(len(units))):
            continue
        plan = Plan((Stage((pu.name,), {pu.name: units}),), levels={u: level for u in units}, instance=problem.name)
        ev = evaluate(problem, plan)
        if best is None or key(ev) < key(best[0]):
            best = (ev, plan)
    if best is None:
        raise ValueError("no single PU can run every unit")
    return scored_result(problem, "single", best[1], objective=objective, params={"freq": freq})

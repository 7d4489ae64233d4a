"""Baseline: the whole network on the single best PU (one stage)."""
from __future__ import annotations

from pipeplan.core.deadline import Deadline
from pipeplan.core.registry import register
from pipeplan.core.vocabulary import MappingAxis
from pipeplan.formulations.mapping.evaluator import Evaluation, evaluate
from pipeplan.formulations.mapping.plan import Plan, Stage
from pipeplan.formulations.mapping.problem import MappingProblem
from pipeplan.solvers.mapping.common import objective_key, scored_result


def single_plan(problem: MappingProblem, objective: str = "period", freq: str = "max",
                deadline: Deadline | None = None) -> tuple[Evaluation, Plan]:
    """The best one-PU plan for ``objective`` and its evaluation; raises OutOfTime once
    ``deadline`` has passed (checked before each PU's evaluation), ValueError when no PU runs
    every unit."""
    deadline = deadline or Deadline(None)
    units = tuple(u.name for u in problem.units)
    key = objective_key(objective)
    best = None
    for pu in problem.profile.pus.values():
        level = pu.max_level if freq == "max" else pu.min_level
        if any(problem.profile.time(i, pu.name, level) is None for i in range(len(units))):
            continue
        deadline.check()
        plan = Plan((Stage((pu.name,), {pu.name: units}),), levels={u: level for u in units}, instance=problem.name)
        ev = evaluate(problem, plan)
        if best is None or key(ev) < key(best[0]):
            best = (ev, plan)
    if best is None:
        raise ValueError("no single PU can run every unit")
    return best


def fastest_pu_plan(problem: MappingProblem) -> Plan:
    """The cheapest plan there is, made without the evaluator: one stage, every unit on the PU
    that runs the whole network fastest (summed unit times at the top level) or, when no PU
    runs every unit, each unit on its own fastest PU in unit (topological) order."""
    prof = problem.profile
    n, units = len(problem.units), tuple(u.name for u in problem.units)
    times = {p: [prof.time(i, p, pu.max_level) for i in range(n)] for p, pu in prof.pus.items()}
    whole = {p: sum(t) for p, t in times.items() if None not in t}
    if whole:
        pu = min(whole, key=whole.get)
        return Plan((Stage((pu,), {pu: units}),), instance=problem.name)
    order: dict[str, list[str]] = {}
    for i, u in enumerate(units):
        fastest = min((p for p in prof.pus if times[p][i] is not None), key=lambda p: times[p][i])
        order.setdefault(fastest, []).append(u)
    pus = tuple(p for p in prof.pus if p in order)
    return Plan((Stage(pus, {p: tuple(order[p]) for p in pus}),), instance=problem.name)


@register("mapping", "single", description="best single PU for the whole network (one stage)")
def solve_single(problem, *, objective: MappingAxis = "period", freq: str = "max"):
    plan = single_plan(problem, objective, freq)[1]
    return scored_result(problem, "single", plan, objective=objective, params={"freq": freq})

"""Exact bi-objective Pareto fronts by epsilon-constraint sweeps over the CP-SAT model.

For axes (x, y): minimise y, then x at that y (a lexicographic pair of proven solves); record
the point; require x to be at least one model unit (1 us or 1 nJ) below it and repeat until no
plan remains. Every point is proven non-dominated in the model's integer units when both
solves of its step are optimal; the points are reported with the evaluator's values. The time
limit covers building each step's model and its hint too.
"""
from __future__ import annotations

from pipeplan.core.deadline import Deadline, OutOfTime
from pipeplan.core.vocabulary import MAPPING_KEYS as AXES
from pipeplan.formulations.mapping.evaluator import evaluate
from pipeplan.formulations.mapping.problem import MappingProblem
from pipeplan.solvers.mapping.cpsat_model import MappingCpModel


def exact_front(problem: MappingProblem, x: str = "period", y: str = "latency", *, time_limit: float = 60.0,
                threads: int = 1, seed: int = 0, max_points: int = 200, progress=None) -> dict:
    """Returns {"points": [{"objectives", "plan", "proven"}...] sorted by x, "complete": bool,
    "wall_time_s"}. ``complete`` is False when the sweep ran out of time or points, in which
    case the front found so far is returned (every listed point still proven where marked)."""
    if x == y or x not in AXES or y not in AXES:
        raise ValueError(f"need two different axes among {', '.join(AXES)}")
    clock = Deadline(time_limit)
    points = []
    eps = None
    complete = False
    while len(points) < max_points and not clock.expired():
        try:
            model = MappingCpModel(problem, deadline=clock)
        except OutOfTime:
            break
        if eps is not None:
            model.add_upper_bound(x, eps)
        first = model.solve(y, time_limit=clock.remaining(), seed=seed, threads=threads)
        if first.status == "infeasible":
            complete = True
            break
        if first.plan is None:
            break
        model.add_upper_bound(y, first.values[y])
        try:
            model.hint(first.plan)
        except OutOfTime:
            pass                 # the hint so far still guides the last, short solve
        second = model.solve(x, time_limit=clock.remaining(floor=0.2), seed=seed, threads=threads)
        best = second if second.plan is not None else first
        ev = evaluate(problem, best.plan)
        points.append({"objectives": ev.objectives(), "plan": best.plan.to_dict(),
                       "proven": first.status == "optimal" and second.status == "optimal"})
        if progress:
            progress(len(points), None, f"{AXES[x]}={ev.objectives()[AXES[x]]:.3f}")
        eps = best.values[x] - 1
    points.sort(key=lambda p: p["objectives"][AXES[x]])
    return {"axes": [x, y], "points": points, "complete": complete, "wall_time_s": clock.elapsed()}

"""Exact bi-objective Pareto fronts by epsilon-constraint sweeps over the CP-SAT model.

For axes (x, y): minimise y, then x at that y (a lexicographic pair of proven solves); record
the point; require x to be at least one model unit (1 us or 1 nJ) below it and repeat until no
plan remains. Every point is proven non-dominated in the model's integer units when both
solves of its step are optimal; the points are reported with the evaluator's values. The time
limit covers building each step's model and its hint too. ``work_limit`` (CP-SAT deterministic
seconds) bounds all the sweep's solves together, each getting what the earlier ones left: with
one thread the front a work limit cuts is the same on any machine load (the wall clock stays
the safety net); the answer's ``stopped_by`` says which limit cut the sweep, if one did.
"""
from __future__ import annotations

from pipeplan.core.deadline import Deadline, OutOfTime
from pipeplan.core.vocabulary import MAPPING_KEYS as AXES
from pipeplan.formulations.mapping.evaluator import evaluate
from pipeplan.formulations.mapping.problem import MappingProblem
from pipeplan.solvers.mapping.cpsat_model import MappingCpModel


def exact_front(problem: MappingProblem, x: str = "period", y: str = "latency", *, time_limit: float = 60.0,
                threads: int = 1, seed: int = 0, max_points: int = 200, progress=None,
                work_limit: float | None = None) -> dict:
    """Returns {"points": [{"objectives", "plan", "proven"}...] sorted by x, "complete": bool,
    "wall_time_s", "work", "stopped_by"}. ``complete`` is False when the sweep ran out of time,
    work or points, in which case the front found so far is returned (every listed point still
    proven where marked); ``stopped_by``: "work", "time" or None (complete, or out of points)."""
    if x == y or x not in AXES or y not in AXES:
        raise ValueError(f"need two different axes among {', '.join(AXES)}")
    clock = Deadline(time_limit)
    points = []
    eps = None
    complete = False
    work, stopped_by = 0.0, None

    def left() -> float | None:
        return None if work_limit is None else max(0.0, work_limit - work)

    while len(points) < max_points:
        if clock.expired():
            stopped_by = "time"
            break
        if work_limit is not None and left() <= 0:
            stopped_by = "work"
            break
        try:
            model = MappingCpModel(problem, deadline=clock)
        except OutOfTime:
            stopped_by = "time"
            break
        if eps is not None:
            model.add_upper_bound(x, eps)
        first = model.solve(y, time_limit=clock.remaining(), seed=seed, threads=threads, work_limit=left())
        work += first.work
        if first.status == "infeasible":
            complete = True
            break
        if first.plan is None:
            stopped_by = first.stopped_by or "time"
            break
        model.add_upper_bound(y, first.values[y])
        try:
            model.hint(first.plan)
        except OutOfTime:
            pass                 # the hint so far still guides the last, short solve
        second = None
        if work_limit is None or left() > 0:
            second = model.solve(x, time_limit=clock.remaining(floor=0.2), seed=seed, threads=threads,
                                 work_limit=left())
            work += second.work
        if first.status != "optimal" or second is None or second.status != "optimal":
            stopped_by = stopped_by or first.stopped_by or (second.stopped_by if second else "work")
        best = second if second is not None and second.plan is not None else first
        ev = evaluate(problem, best.plan)
        points.append({"objectives": ev.objectives(), "plan": best.plan.to_dict(),
                       "proven": first.status == "optimal" and second is not None and second.status == "optimal"})
        if progress:
            progress(len(points), None, f"{AXES[x]}={ev.objectives()[AXES[x]]:.3f}")
        eps = best.values[x] - 1
    points.sort(key=lambda p: p["objectives"][AXES[x]])
    return {"axes": [x, y], "points": points, "complete": complete, "wall_time_s": clock.elapsed(),
            "work": work, "stopped_by": None if complete else stopped_by}

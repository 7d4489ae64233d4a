"""Exact bi-objective Pareto fronts by epsilon-constraint sweeps over the CP-SAT model.

For axes (x, y): minimise y, then x at that y (a lexicographic pair of proven solves); record
the point; require x to be at least one model unit (1 us or 1 nJ) below it and repeat until no
plan remains. Every point is proven non-dominated in the model's integer units when both
solves of its step are optimal; the points are reported with the evaluator's values. The time
limit covers building each step's model and its hint too. ``work_limit`` (CP-SAT deterministic
seconds) bounds all the sweep's solves together, each getting what the earlier ones left: with
one thread the front a work limit cuts is the same on any machine load (the wall clock stays
the safety net); the answer's ``stopped_by`` says which limit cut the sweep, if one did.

On operator graphs (not chains) with disjoint PU sets each of the two solves of a step is the
decomposition over PU-stage configurations (``stage_configs.py``) instead: the same sweep, with
each step's two searches proven configuration by configuration. Its incumbents come from the
sweep itself: the least-x plan (solved first) meets every epsilon bound the sweep will set on x,
and the plan minimising y at a step meets the bound on y of the step's second search. A search
that cannot close gets at most a quarter of the time left (``STEP_SHARE``), so an unproven step
leaves time for the rest of the front; its point is marked unproven. Points closer in x than the
searches' certified gap (0.01%) are not told apart.
"""
from __future__ import annotations

from pipeplan.core.deadline import Deadline, OutOfTime
from pipeplan.core.vocabulary import MAPPING_KEYS as AXES
from pipeplan.formulations.mapping.evaluator import evaluate
from pipeplan.formulations.mapping.problem import MappingProblem
from pipeplan.solvers.mapping.cpsat_model import MappingCpModel

STEP_SHARE = 4      # a configuration search of a sweep gets at most 1/STEP_SHARE of the time left,
STEP_MIN_S = 20.0   # but at least this (when left): unproven steps leave time for the rest

def exact_front(problem: MappingProblem, x: str = "period", y: str = "latency", *, time_limit: float = 60.0,
                threads: int = 1, seed: int = 0, max_points: int = 200, progress=None,
                work_limit: float | None = None, dvfs: bool = False) -> dict:
    """Returns {"points": [{"objectives", "plan", "proven"}...] sorted by x, "complete": bool,
    "wall_time_s", "work", "stopped_by"}. ``complete`` is False when the sweep ran out of time,
    work or points, in which case the front found so far is returned (every listed point still
    proven where marked); ``stopped_by``: "work", "time" or None (complete, or out of points).
    ``dvfs``: every unit's DVFS level is chosen too. Chains with DVFS, a re-entry or whole-graph
    rule, or the steady-state energy on an axis are swept over the chain models
    (``chain_search.chain_front``)."""
    if x == y or x not in AXES or y not in AXES:
        raise ValueError(f"need two different axes among {', '.join(AXES)}")
    from pipeplan.solvers.mapping.chain_search import chain_front, chain_route, plain_objective
    if chain_route(problem, x, dvfs, y):
        return chain_front(problem, x, y, dvfs=dvfs, time_limit=time_limit, threads=threads, seed=seed,
                           max_points=max_points, progress=progress, work_limit=work_limit)
    if "energy_ss" in (x, y):      # equal to the per-frame energy on this profile
        front = exact_front(problem, plain_objective(problem, x), plain_objective(problem, y), time_limit=time_limit,
                            threads=threads, seed=seed, max_points=max_points, progress=progress,
                            work_limit=work_limit)
        front["axes"] = [x, y]
        return front
    if not problem.is_chain and "energy" not in (x, y):
        return _front_by_configurations(problem, x, y, time_limit=time_limit, threads=threads, seed=seed,
                                        max_points=max_points, progress=progress, work_limit=work_limit)
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


def _front_by_configurations(problem: MappingProblem, x: str, y: str, *, time_limit, threads, seed, max_points,
                             progress, work_limit) -> dict:
    """The sweep of :func:`exact_front` with each solve a configuration search (period and
    latency axes: the capped model of the period keeps its certificate under a latency bound)."""
    from pipeplan.formulations.mapping.bounds import best, certified_bounds
    from pipeplan.solvers.mapping.stage_configs import search_configurations
    from pipeplan.solvers.mapping.warm_start import best_heuristic_plan

    clock = Deadline(time_limit)
    found = certified_bounds(problem)
    kx, ky = AXES[x], AXES[y]
    points, work, stopped_by, complete = [], 0.0, None, False

    def search(objective: str, incumbent, eps: dict):
        nonlocal work
        left = None if work_limit is None else max(0.0, work_limit - work)
        remaining = clock.remaining()      # a search that cannot close may not starve the sweep
        step = Deadline(None if remaining is None else min(remaining, max(STEP_MIN_S, remaining / STEP_SHARE)))
        r = search_configurations(problem, objective, incumbent, best(found[AXES[objective]]), deadline=step,
                                  seed=seed, threads=threads, work_limit=left, eps=eps)
        work += r.work
        return r

    try:
        least_x = search(x, best_heuristic_plan(problem, x, Deadline(None if time_limit is None else time_limit / 10)),
                         {})
        eps = None
        while len(points) < max_points:
            if eps is not None and eps < least_x.upper * (1 - 1e-12):
                # complete where every step was proven (a search may close without a proof)
                complete = least_x.proven and all(p["proven"] for p in points)
                break
            first = search(y, least_x.plan, {} if eps is None else {kx: eps})
            second = search(x, first.plan, {ky: first.upper})
            if not (first.proven and second.proven):    # a limit, or a search closed without a proof
                stopped_by = first.stopped_by or second.stopped_by or (
                    None if first.inexact or second.inexact else "time")
            ev = evaluate(problem, second.plan)
            points.append({"objectives": ev.objectives(), "plan": second.plan.to_dict(),
                           "proven": first.proven and second.proven})
            if progress:
                progress(len(points), None, f"{kx}={ev.objectives()[kx]:.3f}")
            if clock.expired():
                break
            eps = ev.objectives()[kx] * (1 - 1e-4) - 1e-6   # the next point improves x by more than the proof gap
    except OutOfTime:
        stopped_by = "time"
    points.sort(key=lambda p: p["objectives"][kx])
    return {"axes": [x, y], "points": points, "complete": complete, "wall_time_s": clock.elapsed(),
            "work": work, "stopped_by": None if complete else stopped_by}

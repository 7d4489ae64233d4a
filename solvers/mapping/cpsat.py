"""Exact mapping solver on CP-SAT: min period, latency or energy, optionally under epsilon
bounds on the others, with a lexicographic tie-break, warm-started from the best heuristic.

The primary objective is solved first; if it is proven optimal, a second solve minimises the
tie-break objective (by default latency for period, period for latency and energy; any other
objective with ``tie_break=``, or none) with the primary held at its optimum. The returned
plan is re-scored by the evaluator; the bound is CP-SAT's best bound of the primary objective.

The time limit covers the warm start (at most half of it), building the model, the hint and
both solves, less the final scoring's share (``common.search_deadline``); past it the warm
start comes back with status time_limit.

``work_limit`` (CP-SAT deterministic seconds, ``max_deterministic_time``) bounds the two solves
together: the tie-break gets what the primary solve left. With one thread a run the work limit
stops returns the same plan and bound on any machine load (the wall clock stays the safety
net); ``SolveResult.stopped_by`` says which limit stopped a run, ``params["work"]`` the
deterministic time it used.

Bounds: a proven optimum (in the model's whole microseconds / nanojoules) is its own bound (the
evaluator's value, so its gap is 0, as the MILP reports it); otherwise the bound is CP-SAT's,
less the model's rounding (``cpsat_model.bound_from_model``), or the analytic lower bound where
that is larger.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from pipeplan.core.deadline import Deadline, OutOfTime
from pipeplan.core.registry import register
from pipeplan.core.result import Quality, SolveResult, Termination, stop_note
from pipeplan.core.vocabulary import MAPPING_KEYS as AXES
from pipeplan.core.vocabulary import MAPPING_TIE_BREAK as TIE_BREAK
from pipeplan.core.vocabulary import MappingAxis
from pipeplan.formulations.mapping.bounds import lower_bounds
from pipeplan.solvers.cpsat_backend import MIN_WORK, check_work_limit
from pipeplan.solvers.mapping.common import scored_result, search_deadline
from pipeplan.solvers.mapping.warm_start import best_heuristic_plan

if TYPE_CHECKING:
    from pipeplan.solvers.mapping.cpsat_model import MappingCpModel

def lexicographic(model: MappingCpModel, objective: str, *, deadline: Deadline, seed, threads,
                  tie_break: str | None, work_limit: float | None = None):
    """Solve ``objective`` then ``tie_break`` (an axis, or None) within ``deadline`` and
    ``work_limit`` deterministic seconds in all; returns (outcome, primary optimum proven?,
    bound of the primary, deterministic seconds used). The outcome's ``stopped_by`` is the
    primary solve's (a cut tie-break leaves the primary optimum proven)."""
    first = model.solve(objective, time_limit=deadline.remaining(floor=0.05), seed=seed, threads=threads,
                        work_limit=work_limit)
    if first.status != "optimal" or not tie_break:
        return first, first.status == "optimal", first.bound, first.work
    left = None if work_limit is None else work_limit - first.work
    if left is not None and left < MIN_WORK:
        return first, True, first.bound, first.work
    model.add_upper_bound(objective, first.values[objective])
    try:
        model.hint(first.plan)
    except OutOfTime:
        return first, True, first.bound, first.work
    second = model.solve(tie_break, time_limit=deadline.remaining(floor=0.05), seed=seed, threads=threads,
                         work_limit=left)
    if second.status in ("optimal", "feasible"):
        second.stopped_by = None
        return second, True, first.bound, first.work + second.work
    return first, True, first.bound, first.work + second.work


@register("mapping", "cpsat", exact=True, requires=("ortools",),
          description="CP-SAT: stages, PU sets, placement and intra-stage schedule, proven optimal")
def solve_cpsat(problem, *, time_limit=None, seed=0, threads=1, warm_start=None, objective: MappingAxis = "period",
                bounds: dict | None = None, shared_pus: bool = False, max_stages: int | None = None,
                tie_break: str | None = "default", work_limit: float | None = None):
    from pipeplan.solvers.mapping.cpsat_model import MappingCpModel, bound_from_model, to_model  # needs ortools

    check_work_limit(work_limit)
    search = search_deadline(time_limit, problem)
    if objective not in AXES:
        raise ValueError(f"unknown objective {objective!r}")
    tie_break = TIE_BREAK[objective] if tie_break == "default" else tie_break
    if tie_break is not None and (tie_break not in AXES or tie_break == objective):
        raise ValueError(f"tie_break must be another objective among {', '.join(AXES)}, or None")
    for axis in bounds or {}:
        if axis.split("_")[0] not in AXES:
            raise ValueError(f"unknown bound {axis!r} (use period_ms, latency_ms, energy_mj)")
    left = search.remaining()
    start_plan = warm_start or best_heuristic_plan(problem, objective, Deadline(None if left is None else left / 2))
    params = {"objective": objective, "bounds": bounds or {}, "shared_pus": shared_pus,
              "max_stages": max_stages, "tie_break": tie_break, "work_limit": work_limit, "work": 0.0}
    try:
        model = MappingCpModel(problem, shared_pus=shared_pus, max_stages=max_stages, deadline=search)
        params["max_stages"] = model.S
        for axis, value in (bounds or {}).items():
            name = axis.split("_")[0]
            model.add_upper_bound(name, to_model(name, value))
        if not shared_pus:
            model.hint(start_plan)
        search.check()
        outcome, proven, bound, params["work"] = lexicographic(
            model, objective, deadline=search, seed=seed, threads=threads, tie_break=tie_break,
            work_limit=work_limit)
    except OutOfTime:
        outcome = None
    stopped_by = "time" if outcome is None else outcome.stopped_by
    note = stop_note(stopped_by, f"{params['work']:.3f} deterministic s")
    if outcome is None or (outcome.plan is None and outcome.status != "infeasible"):
        limit = "work limit" if stopped_by == "work" else "time limit"
        if not bounds:
            # nothing better within the limit: the warm start is the best plan this run holds
            why = ("the time limit passed while building the model" if outcome is None
                   else f"no CP-SAT solution within the {limit}")
            return scored_result(problem, "cpsat", start_plan, objective=objective,
                                 termination=Termination.TIME_LIMIT, quality=Quality.FEASIBLE, params=params,
                                 message=f"{why}; returning the warm start; {note}", stopped_by=stopped_by)
        return SolveResult("mapping", problem.name, "cpsat", Termination.TIME_LIMIT, Quality.NONE, params=params,
                           message=f"no plan found within the {limit}; {note}", stopped_by=stopped_by)
    if outcome.plan is None:
        return SolveResult("mapping", problem.name, "cpsat", Termination.INFEASIBLE, Quality.NONE, params=params,
                           message="no plan meets the constraints" + (f" {bounds}" if bounds else ""))
    key = AXES[objective]
    bound_dict = None
    if bound is not None and not proven:   # CP-SAT's bound less the model's rounding, or the analytic one
        bound_dict = {key: max(bound_from_model(objective, bound, model.slack[objective]),
                               lower_bounds(problem).get(key, 0.0))}
    result = scored_result(problem, "cpsat", outcome.plan, objective=objective,
                           termination=Termination.OPTIMAL if proven else Termination.TIME_LIMIT,
                           quality=Quality.PROVEN_OPTIMAL if proven else Quality.FEASIBLE,
                           bound=bound_dict, params=params, message=note, stopped_by=stopped_by)
    if proven:       # optimal in whole model units: the optimum is its own bound, as the MILP's is
        result.bound = {key: result.objectives[key]}
        result.gap = 0.0
    return result

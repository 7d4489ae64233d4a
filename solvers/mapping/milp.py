"""Exact mapping solver on the MILP of ``milp_model`` through PuLP: HiGHS by default, CBC as
fallback. PuLP is imported on the first solve, so the registry loads without it.

Work limit: ``node_limit``, the most branch-and-bound nodes of each solve (HiGHS's
``mip_max_nodes``, CBC's ``maxNodes``). HiGHS has no deterministic clock: the root node
(presolve, root LP, cuts) is not counted, so the wall-clock time limit stays the only bound of
a model whose root outlasts it (see ``pulp_backend``); ``SolveResult.stopped_by`` says which
limit stopped a run."""
from __future__ import annotations

import time
from typing import Literal

from pipeplan.core.deadline import Deadline, OutOfTime
from pipeplan.core.registry import register
from pipeplan.core.result import Quality, SolveResult, Termination, stop_note
from pipeplan.core.vocabulary import MAPPING_KEYS as AXES
from pipeplan.core.vocabulary import MAPPING_TIE_BREAK as TIE_BREAK
from pipeplan.core.vocabulary import MappingAxis
from pipeplan.formulations.mapping.bounds import DEFAULT_WORK, Bound, certified_bounds
from pipeplan.formulations.mapping.bounds import best as best_bound
from pipeplan.formulations.mapping.evaluator import evaluate
from pipeplan.solvers.mapping.common import as_objective, objective_key, scored_result, search_deadline, tie_break_note
from pipeplan.solvers.mapping.warm_start import best_heuristic_plan, within_stages


@register("mapping", "milp", exact=True, requires=("pulp",),
          description="MILP (PuLP; HiGHS, else CBC): stages, PU sets, placement and schedule, proven optimal")
def solve_milp(problem, *, time_limit=None, seed=0, threads=1, warm_start=None, objective: MappingAxis = "period",
               bounds: dict | None = None, max_stages: int | None = None, backend: Literal["highs", "cbc"] = "highs",
               shared_pus: Literal[False] = False, node_limit: int | None = None, dvfs: bool = False) -> SolveResult:
    """Minimise ``objective`` under the epsilon ``bounds`` ({"latency_ms": ..., ...}), then its
    tie-break with the primary held at its optimum. ``warm_start``: a Plan to start from (the
    default is a cold start, so the MILP stays an independent check of cpsat). When the time
    limit passes before the MILP holds a solution, the warm start, or else the best heuristic
    plan (made first, in at most half the time), is returned as the run's best plan (status
    time_limit). ``time_limit`` (s) covers the heuristics, building the model and both solves,
    less the final scoring's share. ``dvfs``: choose every unit's DVFS level too (chains).
    Chains go to the chain MILPs (``chain_search.py``, ``milp_chain.py``; ``node_limit`` then
    bounds each of their solves, and the first it stops ends the search)."""
    import pulp

    from pipeplan.solvers.mapping.milp_model import MappingMilp, run_milp
    from pipeplan.solvers.pulp_backend import check_node_limit, optimum_lower, pick_backend, tie_break_cap

    check_node_limit(node_limit)
    if objective not in AXES:
        raise ValueError(f"unknown objective {objective!r} (choose from {', '.join(AXES)})")
    if shared_pus:
        raise ValueError("the MILP models disjoint PU sets only (cpsat handles shared PUs)")
    if not isinstance(dvfs, bool):
        raise ValueError(f"dvfs must be true or false, got {dvfs!r}")
    axis_of = {key: axis for axis, key in AXES.items()}
    for key in bounds or {}:
        if key not in axis_of:
            raise ValueError(f"unknown bound {key!r} (use {', '.join(AXES.values())})")
    from pipeplan.solvers.mapping.chain_search import chain_route, plain_bounds, plain_objective, solve_chain
    if chain_route(problem, objective, dvfs, TIE_BREAK[objective], bounds=bounds):
        params = {"backend": pick_backend(backend), "objective": objective, "bounds": dict(bounds or {}),
                  "max_stages": max_stages, "node_limit": node_limit}
        return solve_chain(problem, "milp", backend=params["backend"], objective=objective, bounds=bounds,
                           tie_break=TIE_BREAK[objective], dvfs=dvfs, max_stages=max_stages, time_limit=time_limit,
                           threads=threads, seed=seed, work_limit=None, warm_start=warm_start, params=params,
                           node_limit=node_limit)
    if objective == "energy_ss" or "energy_ss_mj" in (bounds or {}):      # equal to energy here
        return as_objective(solve_milp(
            problem, time_limit=time_limit, seed=seed, threads=threads, warm_start=warm_start,
            objective=plain_objective(problem, objective), bounds=plain_bounds(problem, bounds),
            max_stages=max_stages, backend=backend, node_limit=node_limit), objective)
    search = search_deadline(time_limit, problem)
    backend = pick_backend(backend)
    params = {"backend": backend, "objective": objective, "bounds": dict(bounds or {}), "max_stages": max_stages,
              "node_limit": node_limit, "nodes": 0}
    warm_start = within_stages(warm_start or None, max_stages)
    # what comes back if time runs out first (none under epsilon bounds, which it need not meet)
    fallback_plan = None
    if (time_limit is not None or node_limit is not None) and not bounds:
        left = search.remaining()
        fallback_plan = warm_start or best_heuristic_plan(problem, objective,
                                                          Deadline(None if left is None else left / 2), max_stages)

    def fallback(notes: list[str], why: str = "time") -> SolveResult:
        """Out of time (or nodes) without a MILP solution: the warm start, else the best heuristic plan."""
        notes.append(stop_note(why))
        if fallback_plan is None:
            return SolveResult("mapping", problem.name, "milp", Termination.TIME_LIMIT, Quality.NONE, params=params,
                               message="; ".join(notes), stopped_by=why)
        notes.append("returning the warm start" if warm_start else "returning the best heuristic plan")
        return scored_result(problem, "milp", fallback_plan, objective=objective, termination=Termination.TIME_LIMIT,
                             quality=Quality.FEASIBLE, params=params, message="; ".join(notes), stopped_by=why)

    began = time.perf_counter()
    try:
        model = MappingMilp(problem, max_stages=max_stages, deadline=search)
    except OutOfTime:
        return fallback([f"the time limit passed while building the model ({len(problem.units)} units)"])
    # Each solve also spends time the solver's clock does not see or cannot cut: loading the model
    # into HiGHS (~0.4x the build time), a presolve that overran its limit by ~0.3x the build
    # time, reading the solution back (measured on a311d/inception_v2: 509 units, 10.6 s to build).
    reserve = 0.9 * (time.perf_counter() - began)

    def solve_time() -> float | None:
        return None if time_limit is None else search.remaining() - reserve
    for key, value in (bounds or {}).items():
        model.add_upper_bound(axis_of[key], value)
    # the certified bound is reported beside HiGHS's, not added as a cut: with it the latency
    # tie-break of tiny/chain4-3pu missed its optimum (a window of 1e-3 ms between cut and optimum)
    lower = best_bound(certified_bounds(problem, DEFAULT_WORK)[AXES[objective]])
    notes = []
    if warm_start is not None and not model.set_start(warm_start):
        notes.append("warm start ignored (shared PUs or more stages than the model has)")
    params["max_stages"] = model.S
    run = dict(backend=backend, threads=threads, seed=seed, node_limit=node_limit)
    if time_limit is not None and solve_time() < 0.5:
        return fallback([f"too little time left to load and solve the model ({reserve / 0.9:.1f} s to build)"])
    first = run_milp(model, objective, **run, time_limit=solve_time())
    params["nodes"] = first.nodes
    state, value, dual = first.state, first.value, first.dual
    if state in ("infeasible", "none"):
        if state == "infeasible":
            termination = Termination.INFEASIBLE
            notes.append(f"no plan meets the bounds {bounds}" if bounds else "no plan fits the model")
        else:
            limited = time_limit is not None or node_limit is not None
            termination = Termination.TIME_LIMIT if limited else Termination.ERROR
            notes.append(f"no plan found ({pulp.LpStatus[model.prob.status]})")
            if not bounds and limited:
                return fallback(notes, first.stopped_by or "time")
            if limited:
                notes.append(stop_note(first.stopped_by or "time"))
                return SolveResult("mapping", problem.name, "milp", termination, Quality.NONE, params=params,
                                   message="; ".join(notes), stopped_by=first.stopped_by or "time")
        return SolveResult("mapping", problem.name, "milp", termination, Quality.NONE, params=params,
                           message="; ".join(notes))
    plan = model.plan()
    key = AXES[objective]
    if state == "feasible":
        why = first.stopped_by or "time"
        notes.append(stop_note(why, f"{first.nodes} nodes" if first.nodes is not None else ""))
        best = lower if dual is None or dual < lower.value else Bound(dual, "HiGHS dual bound")
        return scored_result(problem, "milp", plan, objective=objective, termination=Termination.TIME_LIMIT,
                             quality=Quality.FEASIBLE, bound={key: best.value}, bound_source={key: best.source},
                             params=params, message="; ".join(notes), stopped_by=why)
    model.add_upper_bound(objective, tie_break_cap(value))  # the primary held at its optimum
    tied = "not run"
    if time_limit is None or solve_time() >= 0.5:
        second = run_milp(model, TIE_BREAK[objective], **run, time_limit=solve_time())
        params["nodes"] = (first.nodes or 0) + (second.nodes or 0) if first.nodes is not None else None
        tied = second.state
        if second.state in ("optimal", "feasible"):
            plan = min(plan, model.plan(), key=lambda pl: objective_key(objective)(evaluate(problem, pl)))
    if (tie_note := tie_break_note(TIE_BREAK[objective], tied)) is not None:
        notes.append(tie_note)
    # the solver stops within its relative and absolute gaps of the optimum: that much below it
    proof = Bound(optimum_lower(value, backend), f"MILP optimum ({backend}) less its gap tolerance")
    best = max(lower, proof, key=lambda b: b.value)
    bound = min(best.value, evaluate(problem, plan).objectives()[key])
    return scored_result(problem, "milp", plan, objective=objective, termination=Termination.OPTIMAL,
                         quality=Quality.PROVEN_OPTIMAL, bound={key: bound}, bound_source={key: best.source},
                         params=params, message="; ".join(notes))

"""Exact mapping solver on CP-SAT: min period, latency or energy, optionally under epsilon
bounds on the others, with a lexicographic tie-break, warm-started from the best heuristic.

The primary objective is solved first; if it is proven optimal, a second solve minimises the
tie-break objective (by default latency for period, period for latency and energy; any other
objective with ``tie_break=``, or none) with the primary held at its optimum. The returned
plan is re-scored by the evaluator; the bound is CP-SAT's best bound of the primary objective.

The time limit covers the warm start (at most half of it), building the model, the hint and
both solves, less the final scoring's share (``common.search_deadline``); past it the warm
start comes back with status time_limit.

Warm start of an operator graph (``start_evaluations``). The configuration search caps every
configuration's solve just below the incumbent, so the incumbent decides how fast it closes
configurations, and on the larger operator graphs the cheap heuristics' plans are far from the
optimum (a311d/inception_v1, 1.5 deterministic s: HEFT and the pipeline DP start at 20.4 ms,
the optimum is 13.14 ms). There the heuristics' best plan is improved first by NSGA-II seeded
with it, for at most ``start_evaluations`` plans (1,500 by default, about 1.5-7 s on the catalogue's
graphs of 15-509 units) within the warm start's half of the time limit; its best plan that meets
the epsilon bounds becomes the incumbent when it is better. Measured with the quick suite's
limits (1.5 deterministic s, one thread): a311d/inception_v1 20.43 -> 15.43 ms (certified gap
41 -> 22%), bst/inception_v1 6.21 -> 5.45 ms (28 -> 16%); bst/inception_v2 unchanged. Under
``pipeplan optima`` (60 s, two threads) a311d/inception_v1 is proven in 22 s instead of 76 s,
while the graphs proven quickly either way take 1-6 s longer (densenet121 2.8 -> 8.8 s). With
500 plans instead of 1,500 most of the gain is lost (a311d/inception_v1, quick limits: 18.6 ms).
Its limits are counts (plans, and generations = plans / population), so the start is the same
on any machine load. Skipped when the heuristics' plan already meets the certified bound, and
for chains (the chain models prove their optimum in well under a second).

``work_limit`` (CP-SAT deterministic seconds, ``max_deterministic_time``) bounds the two solves
together: the tie-break gets what the primary solve left. With one thread a run the work limit
stops returns the same plan and bound on any machine load (the wall clock stays the safety
net); ``SolveResult.stopped_by`` says which limit stopped a run, ``params["work"]`` the
deterministic time it used.

Bounds: CP-SAT's bound (its optimum when it proves one), less the model's rounding
(``cpsat_model.bound_from_model``), or the certified lower bound where that is larger. An optimum
in the model's whole microseconds (nanojoules) is reported as proven only when that bound lies
within ``stage_configs.PROOF_GAP`` of the plan's evaluator value, as the configuration search
does; otherwise the result is ``completed``/``feasible`` with that bound. Times rounded to whole
microseconds leave up to 0.04% of the period on the Khadas graphs and up to 1.8% on the
operator graphs of the catalogue (``MappingCpModel.slack``).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

from pipeplan.core.deadline import Deadline, OutOfTime
from pipeplan.core.registry import register
from pipeplan.core.result import Quality, SolveResult, Termination, stop_note
from pipeplan.core.vocabulary import MAPPING_KEYS as AXES
from pipeplan.core.vocabulary import MAPPING_TIE_BREAK as TIE_BREAK
from pipeplan.core.vocabulary import MappingAxis
from pipeplan.formulations.mapping.bounds import DEFAULT_WORK, Bound, best_analytic, certified_bounds
from pipeplan.formulations.mapping.bounds import best as best_bound
from pipeplan.formulations.mapping.evaluator import evaluate
from pipeplan.solvers.cpsat_backend import MIN_WORK, check_work_limit
from pipeplan.solvers.mapping.common import as_objective, scored_result, search_deadline, tie_break_note
from pipeplan.solvers.mapping.warm_start import best_heuristic_plan, within_stages

START_EVALUATIONS = 1500   # NSGA-II's plans for an operator graph's warm start (module docstring)
START_POPULATION = 60      # ... its population; it runs evaluations / population generations, so a
                           # graph with fewer distinct plans than that stops too (tiny ones: < 1 s)

TIE_BREAK_MIN_S = 2.0  # after a configuration search, the tie-break gets max(this, the search's time)

if TYPE_CHECKING:
    from pipeplan.solvers.mapping.cpsat_model import CpOutcome, MappingCpModel


UNCERTIFIED = "optimal in the model's whole units, the certified bound below it by the model's rounding"
TIGHTENED = ("the model's first plan broke a bound by the evaluator: this is the optimum under the bounds "
             "tightened by the model's rounding, which left out plans within that rounding of a bound (no proof)")


INEXACT = ("no proof: a configuration's model optimum is a schedule the evaluator's per-PU order cannot run "
           "(a unit of zero time inside another's interval)")


def proof_status(proven: bool, value: float, lower: float) -> tuple[Termination, Quality, str | None]:
    """How a result is reported: a model optimum (``proven``) counts as proven only when the
    bound ``lower``, which holds for the evaluator's values, lies within PROOF_GAP of ``value``;
    otherwise it is completed/feasible, with the note why (None when there is nothing to say)."""
    from pipeplan.solvers.mapping.stage_configs import PROOF_GAP
    if not proven:
        return Termination.TIME_LIMIT, Quality.FEASIBLE, None
    if value - lower <= PROOF_GAP * value * (1 + 1e-9):
        return Termination.OPTIMAL, Quality.PROVEN_OPTIMAL, None
    return Termination.COMPLETED, Quality.FEASIBLE, UNCERTIFIED


class Lexicographic(NamedTuple):
    outcome: CpOutcome           # the tie-break's solve when it found a plan, else the primary's
    proven: bool                 # the primary optimum proven (in the model's whole units)
    bound: float | None          # CP-SAT's bound of the primary, model units
    work: float                  # deterministic seconds of both solves
    tie_break: str | None        # how the tie-break ended: optimal, feasible, ..., "not run"; None: none asked


def lexicographic(model: MappingCpModel, objective: str, *, deadline: Deadline, seed, threads,
                  tie_break: str | None, work_limit: float | None = None, timing: dict | None = None) -> Lexicographic:
    """Solve ``objective`` then ``tie_break`` (an axis, or None) within ``deadline`` and
    ``work_limit`` deterministic seconds in all. The outcome's ``stopped_by`` is the primary
    solve's (a cut tie-break leaves the primary optimum proven)."""
    first = model.solve(objective, time_limit=deadline.remaining(floor=0.05), seed=seed, threads=threads,
                        work_limit=work_limit)
    if timing is not None:
        timing["search_s"] = round(deadline.elapsed(), 3)   # from the solver's start to the primary's end
    if first.status != "optimal" or not tie_break:
        return Lexicographic(first, first.status == "optimal", first.bound, first.work, None)
    left = None if work_limit is None else work_limit - first.work
    if left is not None and left < MIN_WORK:
        return Lexicographic(first, True, first.bound, first.work, "not run")
    try:
        model.hint(first.plan)
    except OutOfTime:
        return Lexicographic(first, True, first.bound, first.work, "not run")
    # the tie-break searches a copy held at the primary optimum: held in ``model`` itself, that cap
    # had stayed for the search under tightened bounds that follows a plan breaking one, and hidden
    # every plan of a longer period (Alex, latency at most 135.53 ms: "no plan" where one exists)
    held = model.m.Clone()
    held.Add(held.GetIntVarFromProtoIndex(model.vars[objective].Index()) <= first.values[objective])
    second = model.solve(tie_break, time_limit=deadline.remaining(floor=0.05), seed=seed, threads=threads,
                         work_limit=left, model=held)
    if second.status in ("optimal", "feasible"):
        second.stopped_by = None
        return Lexicographic(second, True, first.bound, first.work + second.work, second.status)
    return Lexicographic(first, True, first.bound, first.work + second.work, second.status)


@register("mapping", "cpsat", exact=True, requires=("ortools",),
          description="CP-SAT: stages, PU sets, placement and intra-stage schedule, proven optimal")
def solve_cpsat(problem, *, time_limit=None, seed=0, threads=1, warm_start=None, objective: MappingAxis = "period",
                bounds: dict | None = None, shared_pus: bool = False, max_stages: int | None = None,
                tie_break: str | None = "default", work_limit: float | None = None, dvfs: bool = False,
                start_evaluations: int = START_EVALUATIONS):
    """``start_evaluations``: how many plans NSGA-II may score to improve an operator graph's
    warm start (module docstring; 0: the heuristics' best plan as it is). ``dvfs``: choose every unit's DVFS level too (chains; otherwise every PU runs at its top
    level). Chains with disjoint PU sets go to the chain models (``chain_search.py``: exact under
    re-entry, the whole-graph plan, DVFS and the steady-state energy); operator graphs and shared
    PU sets to the models below."""
    check_work_limit(work_limit)
    if objective not in AXES:
        raise ValueError(f"unknown objective {objective!r}")
    if not isinstance(dvfs, bool):
        raise ValueError(f"dvfs must be true or false, got {dvfs!r}")
    tie_break = TIE_BREAK[objective] if tie_break == "default" else tie_break
    if tie_break is not None and (tie_break not in AXES or tie_break == objective):
        raise ValueError(f"tie_break must be another objective among {', '.join(AXES)}, or None")
    for axis in bounds or {}:
        if axis not in AXES.values():
            raise ValueError(f"unknown bound {axis!r} (use {', '.join(AXES.values())})")
    from pipeplan.solvers.mapping.chain_search import chain_route, plain_bounds, plain_objective, solve_chain
    if chain_route(problem, objective, dvfs, tie_break, shared_pus, bounds):
        params = {"objective": objective, "bounds": bounds or {}, "shared_pus": False, "max_stages": max_stages,
                  "tie_break": tie_break, "work_limit": work_limit}
        return solve_chain(problem, "cpsat", backend="cpsat", objective=objective, bounds=bounds,
                           tie_break=tie_break, dvfs=dvfs, max_stages=max_stages, time_limit=time_limit,
                           threads=threads, seed=seed, work_limit=work_limit, warm_start=warm_start, params=params)
    if "energy_ss" in (objective, tie_break) or "energy_ss_mj" in (bounds or {}):   # equal to energy here
        return as_objective(solve_cpsat(
            problem, time_limit=time_limit, seed=seed, threads=threads, warm_start=warm_start,
            objective=plain_objective(problem, objective), bounds=plain_bounds(problem, bounds),
            shared_pus=shared_pus, max_stages=max_stages, work_limit=work_limit,
            tie_break=tie_break and plain_objective(problem, tie_break), start_evaluations=start_evaluations),
            objective, tie_break)
    search = search_deadline(time_limit, problem)
    left = search.remaining()
    start_share = Deadline(None if left is None else left / 2)
    warm_start = within_stages(warm_start, max_stages)
    start_plan = warm_start or best_heuristic_plan(problem, objective, start_share, max_stages)
    key = AXES[objective]
    lower = _certified_lower(problem, key, shared_pus, search)
    params = {"objective": objective, "bounds": bounds or {}, "shared_pus": shared_pus,
              "max_stages": max_stages, "tie_break": tie_break, "work_limit": work_limit, "work": 0.0,
              "warm_start": "given" if warm_start else "heuristics"}
    if not shared_pus and not problem.is_chain and _meets(problem, start_plan, bounds):
        if warm_start is None and start_evaluations:
            start_plan = _evolved_start(problem, objective, start_plan, lower, bounds, start_share, seed=seed,
                                        evaluations=start_evaluations, max_stages=max_stages, params=params)
        return _by_configurations(problem, objective, start_plan, lower, search, seed=seed, threads=threads,
                                  params=params, tie_break=tie_break, work_limit=work_limit, eps=bounds)
    from pipeplan.solvers.mapping.cpsat_model import MappingCpModel, bound_from_model  # needs ortools
    from pipeplan.solvers.mapping.cpsat_pu_stages import PuStageCpModel
    tightened = False           # the search under tightened caps ran to its end
    try:
        if shared_pus or problem.is_chain:
            model = MappingCpModel(problem, shared_pus=shared_pus, max_stages=max_stages, deadline=search)
        else:
            model = PuStageCpModel(problem, max_stages=max_stages, deadline=search)
        params["max_stages"] = model.S
        model.add_lower_bound(objective, lower.value)
        caps = {axis.split("_")[0]: value for axis, value in (bounds or {}).items()}
        # a plan's model value may lie up to the rounding slack either side of its evaluator
        # value: caps relaxed by it keep every plan that meets the bounds (so a proof holds);
        # a plan found beyond a bound is replaced by a search under caps tightened by it
        for name, value in caps.items():
            model.add_cap(name, value, +1)
        if not shared_pus:
            model.hint(start_plan)
        search.check()
        solved = lexicographic(model, objective, deadline=search, seed=seed, threads=threads, tie_break=tie_break,
                               work_limit=work_limit, timing=params)
        outcome, proven, bound, params["work"] = solved.outcome, solved.proven, solved.bound, solved.work
        if solved.tie_break is not None:
            params["tie_break_status"] = solved.tie_break
        if outcome.plan is not None and not _meets(problem, outcome.plan, bounds):
            for name, value in caps.items():
                model.add_cap(name, value, -1)
            relaxed_bound = bound if bound is not None else (outcome.values or {}).get(objective)
            again = lexicographic(model, objective, deadline=search, seed=seed, threads=threads,
                                  tie_break=tie_break, timing=params,
                                  work_limit=None if work_limit is None else max(MIN_WORK, work_limit - params["work"]))
            outcome = again.outcome
            params["work"] += again.work
            params.pop("tie_break_status", None)
            proven, bound, tightened = False, relaxed_bound, again.proven
            params["caps"] = "tightened by the rounding slack: the first plan broke a bound"
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
                                 bound={key: lower.value}, bound_source={key: lower.source},
                                 message=f"{why}; returning the warm start; {note}", stopped_by=stopped_by)
        return SolveResult("mapping", problem.name, "cpsat", Termination.TIME_LIMIT, Quality.NONE, params=params,
                           message=f"no plan found within the {limit}; {note}", stopped_by=stopped_by)
    if outcome.plan is None and "caps" in params:
        # not a proof of infeasibility: plans within the model's rounding of a bound were left out
        return SolveResult("mapping", problem.name, "cpsat", Termination.COMPLETED, Quality.NONE, params=params,
                           message=f"no plan found that meets {bounds}: the model's best breaks a bound by the "
                                   "evaluator, and with the bounds tightened by the model's rounding no plan is left")
    if outcome.plan is None:
        return SolveResult("mapping", problem.name, "cpsat", Termination.INFEASIBLE, Quality.NONE, params=params,
                           message="no plan meets the constraints" + (f" {bounds}" if bounds else ""))
    from pipeplan.solvers.mapping.stage_configs import PROOF_GAP
    best = lower
    if bound is not None:   # CP-SAT's bound (its optimum when proven) less the model's rounding
        own = bound_from_model(objective, bound, model.slack[objective], model.escale)
        if own > best.value:
            best = Bound(own, "CP-SAT optimum less the model's rounding" if proven else "CP-SAT bound")
    value = evaluate(problem, outcome.plan).objectives()[key]
    if proven and value - best.value > PROOF_GAP * value and objective != "energy":
        floor_bound = _round_down_bound(problem, objective, outcome.plan, caps, search, seed=seed, threads=threads,
                                        shared_pus=shared_pus, max_stages=params["max_stages"], work_limit=work_limit,
                                        params=params)
        if floor_bound is not None and floor_bound > best.value:
            best = Bound(floor_bound, "CP-SAT optimum of the model with times rounded down")
    # optimal in the model's whole microseconds (nanojoules), but a plan the rounding ranks
    # higher may be better by the evaluator: only the certified bound is claimed
    termination, quality, uncertified = proof_status(proven, value, best.value)
    if tightened:       # no limit stopped it: a search ended, short of a proof
        termination, uncertified = Termination.COMPLETED, TIGHTENED
    notes = [note, tie_break_note(tie_break, params.get("tie_break_status")) if proven else None, uncertified]
    return scored_result(problem, "cpsat", outcome.plan, objective=objective, termination=termination,
                         quality=quality, bound={key: best.value}, bound_source={key: best.source},
                         params=params, message="; ".join(n for n in notes if n), stopped_by=stopped_by)


def _round_down_bound(problem, objective, plan, caps, search, *, seed, threads, shared_pus, max_stages,
                      work_limit, params) -> float | None:
    """A bound of the period or the latency with no rounding slack: the optimum (or CP-SAT's
    bound) of the same model with every time rounded down (``MappingCpModel(round_down=True)``,
    a relaxation), hinted with ``plan``; None when no time or work is left for it."""
    from pipeplan.solvers.mapping.cpsat_model import MappingCpModel, bound_from_model

    left_work = None if work_limit is None else work_limit - params["work"]
    if search.expired() or (left_work is not None and left_work < MIN_WORK):
        return None
    try:
        model = MappingCpModel(problem, shared_pus=shared_pus, max_stages=max_stages, deadline=search,
                               round_down=True)
        for name, cap in caps.items():
            model.add_cap(name, cap, +1)
        model.hint(plan)
        out = model.solve(objective, time_limit=search.remaining(floor=0.05), seed=seed, threads=threads,
                          work_limit=left_work)
    except OutOfTime:
        return None
    params["work"] += out.work
    params["round_down_status"] = out.status
    return None if out.bound is None else bound_from_model(objective, out.bound)


def _meets(problem, plan, bounds) -> bool:
    """``plan`` meets the epsilon bounds (the configuration search needs a feasible incumbent)."""
    values = evaluate(problem, plan).objectives()
    return all(values[k] <= v for k, v in (bounds or {}).items())


def _evolved_start(problem, objective, start_plan, lower: Bound, bounds, deadline: Deadline, *, seed: int,
                   evaluations: int, max_stages: int | None, params: dict):
    """The warm start of the configuration search: ``start_plan`` improved by NSGA-II (module
    docstring), or ``start_plan`` itself when NSGA-II finds nothing better that meets ``bounds``,
    when it already meets the certified bound, or when the warm start's time is spent."""
    from pipeplan.formulations.mapping.plan import plan_from_dict
    from pipeplan.solvers.mapping.nsga2 import solve_nsga2
    from pipeplan.solvers.mapping.stage_configs import PROOF_GAP

    key = AXES[objective]
    value = evaluate(problem, start_plan).objectives()[key]
    left = deadline.remaining()
    if value <= lower.value / (1 - PROOF_GAP) or (left is not None and left <= 0):
        return start_plan
    evolved = solve_nsga2(problem, time_limit=left, seed=seed, objective=objective, warm_start=start_plan,
                          max_evaluations=evaluations, max_stages=max_stages, pop_size=START_POPULATION,
                          generations=math.ceil(evaluations / START_POPULATION))
    fits = [p for p in evolved.front if all(p["objectives"][k] <= v for k, v in (bounds or {}).items())]
    best = min(fits, key=lambda p: p["objectives"][key], default=None)
    params["warm_start"] = f"heuristics, then nsga2 ({evolved.params['evaluations']} plans)"
    if best is None or best["objectives"][key] >= value:
        return start_plan
    return plan_from_dict(best["plan"])


def _certified_lower(problem, key: str, shared_pus: bool, deadline: Deadline) -> Bound:
    """The best certified bound of ``key`` (``formulations/mapping/bounds.py``), computed by work
    limits so that it is the same on any machine load; the analytic one when less than a second
    is left. The forced-placement argument needs disjoint PU sets."""
    left = deadline.remaining()
    if left is not None and left < 1.0:
        return best_analytic(problem)[key]
    return best_bound(certified_bounds(problem, DEFAULT_WORK, disjoint_pus=not shared_pus)[key])


def _by_configurations(problem, objective, start_plan, lower, search, *, seed, threads, params, tie_break,
                       work_limit, eps):
    """Disjoint PU sets on an operator graph: the decomposition over PU-stage configurations
    (``stage_configs``), then the tie-break objective with the primary held at the plan found."""
    from pipeplan.solvers.mapping.cpsat_pu_stages import PuStageCpModel
    from pipeplan.solvers.mapping.stage_configs import search_configurations

    key = AXES[objective]
    params["method"] = "stage configurations"
    found = search_configurations(problem, objective, start_plan, lower, deadline=search, seed=seed,
                                  threads=threads, work_limit=work_limit, max_stages=params["max_stages"], eps=eps)
    params["work"] = found.work
    params["search_s"] = round(search.elapsed(), 3)      # from the solver's start to the proof (or the limit)
    params.update(found.summary)
    plan = found.plan
    left_work = None if work_limit is None else work_limit - found.work
    if found.proven and tie_break and not search.expired() and (left_work is None or left_work >= MIN_WORK):
        try:
            model = PuStageCpModel(problem, max_stages=params["max_stages"], deadline=search)
            model.add_cap(objective, found.upper, +1)
            for k, value in (eps or {}).items():
                model.add_cap(k.split("_")[0], value, 0)
            model.hint(plan)
            left = search.remaining(floor=0.05)
            share = max(TIE_BREAK_MIN_S, params["search_s"])     # the tie-break may not dwarf the proof
            second = model.solve(tie_break, time_limit=share if left is None else min(left, share), seed=seed,
                                 threads=threads, work_limit=left_work)
            params["work"] += second.work
            params["tie_break_status"] = second.status
            if second.plan is not None:
                old, new = evaluate(problem, plan).objectives(), evaluate(problem, second.plan).objectives()
                if (new[key] <= found.upper * (1 + 1e-12) and new[AXES[tie_break]] < old[AXES[tie_break]]
                        and all(new[k] <= v * (1 + 1e-12) for k, v in (eps or {}).items())):
                    plan = second.plan
        except OutOfTime:
            pass
    note = stop_note(found.stopped_by, f"{params['work']:.3f} deterministic s")
    message = f"{found.summary['closed']} of {found.summary['configurations']} stage configurations closed"
    # energy: optimal in the rounded model's whole units, but the bound certified for the
    # evaluator's values may lie below by that rounding (0.03-0.42% on the A311D graphs): then that
    # bound is reported and the result is not called proven (it had been, with gap 0)
    termination, quality, uncertified = proof_status(found.proven, found.upper, found.lower.value)
    if found.inexact:       # every configuration closed, one at a schedule the evaluator cannot run
        termination, uncertified = Termination.COMPLETED, INEXACT
    notes = [message, tie_break_note(tie_break, params.get("tie_break_status")) if found.proven else None,
             uncertified or note]
    return scored_result(problem, "cpsat", plan, objective=objective, termination=termination, quality=quality,
                         bound={key: found.lower.value}, bound_source={key: found.lower.source},
                         params=params, message="; ".join(n for n in notes if n),
                         stopped_by=None if found.proven or found.inexact else (found.stopped_by or "time"))

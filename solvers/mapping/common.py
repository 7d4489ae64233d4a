"""Shared by the mapping solvers: re-score a plan with the evaluator and wrap it in a result;
the deadline a solver searches to; transfer times of every edge as one array."""
from __future__ import annotations

import numpy as np

from pipeplan.core.deadline import Deadline
from pipeplan.core.result import Quality, SolveResult, Termination
from pipeplan.core.vocabulary import MAPPING_AXES as OBJECTIVES
from pipeplan.core.vocabulary import mapping_key
from pipeplan.formulations.mapping.bounds import best_analytic
from pipeplan.formulations.mapping.evaluator import evaluate
from pipeplan.formulations.mapping.plan import Plan
from pipeplan.formulations.mapping.problem import MappingProblem

# Seconds per unit that a solver keeps for its last steps after it stops searching: scoring the
# plan (the checker, the evaluator, the lower bounds: about 0.6 s at 20,000 units on one loaded
# core) and freeing a model whose building the deadline cut (up to 0.8 s more). A solver stops
# searching this long before its time limit, so that its result still comes back in time.
RESCORE_S_PER_UNIT = 7e-5


def search_deadline(time_limit: float | None, problem: MappingProblem) -> Deadline:
    """The time limit less the final scoring's share, from now (a solver makes it on entry)."""
    return Deadline(None if time_limit is None else max(0.0, time_limit - RESCORE_S_PER_UNIT * len(problem.units)))


def paced(items, deadline: Deadline):
    """``items`` one by one, checking ``deadline`` before each (raises OutOfTime past it)."""
    for item in items:
        deadline.check()
        yield item


def transfer_times(problem: MappingProblem) -> np.ndarray:
    """``t[k, a, b]``: ms to hand edge k's tensor from PU a to PU b (PUs in profile order; 0 on
    the diagonal), as ``Transfers.time_ms`` gives it, for all edges at once."""
    tr = problem.profile.transfers
    pus = list(problem.profile.pus)
    mb = np.array([e.bytes or 0.0 for e in problem.edges])
    out = np.zeros((len(problem.edges), len(pus), len(pus)))
    for a, pa in enumerate(pus):
        for b, pb in enumerate(pus):
            if a != b:
                link = tr.pairs.get(f"{pa}->{pb}", tr.default)
                out[:, a, b] = link.fixed_ms + link.ms_per_mb * mb / 1e6
    for k, e in enumerate(problem.edges):
        for pair, t in tr.measured.get(e.src, {}).items():
            pa, _, pb = pair.partition("->")
            if pa != pb:
                out[k, pus.index(pa), pus.index(pb)] = t
    for pair in tr.switch:              # the switch cost on top of every copy (top levels)
        pa, _, pb = pair.partition("->")
        out[:, pus.index(pa), pus.index(pb)] += [tr.switch_ms(e.src, pa, pb) for e in problem.edges]
    return out


def objective_key(objective: str):
    """Sort key of an Evaluation for ``objective`` with the other two as tie-breaks."""
    mapping_key(objective)
    order = [objective] + [o for o in OBJECTIVES if o != objective]
    return lambda ev: tuple(round(getattr(ev, mapping_key(o)), 9) for o in order)


def tie_break_note(axis: str | None, status: str | None) -> str | None:
    """The message's note when a tie-break on ``axis`` was asked for and did not end optimal."""
    return f"tie-break ({axis}) not proven" if axis and status != "optimal" else None


# the largest gap to its bound a plan reported as proven optimal may keep: ten times what the
# searches prove to (stage_configs.PROOF_GAP, chain_search.SS_GAP: 1e-4; the models' rounding and
# HiGHS's tolerances leave less)
PROOF_GUARD = 1e-3
PROOF_GUARD_ABS = 1e-3      # ms or mJ: the solvers' absolute tolerances (MILP's 1e-6, the models'
                            # rounding in us and nJ) are a larger share of values this small


def scored_result(problem: MappingProblem, solver: str, plan: Plan, *, objective: str = "period",
                  termination: Termination = Termination.COMPLETED, quality: Quality = Quality.FEASIBLE,
                  bound: dict[str, float] | None = None, bound_source: dict[str, str] | None = None,
                  params: dict | None = None,
                  message: str = "", stopped_by: str | None = None) -> SolveResult:
    """Evaluate ``plan`` with the formulation's evaluator (never the solver's own numbers) and
    report the gap of ``objective`` against ``bound`` (default: the formulation's lower bounds).
    A lower bound above the plan's own value of the same objective cannot hold: it is clamped
    to that value (what the model's integer units or a solver's tolerances can leave).
    ``stopped_by``: "work" or "time" when a limit cut the run short (``SolveResult.stopped_by``)."""
    ev = evaluate(problem, plan)
    objectives = ev.objectives()
    if bound is None:
        analytic = best_analytic(problem)
        bound = {k: b.value for k, b in analytic.items()}
        bound_source = {k: b.source for k, b in analytic.items()}
    bound = dict(bound)
    bound_source = {k: v for k, v in (bound_source or {}).items() if k in bound}
    for k, value in bound.items():
        if k in objectives:
            bound[k] = min(value, objectives[k])
    key = mapping_key(objective)
    gap = None
    if key in bound and objectives[key] > 0:
        gap = max(0.0, (objectives[key] - bound[key]) / objectives[key])
    if (quality is Quality.PROVEN_OPTIMAL and gap is not None and gap > PROOF_GUARD
            and objectives[key] - bound[key] > PROOF_GUARD_ABS):
        # a proof of a model the evaluator does not agree with (the chain models had charged no
        # idle power and reported a proven optimum 22% above their own bound)
        quality = Quality.FEASIBLE
        termination = Termination.COMPLETED if termination is Termination.OPTIMAL else termination
        message = (message + "; " if message else "") + (f"not proven: the evaluator's {key} lies {gap:.2%} above "
                                                         "the model's bound")
    plan_dict = plan.to_dict()
    plan_dict["instance"] = problem.name
    return SolveResult("mapping", problem.name, solver, termination, quality, objectives=objectives,
                       bound=bound, bound_source=bound_source, gap=gap, params={"objective": objective, **(params or {})},
                       plan=plan_dict, message=message, stopped_by=stopped_by)


def as_objective(result: SolveResult, objective: str, tie_break: str | None = None) -> SolveResult:
    """``result``, solved for ``energy`` on a profile where ``energy_ss`` equals it (no static
    power, or per-PU power), reported for ``objective`` (and ``tie_break``) as asked."""
    result.params["objective"] = objective
    if "tie_break" in result.params:
        result.params["tie_break"] = tie_break
    if objective == "energy_ss":
        for table in (result.bound, result.bound_source):
            if table and "energy_mj" in table:
                table["energy_ss_mj"] = table.pop("energy_mj")
    return result

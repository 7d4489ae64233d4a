"""Shared by the multi-network solvers: re-score a joint plan with the joint evaluator and wrap
it in a SolveResult; the analytic bounds every solver's gap falls back on."""
from __future__ import annotations

import math

from pipeplan.core.result import Quality, SolveResult, Termination
from pipeplan.core.vocabulary import MULTI_OBJECTIVES
from pipeplan.formulations.mapping.bounds import best_analytic
from pipeplan.formulations.mapping.multi.evaluator import JointEvaluation, evaluate_joint
from pipeplan.formulations.mapping.multi.plan import JointPlan
from pipeplan.formulations.mapping.multi.problem import MultiProblem, reference_fps


def objective_value(ev: JointEvaluation, objective: str) -> float:
    """The value of ``objective`` (fairness, total, rate, energy) in ``ev``."""
    if objective == "energy" and ev.power_mw is None:
        raise ValueError("the energy objective needs min_fps on every network")
    return ev.objectives()[MULTI_OBJECTIVES[objective].key]


def better(objective: str, a: float, b: float) -> bool:
    """Whether value ``a`` is strictly better than ``b`` for ``objective``."""
    return a < b if MULTI_OBJECTIVES[objective].direction == "min" else a > b


def check_objective(problem: MultiProblem, objective: str) -> None:
    if objective == "energy" and any(n.min_fps is None for n in problem.networks):
        missing = next(n.name for n in problem.networks if n.min_fps is None)
        raise ValueError(f"the energy objective is power at the demanded rates: network {missing} has no min_fps")


def network_fault(problem: MultiProblem, solver: str, exact: bool) -> str | None:
    """Why ``solver`` cannot take ``problem``'s networks, or None: the exact joint models and
    nsga2 need chain networks, npu-only an NPU. For a caller to refuse the pair before any work
    (the solvers raise the same as a ValueError, a solver error: `multi solve` had exited 1 with
    the exception's class and line)."""
    if exact or solver == "nsga2":
        graph = next((n for n in problem.networks if not n.problem.is_chain), None)
        if graph is not None:
            return (f"network {graph.name} ({graph.problem.name}) is an operator graph: {solver} needs "
                    "chain networks (the baselines take any)")
    if solver == "npu-only":
        try:
            npu_of(problem)
        except ValueError:
            return f"npu-only needs an NPU: the platform has none (PUs: {', '.join(problem.pu_names)})"
    return None


def npu_of(problem: MultiProblem) -> str:
    """The platform's NPU (the first PU of kind ``npu``); ValueError when it has none."""
    for n in problem.networks:
        for p, pu in n.problem.profile.pus.items():
            if pu.kind == "npu":
                return p
    raise ValueError(f"{problem.name}: the platform has no NPU (PUs: {', '.join(problem.pu_names)})")


def analytic_bound(problem: MultiProblem, objective: str) -> float | None:
    """A bound no joint plan beats (an upper bound of a max objective), from each network's own
    analytic bounds (formulations/mapping/bounds.py): its period is at least P_i^lb, and its
    work per frame at least W_i (every unit on its fastest PU), which the platform's |PU| PUs
    must fit every second. None for energy."""
    pus = len(problem.pu_names)
    p_lb, w_lb, ref = {}, {}, {}
    period = problem.per_model(lambda n: best_analytic(n.problem)["period_ms"].value)
    for n in problem.networks:
        p_lb[n.name] = period[id(n.problem)]
        w_lb[n.name] = n.least_work_ms()
        ref[n.name] = reference_fps(n)
    if objective == "fairness":
        per_net = min(1000.0 / (p_lb[k] * ref[k]) for k in ref)
        capacity = 1000.0 * pus / sum(ref[k] * w_lb[k] for k in ref)
        return min(per_net, capacity)
    if objective == "rate":
        return min(min(1000.0 / p for p in p_lb.values()), 1000.0 * pus / sum(w_lb.values()))
    if objective == "total":   # each network alone at its own best, and no more than the PUs fit
        alone = sum(n.weight * 1000.0 / p_lb[n.name] for n in problem.networks)
        per_work = max(n.weight / w_lb[n.name] for n in problem.networks)
        return min(alone, 1000.0 * pus * per_work)
    return None


def scored_joint_result(problem: MultiProblem, solver: str, plan: JointPlan, *, objective: str,
                        termination: Termination = Termination.COMPLETED, quality: Quality = Quality.FEASIBLE,
                        bound: float | None = None, bound_source: str = "", params: dict | None = None,
                        message: str = "", stopped_by: str | None = None) -> SolveResult:
    """Evaluate ``plan`` with the joint evaluator (never the solver's own numbers) and report
    the gap of ``objective`` against ``bound`` (default: :func:`analytic_bound`). A bound that
    the plan itself beats cannot hold and is clamped to the plan's value (integer rounding)."""
    ev = evaluate_joint(problem, plan)
    value = objective_value(ev, objective)
    key = MULTI_OBJECTIVES[objective].key
    maximise = MULTI_OBJECTIVES[objective].direction == "max"
    if bound is None:
        bound, bound_source = analytic_bound(problem, objective), "analytic"
    bounds, sources, gap = {}, {}, None
    if bound is not None and math.isfinite(bound):
        bound = max(bound, value) if maximise else min(bound, value)
        bounds, sources = {key: bound}, {key: bound_source}
        gap = (bound - value) / bound if maximise else (value - bound) / value
        gap = max(0.0, gap) if value > 0 else None
    doc = plan.to_dict()
    doc["instance"] = problem.name
    objectives = ev.objectives()
    objectives.update({f"{n}.fps_fair": r for n, r in ev.fair_fps.items()})
    return SolveResult("multi", problem.name, solver, termination, quality, objectives=objectives, bound=bounds,
                       bound_source=sources, gap=gap, params={"objective": objective, **(params or {})},
                       plan=doc, message=message, stopped_by=stopped_by)

"""Shared by the mapping solvers: re-score a plan with the evaluator and wrap it in a result."""
from __future__ import annotations

from pipeplan.formulations.mapping.bounds import lower_bounds
from pipeplan.formulations.mapping.evaluator import evaluate
from pipeplan.formulations.mapping.plan import Plan
from pipeplan.formulations.mapping.problem import MappingProblem
from pipeplan.result import Quality, SolveResult, Termination

OBJECTIVES = ("period", "latency", "energy")


def objective_key(objective: str):
    """Sort key of an Evaluation for ``objective`` with the other two as tie-breaks."""
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r} (choose from {', '.join(OBJECTIVES)})")
    order = [objective] + [o for o in OBJECTIVES if o != objective]
    return lambda ev: tuple(round(getattr(ev, f"{o}_{'mj' if o == 'energy' else 'ms'}"), 9) for o in order)


def scored_result(problem: MappingProblem, solver: str, plan: Plan, *, objective: str = "period",
                  termination: Termination = Termination.COMPLETED, quality: Quality = Quality.FEASIBLE,
                  bound: dict[str, float] | None = None, params: dict | None = None,
                  message: str = "") -> SolveResult:
    """Evaluate ``plan`` with the formulation's evaluator (never the solver's own numbers) and
    report the gap of ``objective`` against ``bound`` (default: the formulation's lower bounds)."""
    ev = evaluate(problem, plan)
    objectives = ev.objectives()
    bound = lower_bounds(problem) if bound is None else bound
    key = f"{objective}_{'mj' if objective == 'energy' else 'ms'}"
    gap = None
    if key in bound and objectives[key] > 0:
        gap = max(0.0, (objectives[key] - bound[key]) / objectives[key])
    plan_dict = plan.to_dict()
    plan_dict["instance"] = problem.name
    return SolveResult("mapping", problem.name, solver, termination, quality, objectives=objectives,
                       bound=bound, gap=gap, params={"objective": objective, **(params or {})},
                       plan=plan_dict, message=message)

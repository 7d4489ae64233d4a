"""Warm starts, seeds and fallback plans of the mapping solvers: the one module that calls the
heuristics (HEFT, the best single PU, the pipeline DP) directly, for CP-SAT's hint, the MILP's
and CP-SAT's plan when time runs out, NSGA-II's initial population, and the reference plans of
hypervolume comparisons. Every step checks the deadline it is given."""
from __future__ import annotations

from typing import Any

from pipeplan.core.deadline import Deadline, OutOfTime
from pipeplan.core.errors import InputError, brief_value
from pipeplan.core.registry import warm_start_check
from pipeplan.core.vocabulary import mapping_key
from pipeplan.formulations.mapping.checker import violations
from pipeplan.formulations.mapping.evaluator import evaluate
from pipeplan.formulations.mapping.pareto import single_pu_plans
from pipeplan.formulations.mapping.plan import Plan, plan_from_dict
from pipeplan.formulations.mapping.problem import MappingProblem
from pipeplan.solvers.mapping.heft import heft_plan
from pipeplan.solvers.mapping.pipeline_dp import pipeline_plan
from pipeplan.solvers.mapping.single import fastest_pu_plan, single_plan

HEURISTICS = ("pipeline-dp", "heft", "single")     # ties between their plans go to the first


@warm_start_check("mapping")
def checked_plan(problem: MappingProblem, plan: Any) -> Plan:
    """A mapping solver's ``warm_start``: a Plan of ``problem`` that breaks none of its rules, or
    such a plan as a dictionary (a result's ``plan``); otherwise InputError. ``pipeplan.solve``
    calls it before the solver runs: a wrong object, ``result.plan`` among them, had ended as an
    error result naming an AttributeError from inside the solver."""
    if isinstance(plan, dict):
        plan = plan_from_dict(plan, "warm_start")
    if not isinstance(plan, Plan):
        raise InputError("warm_start", "", f"expected a Plan of {problem.name}, got {brief_value(plan)}")
    bad = violations(problem, plan)
    if bad:
        raise InputError("warm_start", "", f"not a valid plan of {problem.name} ({len(bad)} broken rules; "
                         f"first: {bad[0]})")
    return plan


def within_stages(plan: Plan | None, max_stages: int | None) -> Plan | None:
    """``plan`` when it has at most ``max_stages`` stages (any, without a cap), else None: a
    warm start outside an exact search's plan space is set aside for the heuristics' start
    (kept, it had come back as the "optimum" of a search it does not belong to)."""
    return plan if plan is not None and (max_stages is None or len(plan.stages) <= max_stages) else None


def best_heuristic_plan(problem: MappingProblem, objective: str, deadline: Deadline | None = None,
                        max_stages: int | None = None) -> Plan:
    """The best plan of the cheap heuristics for ``objective`` (a warm start, or what a solver
    returns when its time runs out): HEFT, the best single PU and the pipeline DP (its best
    pipeline by ``deadline``), as many as ``deadline`` allows, compared by the evaluator. When
    time runs out before HEFT's plan is made: the whole network on its fastest PU, which costs
    no evaluation. With ``max_stages``, only plans of at most that many stages (the single PU's
    and the fastest PU's plans have one; HEFT's is left out when it has more)."""
    deadline = deadline or Deadline(None)
    key = mapping_key(objective)

    def fits(plan: Plan) -> bool:
        return within_stages(plan, max_stages) is not None

    try:
        heft = heft_plan(problem, deadline)
    except OutOfTime:
        return fastest_pu_plan(problem)
    found: dict[str, tuple[float, Plan]] = {}
    try:
        ev, plan = single_plan(problem, deadline=deadline)
        found["single"] = (ev.objectives()[key], plan)
    except ValueError:                   # no PU runs every unit
        pass
    except OutOfTime:
        return heft if fits(heft) else fastest_pu_plan(problem)
    try:
        plan, _ = pipeline_plan(problem, max_stages, deadline=deadline)
        found["pipeline-dp"] = (evaluate(problem, plan).objectives()[key], plan)
    except (ValueError, OutOfTime):
        pass
    if not found:
        return heft if fits(heft) else fastest_pu_plan(problem)
    if fits(heft):
        found["heft"] = (evaluate(problem, heft).objectives()[key], heft)
    return min((found[h][0], HEURISTICS.index(h), found[h][1]) for h in found)[2]


def seed_plans(problem: MappingProblem, deadline: Deadline, max_stages: int | None = None) -> list[Plan]:
    """NSGA-II's seeds, in this order: the best single PU, HEFT (the fastest PU's plan when time
    runs out first, so there is always one seed) and the pipeline DP, as ``deadline`` allows."""
    try:
        heft = heft_plan(problem, deadline)
    except OutOfTime:
        heft = fastest_pu_plan(problem)

    def attempt(make):
        try:
            return make()
        except (ValueError, OutOfTime):  # ValueError: no single PU, or no pipeline, runs every unit
            return None

    single = attempt(lambda: single_plan(problem, deadline=deadline)[1])
    pipeline = attempt(lambda: pipeline_plan(problem, max_stages, deadline)[0])
    return [p for p in (single, heft, pipeline) if p is not None]


def reference_plans(problem: MappingProblem) -> list[Plan]:
    """Plans every solver can reach, for a hypervolume reference point: one per PU that runs the
    whole network, or HEFT's plan when no PU does."""
    return single_pu_plans(problem) or [heft_plan(problem)]

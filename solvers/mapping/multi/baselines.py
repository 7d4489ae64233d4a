"""Baselines of the multi-network problem: each network planned on its own, then the joint plan
scored by the joint evaluator (formulations/mapping/multi/evaluator.py).

* ``alone-best-pu``: every network whole on the PU where it runs fastest alone (the PU of its
  reference rate; Puzzle's "best single mapping"). Networks that prefer the same PU share it.
* ``npu-only``: every network whole on the NPU (Puzzle's "NPU only").
* ``own-optimum``: every network's own minimum-period pipeline, as if it ran alone: what a
  single-network planner gives each network when nobody plans them together.
* ``greedy-partition``: PUs handed out one at a time (below); each network's plan is its own
  optimum on the PUs it got, so no PU serves two networks and the plan is valid in both
  sharing modes.

The first three ignore the other networks, so on a ``partitioned`` instance they may put two
networks on one PU; such a plan, like one that misses a deadline or a demanded rate, is
returned as ``infeasible`` with the evaluator's reason rather than scored.

``nsga2.py`` seeds its search with these plans, hence the plan-making functions are public.
"""
from __future__ import annotations

import dataclasses
import itertools

from pipeplan.core.deadline import Deadline, OutOfTime
from pipeplan.core.errors import InputError
from pipeplan.core.registry import register
from pipeplan.core.result import Quality, SolveResult, Termination, stop_note
from pipeplan.core.vocabulary import MULTI_OBJECTIVES, MultiAxis
from pipeplan.formulations.mapping.evaluator import InfeasiblePlan, evaluate
from pipeplan.formulations.mapping.multi.evaluator import evaluate_joint
from pipeplan.formulations.mapping.multi.plan import JointPlan
from pipeplan.formulations.mapping.multi.problem import MultiProblem, Network, reference_fps, single_pu_plans
from pipeplan.formulations.mapping.plan import Plan
from pipeplan.formulations.mapping.problem import MappingProblem, restrict_pus
from pipeplan.solvers.mapping.multi.common import check_objective, npu_of, objective_value, scored_joint_result
from pipeplan.solvers.mapping.pipeline_dp import pipeline_plan
from pipeplan.solvers.mapping.single import single_plan


def joint_result(problem: MultiProblem, solver: str, plan: JointPlan, *, objective: str, params: dict | None = None,
                 termination: Termination = Termination.COMPLETED, message: str = "",
                 stopped_by: str | None = None) -> SolveResult:
    """``scored_joint_result``, or an ``infeasible`` result naming the rules ``plan`` breaks (a
    PU shared on a partitioned instance, a deadline, a demanded rate): the baselines plan each
    network alone and cannot repair what only shows jointly."""
    try:
        return scored_joint_result(problem, solver, plan, objective=objective, termination=termination,
                                   params=params, message=message, stopped_by=stopped_by)
    except InfeasiblePlan as exc:
        return SolveResult("multi", problem.name, solver, Termination.INFEASIBLE, Quality.NONE,
                           params={"objective": objective, **(params or {})},
                           message=f"the {solver} plan is not feasible jointly: {exc}")


# ------------------------------------------------------------------ one network on its own


def own_optimum(problem: MappingProblem, deadline: Deadline | None = None) -> tuple[Plan, bool]:
    """The network's minimum-period plan alone (latency breaks ties) and whether the search
    finished. The least of the pipeline DP's plan and the one-PU plans, by the evaluator: on a
    chain this is the exact optimum over plans with disjoint PU sets (what the exact chain
    solver finds): a stage of two PUs runs its units one after the other, so splitting it never
    lengthens the period, the DP covers every one-PU-per-stage pipeline, and the one rule it
    does not model, the whole-graph speed-up, holds only for one-PU plans, which are compared
    here. Much faster than the exact solver, which matters where the greedy partition asks for
    many PU subsets. On an operator graph the DP approximates. Raises OutOfTime when ``deadline``
    passes before any plan exists, ValueError when no pipeline fits."""
    deadline = deadline or Deadline(None)
    plan, complete = pipeline_plan(problem, deadline=deadline)
    candidates = [plan]
    try:
        candidates.append(single_plan(problem, "period", deadline=deadline)[1])
    except ValueError:                # no PU runs every unit
        pass
    except OutOfTime:
        complete = False
    scores = [evaluate(problem, p) for p in candidates]
    best = min(range(len(candidates)), key=lambda k: (scores[k].period_ms, scores[k].latency_ms))
    return dataclasses.replace(candidates[best], instance=problem.name), complete


def own_optimum_on(problem: MappingProblem, pus, deadline: Deadline | None = None) -> tuple[Plan | None, bool]:
    """:func:`own_optimum` on the PUs ``pus`` only (those of the network's profile); None
    when they cannot run every unit. The plan names the full instance, so it joins a joint plan."""
    mine = tuple(p for p in problem.profile.pus if p in pus)
    if not mine:
        return None, True
    try:
        sub = restrict_pus(problem, mine)
    except InputError:                # some unit runs on none of them
        return None, True
    plan, complete = own_optimum(sub, deadline)
    return dataclasses.replace(plan, instance=problem.name), complete


def best_single_pu(network: Network) -> tuple[str, Plan]:
    """The PU where the network runs fastest whole (ties: profile order) and that plan."""
    plans = single_pu_plans(network)
    if not plans:
        raise ValueError(f"network {network.name}: no single PU runs every unit")
    pu = max(plans, key=lambda p: evaluate(network.problem, plans[p]).throughput_fps)
    return pu, plans[pu]


# ------------------------------------------------------------------ joint plans of the baselines


def alone_best_pu_plan(problem: MultiProblem) -> JointPlan:
    best = problem.per_model(lambda n: best_single_pu(n)[1])
    return JointPlan({n.name: best[id(n.problem)] for n in problem.networks}, instance=problem.name)


def npu_only_plan(problem: MultiProblem) -> JointPlan:
    """Every network whole on the NPU; ValueError naming a network the NPU cannot run."""
    npu = npu_of(problem)
    plans = {}
    for n in problem.networks:
        prob = n.problem
        if npu not in prob.profile.pus:
            raise ValueError(f"network {n.name}: its profile has no time on the NPU {npu}")
        stuck = [u.name for i, u in enumerate(prob.units) if not prob.profile.can_run(i, npu)]
        if stuck:
            raise ValueError(f"network {n.name}: the NPU {npu} cannot run unit {stuck[0]}"
                             + (f" (and {len(stuck) - 1} more)" if len(stuck) > 1 else ""))
        plans[n.name] = single_pu_plans(n)[npu]
    return JointPlan(plans, instance=problem.name)


def own_optimum_plan(problem: MultiProblem, deadline: Deadline | None = None) -> tuple[JointPlan, bool]:
    """Every network's :func:`own_optimum`, and whether every search finished."""
    found = problem.per_model(lambda n: own_optimum(n.problem, deadline))
    plans = {n.name: found[id(n.problem)][0] for n in problem.networks}
    return JointPlan(plans, instance=problem.name), all(done for _, done in found.values())


def greedy_partition_plan(problem: MultiProblem, objective: str = "fairness",
                          deadline: Deadline | None = None) -> tuple[JointPlan | None, bool, str]:
    """A partition of the PUs built greedily: (the joint plan or None, whether the greedy ran
    to its end, why there is no plan).

    Each network's plan is its :func:`own_optimum_on` the PUs it holds. First every network
    gets PUs: the one that would lose most by not getting its best free PU (the regret: best
    minus second-best normalised throughput, so that two networks wanting the same PU leave it
    to the one with the poorer alternative) takes it, the smallest set of free PUs that runs it
    when no single one does. Then, while PUs are free, every (network, free PU) step that
    shortens that network's period is tried and the one with the best joint ``objective`` taken
    (ties, and plans missing a deadline or demand, ranked by the sorted normalised
    throughputs, least first: each step helps the network worst off), until none improves.
    When the deadline passes the greedy stops where it is."""
    deadline = deadline or Deadline(None)
    nets = {n.name: n for n in problem.networks}
    ref = {name: reference_fps(n) for name, n in nets.items()}
    held: dict[str, frozenset[str]] = {name: frozenset() for name in nets}
    plans: dict[str, Plan | None] = dict.fromkeys(nets)
    memo: dict[tuple[str, frozenset[str]], tuple[Plan, float] | None] = {}   # -> (plan, period)

    def plan_on(name: str, pus: frozenset[str]) -> tuple[Plan, float] | None:
        if (name, pus) not in memo:
            plan, done = own_optimum_on(nets[name].problem, pus, deadline)
            if not done:
                raise OutOfTime
            memo[name, pus] = None if plan is None else (plan, evaluate(nets[name].problem, plan).period_ms)
        return memo[name, pus]

    def norm(name: str, period: float) -> float:
        return 1000.0 / (period * ref[name])

    def free() -> list[str]:
        taken = set().union(*held.values())
        return [p for p in problem.pu_names if p not in taken]

    period: dict[str, float] = {}
    try:
        while missing := [name for name in nets if plans[name] is None]:
            options = {}
            for name in missing:
                found = []
                for size in range(1, len(free()) + 1):
                    for pus in itertools.combinations(free(), size):
                        deadline.check()
                        if (got := plan_on(name, frozenset(pus))) is not None:
                            found.append((norm(name, got[1]), frozenset(pus), got))
                    if found:
                        break
                if not found:
                    return None, True, (f"greedy-partition: no free PUs run network {name} "
                                        f"(free: {', '.join(free()) or 'none'})")
                found.sort(key=lambda f: -f[0])
                regret = found[0][0] - (found[1][0] if len(found) > 1 else 0.0)
                options[name] = (regret, found[0])
            name = max(missing, key=lambda m: options[m][0])   # ties: instance order
            _, held[name], (plans[name], period[name]) = options[name][1]

        def rank(periods: dict[str, float], candidate: dict[str, Plan]) -> tuple:
            fair = sorted(norm(m, periods[m]) for m in nets)
            try:
                ev = evaluate_joint(problem, JointPlan(candidate, instance=problem.name))
            except InfeasiblePlan:
                return (False, 0.0, fair)
            value = objective_value(ev, objective)
            return (True, value if MULTI_OBJECTIVES[objective].direction == "max" else -value, fair)

        current = rank(period, plans)
        while free():
            steps = []
            for name in nets:
                for p in free():
                    deadline.check()
                    got = plan_on(name, held[name] | {p})
                    if got is not None and got[1] < period[name] * (1 - 1e-9):
                        steps.append((rank({**period, name: got[1]}, {**plans, name: got[0]}), name, p, got))
            if not steps:
                break
            best = max(steps, key=lambda s: s[0])    # ties: the first network, then PU order
            if best[0] <= current:
                break
            current, name, p, (plans[name], period[name]) = best
            held[name] = held[name] | {p}
    except OutOfTime:
        if any(p is None for p in plans.values()):
            return None, False, "the time limit passed before every network held a PU"
        return JointPlan(dict(plans), instance=problem.name), False, ""
    return JointPlan(dict(plans), instance=problem.name), True, ""


# ------------------------------------------------------------------ the registered solvers


@register("multi", "alone-best-pu", exact=False,
          description="every network whole on its own best PU (Puzzle's best single mapping)")
def solve_alone_best_pu(problem: MultiProblem, *, objective: MultiAxis = "fairness"):
    check_objective(problem, objective)
    return joint_result(problem, "alone-best-pu", alone_best_pu_plan(problem), objective=objective)


@register("multi", "npu-only", exact=False, description="every network whole on the NPU (Puzzle's NPU only)")
def solve_npu_only(problem: MultiProblem, *, objective: MultiAxis = "fairness"):
    check_objective(problem, objective)
    return joint_result(problem, "npu-only", npu_only_plan(problem), objective=objective)


@register("multi", "own-optimum", exact=False,
          description="every network's own minimum-period plan, planned alone")
def solve_own_optimum(problem: MultiProblem, *, objective: MultiAxis = "fairness", time_limit: float | None = None):
    check_objective(problem, objective)
    try:
        plan, complete = own_optimum_plan(problem, Deadline(time_limit))
    except OutOfTime:
        return SolveResult("multi", problem.name, "own-optimum", Termination.TIME_LIMIT, Quality.NONE,
                           params={"objective": objective}, stopped_by="time",
                           message="the time limit passed before every network had a plan")
    if complete:
        return joint_result(problem, "own-optimum", plan, objective=objective)
    return joint_result(problem, "own-optimum", plan, objective=objective, termination=Termination.TIME_LIMIT,
                        stopped_by="time", message=stop_note("time"))


@register("multi", "greedy-partition", exact=False,
          description="PUs handed to the networks one at a time, each network's optimum on its PUs")
def solve_greedy_partition(problem: MultiProblem, *, objective: MultiAxis = "fairness",
                           time_limit: float | None = None):
    check_objective(problem, objective)
    plan, complete, why = greedy_partition_plan(problem, objective, Deadline(time_limit))
    if plan is None:
        if complete:
            return SolveResult("multi", problem.name, "greedy-partition", Termination.INFEASIBLE, Quality.NONE,
                               params={"objective": objective}, message=why)
        return SolveResult("multi", problem.name, "greedy-partition", Termination.TIME_LIMIT, Quality.NONE,
                           params={"objective": objective}, stopped_by="time", message=why)
    params = {"partition": {n: sorted(plan.pus_of(n), key=problem.pu_names.index) for n in plan.plans}}
    if complete:
        return joint_result(problem, "greedy-partition", plan, objective=objective, params=params)
    return joint_result(problem, "greedy-partition", plan, objective=objective, params=params,
                        termination=Termination.TIME_LIMIT, stopped_by="time", message=stop_note("time"))

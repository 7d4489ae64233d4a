"""Brute force over every joint plan of a tiny multi-network instance: the ground truth the
exact joint models are tested against. The plan space is the exact models': each network's
plans as the single-network brute force enumerates them (stages own disjoint PUs), in every
combination; plans breaking a deadline, a demanded rate or the partition are skipped.
Exponential: two or three networks of <= 4 units on <= 3 PUs."""
from __future__ import annotations

import itertools

from pipeplan.core.vocabulary import MULTI_OBJECTIVES
from pipeplan.formulations.mapping.brute_force import all_plans
from pipeplan.formulations.mapping.evaluator import Evaluation, InfeasiblePlan, evaluate
from pipeplan.formulations.mapping.multi.evaluator import evaluate_joint
from pipeplan.formulations.mapping.multi.plan import JointPlan
from pipeplan.formulations.mapping.multi.problem import MultiProblem, Network


def joint_optimum(problem: MultiProblem, objective: str) -> tuple[float, JointPlan] | None:
    """The best value of ``objective`` over every feasible joint plan and one plan that has it
    (None when no joint plan is feasible)."""
    o = MULTI_OBJECTIVES[objective]
    per_net = [list(all_plans(n.problem)) for n in problem.networks]
    names = [n.name for n in problem.networks]
    cache: dict[tuple[str, int, frozenset[str]], Evaluation] = {}
    best = None
    for combo in itertools.product(*range_of(per_net)):
        plans = {n: per_net[k][i] for k, (n, i) in enumerate(zip(names, combo))}
        plan = JointPlan(plans, instance=problem.name)

        def scored(net: Network, evicted: frozenset[str]) -> Evaluation:
            key = (net.name, combo[names.index(net.name)], evicted)
            if key not in cache:
                cache[key] = evaluate(net.problem, plans[net.name], check=False, evicted=evicted)
            return cache[key]

        try:
            ev = evaluate_joint(problem, plan, scored)
        except InfeasiblePlan:
            continue
        value = getattr(ev, o.key)
        if value is None:
            raise ValueError(f"{objective}: the instance lacks what it needs (min_fps on every network)")
        if best is None or (value < best[0] if o.direction == "min" else value > best[0]):
            best = (value, plan)
    return best


def range_of(lists: list[list]) -> list[range]:
    return [range(len(x)) for x in lists]

"""Brute-force oracle for the assignment problem: every group placement of a tiny instance
(workers split into groups of at least s+1, idle workers allowed, k partitions split among the
groups within the capacities; pipelined: at most s+1 per group), each scored by the evaluator's
``scenario_objective``. Exponential: meant for n <= 6."""
from __future__ import annotations

import itertools
from typing import Iterator

import numpy as np

from pipeplan.formulations.gradcode.evaluator import scenario_objective
from pipeplan.formulations.gradcode.placement import groups_code, pipelined
from pipeplan.formulations.gradcode.problem import GradCodeProblem


def _labelings(n: int) -> Iterator[list[int]]:
    """Restricted-growth labelings of n workers; label -1 = idle (set partitions of subsets)."""
    def rec(i: int, top: int, acc: list[int]):
        if i == n:
            yield list(acc)
            return
        for lab in range(-1, top + 1):
            acc.append(lab)
            yield from rec(i + 1, max(top, lab + 1), acc)
            acc.pop()
    yield from rec(0, 0, [])


def group_placements(problem: GradCodeProblem) -> Iterator[tuple[list[list[int]], list[int]]]:
    n, s, k = problem.n, problem.s, problem.k
    for lab in _labelings(n):
        G = max(lab) + 1
        if G == 0:
            continue
        groups = [[i for i in range(n) if lab[i] == g] for g in range(G)]
        if any(len(g) < s + 1 for g in groups):
            continue
        limits = [min(min(problem.capacity[i] for i in g), s + 1 if problem.pipelined else k) for g in groups]
        for counts in itertools.product(*(range(1, lim + 1) for lim in limits)):
            if sum(counts) == k:
                yield groups, list(counts)


def optimum(problem: GradCodeProblem, scenarios: np.ndarray, objective: str = "expected") -> float:
    """The best ``scenario_objective`` over every group placement (inf when there is none)."""
    best = np.inf
    for groups, counts in group_placements(problem):
        code = groups_code("brute", problem.s, problem.n, groups, counts)
        if problem.pipelined:
            code = pipelined(code, "brute")
        best = min(best, scenario_objective(problem, code, scenarios, objective))
    return best

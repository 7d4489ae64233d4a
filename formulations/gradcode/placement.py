"""Building blocks of placements, shared by the constructions, the assignment solvers and the
brute-force oracle: group codes, the cyclic support and the round-robin schedule."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from pipeplan.formulations.gradcode.decoders import group_index
from pipeplan.formulations.gradcode.gradient_code import GradientCode


def groups_code(scheme: str, s: int, n: int, groups: list[list[int]], counts: list[int]) -> GradientCode:
    """Group code: group g's workers store the next ``counts[g]`` partitions (in group order),
    reply their sum, and one reply per group decodes."""
    k = sum(counts)
    support = np.zeros((n, k), dtype=bool)
    first = 0
    for members, q in zip(groups, counts):
        support[np.ix_(members, range(first, first + q))] = True
        first += q
    return GradientCode(scheme=scheme, s=s, support=support, B=support.astype(np.float64), decoder="groups",
                        groups=tuple(tuple(int(w) for w in g) for g in groups))


def cyclic_support(n: int, s: int) -> np.ndarray:
    """Worker i stores partitions i, ..., i+s (mod n)."""
    support = np.zeros((n, n), dtype=bool)
    for i in range(n):
        support[i, (i + np.arange(s + 1)) % n] = True
    return support


def round_robin_schedule(code: GradientCode) -> np.ndarray:
    """(period, n) partition computed by each worker in each step. In a groups code member j of a
    group starts at the group's j-th partition; otherwise worker i takes its partitions in
    cyclic order starting at partition i. The period is the lcm of the workers' counts."""
    n = code.n
    lists, offsets = [], []
    of = group_index(code) if code.decoder == "groups" else None
    for i in range(n):
        held = np.flatnonzero(code.support[i])
        if of is not None:
            offsets.append(code.groups[of[i]].index(i) if of[i] >= 0 else 0)
        else:
            held = np.roll(held, -int(np.searchsorted(held, i % code.k))) if held.size else held
            offsets.append(0)
        lists.append(held)
    period = math.lcm(*[max(1, h.size) for h in lists])
    schedule = np.full((period, n), -1, dtype=np.int64)
    for i, held in enumerate(lists):
        if held.size:
            schedule[:, i] = held[(offsets[i] + np.arange(period)) % held.size]
    return schedule


def pipelined(code: GradientCode, scheme: str) -> GradientCode:
    """The code with a round-robin schedule: one partition per worker per step."""
    return replace(code, scheme=scheme, schedule=round_robin_schedule(code))

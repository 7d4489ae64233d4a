"""The assignment problem for heterogeneous workers, shared by the CP-SAT and MILP solvers.

Structure: the workers are split into groups of at least s+1 (a worker may stay idle); group g
stores q_g partitions (sum q_g = k, q_g <= every member's capacity; pipelined: q_g <= s+1, so
round-robin staleness stays <= s) and every member stores all of them. Any s stragglers leave a
member in every group, so one reply per group decodes exactly: decodability is guaranteed by the
structure, not by numbers (the verifier re-checks it).

Step time of a placement: a member of group g replies after q_g c_i + D_i (pipelined: c_i + D_i),
c_i = partition_time / speed_i, D_i its straggling delay; the step ends at max over groups of
the group's first reply. Objectives:

* ``expected``: sample average over R delay scenarios drawn from the straggler model (SAA;
  stratified, see ``draw_scenarios``);
* ``worst``: s workers never reply: max over groups of the (s+1)-th fastest member's time;
  among the placements with the optimal worst case, the backends then minimise the expected
  step time (lexicographic), since many placements tie on the worst case.

Symmetry breaking (both backends): workers are renumbered so that identical workers (same
speed, straggle probability and capacity; not under a trace, whose columns differ) are
consecutive; groups are labelled by their first member, and identical workers take
non-decreasing group labels (idle last). Any placement can be relabelled into that form, and
for identical workers it removes choices that only fit the sampled delays' noise: on
homogeneous workers the only optimal shape left is FR's contiguous groups.
"""
from __future__ import annotations

import dataclasses
import heapq
from dataclasses import dataclass

import numpy as np

from pipeplan.core.vocabulary import GRADCODE_OBJECTIVES
from pipeplan.formulations.gradcode.delays import DelaySampler, stratified_delays
from pipeplan.formulations.gradcode.gradient_code import GradientCode
from pipeplan.formulations.gradcode.placement import groups_code, pipelined
from pipeplan.formulations.gradcode.problem import GradCodeProblem

OBJECTIVES = tuple(GRADCODE_OBJECTIVES)


@dataclass(frozen=True)
class AssignmentData:
    problem: GradCodeProblem
    objective: str
    order: np.ndarray        # canonical position -> worker index
    c: np.ndarray            # per-partition seconds, canonical order
    cap: np.ndarray          # capacity, canonical order
    scenarios: np.ndarray    # (R, n) delays in seconds, canonical order
    groups: int              # most groups possible
    qmax: int                # most partitions per group
    ties: tuple[tuple[int, int], ...]   # consecutive canonical positions of identical workers
    floor: float = 0.0       # seconds: a proven floor under every placement's step in every scenario

    @property
    def n(self) -> int:
        return self.order.size


def delay_free(data: AssignmentData) -> AssignmentData:
    """The same placements with no delays: one scenario of zeros, the expected objective.

    A delay only adds to a reply, so in any scenario a placement's step is at least its step
    here, and so is its worst case (the (s+1)-th fastest core member's work, never less than the
    fastest's). The optimum of this problem, or any proven bound of it, is therefore a floor
    under every scenario's step of every placement (``AssignmentData.floor``). It is what the
    scenario-average models' relaxations miss: each scenario's row can pick another witness, so
    they bound the step by the fastest workers' replies alone. On gradcode/hetero-n12-s2 the
    reply counts give 0.75 s, CP-SAT's bound within the quick suite's work limit 1.0 s, and the
    floor 1.5 s, where the best placement found takes 1.5015 s (a one-scenario model of n = 12
    closes in milliseconds)."""
    return dataclasses.replace(data, objective="expected", scenarios=np.zeros((1, data.n)), floor=0.0)


def with_floor(data: AssignmentData, floor: float | None) -> AssignmentData:
    """``data`` with ``floor`` (seconds; None: nothing proven) as its floor, if higher."""
    return data if floor is None or floor <= data.floor else dataclasses.replace(data, floor=float(floor))


def draw_scenarios(problem: GradCodeProblem, count: int, seed: int) -> np.ndarray:
    """(count, n) delays in worker order from the problem's straggler model. Independent models
    are sampled stratified (``stratified_delays``): with plain draws the optimum over 64
    scenarios was up to 6% worse than PGC-FR out of sample on gradcode/hetero-n12-s1-pipe,
    stratified it is 5-6% better for every seed tried. Persistent (Markov) stragglers are
    sampled every 5/(1 - stay) steps, so that the scenarios are close to independent draws
    rather than one straggler episode repeated; traces are replayed."""
    rng = np.random.default_rng(seed)
    model = problem.straggler
    if model.kind in ("exponential", "shifted-exponential", "pareto"):
        return stratified_delays(model, problem.straggle_prob, count, rng)
    stride = int(np.ceil(5 / (1 - model.stay))) if model.kind == "markov" else 1
    return DelaySampler(model, problem.straggle_prob, rng).next(count * stride)[::stride]


def assignment_data(problem: GradCodeProblem, objective: str, *, scenarios: int = 64, seed: int = 0) -> AssignmentData:
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r} (expected or worst)")
    n, s = problem.n, problem.s
    if problem.straggler.kind == "trace":
        keys = [(i,) for i in range(n)]
    else:
        keys = [(-problem.speeds[i], problem.straggle_prob[i], -problem.capacity[i]) for i in range(n)]
    order = np.array(sorted(range(n), key=lambda i: (keys[i], i)), dtype=np.int64)
    ties = tuple((a, a + 1) for a in range(n - 1) if keys[order[a]] == keys[order[a + 1]])
    c = np.array([problem.compute_time(i) for i in order])
    cap = np.array([problem.capacity[i] for i in order], dtype=np.int64)
    qmax = int(min(problem.k, cap.max(), s + 1 if problem.pipelined else problem.k))
    if scenarios < 1:
        raise ValueError(f"need at least one delay scenario, got {scenarios}")
    draws = draw_scenarios(problem, scenarios, seed)[:, order]
    return AssignmentData(problem, objective, order, c, cap, draws, min(n // (s + 1), problem.k), qmax, ties)


def code_from_assignment(data: AssignmentData, groups: list[list[int]], counts: list[int], scheme: str) -> GradientCode:
    """The code of a solution given in canonical positions (groups in label order)."""
    p = data.problem
    workers = [[int(data.order[i]) for i in g] for g in groups]
    code = groups_code(scheme, p.s, p.n, workers, counts)
    return pipelined(code, scheme) if p.pipelined else code


def fr_shape(data: AssignmentData) -> tuple[list[list[int]], list[int]] | None:
    """FR's contiguous groups of s+1 with s+1 partitions each (a warm start), when feasible."""
    p = data.problem
    q = p.s + 1
    if p.n % q or p.k != p.n or (data.cap < q).any() or data.qmax < q:
        return None
    return [list(range(a, a + q)) for a in range(0, p.n, q)], [q] * (p.n // q)


def greedy_shape(data: AssignmentData) -> tuple[list[list[int]], list[int]] | None:
    """A quick placement for when the search finds none in time: consecutive canonical
    positions (fastest first, identical workers together) in groups of s+1, the rest idle; each
    group takes one partition, then every further partition goes to the group whose fastest
    member would finish it soonest (pipelined: the next group with room), within capacities.
    None when the groups cannot hold the k partitions."""
    p = data.problem
    q = p.s + 1
    groups = [list(range(a, a + q)) for a in range(0, data.groups * q, q)]
    room = [int(min(data.qmax, data.cap[g].min())) for g in groups]
    if not groups or sum(room) < p.k:
        return None
    fastest = [float(data.c[g].min()) for g in groups]
    counts = [1] * len(groups)
    heap = [(0.0 if p.pipelined else 2 * fastest[g], g) for g in range(len(groups)) if room[g] > 1]
    heapq.heapify(heap)
    for _ in range(p.k - len(groups)):
        _, g = heapq.heappop(heap)
        counts[g] += 1
        if counts[g] < room[g]:
            heapq.heappush(heap, (float(counts[g]) if p.pipelined else (counts[g] + 1) * fastest[g], g))
    return groups, counts


def lower_bound(data: AssignmentData) -> float:
    """A bound on the model objective of every group placement, for a gap when the search is
    cut short. At least G = ceil(k / qmax) groups are used and each needs a reply from a worker
    of its own, which has computed at least one partition: a scenario's step is at least the
    G-th smallest of c_i + D_ri, and the worst case at least the G(s+1)-th smallest c_i (every
    group's s+1 fastest members are distinct workers). Without pipelining some group holds
    ceil(k / groups) partitions, which bounds the step by that many partitions' work on the
    fastest worker too. Every scenario's step is also at least ``data.floor``."""
    p = data.problem
    used = -(-p.k // data.qmax)
    most = 1 if p.pipelined else -(-p.k // data.groups)
    if data.objective == "worst":
        c = np.sort(data.c)
        return float(max(c[min(c.size, used * (p.s + 1)) - 1], most * c[p.s], data.floor))
    replies = np.partition(data.c + data.scenarios, used - 1, axis=1)[:, used - 1]
    heavy = (most * data.c + data.scenarios).min(axis=1)
    return float(np.maximum(np.maximum(replies, heavy), data.floor).mean())


def check_solution(data: AssignmentData, groups: list[list[int]], counts: list[int]) -> None:
    """The structural rules, re-checked on a backend's answer (a bug guard, not a model)."""
    p = data.problem
    assert sum(counts) == p.k, (counts, p.k)
    seen = [i for g in groups for i in g]
    assert len(seen) == len(set(seen))
    for g, q in zip(groups, counts):
        assert len(g) >= p.s + 1 and 1 <= q <= data.qmax and all(data.cap[i] >= q for i in g), (g, q)

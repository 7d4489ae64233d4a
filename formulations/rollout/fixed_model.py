"""The offline model: every request occupies one engine slot and a fixed amount of KV for a
fixed time once started, so a round is a scheduling problem with two cumulative resources
(running sequences, KV tokens), group completion as the max of its requests' ends, and the
trainer's updates after that.

With a ``linear`` engine (reserve mode, ``c1 = c2 = 0``, no prefill) this model *is* the
simulator: request i takes ``len_i * c0`` wherever it runs and holds its footprint. For other
engines it is an approximation: ``tau`` seconds per token (the mean per-token residence time
measured in a simulated run) and, with on-demand KV, the time-average footprint
``prompt + len / 2``; plans made on it are replayed in the simulator for their real figures.
"""
from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass

from pipeplan.formulations.rollout.problem import RolloutProblem
from pipeplan.formulations.rollout.trainer import chunks, run_updates


@dataclass(frozen=True)
class FixedModel:
    durations: tuple[float, ...]    # seconds per request
    demands: tuple[int, ...]        # KV tokens held while running
    seqs: int
    capacity: int
    tau: float
    exact: bool


def fixed_model(problem: RolloutProblem, tau: float | None = None) -> FixedModel:
    """``tau`` is required unless the engine is linear (then it is ``c0`` and the model exact)."""
    eng = problem.engine
    exact = eng.linear and (tau is None or tau == eng.c0_s)
    if tau is None:
        if not eng.linear:
            raise ValueError("a non-linear engine needs tau (seconds per token)")
        tau = eng.c0_s
    if eng.kv_mode == "reserve":
        demands = tuple(problem.footprint(i) for i in range(problem.n_requests))
    else:
        demands = tuple(p + -(-n // 2) for p, n in zip(problem.prompts, problem.lengths))
    return FixedModel(tuple(n * tau for n in problem.lengths), demands, eng.max_num_seqs,
                      eng.kv_capacity_tokens, tau, exact)


def _fits(placed: list[tuple[float, float, int]], start: float, end: float, demand: int, m: FixedModel) -> bool:
    """Whether a request fits over [start, end) next to ``placed`` (start, end, demand)."""
    if end <= start:
        return True
    points = [start] + [s for s, _, _ in placed if start < s < end]
    for t in points:
        run = [d for s, e, d in placed if s <= t < e]
        if len(run) + 1 > m.seqs or sum(run) + demand > m.capacity:
            return False
    return True


def serial_schedule(m: FixedModel, order) -> list[float]:
    """Serial schedule generation: each request in ``order`` at the earliest time it fits next
    to the ones already placed. Over all orders this reaches an optimal schedule of any
    objective that never improves when a request ends later (Kolisch 1996), such as the
    trainer's finish."""
    placed: list[tuple[float, float, int]] = []
    starts = [0.0] * len(m.durations)
    for i in order:
        for t in sorted({0.0} | {e for _, e, _ in placed}):
            if _fits(placed, t, t + m.durations[i], m.demands[i], m):
                starts[i] = t
                placed.append((t, t + m.durations[i], m.demands[i]))
                break
    return starts


def list_schedule(m: FixedModel, order) -> list[float]:
    """The engine's way on the fixed model: time moves forward, and at every end the next
    requests of ``order`` start while they fit (stopping at the first that does not)."""
    starts = [0.0] * len(m.durations)
    order = list(order)
    pos, t, running, kv = 0, 0.0, [], 0
    while pos < len(order):
        while pos < len(order):
            i = order[pos]
            if len(running) + 1 > m.seqs or kv + m.demands[i] > m.capacity:
                break
            starts[i] = t
            heapq.heappush(running, (t + m.durations[i], i))
            kv += m.demands[i]
            pos += 1
        if pos < len(order):
            t, i = heapq.heappop(running)
            kv -= m.demands[i]
            while running and running[0][0] <= t:
                kv -= m.demands[heapq.heappop(running)[1]]
    return starts


def completions(problem: RolloutProblem, m: FixedModel, starts: list[float]) -> list[float]:
    return [max(starts[i] + m.durations[i] for i in problem.group_requests(g)) for g in range(problem.R)]


def best_trainer(problem: RolloutProblem, complete_s: list[float]) -> tuple[float, list[list[int]]]:
    """The trainer's best use of given group completions: every order of the groups cut into
    updates (for tiny rounds; the factorial is the point)."""
    best = (float("inf"), [])
    sizes = problem.update_sizes()
    for perm in itertools.permutations(range(problem.R)):
        batches = chunks(list(perm), sizes)
        end = run_updates(problem, complete_s, batches)[-1].end_s
        if end < best[0] - 1e-12:
            best = (end, batches)
    return best

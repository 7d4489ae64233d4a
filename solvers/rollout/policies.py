"""Online admission policies of the rollout engine (each a registered solver, see
``online.py``). Only the oracle policies (longest-/shortest-first, deadline) read the response
lengths; the others see what a real engine sees.

* ``sync``: the engine serves requests in its own FCFS order (arrival order, retracted
  requests at the tail); the trainer waits for the whole round and trains in prompt order
  (Slime).
* ``cgp``: the same engine; complete groups go to the trainer FIFO at once (complete-group
  pipelining).
* ``fifo``: request-level FIFO in prompt order (group-major), with the CGP trainer.
* ``fgd-hard`` / ``fgd-soft``: frontier-group dispatch with CGP. The frontier is the
  ``frontier`` lowest-order unfinished groups; the hard gate admits only their requests, the
  soft priority admits them first and backfills free capacity in the engine's own order. Where
  the engine lets the policy act inside the running batch, frontier requests are priority
  class 0 (the rest 1: with ``priority_preemption`` they may displace running non-frontier
  requests) and retractions take non-frontier requests first (``policy_victims``).
* ``longest-first`` / ``shortest-first``: by known response length, with CGP.
* ``deadline``: see ``DeadlinePolicy``.
* ``slack``: see ``SlackPolicy``.
* ``defer``: see ``DeferPolicy``.
"""
from __future__ import annotations

import heapq

import numpy as np

from pipeplan.core.deadline import Deadline
from pipeplan.formulations.rollout.simulator import FINISHED, WAITING, EngineState, Policy, simulate
from pipeplan.formulations.rollout.trainer import StreamingTrainer
from pipeplan.solvers.rollout.common import rescore_s


class NativePolicy(Policy):
    """Leave the order to the engine: its FCFS queue (arrival order, retracted requests at the
    tail)."""

    def decide(self, state: EngineState):
        return state.native_queue()


class SyncPolicy(NativePolicy):
    name = "sync"
    trainer = "sync"


class CgpPolicy(NativePolicy):
    name = "cgp"


class OrderPolicy(Policy):
    """Admit in a fixed priority order over requests (computed once per round by ``order``);
    a retracted request keeps its place."""

    def order(self, problem) -> list[int]:
        raise NotImplementedError

    def reset(self, problem):
        super().reset(problem)
        self._order = self.order(problem)
        self._cursor = 0
        self._rank: list[int] | None = None
        self._mine: dict[int, list] = {}    # replica -> [its requests in the order, cursor, routed seen]

    def decide(self, state: EngineState):
        return self._in_order(state) if len(state.replicas) == 1 else self._replica_in_order(state)

    def _in_order(self, state: EngineState):
        order, status = self._order, state.status
        while self._cursor < len(order) and status[order[self._cursor]] == FINISHED:
            self._cursor += 1
        for j in range(self._cursor, len(order)):
            if status[order[j]] == WAITING:
                yield order[j]

    def _replica_in_order(self, state: EngineState):
        """The order restricted to the deciding replica's requests (the engine skips the
        others: walking past every other replica's waiting requests at each decision had made
        fifo take 16 s at 16,000 replicas); kept per replica, merged as requests arrive."""
        status, routed = state.status, state.routed()
        mine = self._mine.get(state.replica.index) or [[], 0, 0]
        if mine[2] < len(routed):
            if self._rank is None:
                self._rank = [0] * len(self._order)
                for j, i in enumerate(self._order):
                    self._rank[i] = j
            rank = self._rank.__getitem__
            kept = [i for i in mine[0][mine[1]:] if status[i] != FINISHED]
            mine = [list(heapq.merge(kept, sorted(routed[mine[2]:], key=rank), key=rank)), 0, len(routed)]
            self._mine[state.replica.index] = mine
        queue = mine[0]
        while mine[1] < len(queue) and status[queue[mine[1]]] == FINISHED:
            mine[1] += 1
        for j in range(mine[1], len(queue)):
            if status[queue[j]] == WAITING:
                yield queue[j]


class FifoPolicy(OrderPolicy):
    name = "fifo"

    def order(self, problem):
        return list(range(problem.n_requests))


class LongestFirstPolicy(OrderPolicy):
    name = "longest-first"

    def order(self, problem):
        pos = {i: j for j, i in enumerate(problem.native_order)}
        return sorted(range(problem.n_requests), key=lambda i: (-problem.lengths[i], pos[i]))


class ShortestFirstPolicy(OrderPolicy):
    name = "shortest-first"

    def order(self, problem):
        pos = {i: j for j, i in enumerate(problem.native_order)}
        return sorted(range(problem.n_requests), key=lambda i: (problem.lengths[i], pos[i]))


class SlackPolicy(OrderPolicy):
    """Group-completion slack with known lengths (an oracle policy). A group completes when its
    longest sample does, so request i can wait ``longest(group) - len(i)`` steps without
    delaying its group (its slack). Requests go by ``longest(group) - alpha * len(i)``: alpha = 0
    is group-major with the easiest groups first, alpha = 1 least slack first (long requests of
    every group at once, which packs the engine but completes groups late). alpha = 0.5, the
    default, was picked on the three linear-engine presets whose optimum is proven (R = 32:
    1.086-1.090 x the optimum against 1.100-1.112 for ``deadline``) and checked on the rho
    sweep of one of them (0.5: 1.091 x the proven optimum) and on the real engine, where it
    lands within a point of ``deadline`` (optima and best schedules: results/rollout/optimum_gaps.md)."""

    name = "slack"

    def __init__(self, alpha: float = 0.5):
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 <= alpha <= 1:
            raise ValueError(f"alpha must be a number in [0, 1], got {alpha!r}")
        self.alpha = float(alpha)

    def order(self, problem):
        L, K = problem.lengths, problem.K
        longest = [max(L[i] for i in problem.group_requests(g)) for g in range(problem.R)]
        pos = {i: j for j, i in enumerate(problem.native_order)}
        return sorted(range(problem.n_requests), key=lambda i: (longest[i // K] - self.alpha * L[i], pos[i]))


class DeferPolicy(OrderPolicy):
    """``slack``'s order with the ``held`` cheapest groups of each round (fewest
    training tokens: the least trainer time) moved to the end of the round (an oracle policy).

    Why. In a rollout-bound round the train end is the last group's completion plus the updates
    still queued behind it, so the groups that finish last should be the cheapest to train; and
    their short requests fill the KV cache the long requests of the other groups leave free as
    they end, so holding them back costs the engine little. CP-SAT's plans on the linear engine
    do this (lsat-ar R = 32, rho 0.5: its two last groups are admitted from 141 s on, of a 258 s
    rollout). How many groups to hold depends on the round, and not smoothly: on the linear
    engine at lsat-ar R = 32, rho 0.5, 10-12 of 32 do best (286.6 s against slack's 296.4 s)
    while 8 or 20 lose most of the gain (291.8, 295.9 s); on sci-xw's, 24 do best (464.6 s
    against 484.6 s) and 12 are worse than none (505.3 s). No count follows from the round's
    size alone, so ``held="auto"`` (the default) picks it per round by simulating the round with
    each count: every count 0..n-1 (n groups per round) up to 33 of them, else 33 spread evenly
    from 0 to n-1 (a simulation takes about 2 ms at R = 32 and 0.9 s at R = 2,000); the least
    train end wins, the smaller count on a tie. That is a search over a one-parameter family with
    the true lengths and the engine model, so its figure is what a length predictor could reach
    at best, like the other oracle policies'. ``time_limit`` stops the search (count 0, i.e.
    ``slack``, is always tried)."""

    name = "defer"
    CANDIDATES = 33

    def __init__(self, held: int | str = "auto", alpha: float = 0.5, time_limit: float | None = None):
        if held != "auto" and (isinstance(held, bool) or not isinstance(held, int) or held < 0):
            raise ValueError(f"held must be 'auto' or a whole number of groups >= 0, got {held!r}")
        self.held = held
        self.base = SlackPolicy(alpha)
        self.time_limit = time_limit
        self.chosen: int | None = None
        self.tried = (0, 0)       # (counts tried, counts to try) by the last "auto" choice

    def candidates(self, problem) -> list[int]:
        n = problem.groups_per_round
        if n <= self.CANDIDATES:
            return list(range(n))
        return sorted({round(j * (n - 1) / (self.CANDIDATES - 1)) for j in range(self.CANDIDATES)})

    def _tuned(self, problem) -> int:
        """The count of least train end. Under a time limit a further count is tried only while
        the time left holds it, the simulation of the round in the chosen order and the
        re-scoring, at the pace of the counts so far: at R = 2,000 a simulation takes about a
        second, and trying counts until the limit ran 5.7 s under a 3 s one."""
        clock, ends, counts = Deadline(self.time_limit), {}, self.candidates(problem)
        after = rescore_s(problem)
        for held in counts:
            if ends and (clock.expired() or (clock.limit is not None and
                                             clock.remaining() < 2 * clock.elapsed() / len(ends) + after)):
                break
            trial = DeferPolicy(held, self.base.alpha)
            trial.staleness = self.staleness
            ends[held] = simulate(problem, trial).metrics()["train_end_s"]
        self.tried = (len(ends), len(counts))
        return min(ends, key=lambda held: (ends[held], held))

    def order(self, problem):
        self.chosen = self._tuned(problem) if self.held == "auto" else self.held
        n, K = problem.groups_per_round, problem.K
        tokens = problem.group_tokens
        late = set()
        for first in range(0, problem.R, n):
            cheapest = sorted(range(first, first + n), key=lambda g: (tokens[g], g))
            late.update(cheapest[:self.chosen])
        rank = {i: j for j, i in enumerate(self.base.order(problem))}
        return sorted(range(problem.n_requests), key=lambda i: (i // K // n, i // K in late, rank[i]))

    def settled(self) -> dict:
        if self.held != "auto":
            return {"chosen": self.chosen}
        return {"chosen": self.chosen, "counts_tried": self.tried[0], "counts": self.tried[1]}

    def cut_note(self) -> str | None:
        if self.held != "auto" or self.tried[0] >= self.tried[1]:
            return None
        return f"the time limit stopped the search for the held count after {self.tried[0]} of {self.tried[1]} counts"


class FgdPolicy(NativePolicy):
    """Frontier-group dispatch. ``frontier`` (F_w) is a number of groups."""

    def __init__(self, frontier: int = 2, gate: str = "soft"):
        if gate not in ("hard", "soft"):
            raise ValueError(f"gate must be hard or soft, got {gate!r}")
        if not isinstance(frontier, int) or frontier < 1:
            raise ValueError(f"frontier must be a positive number of groups, got {frontier!r}")
        self.frontier = frontier
        self.gate = gate
        self.name = f"fgd-{gate}"

    def reset(self, problem):
        super().reset(problem)
        self._low = 0
        self._set_at = None

    def frontier_set(self, state: EngineState) -> set[int]:
        """The frontier as a set, recomputed only when a group completes."""
        if getattr(self, "_set_at", None) != state.groups_done:
            self._set, self._set_at = set(self.frontier_groups(state)), state.groups_done
        return self._set

    def priority(self, state: EngineState, i: int) -> int:
        return 0 if i // self.problem.K in self.frontier_set(state) else 1

    def victim_order(self, state: EngineState, running: list[int]) -> list[int]:
        front, K = self.frontier_set(state), self.problem.K
        return sorted(running, key=lambda i: i // K in front)     # stable: the engine's order within

    def frontier_groups(self, state: EngineState) -> list[int]:
        left = state.group_left
        while self._low < len(left) and left[self._low] == 0:
            self._low += 1
        out, g = [], self._low
        while g < len(left) and len(out) < self.frontier:
            if left[g]:
                out.append(g)
            g += 1
        return out

    def decide(self, state: EngineState):
        for g in self.frontier_groups(state):
            for i in self.problem.group_requests(g):
                if state.status[i] == WAITING:
                    yield i
        if self.gate == "soft":
            yield from super().decide(state)


class DeadlinePolicy(Policy):
    """Deadline-driven admission with known lengths (an oracle policy).

    At each decision the unfinished groups are ranked by when they could complete at the
    earliest (their longest remaining sample at the current step time); the k-th of them gets
    the deadline at which the trainer will want it (the trainer's projected free time plus one
    estimated update per U groups ahead of it). Waiting requests are admitted by least laxity
    (deadline - now - own remaining time). When the trainer is fast, every deadline is "now"
    and this is longest-first; when it is slow, the groups that can finish soonest go first.

    Ranking every group at every decision is quadratic in the round; over numpy arrays a whole
    lsat-ar round takes 1.1 s at R = 250 and 10.7 s at R = 1,000 (K = 8; ranked in Python loops,
    2.9 and 42 s, with the same schedules on 1,500 random rounds, twelve presets and every engine
    feature). Past ``time_limit`` (wall seconds from the start of the simulation) less
    the re-scoring's share (``rescore_s``, which holds the rest of the simulation too) the
    rest of the round is admitted in the engine's own order, as CGP does; ``settled()`` then
    names the simulated time of the switch.
    """

    name = "deadline"

    def __init__(self, time_limit: float | None = None):
        self.time_limit = time_limit
        self.switched_at_s: float | None = None

    def reset(self, problem):
        super().reset(problem)
        self.trainer_view = StreamingTrainer(problem)
        mean_group = sum(problem.group_tokens) / problem.R
        self.update_estimate = problem.trainer.update_time(round(problem.U * mean_group))
        self.clock = Deadline(None if self.time_limit is None else max(0.0, self.time_limit - rescore_s(problem)))
        self.switched_at_s = None
        self.lengths = np.array(problem.lengths)
        self.prefills = np.array([problem.engine.prefill_time(x) for x in problem.prompts])

    def on_group_complete(self, g, t):
        self.trainer_view.push(g, t)

    def settled(self) -> dict:
        return {} if self.switched_at_s is None else {"switched_to_cgp_at_s": self.switched_at_s}

    def cut_note(self) -> str | None:
        if self.switched_at_s is None:
            return None
        return f"past its time limit the round was admitted in CGP's order from simulated t = {self.switched_at_s:.1f} s on"

    def decide(self, state: EngineState):
        if self.switched_at_s is None and self.clock.expired():
            self.switched_at_s = state.t
        if self.switched_at_s is not None:
            return state.native_queue()
        p, eng = self.problem, self.problem.engine
        tau = eng.step_time(max(1, state.running), state.active_kv())
        status = np.array(state.status)
        remaining = self.lengths - state.generated_all()
        # each unfinished request's earliest completion, its group's the latest of them
        soonest = remaining * tau + np.where(status == WAITING, self.prefills, 0.0)
        soonest[status == FINISHED] = -np.inf
        left = np.flatnonzero(np.array(state.group_left) > 0)
        latest = soonest.reshape(p.R, p.K).max(axis=1)[left]
        ranked = left[np.lexsort((left, latest))]                  # by (earliest completion, group)
        base = max(state.t, self.trainer_view.free_at)
        deadline = np.empty(p.R)
        deadline[ranked] = base + ((self.trainer_view.queued + np.arange(len(ranked))) // p.U) * self.update_estimate
        waiting = np.flatnonzero(status == WAITING)
        laxity = deadline[waiting // p.K] - state.t - remaining[waiting] * tau
        return waiting[np.lexsort((waiting, laxity))].tolist()      # by (laxity, request)

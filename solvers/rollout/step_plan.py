"""Offline plans by group finish steps: every request admitted just in time.

A plan here is a finish step F_g per group (decode steps the engine has run when g completes);
request i of g is admitted at step F_g - n_i and runs to F_g. This is the schedule family that
meets the step-indexed bound's forced work exactly (``step_bound``): nothing runs earlier than
it must, so the steps stay cheap, while F spreads the groups' completions to feed the trainer.

``StepTimeline`` gives such a plan's exact engine time on one engine (steps ``c0 + c1 b + c2
kv``, prefills stalling the decode) with numpy difference arrays, and the train end with the
trainer taking groups in completion order; a plan that runs more requests at once than the
engine's batch or KV limits allow scores inf (the simulator would delay or retract them: before
this check, at lsat-ar R = 32, rho 0.5, the plan of least planned train end, 204.4 s, replayed
at 213.6 s; plans kept within the limits replay as planned, 204.2-204.5 s). On demand the limits
include SGLang's admission check, which reserves room for every running request's tokens to
come (``StepTimeline._reserved``): a plan whose KV fits can still have admissions delayed by it.
Where the reservation binds, every start is also walked within the batch and KV limits alone
and the plan whose replay ends first stands: the reservation asks ~0.7 x 4,096 tokens per
running request in the first steps, and at R = 96 on the paper's engine 3,000 moves met no
plan within it (sci-xw: replayed 843.0 s, CGP 726.9 s), while the best plan within the batch
and KV limits, its admissions delayed a little by the replay, ends at 601.1 s. At R = 32 the
walk within every limit wins (sci-xw: 296.6 s). ``SequencePlanner`` finds the
best plan of a given update sequence exactly (a backward pass) and searches sequences from
Johnson's order. Simulated annealing moves finish steps (one group, two groups, or every group
from some step on) from each start; it is deterministic for a seed and a number of evaluations.
Until it meets a plan within the limits it walks on the train end stretched by the plan's
overflow of them (``score``), so a start beyond them (every group as early as it can finish, at
R = 64 / 96 on the paper's engine) is led back within them: when every such plan scored inf the
walk was blind until it happened on one, and at lsat-ar R = 96 10,000 moves ended at 592.7 s,
against 565.1 s with the stretched walk.
The best plan is replayed in the simulator, whose figures stand (a plan the timeline keeps
replays as planned; one beyond the limits, when no start or move met them, may not). Where an
online policy's schedule ends first (no just-in-time plan fits, or the moves did not find one
that does), that schedule is returned instead and ``params["fallback"]`` names the policy, as
CP-SAT returns its hint when its own plan replays worse: the planner is never worse than the
best online policy (within its time limit, if one is given: ``online.best_policy``).

With ``prove_s`` the step-indexed bound also runs, and its MILP solutions, groups in bucket
order, are planned as update sequences (``guided_plan``); that plan stands where its replay ends
first (lsat-ar R = 32, real engine: 228.1-228.6 s against 229.5 s from the walks).

Known response lengths: an oracle, like CP-SAT's offline model.
"""
from __future__ import annotations

import time

import numpy as np

from pipeplan.core.deadline import Deadline, OutOfTime
from pipeplan.core.errors import InputError
from pipeplan.core.registry import register
from pipeplan.core.result import Termination
from pipeplan.core.sizes import check_memory
from pipeplan.formulations.rollout.flowshop_bound import johnson_order
from pipeplan.formulations.rollout.problem import RolloutProblem
from pipeplan.formulations.rollout.replay import replay
from pipeplan.formulations.rollout.schedule import PLAN_SCHEMA
from pipeplan.formulations.rollout.simulator import simulate
from pipeplan.formulations.rollout.trainer import chunks
from pipeplan.solvers.rollout.common import scored_result, search_deadline
from pipeplan.solvers.rollout.online import best_policy, make_policy
from pipeplan.solvers.rollout.step_bound import step_bound
from pipeplan.solvers.rollout.unlimited_pass import UnlimitedPass

EVALUATIONS = 3_000     # annealing moves tried from each start by default (about 0.3 ms each at R = 32)
SEQUENCE_MOVES = 1_000  # update-sequence moves by default (about 3 ms each at R = 32)
SEQUENCE_MAX_R = 32     # studies search sequences only up to this R: the backward pass grows with R^2 (minutes at 96)
CLIMB_STEP = 0.02       # an improving sequence move is bisected at most this far (relative) below the last target
LARGEST_MOVE = 10       # moves shift finish steps by +-2**0 .. 2**LARGEST_MOVE steps
LARGEST_SHIFT = 2 ** LARGEST_MOVE
GUIDED_MOVES = 125      # update-sequence moves per group in each walk from the bound's best sequence
                        # (``guided_plan``): 4,000 at R = 32
GUIDED_RESTARTS = 3     # ... and walks, each with its own random stream
SIDEWAYS = 2e-4         # a walk takes moves whose plan meets the best target plus this (relative)
# the timeline's arrays over every decode step, measured at 1e7 and 2e7 steps (0.63 and 1.25 GB);
# a plan spans at least the longest response: a crafted round of 5e8-token responses took 23 GB
TIMELINE_BYTES_PER_STEP = 64
# seconds per decode step of one timeline (``StepTimeline.step_times``: a score, a plan), before the
# first one over TIMED_STEPS steps is timed (then that one's figure): about 5e-8 s on one core at
# 1e7-2e7 steps. A score is started only when it and the best plan's timeline still fit the search's
# time (``StepTimeline.affordable``): with no check inside one, 2e7-token responses under a 3 s
# limit had taken 5.1-7.0 s (four timelines of 1.0-1.4 s each)
TIMELINE_S_PER_STEP = 1e-7
TIMED_STEPS = 100_000
# a walk's start is scored, past the search's time too, when its timeline takes at most this
# (every round of ordinary lengths: 1e4 steps take about 1 ms); the starts of a search cut by its
# clock then still compete with fifo's schedule, as they did before the check
CHEAP_TIMELINE_S = 0.05
TEMPERATURE = 0.005     # annealing's first temperature, relative to the train end (best of 0.002-0.01 on lsat-ar R = 32)


def _per_step(start: np.ndarray, end: np.ndarray, weight, size: int) -> np.ndarray:
    """Per step s < size - 1: the sum of ``weight`` (1 when None) over the requests running in
    it (admitted at ``start`` <= s < ``end``), by a difference array."""
    return np.cumsum(np.bincount(start, weight, minlength=size) - np.bincount(end, weight, minlength=size))[:-1]


class _Running:
    """Sums over the requests running at given steps (request i runs in steps start_i <= s <
    end_i), by sorted starts and ends: what ``StepTimeline.overflow`` needs at a few hundred
    steps without arrays over every step."""

    def __init__(self, start: np.ndarray, end: np.ndarray):
        self.start, self.end = start, end
        self.by_start, self.by_end = np.argsort(start, kind="stable"), np.argsort(end, kind="stable")
        self.starts, self.ends = start[self.by_start], end[self.by_end]
        self.last = int(end.max(initial=0))

    def _split(self, steps):
        return np.searchsorted(self.starts, steps, "right"), np.searchsorted(self.ends, steps, "right")

    def count(self, steps: np.ndarray) -> np.ndarray:
        begun, ended = self._split(steps)
        return begun - ended        # a request that has ended has begun

    def total(self, weight: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """The sum of ``weight`` over the requests running at each of ``steps``."""
        begun, ended = self._split(steps)
        return (np.concatenate(([0.0], np.cumsum(weight[self.by_start])))[begun]
                - np.concatenate(([0.0], np.cumsum(weight[self.by_end])))[ended])

    def busy_before(self, steps: np.ndarray) -> np.ndarray:
        """How many steps before each of ``steps`` someone runs in (the engine's decode steps:
        idle steps run none)."""
        if not self.start.size:
            return np.zeros(np.shape(steps))
        reach = np.maximum.accumulate(self.end[self.by_start])          # merged runs of busy steps
        fresh = np.concatenate(([True], self.starts[1:] > reach[:-1]))
        block_start = self.starts[fresh]
        block_end = reach[np.append(np.flatnonzero(fresh)[1:] - 1, reach.size - 1)]
        before = np.concatenate(([0], np.cumsum(block_end - block_start)))
        k = np.searchsorted(block_start, steps, "right") - 1
        inside = np.clip(np.minimum(block_end[k], steps) - block_start[k], 0, None)
        return np.where(k >= 0, before[np.maximum(k, 0)] + inside, 0)


class StepTimeline:
    """Exact times of just-in-time plans on one engine (module docstring)."""

    def __init__(self, problem: RolloutProblem, reservation: bool = True):
        e = problem.engine
        check_memory(f"{problem.source or problem.name}: response_tokens", max(problem.lengths) + 1,
                     TIMELINE_BYTES_PER_STEP)
        self.problem = problem
        # on demand, also keep to what SGLang's admission check reserves (``_reserved``); off:
        # the batch and KV limits alone, the replay delaying admissions the check refuses
        self.reservation = reservation and e.kv_mode == "on_demand"
        self.lengths = np.array(problem.lengths, dtype=np.int64)
        self.prompts = np.array(problem.prompts, dtype=float)
        self.group = np.arange(problem.n_requests) // problem.K
        self.prefill = np.array([e.prefill_time(int(p)) for p in problem.prompts])
        self.longest = np.array([max(r) if r else 0 for r in problem.response_tokens], dtype=np.int64)
        self.tokens = np.array(problem.group_tokens, dtype=np.int64)
        self.sizes = problem.update_sizes()
        e = problem.engine
        self.max_new = problem.max_new_tokens
        # every request at once, at its largest KV (and, on demand, the most the engine reserves
        # for its tokens to come), fits: no plan can break the limits
        reserved = e.reserve_ratio_init * min(self.max_new, e.reserve_clip_tokens) if self.reservation else 0
        self.roomy = (problem.n_requests <= e.max_num_seqs
                      and float(np.sum(self.prompts + self.lengths + 1 + reserved)) <= e.kv_capacity_tokens)
        self.s_per_step = TIMELINE_S_PER_STEP

    def timeline_s(self, finish: np.ndarray) -> float:
        """About how long a timeline of ``finish`` or a move from it takes (``TIMELINE_S_PER_STEP``)."""
        return self.s_per_step * (int(finish.max(initial=0)) + LARGEST_SHIFT + 1)

    def affordable(self, finish: np.ndarray, deadline: Deadline) -> bool:
        """Whether a timeline of ``finish`` (a score) and one more as long (the best plan's,
        ``plan``) still fit before ``deadline``: each is linear in the decode steps, with no
        clock inside."""
        left = deadline.remaining()
        return left is None or left > 2 * self.timeline_s(finish)

    def step_times(self, finish: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(T, start): T[s] is the time when s decode steps have run, start[i] request i's
        admission step. Steps nobody runs in cost nothing (the engine waits)."""
        e = self.problem.engine
        began = time.perf_counter()
        end = finish[self.group]
        start = end - self.lengths
        size = int(finish.max()) + 1
        running = _per_step(start, end, None, size)
        # KV in use at step s: sum over running requests of prompt + (s - start)
        base = _per_step(start, end, self.prompts - start, size)
        kv = base + np.arange(size - 1) * running
        cost = np.where(running > 0, e.c0_s + e.c1_s * running + e.c2_s * kv, 0.0)
        cost += np.bincount(start, self.prefill, minlength=size)[:-1]
        times = np.concatenate(([0.0], np.cumsum(cost)))
        if size >= TIMED_STEPS:         # this machine's speed, for ``affordable``
            self.s_per_step = (time.perf_counter() - began) / size
        return times, start

    def overflow(self, finish: np.ndarray, requests: np.ndarray | None = None) -> float:
        """How far the plan breaks the engine's limits in its worst step, relative to them (0:
        within): at most max_num_seqs running, their KV (on demand: after the step's token;
        reserve: whole footprints) within the capacity and, on demand, what the admission check
        reserves (``_reserved``). A plan that breaks them is delayed or retracted in the
        simulator. ``requests``: only these (``finish`` then holds their finish steps).

        Only the steps where a maximum can lie are looked at (``_Running``): admissions for the
        batch, the reservation and reserved footprints, the last step of a request for KV that
        grows a token per step. Per step, this took 2-3 times as long as the rest of a score."""
        e = self.problem.engine
        if self.roomy:
            return 0.0
        if requests is None:
            requests, end = slice(None), finish[self.group]
        else:
            end = finish
        if not np.size(end):
            return 0.0
        lengths, prompts = self.lengths[requests], self.prompts[requests]
        start = end - lengths
        run = _Running(start, end)
        admit = start[start < run.last]                 # steps that admit a request someone runs past
        worst = run.count(admit).max(initial=0) / e.max_num_seqs
        if e.kv_mode == "reserve":
            held = run.total(prompts + lengths, admit)
        else:   # prompt + tokens so far, one more after the step: largest in a request's last step
            last = end[lengths > 0] - 1
            held = run.total(prompts - start + 1, last) + last * run.count(last)
            if self.reservation:
                held = np.append(held, self._reserved(run, start, prompts, admit))
        return max(0.0, worst - 1, held.max(initial=0) / e.kv_capacity_tokens - 1)

    def _reserved(self, run: "_Running", start, prompts, admit) -> np.ndarray:
        """On demand, at each step in ``admit``: what the engine's admission check adds up for the
        requests running in it (``simulator``'s ``fits``: KV in use before the step, plus
        ``ratio x min(max_new - generated, reserve_clip_tokens)`` per request, the ratio decaying
        with the decode steps run). Without this a plan that kept the KV within the capacity
        still had admissions delayed in the replay: at sci-xw R = 32 a plan of 297.0 s replayed
        at 310.0 s (53 admissions late, by up to 19 s), the study's best plan of 294.8 s at
        310.3 s."""
        e = self.problem.engine
        in_use = run.total(prompts - start, admit) + admit * run.count(admit)
        # min(max_new - generated, clip) = min(max_new, clip) - (generated - (max_new - clip)^+)^+
        turn = start + max(0, self.max_new - e.reserve_clip_tokens)
        ramp = turn < run.end
        past = _Running(turn[ramp], run.end[ramp])
        over = past.total(-turn[ramp].astype(float), admit) + admit * past.count(admit)
        decay = (e.reserve_ratio_init - e.reserve_ratio_min) / e.reserve_ratio_decay_steps
        ratio = np.maximum(e.reserve_ratio_min, e.reserve_ratio_init - decay * run.busy_before(admit))
        return in_use + ratio * (min(self.max_new, e.reserve_clip_tokens) * run.count(admit) - over)

    def fits(self, finish: np.ndarray, requests: np.ndarray | None = None) -> bool:
        """Whether the plan keeps to the engine's limits in every step (``overflow`` is 0)."""
        return self.overflow(finish, requests) == 0.0

    def train_end(self, finish: np.ndarray) -> float:
        """The plan's train end, the trainer taking groups in completion order; inf when the plan
        breaks the engine's limits (``fits``)."""
        return self.score(finish)[0]

    def score(self, finish: np.ndarray) -> tuple[float, float]:
        """(train end, inf when the plan breaks the limits; the train end as if it kept to them,
        stretched by its ``overflow``: the figure the annealing walks on, so that a plan beyond
        the limits is led back to them rather than wandering while every move scores inf)."""
        over = self.overflow(finish)
        t, _ = self.step_times(finish)
        done = t[finish]
        order = np.argsort(done, kind="stable")
        tr, end, k = self.problem.trainer, 0.0, 0
        for n in self.sizes:
            batch = order[k:k + n]
            k += n
            end = max(end, done[batch].max()) + tr.update_time(int(self.tokens[batch].sum()))
        return (end if over == 0.0 else np.inf), end * (1 + over)

    def plan(self, finish: np.ndarray) -> dict:
        t, start = self.step_times(finish)
        order = [int(g) for g in np.argsort(t[finish], kind="stable")]
        admissions = sorted(((int(i), float(t[s])) for i, s in enumerate(start)), key=lambda a: (a[1], a[0]))
        return {"schema": PLAN_SCHEMA, "policy": "step-plan", "admissions": admissions,
                "updates": chunks(order, self.sizes), "trainer": "stream"}


def seeds(problem: RolloutProblem, timeline: StepTimeline) -> dict[str, np.ndarray]:
    """Starting plans: every group as early as it can finish, and the groups finishing one
    after another in Johnson's flow-shop order, about (mean longest response) / R steps apart
    (each no earlier than its own longest response)."""
    asap = timeline.longest.copy()
    spaced = asap.copy()
    step = int(np.mean(timeline.longest) / max(1, problem.R // max(timeline.sizes)))   # per update
    prev = 0
    for g in johnson_order(problem):
        prev = spaced[g] = max(asap[g], prev + step // max(timeline.sizes))
    return {"asap": asap, "johnson-spaced": spaced}


def _latest(test, lo: int, hi: int) -> int:
    """The largest step in [lo, hi] passing ``test`` (which ``lo`` passes): ``hi`` when it passes
    (the common case for the engine's limits, one call instead of a bisection's dozen), else by
    bisection: exact for a test that holds up to some step and fails after it."""
    if lo < hi and test(hi):
        return hi
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if test(mid) else (lo, mid - 1)
    return lo


class SequencePlanner:
    """The best just-in-time plan for a given *update sequence* (the trainer's updates, in
    order, each a set of groups), found exactly by a backward pass.

    Why it is exact. For a target train end Z, update j (and each of its groups) must complete
    at a step F_j with ``time(F_j) + T(B_j) + ... + T(B_m) <= Z``. Counting every step as run,
    ``time(F) = c0 F + the work of the groups of updates <= j + the work the later groups'
    requests have made by F`` (each admitted its length before its finish): increasing in F,
    and *decreasing* in the later updates' finish steps. So going from the last update back,
    each update is best put at the latest step that meets Z (found by bisection over steps),
    its groups all at that step: any earlier step only adds forced work to the rows before it.
    The least Z for which this pass places every update (each at or after its longest response)
    is the sequence's best plan, found by bisection over Z (tested against brute force). Steps
    in which nothing runs would be free in the engine: the plan's real train end can only be
    lower. Where the engine's batch or KV limits bind, each update goes to the latest step
    within them at or before that one (bisection again, as if moving it earlier only relieved
    the limits): a heuristic there, no longer exact.

    The search over sequences (``climb``) swaps two groups or moves one, keeping a change when
    the pass meets a lower Z. At R = 32 (1,000 moves, then annealing; against the other starts
    with 40,000 annealing moves) it gives sci-xw 294.8 s planned, 295.9 s replayed, against
    300.2 s; olyphys 237.9 against 238.3 s; lsat-ar 233.5 against 233.9 s; sci-jl no gain."""

    def __init__(self, timeline: StepTimeline):
        p, e = timeline.problem, timeline.problem.engine
        self.timeline, self.problem = timeline, p
        self.lengths = timeline.lengths.astype(float)
        self.requests = [np.arange(g * p.K, (g + 1) * p.K) for g in range(p.R)]
        self.group_work = np.bincount(timeline.group, self._work(self.lengths, slice(None)), minlength=p.R)
        self.ceiling = (e.c0_s * float(timeline.longest.max(initial=0)) + float(self.group_work.sum())
                        + sum(p.trainer.update_time(int(t)) for t in timeline.tokens) + 1.0)
        self.unlimited = UnlimitedPass.of(self)

    def _work(self, k: np.ndarray, idx) -> np.ndarray:
        """The additive engine time of the first k tokens of the requests ``idx``."""
        return self.problem.engine.request_work(self.timeline.prompts[idx], k)

    def place(self, updates: list[list[int]], target: float, deadline: Deadline | None = None) -> np.ndarray | None:
        """Finish steps meeting ``target`` (the backward pass), or None when none are found.
        Past ``deadline`` it raises OutOfTime (one pass over R = 1,000 groups takes seconds)."""
        tl, c0 = self.timeline, self.problem.engine.c0_s
        tr = self.problem.trainer
        tail = np.cumsum([tr.update_time(int(tl.tokens[u].sum())) for u in updates][::-1])[::-1]
        if self.unlimited is not None and not self.unlimited.meets(updates, tail, target):
            return None                           # not even without the limits (``unlimited_pass``)
        finish = np.zeros(self.problem.R, dtype=np.int64)
        done = float(self.group_work.sum())       # work of the groups of updates <= j
        later = np.zeros(0, dtype=np.int64)       # requests of later updates, and their finish steps
        later_finish = np.zeros(0, dtype=np.int64)
        next_step = np.iinfo(np.int64).max // 2
        for j in range(len(updates) - 1, -1, -1):
            if deadline is not None:
                deadline.check()
            n = self.lengths[later]
            budget = target - tail[j] - done
            requests = np.concatenate([self.requests[g] for g in updates[j]])
            placed = np.concatenate([later, requests])

            def meets(f: int) -> bool:
                k = np.clip(n - (later_finish - f), 0, n)
                return c0 * f + float(self._work(k, later).sum()) <= budget

            def fits(f: int) -> bool:
                return tl.fits(np.concatenate([later_finish, np.full(requests.size, f)]), placed)

            lowest = int(tl.longest[updates[j]].max())
            highest = next_step if c0 <= 0 else min(next_step, int(budget / c0) + 1)
            if highest < lowest or not meets(lowest) or not fits(lowest):
                return None
            # the latest step meeting the target, then the latest at or before it within the limits
            step = _latest(fits, lowest, _latest(meets, lowest, highest))
            finish[updates[j]] = step
            next_step = step - 1                  # the updates complete in their order, no ties
            later, later_finish = placed, np.concatenate([later_finish, np.full(requests.size, step)])
            done -= float(self.group_work[updates[j]].sum())
        return finish

    def best(self, order: list[int], upper: float | None = None, lower: float = 0.0,
             tol: float = 1e-3, deadline: Deadline | None = None) -> tuple[float, np.ndarray | None]:
        """(least target met, its finish steps) for the groups trained in ``order``, by bisection
        over [``lower``, ``upper``] to ``tol`` seconds (``upper``: a target known to be met; by
        default one that every sequence meets unless the engine's limits break its plan, then
        (inf, None))."""
        updates = chunks(list(order), self.timeline.sizes)
        hi = self.ceiling if upper is None else upper
        finish = self.place(updates, hi, deadline)
        if finish is None:
            return np.inf, None
        lo = lower
        while hi - lo > tol:
            mid = (lo + hi) / 2
            found = self.place(updates, mid, deadline)
            if found is None:
                lo = mid
            else:
                hi, finish = mid, found
        return hi, finish

    def climb(self, order: list[int], moves: int, rng: np.random.Generator, deadline: Deadline,
              tol: float = 1e-3, sideways: float = 0.0) -> tuple[float, np.ndarray, int]:
        """Local search over sequences from ``order``: (best target, its finish steps, moves
        made). A move that meets a lower target is bisected only ``CLIMB_STEP`` below the old
        one (a larger gain is taken by the next moves). With ``sideways`` > 0 a move whose plan
        meets the best target plus that much (relative) is taken too, without a gain: a walk
        along the plateau of near-equal sequences, which the strict climb cannot leave. When the
        engine's limits break the first sequence's plan, or ``deadline`` passes before it is
        planned, (inf, None, 0)."""
        order = list(order)
        try:
            value, finish = self.best(order, tol=tol, deadline=deadline)
        except OutOfTime:
            return np.inf, None, 0
        if finish is None:
            return value, finish, 0
        R, done = len(order), 0
        while done < moves and not deadline.expired():
            trial = order.copy()
            a, b = rng.integers(R, size=2)
            if rng.random() < 0.5:
                trial[a], trial[b] = trial[b], trial[a]
            else:
                trial.insert(b, trial.pop(a))
            done += 1
            updates = chunks(trial, self.timeline.sizes)
            try:
                if sideways and self.place(updates, value * (1 + sideways), deadline) is None:
                    continue                  # worse than the plateau: one pass decides most moves
                if self.place(updates, value - tol, deadline) is not None:
                    value, finish = self.best(trial, upper=value - tol, lower=value * (1 - CLIMB_STEP), tol=tol,
                                              deadline=deadline)
                    order = trial
                elif sideways:
                    order = trial
            except OutOfTime:             # mid-move: the best plan so far stands
                break
        return value, finish, done


def guided_plan(problem: RolloutProblem, orders, *, evaluations: int = EVALUATIONS,
                sequence_moves: int | None = None, restarts: int = GUIDED_RESTARTS, seed: int = 0,
                deadline: Deadline | None = None):
    """The schedule (replayed) of the best plan among the update sequences ``orders``, its
    sequence walked ``restarts`` times for ``sequence_moves`` moves each (``GUIDED_MOVES`` per
    group by default; ``SequencePlanner.climb`` with ``SIDEWAYS``), the best plan annealed
    ``evaluations`` moves further, or None when none keeps to the engine's limits. The orders to
    try are the step-indexed bound's MILP solutions, groups by bucket (``StepBound.orders``): a
    relaxation's placement is a good sequence.

    Why the walks. At lsat-ar R = 32 (real engine) the MILP's best sequence plans at 228.1-228.8 s
    (its solutions vary run to run), and the strict climb from it stops at 228.53 s in 1,000 or
    10,000 moves alike, a local optimum; walking its plateau (moves within 0.02 % of the best
    taken) reached 227.97-228.01 s in 3 of 7 walks of 4,000 moves (0 of 5 with 0.1 %: the walk
    strays too far), the others staying at 228.53 s. sci-xw: 296.7 -> 294.4-294.8 s."""
    deadline = deadline or Deadline(None)
    timeline = StepTimeline(problem)
    planner = SequencePlanner(timeline)
    best, start = np.inf, None
    for order in orders:
        try:
            value, _ = planner.best(list(order), deadline=deadline)
        except OutOfTime:
            break
        if value < best:
            best, start = value, list(order)
    if start is None:
        return None
    moves = GUIDED_MOVES * problem.R if sequence_moves is None else sequence_moves
    walks = [planner.climb(start, moves, np.random.default_rng([seed, k]), deadline, sideways=SIDEWAYS)
             for k in range(max(1, restarts))]
    best, finish, _ = min(walks, key=lambda walk: walk[0])
    best, finish, _ = anneal(timeline, finish, evaluations, np.random.default_rng(seed), deadline)
    return replay(problem, timeline.plan(finish)) if np.isfinite(best) else None


def anneal(timeline: StepTimeline, finish: np.ndarray, evaluations: int, rng: np.random.Generator,
           deadline: Deadline) -> tuple[float, np.ndarray, int]:
    """Simulated annealing over finish steps: (best train end of a plan within the engine's
    limits, inf when none was met; its finish steps; evaluations made). Until a plan within the
    limits is met the walk is on ``StepTimeline.score``'s stretched figure, from then on on the
    true train end (plans beyond the limits refused), so from a start within the limits it is the
    plain walk: straying through plans beyond the limits where they bind cost lsat-ar R = 32,
    rho 0.5 2.4 s (206.6 s against 204.2 s). A worse move is kept with probability
    exp(-loss / T), T falling linearly from ``TEMPERATURE`` x the current figure to 0. A move, and
    the start itself, is scored only while it and the best plan's timeline fit before
    ``deadline`` (``StepTimeline.affordable``; a cheap start always is, ``CHEAP_TIMELINE_S``);
    (inf, None, 0) when the start is not."""
    if timeline.timeline_s(finish) > CHEAP_TIMELINE_S and not timeline.affordable(finish, deadline):
        return np.inf, None, 0
    best, current = timeline.score(finish)
    best_finish = finish
    lo, R = timeline.longest, finish.size
    done = 0
    while done < evaluations and not deadline.expired() and timeline.affordable(finish, deadline):
        trial = finish.copy()
        shift = int(rng.choice((-1, 1)) * 2 ** rng.integers(0, LARGEST_MOVE + 1))
        kind = rng.random()
        g = rng.integers(R)
        if kind < 0.6:
            trial[g] += shift
        elif kind < 0.85:
            trial[[g, rng.integers(R)]] += shift
        else:
            trial[trial >= trial[g]] += shift
        np.maximum(trial, lo, out=trial)
        value, walk = timeline.score(trial)
        figure = walk if np.isinf(best) else value   # once a plan fits, plans beyond the limits are refused
        temperature = TEMPERATURE * current * (1 - done / evaluations)
        done += 1
        if figure <= current or (temperature > 0 and rng.random() < np.exp((current - figure) / temperature)):
            finish, current = trial, figure
            if value < best:
                best, best_finish = value, trial
    return best, best_finish, done


def _walks(timeline: StepTimeline, starts: dict[str, np.ndarray], evaluations: int, rng: np.random.Generator,
           deadline: Deadline) -> list[tuple[float, str, np.ndarray, int]]:
    """``anneal`` from every start in turn on one random stream: (best planned train end, start's
    name, its finish steps, moves made) per start; the finish steps are None where the start could
    not be scored in time."""
    walks = []
    for name, start in starts.items():
        value, finish, done = anneal(timeline, start, evaluations, rng, deadline)
        walks.append((value, name, finish, done))
    return walks


def _planned_then_name(walk) -> tuple[float, str]:
    return walk[0], walk[1]


@register("rollout", "step-plan",
          description="offline: group finish steps, requests admitted just in time; update-sequence search and "
                      "simulated annealing on the exact engine timeline, replayed (known lengths)")
def solve_step_plan(problem, *, evaluations: int = EVALUATIONS, sequence_moves: int = SEQUENCE_MOVES, seed: int = 0,
                    time_limit=None, prove_s: float = 0.0, threads: int = 1):
    """``evaluations`` annealing moves from each start (deterministic for ``seed``;
    ``time_limit`` is the safety net): the ``seeds`` and, with ``sequence_moves`` > 0, the best
    plan of the update sequence ``SequencePlanner.climb`` reaches from Johnson's order in that
    many moves. ``prove_s`` > 0 also runs the step-indexed bound for that many seconds (HiGHS,
    ``threads``) and reports it when it beats the analytic one."""
    if problem.rounds != 1 or not problem.engine.single:
        field = "rounds" if problem.rounds != 1 else "engine"
        raise InputError(problem.name, field, "step-plan plans one round on one engine without shared prefixes")
    for field, value in (("evaluations", evaluations), ("sequence_moves", sequence_moves)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InputError(problem.name, field, f"expected a whole number >= 0, got {value!r}")
    clock = Deadline(time_limit)
    # fifo's schedule first, the one online policy simulated when time is short (it stands where
    # no plan replays earlier); then the search stops where the replay of its plan and the
    # re-scoring still fit the limit: at R = 2,000 one simulation takes over a second, and with
    # both after a 3 s search the run took 5.2-5.8 s
    online = (("fifo", simulate(problem, make_policy("fifo"))),)
    search = search_deadline(clock, problem)
    timeline = StepTimeline(problem)
    rng = np.random.default_rng(seed)
    starts, climbed = seeds(problem, timeline), 0
    if sequence_moves:
        planner = SequencePlanner(timeline)
        # its own random stream: the other starts anneal as they would without it
        _, finish, climbed = planner.climb(johnson_order(problem), sequence_moves, np.random.default_rng([seed, 1]),
                                           search)
        if finish is not None:
            starts["sequence"] = finish
    found = _walks(timeline, starts, evaluations, rng, search)
    scored = [walk for walk in found if walk[2] is not None]
    # no start scored in time (responses of 1e7 tokens and more under a few seconds): fifo's
    # schedule stands
    value, name, finish, _ = min(scored, key=_planned_then_name) if scored else (np.inf, None, None, 0)
    schedule, limits = (replay(problem, timeline.plan(finish)) if scored else None), "every limit"
    if scored and timeline.reservation and not timeline.roomy and not search.expired():
        # the same walks within the batch and KV limits alone (their own random stream), the
        # replay delaying the admissions SGLang's reservation refuses; the plan whose replay
        # ends first stands (module docstring)
        loose = StepTimeline(problem, reservation=False)
        walks = _walks(loose, starts, evaluations, np.random.default_rng([seed, 2]), search)
        found += walks
        walks = [walk for walk in walks if walk[2] is not None]
        v, other, f, _ = min(walks, key=_planned_then_name) if walks else (np.inf, None, None, 0)
        alternative = replay(problem, loose.plan(f)) if walks else None
        if (alternative is not None     # and not float noise
                and alternative.metrics()["train_end_s"] < schedule.metrics()["train_end_s"] * (1 - 1e-9)):
            value, name, schedule, limits = v, other, alternative, "the batch and KV limits"
    walked = schedule.metrics()["train_end_s"] if schedule is not None else np.inf
    fallback = best_policy(problem, search, online)
    if schedule is None or fallback[1].metrics()["train_end_s"] < walked * (1 - 1e-9):
        schedule = fallback[1]
    schedule.policy = "step-plan"
    replayed = schedule.metrics()["train_end_s"]
    within = bool(np.isfinite(value))      # else no start or move kept to the limits: the replay says what runs
    params = {"evaluations": evaluations, "sequence_moves": sequence_moves, "seed": seed, "start": name,
              "planned_train_end_s": float(value) if within else None, "planned_within": limits if within else None,
              "evaluations_done": sum(f[3] for f in found), "sequence_moves_done": climbed,
              "fallback": fallback[0] if schedule is fallback[1] else None}
    bound = None
    if prove_s > 0 and not clock.expired():
        left = clock.remaining(floor=0.05)
        proof = step_bound(problem, time_limit=prove_s if left is None else min(prove_s, left), threads=threads,
                           upper=replayed)
        bound = proof.bound_s
        # the bound's MILP solutions, as update sequences, can beat the walks (``guided_plan``)
        guided = guided_plan(problem, proof.orders, evaluations=evaluations, seed=seed, deadline=clock)
        if guided is not None and guided.metrics()["train_end_s"] < replayed * (1 - 1e-9):
            schedule, replayed, params["fallback"] = guided, guided.metrics()["train_end_s"], None
            schedule.policy, params["start"] = "step-plan", "bound-guided"
        # HiGHS's dual bound is a proof whether or not it closed the MILP: the bench counts it
        # as a certified bound (``report._reference``), like an exact solver's
        params.update(step_bound_s=proof.bound_s, step_bound_closed=proof.closed, step_bound_width=proof.width,
                      bound_proven=True)
    # its share of the limit, which ends first, or a walk stopped where its next score would not fit
    cut = search.expired() or any(walk[3] < evaluations for walk in found)
    planned = (f"planned {value:.3f} s within {limits}" if within
               else "no plan within the engine's limits found")
    message = ((f"best of {len(found)} walks ({name}): {planned}, replayed {walked:.3f} s" if scored
                else f"no walk's start could be scored within the time limit ({len(found)} starts)")
               + (f"; the online policy {fallback[0]}'s schedule ends first, {replayed:.3f} s, and stands"
                  if params["fallback"] else "")
               + (f"; the bound's MILP solutions as update sequences end first, {replayed:.3f} s"
                  if params["start"] == "bound-guided" else "")
               + (f"; step-indexed bound {bound:.3f} s" if bound is not None else ""))
    return scored_result(problem, "step-plan", schedule, bound=bound, params=params, message=message,
                         termination=Termination.TIME_LIMIT if cut else Termination.COMPLETED,
                         stopped_by="time" if cut else None)

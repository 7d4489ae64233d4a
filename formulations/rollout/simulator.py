"""Discrete-event simulator of one round: a continuous-batching rollout engine fed by an
admission policy, and the trainer. The single source of truth for every figure of a rollout
solver (policies run in it; offline plans are replayed in it).

Engine semantics (see ``EngineModel``): decisions happen at step boundaries when something
happened (a request finished or was retracted, a prefill ended, or the policy asked to wake
up). At a decision the policy lists waiting requests in priority order and the engine admits
them in that order while they fit, stopping at the first that does not (no overtaking).
Admitted requests are prefilled (stalling decode), then every decode step gives each running
request one token. Between two decisions the batch is fixed, so the time of ``g`` steps is
exact in closed form: ``g*(c0 + c1*b + c2*kv0) + c2*b*g*(g-1)/2`` (the KV grows by b tokens a
step). The engine's own queue is FCFS in arrival order; retracted requests rejoin at its tail.
The simulator has no randomness of its own (seeds live in the workload).
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Iterable

from pipeplan.formulations.rollout.problem import RolloutProblem
from pipeplan.formulations.rollout.schedule import Schedule
from pipeplan.formulations.rollout.trainer import trainer_updates

EPS = 1e-9  # seconds; how close two event times must be to count as the same instant
WAITING, RUNNING, FINISHED = 0, 1, 2


class PolicyStalled(RuntimeError):
    """The engine is idle, requests wait, and the policy neither admits one nor asks to wake up."""


class Policy:
    """An admission policy, in the scikit-learn manner: parameters in ``__init__``, ``reset``
    at the start of a round, then ``decide(state)`` at every engine decision. ``trainer`` says
    how the trainer consumes groups (``stream``, ``sync`` or ``planned``)."""

    name = "policy"
    trainer = "stream"

    def reset(self, problem: RolloutProblem) -> None:
        self.problem = problem

    def decide(self, state: "EngineState") -> Iterable[int]:
        """Waiting requests in priority order (lazily: the engine stops at the first that does
        not fit); requests that are not waiting are skipped by the engine."""
        raise NotImplementedError

    def next_wakeup(self, state: "EngineState") -> float | None:
        """A time after ``state.last_decision_s`` at which to decide again even if nothing
        finishes by then (timed plans), or None."""
        return None

    def on_group_complete(self, g: int, t: float) -> None:
        pass

    def on_retract(self, i: int, t: float) -> None:
        pass

    def planned_updates(self) -> list[list[int]] | None:
        return None


@dataclass(frozen=True)
class Segment:
    """One stay of a request in the running batch: admitted at ``admit_s`` (decode step
    ``admit_step``) with ``generated_before`` tokens already made, until ``end_s`` (step
    ``end_step``), where it finished or was retracted."""

    request: int
    admit_s: float
    end_s: float
    admit_step: int
    end_step: int
    generated_before: int
    finished: bool


class EngineState:
    """What a policy may look at: the clock, each request's status (waiting, running,
    finished), how many requests of each group are unfinished, and the engine's load."""

    def __init__(self, problem: RolloutProblem):
        self.problem = problem
        n = problem.n_requests
        self.t = 0.0
        self.last_decision_s = -math.inf
        self.status = [WAITING] * n
        self.admissions = [0] * n           # how many times each request was admitted
        self.group_left = [problem.K] * problem.R
        self.groups_done = 0
        self.steps = 0                      # decode steps run so far
        self.admit_step = [0] * n
        self.generated_before = [0] * n     # tokens made before the current stay in the batch
        self.running = 0
        self.waiting = n
        self.base_sum = 0                   # prompt + generated_before over the running requests
        self.admit_step_sum = 0
        self.reserved = 0                   # reserved footprints of the running requests (reserve)
        self.ratio_set = problem.engine.reserve_ratio_init   # on_demand: ratio when last reset...
        self.ratio_set_step = 0                                 # ...and the step it was reset at
        self._queue = [(i, 0) for i in problem.native_order]   # engine FCFS queue: (request, epoch)
        self._epoch = [0] * n
        self._queue_cursor = 0

    def active_kv(self) -> int:
        """KV tokens in use now (prompts plus tokens generated so far, running requests)."""
        return self.base_sum + self.running * self.steps - self.admit_step_sum

    def generated(self, i: int) -> int:
        if self.status[i] == RUNNING:
            return self.generated_before[i] + self.steps - self.admit_step[i]
        return self.problem.lengths[i] if self.status[i] == FINISHED else self.generated_before[i]

    def remaining_tokens(self, i: int) -> int:
        return self.problem.lengths[i] - self.generated(i)

    def reserve_ratio(self) -> float:
        e = self.problem.engine
        decay = (e.reserve_ratio_init - e.reserve_ratio_min) / e.reserve_ratio_decay_steps
        return max(e.reserve_ratio_min, self.ratio_set - decay * (self.steps - self.ratio_set_step))

    def native_queue(self):
        """The waiting requests in the engine's own FCFS order (arrival order, retracted
        requests at the tail)."""
        q, status, epoch = self._queue, self.status, self._epoch
        while self._queue_cursor < len(q):
            i, e = q[self._queue_cursor]
            if status[i] == WAITING and epoch[i] == e:
                break
            self._queue_cursor += 1
        for j in range(self._queue_cursor, len(q)):
            i, e = q[j]
            if status[i] == WAITING and epoch[i] == e:
                yield i

    def requeue(self, i: int) -> None:
        self._epoch[i] += 1
        self._queue.append((i, self._epoch[i]))


def decode_time(engine, b: int, kv0: float, g: int) -> float:
    return g * (engine.c0_s + engine.c1_s * b + engine.c2_s * kv0) + engine.c2_s * b * g * (g - 1) / 2


def steps_until(engine, b: int, kv0: float, dt: float) -> int:
    """The smallest g >= 1 with decode_time(g) >= dt (the first step boundary at or after dt)."""
    a = engine.c2_s * b / 2
    lin = engine.c0_s + engine.c1_s * b + engine.c2_s * kv0 - a
    g = dt / lin if a == 0 else (-lin + math.sqrt(lin * lin + 4 * a * dt)) / (2 * a)
    g = max(1, math.ceil(g - 1e-9))
    while g > 1 and decode_time(engine, b, kv0, g - 1) >= dt - EPS:
        g -= 1
    while decode_time(engine, b, kv0, g) < dt - EPS:
        g += 1
    return g


class _Engine:
    """The event loop of ``simulate``; one instance per run."""

    def __init__(self, problem: RolloutProblem, policy: Policy):
        self.p, self.policy = problem, policy
        self.eng = problem.engine
        self.on_demand = self.eng.kv_mode == "on_demand"
        self.st = EngineState(problem)
        n = problem.n_requests
        self.lengths, self.prompts = problem.lengths, problem.prompts
        self.max_new = problem.max_new_tokens
        self.finish_s = [math.nan] * n
        self.first_admit_s = [math.nan] * n
        self.group_complete = [math.nan] * problem.R
        self.admissions: list[tuple[int, float]] = []
        self.segments: list[Segment] = []
        self.open: dict[int, tuple[float, int, int]] = {}    # request -> (admit time, step, generated before)
        self.heap: list[tuple[int, int, int]] = []            # (finish step, request, admission number)
        self.decisions = self.retractions = 0

    # -- capacity -----------------------------------------------------------------------
    def _future(self, i: int, generated: int, ratio: float) -> float:
        """on_demand: the KV request i is expected to still need."""
        return ratio * min(self.max_new - generated, self.eng.reserve_clip_tokens)

    def start_decision(self) -> None:
        """Fix what admissions are checked against at this decision (on_demand)."""
        if self.on_demand:
            st = self.st
            self.ratio = ratio = st.reserve_ratio()
            # _future(i, st.generated(i), ratio) inlined (every open request is running): the
            # sum over the batch at every decision is the simulator's hot loop
            made, admitted, steps = st.generated_before, st.admit_step, st.steps
            new, clip = self.max_new, self.eng.reserve_clip_tokens
            self.projected = st.active_kv() + sum(ratio * min(new - (made[i] + steps - admitted[i]), clip)
                                                  for i in self.open)

    def fits(self, i: int) -> bool:
        st, eng = self.st, self.eng
        if st.running + 1 > eng.max_num_seqs:
            return False
        if not self.on_demand:
            return st.reserved + self.prompts[i] + self.lengths[i] <= eng.kv_capacity_tokens
        gb = st.generated_before[i]
        if self.projected + self.prompts[i] + gb + self._future(i, gb, self.ratio) > eng.kv_capacity_tokens:
            return False
        # the prefill must fit now, with room for the next decode step
        step = st.running + (1 if self.lengths[i] > gb else 0)
        return st.active_kv() + self.prompts[i] + gb + step <= eng.kv_capacity_tokens

    # -- state changes ------------------------------------------------------------------
    def admit(self, i: int) -> float:
        st = self.st
        st.status[i] = RUNNING
        st.admissions[i] += 1
        st.waiting -= 1
        st.running += 1
        if math.isnan(self.first_admit_s[i]):
            self.first_admit_s[i] = st.t
        self.admissions.append((i, st.t))
        gb = st.generated_before[i]
        self.open[i] = (st.t, st.steps, gb)
        st.admit_step[i] = st.steps
        st.admit_step_sum += st.steps
        st.base_sum += self.prompts[i] + gb
        st.reserved += self.prompts[i] + self.lengths[i]
        if self.on_demand:
            self.projected += self.prompts[i] + gb + self._future(i, gb, self.ratio)
        heapq.heappush(self.heap, (st.steps + self.lengths[i] - gb, i, st.admissions[i]))
        return self.eng.prefill_time(self.prompts[i] + gb)

    def _leave(self, i: int, finished: bool) -> None:
        st = self.st
        t0, step0, gb = self.open.pop(i)
        self.segments.append(Segment(i, t0, st.t, step0, st.steps, gb, finished))
        st.running -= 1
        st.admit_step_sum -= st.admit_step[i]
        st.base_sum -= self.prompts[i] + gb
        st.reserved -= self.prompts[i] + self.lengths[i]

    def finish_due(self) -> bool:
        st, done = self.st, False
        while self.heap and self.heap[0][0] <= st.steps:
            _, i, nth = heapq.heappop(self.heap)
            if st.status[i] != RUNNING or st.admissions[i] != nth:
                continue                                  # a stay that ended in a retraction
            self._leave(i, True)
            done = True
            st.status[i] = FINISHED
            self.finish_s[i] = st.t
            g = i // self.p.K
            st.group_left[g] -= 1
            if st.group_left[g] == 0:
                self.group_complete[g] = st.t
                st.groups_done += 1
                self.policy.on_group_complete(g, st.t)
        return done

    def retract(self) -> None:
        """Free KV until ``retract_headroom_steps`` steps fit: fewest generated tokens first,
        the latest admitted first among equals; then reset the reservation ratio."""
        st, cap, h = self.st, self.eng.kv_capacity_tokens, self.eng.retract_headroom_steps
        for i in sorted(self.open, key=lambda i: (st.generated(i), -st.admit_step[i], -i)):
            if st.running <= 1 or st.active_kv() + st.running * h <= cap:
                break
            st.generated_before[i] = st.generated(i)
            self._leave(i, False)
            st.status[i] = WAITING
            st.waiting += 1
            st.requeue(i)
            self.retractions += 1
            self.policy.on_retract(i, st.t)
        made = sum(st.generated(i) for i in self.open)
        st.ratio_set = min(1.0, (made + h * st.running) / (self.max_new * st.running))
        st.ratio_set_step = st.steps

    # -- the loop -----------------------------------------------------------------------
    def run(self) -> None:
        st, eng, policy = self.st, self.eng, self.policy
        while True:
            st.last_decision_s = st.t
            self.decisions += 1
            if self.on_demand and st.running and st.active_kv() + st.running > eng.kv_capacity_tokens:
                self.retract()
            prefill = 0.0
            if st.waiting:
                self.start_decision()
                for i in policy.decide(st):
                    if st.status[i] != WAITING:
                        continue
                    if not self.fits(i):
                        break
                    prefill += self.admit(i)
            st.t += prefill
            if self.finish_due():          # zero-length responses end with their prefill
                continue
            if st.running == 0:
                if not st.waiting:
                    return
                wake = policy.next_wakeup(st)
                if wake is None or wake <= st.t + EPS:
                    raise PolicyStalled(f"{policy.name}: engine idle at t={st.t:.3f}s with {st.waiting} requests "
                                        "waiting, and the policy admits none")
                st.t = wake
                continue
            wake = policy.next_wakeup(st)
            if wake is not None and wake <= st.t + EPS:
                continue                   # a planned admission fell due during the prefill
            b, kv0 = st.running, st.active_kv()
            g = self.heap_top() - st.steps
            if self.on_demand:             # stop where the next step would not fit
                g = min(g, max(1, (eng.kv_capacity_tokens - kv0) // b))
            dt = decode_time(eng, b, kv0, g)
            if wake is not None and st.t + dt > wake + EPS:
                g = steps_until(eng, b, kv0, wake - st.t)
                dt = decode_time(eng, b, kv0, g)
            st.t += dt
            st.steps += g
            self.finish_due()

    def heap_top(self) -> int:
        st = self.st
        while st.status[self.heap[0][1]] != RUNNING or st.admissions[self.heap[0][1]] != self.heap[0][2]:
            heapq.heappop(self.heap)
        return self.heap[0][0]


def simulate(problem: RolloutProblem, policy: Policy) -> Schedule:
    """Run one round under ``policy``; returns the full schedule (re-check it with
    ``checker.check``)."""
    policy.reset(problem)
    e = _Engine(problem, policy)
    e.run()
    updates = trainer_updates(problem, e.group_complete, policy.trainer, policy.planned_updates())
    train_end = updates[-1].end_s
    return Schedule(admit_s=e.first_admit_s, finish_s=e.finish_s, admissions=e.admissions, segments=e.segments,
                    group_complete_s=e.group_complete, updates=updates, weight_version=[0] * problem.n_requests,
                    publish_start_s=train_end, publish_end_s=train_end + problem.trainer.publish_s,
                    trainer_mode=policy.trainer, policy=policy.name, decisions=e.decisions,
                    retractions=e.retractions)

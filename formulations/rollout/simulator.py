"""Discrete-event simulator of rollout rounds: continuous-batching rollout engines (one, or
several data-parallel replicas behind a router) fed by an admission policy, and the trainer.
The single source of truth for every figure of a rollout solver (policies run in it; offline
plans are replayed in it).

Engine semantics (see ``EngineModel``): decisions happen at step boundaries when something
happened on that replica (a request finished or was retracted, a prefill ended, requests
arrived, or the policy asked to wake up). At a decision the policy lists waiting requests in
priority order and the engine admits them in that order while they fit, stopping at the first
that does not (no overtaking) unless priority preemption lets it displace running requests of
lower priority. Admitted requests are prefilled (stalling decode), then every decode step gives
each running request one token. Between two decisions the batch is fixed, so the time of ``g``
steps is exact in closed form: ``g*(c0 + c1*b + c2*kv0) + c2*b*g*(g-1)/2`` (the KV grows by b
tokens a step). Each replica's own queue is FCFS in arrival order; retracted requests rejoin at
its tail (SGLang) or head (vLLM).

Replicas run side by side on one clock: the loop always advances the replica whose next
decision is earliest, and a replica's decode run is applied only when its turn comes, so every
policy decision sees exactly the events before it. A replica decides at its own events only;
an event elsewhere (a group completing on another replica) wakes a replica only if it is idle.
The replicas due to decide wait in a heap (time, index), so a decision costs O(log replicas)
whatever their number; idle replicas with nothing queued, which a wake-up makes decide
nothing, are woken as one set and their empty decisions counted together in their turn (a
group completing had made every idle replica of thousands decide, each after a scan of all
of them).

Rounds (``RolloutProblem.rounds``): round r's requests arrive when the weights they may use are
published, i.e. at the publish of round r - 1 - staleness (at 0 for the first 1 + staleness
rounds); the trainer trains each round after the previous one's publish. The simulator has no
randomness of its own (seeds live in the workload).
"""
from __future__ import annotations

import bisect
import heapq
import math
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from pipeplan.formulations.rollout.problem import RolloutProblem
from pipeplan.formulations.rollout.schedule import Schedule
from pipeplan.formulations.rollout.trainer import round_updates, trainer_updates

EPS = 1e-9  # seconds; how close two event times must be to count as the same instant
WAITING, RUNNING, FINISHED, HELD = 0, 1, 2, 3   # HELD: its round has not arrived yet


class PolicyStalled(RuntimeError):
    """The engine is idle, requests wait, and the policy neither admits one nor asks to wake up."""


class Policy:
    """An admission policy, in the scikit-learn manner: parameters in ``__init__``, ``reset``
    at the start of a run, then ``decide(state)`` at every engine decision. ``trainer`` says
    how the trainer consumes groups (``stream``, ``sync`` or ``planned``); ``staleness`` how
    many weight versions a request may lag behind its round (0: on-policy)."""

    name = "policy"
    trainer = "stream"
    staleness = 0

    def reset(self, problem: RolloutProblem) -> None:
        self.problem = problem

    def decide(self, state: "EngineState") -> Iterable[int]:
        """Waiting requests in priority order (lazily: the engine stops at the first that does
        not fit); requests that are not waiting on the deciding replica are skipped."""
        raise NotImplementedError

    def priority(self, state: "EngineState", i: int) -> int:
        """Request i's priority class, lower first; only used with the engine's
        ``priority_preemption``, where a waiting request may preempt running ones of a later
        class."""
        return 0

    def victim_order(self, state: "EngineState", running: list[int]) -> list[int] | None:
        """The running requests in the order to retract them, or None for the engine's rule;
        only used with the engine's ``policy_victims``."""
        return None

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

    def settled(self) -> dict:
        """Parameters the policy settled on itself in its last run, for the result's params
        (``defer``'s count); none by default."""
        return {}

    def cut_note(self) -> str | None:
        """What its time limit cut short in its last run, said in one line; None when nothing
        was (the default: most policies take no limit)."""
        return None


@dataclass(frozen=True)
class Segment:
    """One stay of a request in a replica's running batch: admitted at ``admit_s`` (that
    replica's decode step ``admit_step``) with ``generated_before`` tokens already made, on
    weights ``version``, until ``end_s`` (step ``end_step``), where it finished or was
    retracted."""

    request: int
    admit_s: float
    end_s: float
    admit_step: int
    end_step: int
    generated_before: int
    finished: bool
    replica: int = 0
    version: int = 0


class Replica:
    """One engine's own state: clock, decode steps, running batch, KV, queue."""

    def __init__(self, index: int, ratio_init: float):
        self.index = index
        self.t = 0.0                        # when this replica decides next (inf: idle until woken)
        self.steps = 0
        self.running = 0
        self.waiting = 0
        self.base_sum = 0                   # prompts (once per group with sharing) + generated_before
        self.admit_step_sum = 0
        self.reserved = 0                   # reserved footprints of the running requests (reserve)
        self.ratio_set, self.ratio_set_step = ratio_init, 0
        self.queue: list[tuple[int, int]] = []   # FCFS: (request, epoch)
        self.routed: list[int] = []              # every request routed here, in arrival order
        self.front: list[tuple[int, int]] = []   # vLLM: preempted requests, head of the queue
        self.cursor = 0
        self.heap: list[tuple[int, int, int]] = []   # (finish step, request, admission number)
        self.open: dict[int, tuple[float, int, int, int]] = {}  # request -> (admit s, step, made, version)
        self.group_running: dict[int, int] = {}      # prefix sharing: running samples per group
        self.chunk: tuple[float, int, float, int] | None = None  # decode run not yet applied
        self.outstanding = 0                # routed and unfinished (least-load routing)
        self.stamp = 0                      # its entry in the engine's clock counts only with this stamp

    def active_kv(self) -> int:
        return self.base_sum + self.running * self.steps - self.admit_step_sum


class EngineState:
    """What a policy may look at: the clock, each request's status, how many requests of each
    group are unfinished, the published weight version, and the deciding replica's load
    (``running``, ``active_kv()``, ``native_queue()``)."""

    def __init__(self, problem: RolloutProblem, replicas: list[Replica]):
        self.problem = problem
        n = problem.n_requests
        self.t = 0.0
        self.last_decision_s = -math.inf
        self.status = [HELD] * n
        self.admissions = [0] * n           # how many times each request was admitted
        self.group_left = [problem.K] * problem.R
        self.groups_done = 0
        self.admit_step = [0] * n
        self.generated_before = [0] * n     # tokens made before the current stay in the batch
        self.replica_of = [0] * n
        self.replicas = replicas
        self.replica = replicas[0]
        self.version = 0                    # weights published so far
        self.waiting = 0
        self.epoch = [0] * n                # queue entries of older stays are stale

    @property
    def running(self) -> int:
        return self.replica.running

    @property
    def steps(self) -> int:
        return self.replica.steps

    def active_kv(self) -> int:
        """KV tokens in use now on the deciding replica."""
        return self.replica.active_kv()

    def routed(self) -> list[int]:
        """Every request routed to the deciding replica so far, in arrival order (the engine's
        own list: read it, do not change it). With many replicas a policy that ranks requests
        looks at these rather than at every request of the round."""
        return self.replica.routed

    def generated(self, i: int) -> int:
        if self.status[i] == RUNNING:
            return self.generated_before[i] + self.replicas[self.replica_of[i]].steps - self.admit_step[i]
        return self.problem.lengths[i] if self.status[i] == FINISHED else self.generated_before[i]

    def generated_all(self) -> np.ndarray:
        """:meth:`generated` of every request at once (an oracle policy ranks them all at each
        decision)."""
        status = np.array(self.status)
        steps = np.array([r.steps for r in self.replicas])[np.array(self.replica_of)]
        before = np.array(self.generated_before)
        made = np.where(status == RUNNING, before + steps - np.array(self.admit_step), before)
        return np.where(status == FINISHED, np.array(self.problem.lengths), made)

    def remaining_tokens(self, i: int) -> int:
        return self.problem.lengths[i] - self.generated(i)

    def reserve_ratio(self) -> float:
        e, r = self.problem.engine, self.replica
        decay = (e.reserve_ratio_init - e.reserve_ratio_min) / e.reserve_ratio_decay_steps
        return max(e.reserve_ratio_min, r.ratio_set - decay * (r.steps - r.ratio_set_step))

    def native_queue(self):
        """The deciding replica's waiting requests in its own order (arrival order; retracted
        requests at the tail, or preempted ones at the head with vLLM's rule)."""
        r, status, epoch = self.replica, self.status, self.epoch
        if r.front:
            r.front = [(i, e) for i, e in r.front if status[i] == WAITING and epoch[i] == e]
            yield from [i for i, _ in r.front]
        q = r.queue
        while r.cursor < len(q):
            i, e = q[r.cursor]
            if status[i] == WAITING and epoch[i] == e:
                break
            r.cursor += 1
        for j in range(r.cursor, len(q)):
            i, e = q[j]
            if status[i] == WAITING and epoch[i] == e:
                yield i


class _Woken:
    """Idle replicas with nothing queued or running, woken together at ``w``: each decides
    nothing in its turn ``(w, index)``. Kept as a set until a replica deciding at ``w`` itself
    falls among them; then sorted, with ``p`` the first whose turn has not come."""

    __slots__ = ("w", "members", "order", "p", "lo")

    def __init__(self, w: float, members: set[int], lo: int):
        self.w, self.members, self.order, self.p, self.lo = w, members, None, 0, lo

    def remaining(self):
        return self.members if self.order is None else self.order[self.p:]


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
        self.eng = eng = problem.engine
        self.on_demand = eng.kv_mode == "on_demand"
        self.sharing = eng.prefix_sharing
        self.replicas = [Replica(k, eng.reserve_ratio_init) for k in range(eng.replicas)]
        # the replicas due to decide, (t, index, stamp) (an entry whose stamp is old is stale);
        # idle ones (t = inf) are in ``idle`` (nothing queued or running: woken, they decide
        # nothing) or ``stalled`` (requests queued that the policy held); ``woken`` is a heap of
        # (w, lowest index, n, _Woken); ``busy`` have a decode run pending (``cut_runs``)
        self.clock: list[tuple[float, int, int]] = []
        self.idle: set[int] = set()
        self.idle_lo, self.idle_lo_stale = math.inf, False
        self.stalled: set[int] = set()
        self.woken: list[tuple[float, int, int, _Woken]] = []
        self.wakes = 0
        self.busy: set[int] = set()
        for rep in self.replicas:
            self.schedule(rep)
        # least-load routing: (outstanding, index) heap, an entry stale once the count moved on
        self.loads = [(0, k) for k in range(eng.replicas)] if eng.replicas > 1 and eng.router != "round_robin" else None
        self.st = st = EngineState(problem, self.replicas)
        self.epoch = st.epoch
        n = problem.n_requests
        self.lengths, self.prompts = problem.lengths, problem.prompts
        self.K = problem.K
        self.max_new = problem.max_new_tokens
        self.finish_s = [math.nan] * n
        self.first_admit_s = [math.nan] * n
        self.version_of = [-1] * n                     # version of a request's first stay
        self.group_complete = [math.nan] * problem.R
        self.admissions: list[tuple[int, float]] = []
        self.admit_seq = [0] * n                       # global admission counter (vLLM's rule)
        self.segments: list[Segment] = []
        self.decisions = self.retractions = 0
        self.routed = 0
        self.group_replica: dict[int, int] = {}
        # rounds: arrivals at publishes; trainer schedules computed as rounds complete
        self.staleness = int(getattr(policy, "staleness", 0))
        self.round_left = [problem.groups_per_round] * problem.rounds
        self.updates: list[list] = [[] for _ in range(problem.rounds)]
        self.publishes: list[tuple[float, float] | None] = [None] * problem.rounds
        self.events: list[tuple[float, int]] = []     # (time, round published) pending publishes
        self.trained = 0                               # rounds whose trainer schedule is known
        per = problem.groups_per_round * problem.K
        self.arrivals: list[list[int]] = [[] for _ in range(problem.rounds)]   # each round's, in arrival order
        for i in problem.native_order:
            self.arrivals[i // per].append(i)
        for r in range(min(problem.rounds, 1 + self.staleness)):
            self.release(r)

    # -- arrivals and routing -----------------------------------------------------------
    def release(self, r: int) -> None:
        """Round r's requests arrive: each is routed to a replica's queue, in arrival order."""
        st = self.st
        for i in self.arrivals[r]:
            k = self.route(i)
            st.replica_of[i] = k
            st.status[i] = WAITING
            st.waiting += 1
            rep = self.replicas[k]
            rep.queue.append((i, 0))
            rep.routed.append(i)
            rep.waiting += 1
            rep.outstanding += 1
            if self.loads is not None:
                heapq.heappush(self.loads, (rep.outstanding, k))
            if k in self.idle:                  # idle with a request queued now: woken as such
                self.idle.remove(k)
                self.stalled.add(k)
                self.idle_lo_stale |= k == self.idle_lo

    def route(self, i: int) -> int:
        n, rule = len(self.replicas), self.eng.router
        if n == 1:
            return 0
        if rule == "round_robin":
            self.routed += 1
            return (self.routed - 1) % n
        g = i // self.K
        if rule == "group_affinity" and g in self.group_replica:
            return self.group_replica[g]
        loads, reps = self.loads, self.replicas
        while loads[0][0] != reps[loads[0][1]].outstanding:     # the fewest outstanding, then the lowest index
            heapq.heappop(loads)
        k = loads[0][1]
        self.group_replica[g] = k
        return k

    # -- capacity -----------------------------------------------------------------------
    def _future(self, i: int, generated: int, ratio: float) -> float:
        """on_demand: the KV request i is expected to still need."""
        return ratio * min(self.max_new - generated, self.eng.reserve_clip_tokens)

    def _prompt_cost(self, rep: Replica, i: int) -> int:
        """The prompt KV request i adds on ``rep`` (none when its group's prompt is shared there)."""
        return 0 if self.sharing and rep.group_running.get(i // self.K, 0) else self.prompts[i]

    def start_decision(self, rep: Replica) -> None:
        """Fix what admissions are checked against at this decision (on_demand)."""
        if self.on_demand:
            st = self.st
            self.ratio = ratio = st.reserve_ratio()
            # _future(i, st.generated(i), ratio) inlined (every open request is running): the
            # sum over the batch at every decision is the simulator's hot loop
            made, admitted, steps = st.generated_before, st.admit_step, rep.steps
            new, clip = self.max_new, self.eng.reserve_clip_tokens
            self.projected = rep.active_kv() + sum(ratio * min(new - (made[i] + steps - admitted[i]), clip)
                                                   for i in rep.open)

    def fits(self, rep: Replica, i: int) -> bool:
        st, eng = self.st, self.eng
        if rep.running + 1 > eng.max_num_seqs:
            return False
        prompt = self._prompt_cost(rep, i)
        if not self.on_demand:
            return rep.reserved + prompt + self.lengths[i] <= eng.kv_capacity_tokens
        gb = st.generated_before[i]
        if self.projected + prompt + gb + self._future(i, gb, self.ratio) > eng.kv_capacity_tokens:
            return False
        # the prefill must fit now, with room for the next decode step
        step = rep.running + (1 if self.lengths[i] > gb else 0)
        return rep.active_kv() + prompt + gb + step <= eng.kv_capacity_tokens

    # -- state changes ------------------------------------------------------------------
    def admit(self, rep: Replica, i: int) -> float:
        st, eng = self.st, self.eng
        prompt = self._prompt_cost(rep, i)
        st.status[i] = RUNNING
        st.admissions[i] += 1
        st.waiting -= 1
        rep.waiting -= 1
        rep.running += 1
        if math.isnan(self.first_admit_s[i]):
            self.first_admit_s[i] = st.t
            self.version_of[i] = st.version
        self.admissions.append((i, st.t))
        self.admit_seq[i] = len(self.admissions)
        gb = st.generated_before[i]
        rep.open[i] = (st.t, rep.steps, gb, st.version)
        st.admit_step[i] = rep.steps
        rep.admit_step_sum += rep.steps
        rep.base_sum += prompt + gb
        rep.reserved += prompt + self.lengths[i]
        if self.on_demand:
            self.projected += prompt + gb + self._future(i, gb, self.ratio)
        g = i // self.K
        rep.group_running[g] = rep.group_running.get(g, 0) + 1
        heapq.heappush(rep.heap, (rep.steps + self.lengths[i] - gb, i, st.admissions[i]))
        if gb and eng.resume == "swap":
            return eng.swap_s_per_token * (self.prompts[i] + gb)
        return eng.prefill_time(prompt + gb)

    def _leave(self, rep: Replica, i: int, finished: bool) -> None:
        st = self.st
        t0, step0, gb, version = rep.open.pop(i)
        self.segments.append(Segment(i, t0, st.t, step0, rep.steps, gb, finished, rep.index, version))
        rep.running -= 1
        rep.admit_step_sum -= st.admit_step[i]
        g = i // self.K
        rep.group_running[g] -= 1
        prompt = self.prompts[i] if not self.sharing or rep.group_running[g] == 0 else 0
        rep.base_sum -= prompt + gb
        rep.reserved -= prompt + self.lengths[i]

    def finish_due(self, rep: Replica) -> bool:
        st, done = self.st, False
        while rep.heap and rep.heap[0][0] <= rep.steps:
            _, i, nth = heapq.heappop(rep.heap)
            if st.status[i] != RUNNING or st.admissions[i] != nth:
                continue                                  # a stay that ended in a retraction
            self._leave(rep, i, True)
            done = True
            st.status[i] = FINISHED
            rep.outstanding -= 1
            if self.loads is not None:
                heapq.heappush(self.loads, (rep.outstanding, rep.index))
            self.finish_s[i] = st.t
            g = i // self.K
            st.group_left[g] -= 1
            if st.group_left[g] == 0:
                self.group_complete[g] = st.t
                st.groups_done += 1
                self.policy.on_group_complete(g, st.t)
                self.wake_idle(st.t)
                r = self.p.round_of(g)
                self.round_left[r] -= 1
                if self.round_left[r] == 0 and self.p.rounds > 1:
                    self.train_rounds()
        return done

    def victims(self, rep: Replica) -> list[int]:
        """The running requests of ``rep`` in the order the engine retracts them."""
        st = self.st
        if self.eng.retract_rule == "vllm":
            order = sorted(rep.open, key=lambda i: -self.admit_seq[i])
        else:
            order = sorted(rep.open, key=lambda i: (st.generated(i), -st.admit_step[i], -i))
        if self.eng.policy_victims:
            mine = self.policy.victim_order(st, order)
            if mine is not None:
                return list(mine)
        return order

    def preempt(self, rep: Replica, i: int) -> float:
        """Take running request i out of ``rep``'s batch back to its queue; the swap-out time."""
        st, eng = self.st, self.eng
        st.generated_before[i] = st.generated(i)
        self._leave(rep, i, False)
        st.status[i] = WAITING
        st.waiting += 1
        rep.waiting += 1
        self.epoch[i] += 1
        if eng.retract_rule == "vllm":
            rep.front.insert(0, (i, self.epoch[i]))
        else:
            rep.queue.append((i, self.epoch[i]))
        self.retractions += 1
        self.policy.on_retract(i, st.t)
        return eng.swap_s_per_token * (self.prompts[i] + st.generated_before[i]) if eng.resume == "swap" else 0.0

    def retract(self, rep: Replica) -> float:
        """Free KV until ``retract_headroom_steps`` steps fit (one step with vLLM's rule), the
        victims in the engine's (or the policy's) order; then reset the reservation ratio.
        Returns the swap-out time."""
        st, cap = self.st, self.eng.kv_capacity_tokens
        h = self.eng.retract_headroom_steps if self.eng.retract_rule == "sglang" else 1
        stall = 0.0
        for i in self.victims(rep):
            if rep.running <= 1 or rep.active_kv() + rep.running * h <= cap:
                break
            stall += self.preempt(rep, i)
        h = self.eng.retract_headroom_steps
        made = sum(st.generated(i) for i in rep.open)
        rep.ratio_set = min(1.0, (made + h * rep.running) / (self.max_new * rep.running))
        rep.ratio_set_step = rep.steps
        return stall

    def preempt_for(self, rep: Replica, i: int) -> float | None:
        """Priority preemption: retract running requests of a later priority class than i (the
        latest class first, then the victim order) until i fits; None when it cannot fit even
        then (nothing is retracted). Returns the swap-out time."""
        st, policy = self.st, self.policy
        mine = policy.priority(st, i)
        lower = [j for j in self.victims(rep) if policy.priority(st, j) > mine]
        lower.sort(key=lambda j: -policy.priority(st, j))     # stable: the victim order within a class
        need_seqs = rep.running + 1 - self.eng.max_num_seqs
        freed_kv = 0
        left = dict(rep.group_running)      # running samples per group once the chosen leave
        chosen = []
        for j in lower:
            if len(chosen) >= need_seqs and self._fits_after(rep, i, freed_kv, left):
                break
            chosen.append(j)
            g = j // self.K
            left[g] -= 1
            prompt = self.prompts[j] if not self.sharing or left[g] == 0 else 0   # a shared prompt stays
            freed_kv += prompt + (st.generated(j) if self.on_demand else self.lengths[j])
        if not chosen or len(chosen) < need_seqs or not self._fits_after(rep, i, freed_kv, left):
            return None
        stall = sum(self.preempt(rep, j) for j in chosen)
        self.start_decision(rep)
        return stall if self.fits(rep, i) else None

    def _fits_after(self, rep: Replica, i: int, freed_kv: int, left: dict[int, int]) -> bool:
        """Whether i's KV would fit with ``freed_kv`` tokens freed and ``left`` running samples
        per group (a dry run of ``fits``)."""
        cap, gb = self.eng.kv_capacity_tokens, self.st.generated_before[i]
        prompt = 0 if self.sharing and left.get(i // self.K, 0) else self.prompts[i]
        if not self.on_demand:
            return rep.reserved - freed_kv + prompt + self.lengths[i] <= cap
        return (self.projected - freed_kv + prompt + gb + self._future(i, gb, self.ratio) <= cap
                and rep.active_kv() - freed_kv + prompt + gb + rep.running + 1 <= cap)

    # -- the trainer and the publishes (rounds) ---------------------------------------------
    def train_rounds(self) -> None:
        """Schedule the trainer for every complete round whose predecessor is scheduled, and
        the publish that lets a later round arrive."""
        p = self.p
        while self.trained < p.rounds and self.round_left[self.trained] == 0:
            r = self.trained
            free = self.publishes[r - 1][1] if r else 0.0
            self.updates[r] = round_updates(p, self.group_complete, self.policy.trainer, r, free)
            end = self.updates[r][-1].end_s
            self.publishes[r] = (end, end + p.trainer.publish_s)
            heapq.heappush(self.events, (end + p.trainer.publish_s, r))
            self.cut_runs(end + p.trainer.publish_s)
            self.trained += 1

    def cut_runs(self, t: float) -> None:
        """Stop every replica's pending decode run at the first step boundary at or after t."""
        for k in self.busy:
            rep = self.replicas[k]
            if rep.t > t + EPS:
                t0, b, kv0, g = rep.chunk
                g2 = steps_until(self.eng, b, kv0, t - t0)
                if g2 < g:
                    rep.chunk = (t0, b, kv0, g2)
                    rep.t = t0 + decode_time(self.eng, b, kv0, g2)
                    self.schedule(rep)

    def publish(self, t: float, r: int) -> None:
        """Weights trained on round r are out: version r + 1; the round they unlock arrives."""
        st = self.st
        for _, _, _, woken in self.woken:  # replicas woken but not yet at their turn may get requests
            for k in woken.remaining():      # now: each waits for its turn on the clock
                self.replicas[k].t = woken.w
                self.schedule(self.replicas[k])
        self.woken = []
        st.version = r + 1
        nxt = r + 1 + self.staleness
        if nxt < self.p.rounds:
            self.release(nxt)
        self.wake_idle(t)

    def wake_idle(self, t: float) -> None:
        """Every idle replica decides at t: those with requests queued one by one, those with
        nothing as one set (each of them decides nothing)."""
        for k in self.stalled:
            self.replicas[k].t = t
            self.schedule(self.replicas[k])
        self.stalled = set()
        if self.idle:
            lo = min(self.idle) if self.idle_lo_stale else self.idle_lo
            self.wakes += 1
            heapq.heappush(self.woken, (t, lo, self.wakes, _Woken(t, self.idle, lo)))
            self.idle, self.idle_lo, self.idle_lo_stale = set(), math.inf, False

    def schedule(self, rep: Replica) -> None:
        """``rep`` decides next at ``rep.t``: its entry on the clock (any older one is stale)."""
        rep.stamp += 1
        heapq.heappush(self.clock, (rep.t, rep.index, rep.stamp))

    def settle(self, rep: Replica) -> None:
        """After its decision: on the clock, or idle (stalled when it holds requests)."""
        if rep.t != math.inf:
            self.schedule(rep)
        elif rep.waiting:
            self.stalled.add(rep.index)
        else:
            self.idle.add(rep.index)
            self.idle_lo = min(self.idle_lo, rep.index)

    def decide_nothing(self, until: tuple[float, int]) -> None:
        """The empty decisions of the earliest woken set whose turns come before ``until`` (the
        next replica on the clock): counted, and those replicas idle again."""
        w, lo, n, woken = self.woken[0]
        if w < until[0]:
            done = woken.remaining()
            heapq.heappop(self.woken)
        else:                              # a replica deciding at w too: only those before it
            if woken.order is None:
                woken.order, woken.members = sorted(woken.members), None
            q = bisect.bisect_left(woken.order, until[1], woken.p)
            done, woken.p = woken.order[woken.p:q], q
            if woken.p < len(woken.order):
                woken.lo = woken.order[woken.p]
                heapq.heapreplace(self.woken, (w, woken.lo, n, woken))
            else:
                heapq.heappop(self.woken)
        self.decisions += len(done)
        self.st.t = self.st.last_decision_s = w
        self.idle_lo = min(self.idle_lo, lo)       # the lowest of them
        if isinstance(done, set) and len(done) > len(self.idle):
            done.update(self.idle)
            self.idle = done
        else:
            self.idle.update(done)

    # -- the loop -----------------------------------------------------------------------
    def run(self) -> None:
        st, multi = self.st, self.p.rounds > 1
        clock, reps = self.clock, self.replicas
        while True:
            while clock and clock[0][2] != reps[clock[0][1]].stamp:
                heapq.heappop(clock)
            nxt = clock[0][:2] if clock else (math.inf, len(reps))
            woken = self.woken[0][:2] if self.woken and self.woken[0][:2] < nxt else None
            t = woken[0] if woken else nxt[0]
            if self.events and self.events[0][0] <= t + EPS:
                t, r = heapq.heappop(self.events)
                st.t = t
                self.publish(t, r)
                continue
            if woken:
                self.decide_nothing(nxt)
                continue
            if t == math.inf:
                if all(s == FINISHED for s in st.status):
                    return
                raise PolicyStalled(f"{self.policy.name}: engine idle at t={st.t:.3f}s with {st.waiting} requests "
                                    "waiting, and the policy admits none")
            rep = reps[heapq.heappop(clock)[1]]
            self.iterate(rep, multi)
            self.settle(rep)

    def iterate(self, rep: Replica, multi: bool) -> None:
        """One decision of ``rep``: apply its decode run, finishes, retractions and admissions,
        then plan its next decode run (or go idle)."""
        st, eng, policy = self.st, self.eng, self.policy
        if rep.chunk is not None:
            rep.steps += rep.chunk[3]
            rep.chunk = None
            self.busy.discard(rep.index)
        st.replica = rep
        st.t = rep.t
        self.finish_due(rep)
        st.last_decision_s = st.t
        self.decisions += 1
        stall = 0.0
        if self.on_demand and rep.running and rep.active_kv() + rep.running > eng.kv_capacity_tokens:
            stall += self.retract(rep)
        if rep.waiting:
            self.start_decision(rep)
            k, of = rep.index, st.replica_of
            for i in policy.decide(st):
                if st.status[i] != WAITING or of[i] != k:
                    continue
                if not self.fits(rep, i):
                    extra = self.preempt_for(rep, i) if eng.priority_preemption else None
                    if extra is None:
                        break
                    stall += extra
                stall += self.admit(rep, i)
        st.t += stall
        rep.t = st.t
        if self.due(rep):                 # zero-length responses end with their prefill, at this
            return                        # replica's next turn: in clock order with the others
        if rep.running == 0:
            wake = policy.next_wakeup(st) if rep.waiting else None
            if rep.waiting and (wake is None or wake <= st.t + EPS) and not multi and len(self.replicas) == 1:
                raise PolicyStalled(f"{policy.name}: engine idle at t={st.t:.3f}s with {st.waiting} requests "
                                    "waiting, and the policy admits none")
            rep.t = wake if wake is not None and wake > st.t + EPS else math.inf
            return
        wake = policy.next_wakeup(st)
        if wake is not None and wake <= st.t + EPS:
            return                        # a planned admission fell due during the prefill
        if self.events and (wake is None or self.events[0][0] < wake):
            wake = self.events[0][0]
        b, kv0 = rep.running, rep.active_kv()
        g = self.heap_top(rep) - rep.steps
        if self.on_demand:                # stop where the next step would not fit
            g = min(g, max(1, (eng.kv_capacity_tokens - kv0) // b))
        dt = decode_time(eng, b, kv0, g)
        if wake is not None and st.t + dt > wake + EPS:
            g = steps_until(eng, b, kv0, wake - st.t)
            dt = decode_time(eng, b, kv0, g)
        rep.chunk = (st.t, b, kv0, g)
        self.busy.add(rep.index)
        rep.t = st.t + dt

    def due(self, rep: Replica) -> bool:
        """Whether a running request of ``rep`` has made all its tokens already."""
        return rep.running > 0 and self.heap_top(rep) <= rep.steps

    def heap_top(self, rep: Replica) -> int:
        st, heap = self.st, rep.heap
        while st.status[heap[0][1]] != RUNNING or st.admissions[heap[0][1]] != heap[0][2]:
            heapq.heappop(heap)
        return heap[0][0]


def simulate(problem: RolloutProblem, policy: Policy) -> Schedule:
    """Run every round under ``policy``; returns the full schedule (re-check it with
    ``checker.check``)."""
    policy.reset(problem)
    e = _Engine(problem, policy)
    e.run()
    if problem.rounds == 1:
        updates = trainer_updates(problem, e.group_complete, policy.trainer, policy.planned_updates())
        end = updates[-1].end_s
        publishes = [(end, end + problem.trainer.publish_s)]
    else:
        updates = [u for r in e.updates for u in r]
        publishes = list(e.publishes)
    return Schedule(admit_s=e.first_admit_s, finish_s=e.finish_s, admissions=e.admissions, segments=e.segments,
                    group_complete_s=e.group_complete, updates=updates, weight_version=e.version_of,
                    publish_start_s=publishes[-1][0], publish_end_s=publishes[-1][1],
                    trainer_mode=policy.trainer, policy=policy.name, decisions=e.decisions,
                    retractions=e.retractions, publishes=publishes, staleness=e.staleness)

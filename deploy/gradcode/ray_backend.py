"""Distributed training on Ray (extra ``pipeplan[ray]``): one actor per worker holding its
partitions, dealt round-robin over the cluster's live nodes (each actor pinned to its node:
Ray's ``SPREAD`` is best effort and once left a node of three empty); the master sends each
step's weights, takes replies as they come (``ray.wait``) until it can decode (the first n-s,
or the first of every group), drops replies tagged with an older step, and updates with the
same ``protocol`` code as the simulated backend.

Straggling is injected: after computing, a worker waits its virtual reply time (computation +
delay drawn from the problem's straggler model) times ``time_scale``. Two ways:

* ``straggle="blocking"`` (default): the actor is synchronous (one call at a time) and sleeps,
  so a straggler really is busy: it cannot start step t+1's work before its late reply of step
  t is out, and that reply arrives while step t+1 runs. In virtual time each worker is a queue:
  its reply of step t comes at max(step start, end of its previous reply) + its reply time, and
  a step ends at its last used reply (``run.time_s``). Unlike the simulator's carry-over
  (``formulations.gradcode.queueing``), a busy worker skips no step: it works through every
  request in turn, so its backlog is the sum of its delays.
* ``straggle="sleep"``: an async actor that awaits the delay, so it is never busy; a step's
  reply times do not depend on earlier steps (the simulated backend's clock).

The record is exact and checkable (``RayRun``): per step, every reply the master took from Ray
in the order it took them (``arrivals``); the used ones are the first of them (``survivors``),
the others came late and were dropped (``late``, taken during a later step) or were still out
when the run ended (``still_out``, not waited for); ``dropped_replies`` counts both. Every reply
sent is in exactly one of survivors, late and still_out.

What the tests show (trace delays 1 s or more apart, ``time_scale`` 1, so every outcome is
exact): on a local cluster of three raylets (``ray.cluster_utils.Cluster``: a head and two
worker nodes on one machine) the 16 actors of PGC-CR (s = 2) are on all three nodes; the master
uses exactly the first 14 replies the queue model predicts, a straggler with no delay of its own
stays late while it works off its backlog, and when more than s workers are busy the master
waits for the first of them; the late replies of a step arrive, and are dropped, during a later
step; and the updates equal the simulated backend's replay of the same survivors bit for bit,
the late workers' stale pipelined stores included, because each call carries its step's weights
and a blocking actor runs its calls in order (tests/gradcode/test_gradcode_ray_cluster.py). The
same holds under the groups rule (PGC-FR on one node), and with sleeping stragglers a worker
late in one step replies on time in the next (tests/gradcode/test_gradcode_ray.py).

A local Ray started here runs without its dashboard (``include_dashboard=False``): nothing
listens on a port beyond what Ray needs between its own processes. Start Ray yourself
(``ray.init(include_dashboard=True)``, or ``ray.init(address=...)`` for a cluster) before
training to have the dashboard or more nodes; an already running Ray is used as it is.
"""
from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field

import numpy as np

from pipeplan.deploy.gradcode.data import digits
from pipeplan.deploy.gradcode.models import accuracy, make_model, mean_loss
from pipeplan.deploy.gradcode.protocol import Master, WorkerState
from pipeplan.deploy.gradcode.training import DEFAULT_LR, StepClock, TrainingRun
from pipeplan.formulations.gradcode.decoders import can_decode
from pipeplan.formulations.gradcode.gradient_code import GradientCode, code_from_dict
from pipeplan.formulations.gradcode.problem import GradCodeProblem

STRAGGLE = ("blocking", "sleep")


@dataclass
class RayRun(TrainingRun):
    """A Ray run's record. Per step: the replies the master took from Ray, in the order it took
    them (``arrivals``: the used ones, ``survivors``, first, then those it dropped during later
    steps, ``late``) and those still out when the run ended (``still_out``). ``nodes``: the Ray
    node of each worker's actor."""
    straggle: str = "blocking"
    arrivals: list[list[int]] = field(default_factory=list)
    late: list[list[int]] = field(default_factory=list)
    still_out: list[list[int]] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)


class GradientWorker:
    """The body of a blocking Ray actor (wrapped with ``ray.remote`` in ``train_ray``): it runs
    one call at a time, so while it sleeps out a delay the next step's call waits."""

    def __init__(self, index: int, code: dict, model: str, partitions: dict[int, tuple[np.ndarray, np.ndarray]],
                 total: int, features: int, classes: int):
        self.index = index
        self.state = WorkerState(index, code_from_dict(code))
        self.net = make_model(model, features, classes)
        self.partitions = partitions
        self.total = total

    def node(self) -> str:
        import ray
        return ray.get_runtime_context().get_node_id()

    def reply(self, t: int, params: np.ndarray) -> np.ndarray | None:
        def grad_of(j: int) -> np.ndarray:
            return self.net.loss_and_grad_sum(params, *self.partitions[j])[1] / self.total

        return self.state.reply(t, grad_of)

    def step(self, t: int, params: np.ndarray, sleep_s: float):
        reply = self.reply(t, params)
        time.sleep(sleep_s)
        return t, self.index, reply


class SleepingWorker(GradientWorker):
    """The body of a non-blocking actor (async): it awaits its delay, free for the next call."""

    async def step(self, t: int, params: np.ndarray, sleep_s: float):
        reply = self.reply(t, params)
        await asyncio.sleep(sleep_s)
        return t, self.index, reply


def train_ray(problem: GradCodeProblem, code: GradientCode, *, model: str = "softmax", steps: int = 50,
              lr: float | None = None, seed: int = 0, time_scale: float = 0.02, num_cpus: int = 2,
              straggle: str = "blocking", progress=None) -> RayRun:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if problem.n != code.n:
        raise ValueError(f"problem has n = {problem.n}, code has n = {code.n}")
    if straggle not in STRAGGLE:
        raise ValueError(f"straggle must be one of {STRAGGLE}, got {straggle!r}")
    if problem.timing_dict():
        raise ValueError("the timing options (carry-over, link, decoding) are for the simulated backend: "
                         "Ray's actors and messages take their own time")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    data = digits()
    parts = data.partitions(code.k)
    net = make_model(model, data.X.shape[1], data.classes)
    lr = DEFAULT_LR[model] if lr is None else lr
    w = net.init(seed)
    run = RayRun(scheme=code.scheme, backend="ray", model=model, n=code.n, s=code.s, lr=lr, seed=seed,
                 loss=[mean_loss(net, w, data.X, data.y)], time_s=[0.0], straggle=straggle)
    body = GradientWorker if straggle == "blocking" else SleepingWorker
    actor_class = ray.remote(num_cpus=0)(body)
    nodes = sorted(node["NodeID"] for node in ray.nodes() if node["Alive"])
    actors = [actor_class.options(scheduling_strategy=NodeAffinitySchedulingStrategy(nodes[i % len(nodes)], soft=False))
              .remote(i, code.to_dict(), model, {int(j): parts[j] for j in np.flatnonzero(code.support[i])},
                      len(data.y), data.X.shape[1], data.classes) for i in range(code.n)]
    master = Master(code, lr)
    clock = StepClock(problem, code, steps, seed)
    free_at = np.zeros(code.n)     # virtual time each worker is done with its calls so far
    out: dict = {}                 # replies not taken yet: ref -> (step, worker)
    try:
        run.nodes = ray.get([a.node.remote() for a in actors])   # every actor started before the clock
        began = time.perf_counter()
        for t in range(steps):
            T = clock.reply_times(t)   # each call's own reply time (computation + delay)
            weights = ray.put(w)
            for i in np.flatnonzero(np.isfinite(T)):
                out[actors[i].step.remote(t, weights, float(T[i] * time_scale))] = (t, int(i))
            if straggle == "blocking":   # the step's replies in virtual time: a busy worker starts late
                now = run.time_s[-1]
                T = np.maximum(free_at - now, 0.0) + T
                free_at = np.where(np.isfinite(T), now + T, free_at)
            run.arrivals.append([])
            run.late.append([])
            arrived: list[int] = []
            replies: dict[int, np.ndarray] = {}
            while not can_decode(code, arrived):
                [ref], _ = ray.wait(list(out), num_returns=1)
                tag, i, reply = ray.get(ref)
                del out[ref]
                run.arrivals[tag].append(i)
                if tag != t:
                    run.late[tag].append(i)
                    run.dropped_replies += 1
                    continue
                arrived.append(i)
                if reply is not None:
                    replies[i] = reply
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):   # diverging: Diverged
                w = master.step(w, arrived, replies)
                run.record_step(arrived, T, mean_loss(net, w, data.X, data.y))
            if progress:
                progress(t + 1, steps)
        run.wall_s = time.perf_counter() - began
        run.still_out = [[] for _ in range(steps)]
        for tag, i in out.values():    # every reply still out is late; not waited for
            run.still_out[tag].append(i)
        run.dropped_replies += len(out)
    finally:
        for a in actors:
            ray.kill(a)
        if started:
            ray.shutdown()
    run.test_accuracy = accuracy(net, w, data.X_test, data.y_test)
    return run

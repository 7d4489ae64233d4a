"""Distributed training on Ray (extra ``pipeplan[ray]``): one actor per worker holding its
partitions; the master sends each step's weights, takes replies as they come (``ray.wait``)
until it can decode (the first n-s, or the first of every group), drops replies tagged with an
older step, and updates with the same ``protocol`` code as the simulated backend.

Straggling is injected: a worker sleeps its virtual reply time (computation + delay drawn from
the problem's straggler model) times ``time_scale`` after computing, without blocking the
actor (an async actor), so a late reply of step t arrives while step t+1 runs and is dropped.

A local Ray started here runs without its dashboard (``include_dashboard=False``): nothing
listens on a port beyond what Ray needs between its own processes. Start Ray yourself
(``ray.init(include_dashboard=True)``) before training to have the dashboard; an already
running Ray is used as it is.
"""
from __future__ import annotations

import asyncio
import os
import time

import numpy as np

from pipeplan.deploy.gradcode.data import digits
from pipeplan.deploy.gradcode.models import accuracy, make_model, mean_loss
from pipeplan.deploy.gradcode.protocol import Master, WorkerState
from pipeplan.deploy.gradcode.training import DEFAULT_LR, StepClock, TrainingRun
from pipeplan.formulations.gradcode.decoders import can_decode
from pipeplan.formulations.gradcode.gradient_code import GradientCode, code_from_dict
from pipeplan.formulations.gradcode.problem import GradCodeProblem


class GradientWorker:
    """The body of a Ray actor (wrapped with ``ray.remote`` in ``train_ray``)."""

    def __init__(self, index: int, code: dict, model: str, partitions: dict[int, tuple[np.ndarray, np.ndarray]],
                 total: int, features: int, classes: int):
        self.index = index
        self.state = WorkerState(index, code_from_dict(code))
        self.net = make_model(model, features, classes)
        self.partitions = partitions
        self.total = total

    async def step(self, t: int, params: np.ndarray, sleep_s: float):
        def grad_of(j: int) -> np.ndarray:
            return self.net.loss_and_grad_sum(params, *self.partitions[j])[1] / self.total

        reply = self.state.reply(t, grad_of)
        await asyncio.sleep(sleep_s)
        return t, self.index, reply


def train_ray(problem: GradCodeProblem, code: GradientCode, *, model: str = "softmax", steps: int = 50,
              lr: float | None = None, seed: int = 0, time_scale: float = 0.02, num_cpus: int = 2,
              progress=None) -> TrainingRun:
    import ray

    if problem.n != code.n:
        raise ValueError(f"problem has n = {problem.n}, code has n = {code.n}")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    data = digits()
    parts = data.partitions(code.k)
    net = make_model(model, data.X.shape[1], data.classes)
    lr = DEFAULT_LR[model] if lr is None else lr
    w = net.init(seed)
    run = TrainingRun(code.scheme, "ray", model, code.n, code.s, lr, seed,
                      loss=[mean_loss(net, w, data.X, data.y)], time_s=[0.0])
    actor_class = ray.remote(num_cpus=0)(GradientWorker)
    actors = [actor_class.remote(i, code.to_dict(), model, {int(j): parts[j] for j in np.flatnonzero(code.support[i])},
                                 len(data.y), data.X.shape[1], data.classes) for i in range(code.n)]
    master = Master(code, lr)
    clock = StepClock(problem, code, steps, seed)
    pending: list = []
    began = time.perf_counter()
    try:
        for t in range(steps):
            T = clock.reply_times(t)
            weights = ray.put(w)
            pending += [actors[i].step.remote(t, weights, float(T[i] * time_scale))
                        for i in range(code.n) if np.isfinite(T[i])]
            arrived: list[int] = []
            replies: dict[int, np.ndarray] = {}
            while not can_decode(code, arrived):
                done, pending = ray.wait(pending, num_returns=1)
                tag, i, reply = ray.get(done[0])
                if tag != t:
                    run.dropped_replies += 1
                    continue
                arrived.append(i)
                if reply is not None:
                    replies[i] = reply
            w = master.step(w, arrived, replies)
            run.record_step(arrived, T, mean_loss(net, w, data.X, data.y))
            if progress:
                progress(t + 1, steps)
        run.wall_s = time.perf_counter() - began
        run.dropped_replies += len(ray.get(pending))   # every reply still out is late
    finally:
        for a in actors:
            ray.kill(a)
        if started:
            ray.shutdown()
    run.test_accuracy = accuracy(net, w, data.X_test, data.y_test)
    return run

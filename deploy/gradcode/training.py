"""A training run's record and the simulated-time backend.

Time is virtual: a step lasts until the master can decode (the simulator's rule, on delays drawn
from the problem's straggler model); the gradients, the stale stores and the updates are real.
In the first step of a pipelined scheme every worker computes all its partitions (to fill its
store), and that step is charged that much computation.

The problem's timing options apply as in the simulator (``formulations.gradcode.queueing``):
with carry-over only the workers that really work on a step compute (and, pipelined, refresh
their stores); a worker that skips a step leaves its scheduled partition's gradient to age. A
problem that sets a link but no gradient size is charged the trained model's size, its
parameter count x 8 bytes (float64).
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from pipeplan.deploy.gradcode.data import digits
from pipeplan.deploy.gradcode.models import accuracy, make_model, mean_loss
from pipeplan.deploy.gradcode.protocol import Master, WorkerState
from pipeplan.formulations.gradcode.delays import DelaySampler
from pipeplan.formulations.gradcode.gradient_code import GradientCode
from pipeplan.formulations.gradcode.problem import GradCodeProblem
from pipeplan.formulations.gradcode.queueing import WorkerQueues, step_costs
from pipeplan.formulations.gradcode.simulator import compute_times

DEFAULT_LR = {"softmax": 2.0, "mlp": 1.0}


class Diverged(ArithmeticError):
    """The training loss left the finite numbers (a learning rate far too large: --lr 1e308 had
    trained to a NaN loss with exit 0); the run stops at that step. ``survivors``: the replies
    each step up to and including that one used, so a Ray run's divergence can be replayed."""

    def __init__(self, step: int, loss: float, lr: float, survivors: list[list[int]]):
        self.step, self.loss, self.lr, self.survivors = step, loss, lr, survivors
        super().__init__(f"training diverged at step {step}: the loss is {loss} (lr {lr:g})")


@dataclass
class TrainingRun:
    scheme: str
    backend: str
    model: str
    n: int
    s: int
    lr: float
    seed: int
    loss: list[float] = field(default_factory=list)        # training loss before step 0, after each step
    time_s: list[float] = field(default_factory=list)      # virtual time at the same points
    survivors: list[list[int]] = field(default_factory=list)
    test_accuracy: float = 0.0
    wall_s: float = 0.0
    dropped_replies: int = 0                               # late replies the master discarded (Ray)
    skipped_work: int = 0                                  # steps a busy worker skipped (carry-over)

    def record_step(self, survivors: list[int], reply_times: np.ndarray, loss: float,
                    step_s: float | None = None) -> None:
        """One finished step: who was used, how long it took (``step_s``, else its slowest used
        reply), the loss."""
        if not math.isfinite(loss):
            raise Diverged(len(self.loss), loss, self.lr, self.survivors + [survivors])
        self.survivors.append(survivors)
        if step_s is None:
            step_s = float(reply_times[survivors].max())
        self.time_s.append(self.time_s[-1] + step_s)
        self.loss.append(loss)

    def time_to_loss(self, target: float) -> float | None:
        """Virtual time when the training loss first reaches ``target`` (None: never)."""
        hit = np.flatnonzero(np.asarray(self.loss) <= target)
        return float(self.time_s[hit[0]]) if hit.size else None

    def steps_to_loss(self, target: float) -> int | None:
        hit = np.flatnonzero(np.asarray(self.loss) <= target)
        return int(hit[0]) if hit.size else None

    def to_dict(self) -> dict:
        return asdict(self)


class StepClock:
    """Reply times of every worker in each step. The delays of all ``steps`` are drawn at once,
    as ``simulate_step_times`` draws them, so both see the same delays for the same seed."""

    def __init__(self, problem: GradCodeProblem, code: GradientCode, steps: int, seed: int):
        self.base = compute_times(problem, code)
        self.first = self.base
        if code.pipelined:   # the filling step computes every stored partition
            self.first = np.where(np.isfinite(self.base), self.base * code.support.sum(axis=1), np.inf)
        sampler = DelaySampler(problem.straggler, problem.straggle_prob, np.random.default_rng(seed))
        self.delays = sampler.next(steps)

    def compute(self, t: int) -> np.ndarray:
        """Seconds of computation of every worker in step t."""
        return self.first if t == 0 else self.base

    def reply_times(self, t: int) -> np.ndarray:
        return self.compute(t) + self.delays[t]


def arrival_order(T: np.ndarray) -> np.ndarray:
    order = np.argsort(T, kind="stable")
    return order[np.isfinite(T[order])]


def train_simulated(problem: GradCodeProblem, code: GradientCode, *, model: str = "softmax", steps: int = 200,
                    lr: float | None = None, seed: int = 0, replay: list[list[int]] | None = None,
                    progress=None) -> TrainingRun:
    """Train with the code on the digits; ``replay`` forces the survivors of every step (to
    re-run a Ray run's steps exactly, with independent steps and the reply times as time),
    otherwise they come from the straggler model and the problem's timing."""
    if problem.n != code.n:
        raise ValueError(f"problem has n = {problem.n}, code has n = {code.n}")
    if replay is not None and problem.timing_dict():
        raise ValueError("replay re-runs independent steps: the problem must not set timing options")
    data = digits()
    parts = data.partitions(code.k)
    N = len(data.y)
    net = make_model(model, data.X.shape[1], data.classes)
    lr = DEFAULT_LR[model] if lr is None else lr
    w = net.init(seed)
    workers = [WorkerState(i, code) for i in range(code.n)]
    master = Master(code, lr)
    clock = StepClock(problem, code, steps, seed)
    queues = WorkerQueues(problem, code, step_costs(problem, code, problem.gradient_mb or net.size * 8 / 1e6))
    run = TrainingRun(code.scheme, "sim", model, code.n, code.s, lr, seed,
                      loss=[mean_loss(net, w, data.X, data.y)], time_s=[0.0])
    began = time.perf_counter()
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):   # a diverging run: Diverged, no warnings
        for t in range(steps):
            timing = queues.step(clock.compute(t), clock.delays[t])
            if replay is not None:
                survivors, step_s = [int(x) for x in replay[t]], None
            else:
                order = arrival_order(timing.arrival)
                survivors, step_s = [int(x) for x in order[:master.needed(order)]], timing.duration
            cache: dict[int, np.ndarray] = {}

            def grad_of(j: int, w=w) -> np.ndarray:
                if j not in cache:
                    cache[j] = net.loss_and_grad_sum(w, *parts[j])[1] / N
                return cache[j]

            replies = {i: r for i, wk in enumerate(workers)
                       if timing.working[i] and (r := wk.reply(t, grad_of)) is not None}
            run.skipped_work += int(code.n - timing.working.sum())
            w = master.step(w, survivors, replies)
            run.record_step(survivors, clock.reply_times(t), mean_loss(net, w, data.X, data.y), step_s)
            if progress:
                progress(t + 1, steps)
    run.wall_s = time.perf_counter() - began
    run.test_accuracy = accuracy(net, w, data.X_test, data.y_test)
    return run

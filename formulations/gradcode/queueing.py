"""Step timing with workers as queues, communication and decoding (virtual time).

One step t, times measured from its start (the end of step t-1):

1. Broadcast: the master sends the weights w_t (as large as a gradient) to every worker; they
   arrive at ``broadcast_s = 2 (n-1)/n x gradient_mb / link_mb_per_s``, the long-message
   broadcast of MPICH (scatter, then allgather, after van de Geijn; Thakur, Rabenseifner and
   Gropp, "Optimization of collective communication operations in MPICH", IJHPCA 19(1), 2005:
   2 (p-1)/p n beta, latency terms left out).
2. Work: worker i starts the step when it is free, ``start_i = max(broadcast_s, free_i)``,
   computes its load (``c_i`` s) and stays busy for its straggler delay ``d_i`` too; its reply
   is ready at ``start_i + c_i + d_i`` and it is free again then (its network interface sends
   while it goes on).
3. Replies (incast): the master's ingress link is one shared FIFO link; a reply occupies it for
   ``reply_s = gradient_mb / link_mb_per_s``, in the order the replies are ready:
   ``arrival = max(ready, link free) + reply_s``. FIFO order is readiness order, so a reply the
   master will not use never delays one it uses within a step. Replies ready at the same instant
   (common: the workers that do not straggle) go in worker-index order; for FR, whose groups are
   consecutive workers, that is the worst order (the master waits for about n - s transfers, as
   the count rule does, rather than one per group).
4. Decode: the master stops by the decoder's rule (``simulator.StepRule``) on the arrival times
   and then decodes for ``decode_s = decode_s_per_reply x replies combined`` (one per group, or
   ``wait``); the step ends then. The least-squares solve is not charged: the master caches a
   decoding vector per survivor set (``protocol.Master``), and one solve took 20 us for CR with
   n = 12, s = 3 (measured here, numpy, 2026-12-02), against 6.9 ms to add one float32
   ResNet-18-size reply (11.7 M values) into the sum.

Carry-over (``problem.carry_over``): nothing is cancelled at a step's end; each worker's busy
time and the link's backlog carry into the next steps. A worker that becomes free only after
step t was decoded (``start_i >= end``) skips step t: it does no work for it (in pipelined
schemes the partition scheduled for it in step t is not refreshed) and takes the next request,
so queues stay bounded and a slow worker catches up. A reply ready only after its step was
decoded is not sent (the next request tells the worker its step is over).

Without carry-over every step starts afresh: all workers free, the link empty, late work costs
no time after the step (and, as in the historical model, still counts for a pipelined worker's
store). With no communication and no decoding time this is exactly the historical model of
independent steps.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeplan.core.errors import InputError
from pipeplan.formulations.gradcode.gradient_code import GradientCode
from pipeplan.formulations.gradcode.problem import GradCodeProblem
from pipeplan.formulations.gradcode.stopping import StepRule


@dataclass(frozen=True)
class StepCosts:
    broadcast_s: float
    reply_s: float
    decode_s: float


def replies_combined(code: GradientCode) -> int:
    """Replies the master adds into the decoded gradient: one per group, or the ``wait`` first."""
    return len(code.groups) if code.decoder == "groups" else code.wait


def step_costs(problem: GradCodeProblem, code: GradientCode, gradient_mb: float | None = None) -> StepCosts:
    """The per-step communication and decoding costs; ``gradient_mb`` overrides the problem's
    (the trainer passes its model's size when the problem leaves it 0)."""
    mb = problem.gradient_mb if gradient_mb is None else gradient_mb
    if problem.link_mb_per_s > 0 and mb <= 0:
        raise InputError(problem.source or problem.name, "gradient_mb",
                         "link_mb_per_s needs the gradient size (MB) to charge communication")
    reply = mb / problem.link_mb_per_s if problem.link_mb_per_s > 0 else 0.0
    return StepCosts(broadcast_s=2.0 * (problem.n - 1) / problem.n * reply, reply_s=reply,
                     decode_s=problem.decode_s_per_reply * replies_combined(code))


def fifo_arrivals(ready: np.ndarray, reply_s: float, link_free) -> np.ndarray:
    """Arrival times (steps, n) of replies ready at ``ready`` through one FIFO link that takes
    ``reply_s`` per reply and is busy until ``link_free`` (scalar or one per row). In readiness
    order a_k = max(r_k, a_{k-1}) + reply_s, i.e. a_k = (k+1) reply_s + max(link_free,
    max_{j<=k} (r_j - j reply_s)), a running maximum."""
    if reply_s == 0:
        return ready
    order = np.argsort(ready, axis=1, kind="stable")
    rows = np.arange(ready.shape[0])[:, None]
    k = np.arange(ready.shape[1]) * reply_s
    start = np.maximum(ready[rows, order] - k, np.reshape(np.asarray(link_free, dtype=np.float64), (-1, 1)))
    out = np.empty_like(ready)
    out[rows, order] = np.maximum.accumulate(start, axis=1) + (k + reply_s)
    return out


@dataclass(frozen=True)
class StepTiming:
    arrival: np.ndarray     # (n,) when each reply reaches the master (inf: not sent, or never)
    working: np.ndarray     # (n,) bool: the worker works on this step
    duration: float         # seconds from the step's start to the end of decoding


class WorkerQueues:
    """The timing of consecutive steps, one at a time (the state is each worker's busy time and
    the link's backlog, relative to the current step's start)."""

    def __init__(self, problem: GradCodeProblem, code: GradientCode, costs: StepCosts):
        self.rule = StepRule(code)
        self.costs = costs
        self.carry_over = problem.carry_over
        self.free = np.zeros(code.n)
        self.link = 0.0

    def step(self, compute: np.ndarray, delays: np.ndarray) -> StepTiming:
        """The next step, with computation ``compute`` and straggler ``delays`` per worker."""
        c = self.costs
        start = np.maximum(self.free, c.broadcast_s)
        ready = start + compute + delays
        arrival = fifo_arrivals(ready[None, :], c.reply_s, self.link)[0]
        end = float(self.rule(arrival[None, :])[0]) + c.decode_s
        working = start < end
        sent = ready <= end
        if self.carry_over:
            self.free = np.maximum(np.where(working, ready, self.free) - end, 0.0)
            if sent.any():
                self.link = max(self.link, float(arrival[sent].max()))
            self.link = max(self.link - end, 0.0)
        return StepTiming(arrival=np.where(sent, arrival, np.inf), working=working, duration=end)

"""Virtual-time simulation of training steps (timing only), vectorised over steps and workers.

In a step worker i replies after ``load_i * partition_time / speed_i + delay_i`` seconds (load:
partitions it computes per step; delay from the straggler model). The step ends when the master
can decode (``decoders.needed_replies``): at the first reply of every group (groups decoder) or
at the ``wait``-th reply (count rule). Every step starts when the previous one ends; late replies
are dropped.

The problem's timing options (``queueing``) add the weight broadcast, the replies' FIFO link and
the decoding time; without carry-over the steps stay independent and are simulated vectorised
over steps and workers. With carry-over (workers as queues) a step depends on the ones before:
one step at a time, vectorised over workers.
"""
from __future__ import annotations

import numpy as np

from pipeplan.formulations.gradcode.delays import DelaySampler
from pipeplan.formulations.gradcode.gradient_code import GradientCode
from pipeplan.formulations.gradcode.problem import GradCodeProblem
from pipeplan.formulations.gradcode.queueing import WorkerQueues, fifo_arrivals, step_costs
from pipeplan.formulations.gradcode.stopping import StepRule


def compute_times(problem: GradCodeProblem, code: GradientCode) -> np.ndarray:
    """Seconds of computation per step for each worker (inf: the worker never replies)."""
    loads = code.loads().astype(np.float64)
    c = problem.partition_time_s / np.asarray(problem.speeds, dtype=np.float64)
    return np.where(loads > 0, loads * c, np.inf)


def simulate_step_times(problem: GradCodeProblem, code: GradientCode, steps: int, *, seed: int = 0,
                        chunk: int = 16_384) -> np.ndarray:
    """Duration of each of ``steps`` steps (seconds)."""
    rule = StepRule(code)
    base = compute_times(problem, code)
    costs = step_costs(problem, code)
    queues = WorkerQueues(problem, code, costs) if problem.carry_over else None
    sampler = DelaySampler(problem.straggler, problem.straggle_prob, np.random.default_rng(seed))
    out = np.empty(steps)
    for lo in range(0, steps, chunk):
        m = min(chunk, steps - lo)
        reply = sampler.next(m)
        if queues is not None:
            for t in range(m):
                out[lo + t] = queues.step(base, reply[t]).duration
            continue
        reply += base
        reply += costs.broadcast_s
        out[lo:lo + m] = rule(fifo_arrivals(reply, costs.reply_s, 0.0), scratch=True) + costs.decode_s
    return out


def worst_case_step_time(problem: GradCodeProblem, code: GradientCode) -> float:
    """Step time when an adversary picks s workers that never reply (no random delays): the
    (s+1)-th fastest member of the slowest group, or the (s + wait)-th fastest worker. Computation
    only: the problem's communication and decoding times are not charged here."""
    c = compute_times(problem, code)
    s = code.s
    if code.decoder == "groups":
        worst = 0.0
        for members in code.groups:
            times = np.sort(c[list(members)])
            worst = max(worst, float(times[s]) if times.size > s else np.inf)
        return worst
    order = np.sort(c)
    return float(order[s + code.wait - 1]) if s + code.wait <= code.n else np.inf

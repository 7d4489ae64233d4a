"""The coverage bound: a lower bound on the step time of EVERY exact gradient code of a problem.

Two facts hold for any code that passes the checker (``checker.violations``) and decodes exactly:

1. every partition is stored on at least s+1 workers (else s stragglers can remove all its
   holders), so the loads l_i = |support_i| satisfy sum_i l_i >= (s+1) k, with
   l_i <= min(capacity_i, k) (pipelined: l_i <= s+1 too, since a worker computes one partition
   a step and must refresh each partition it encodes within s+1 steps: staleness <= s);
2. whatever the stopping rule, the master cannot decode before the replies that arrived cover
   every partition (a partition outside their supports has weight 0 in any combination of
   them), so a step lasts at least the first time t at which sum of l_i over the workers that
   replied by t reaches k.

Worker i replies at l_i c_i + D_i (c_i = partition_time / speed_i, D_i its delay in the step;
pipelined: c_i + D_i, one partition computed per step, while its reply still encodes its l_i
stored partitions). Minimising the scenario average of fact 2 over integer loads that satisfy
fact 1 therefore bounds from below the scenario average of every code on the same delays; the
solver ``general`` does that minimisation (a MILP), and ``coverage_step_times`` is its exact
objective for given loads (the check of its answer and of the tests).

The bound ignores that the replies must also *decode*, not just cover: it is attained only by
codes whose first covering replies always decode (disjoint supports among the early replies).

``relaxed_bound`` lets the loads differ per scenario and drops sum l_i >= (s+1) k: a
relaxation of the MILP, so weaker, but closed-form: the fallback when the MILP finds no bound
in time.
"""
from __future__ import annotations

import numpy as np

from pipeplan.formulations.gradcode.problem import GradCodeProblem


def load_limits(problem: GradCodeProblem) -> np.ndarray:
    """The most partitions each worker can store in any code (fact 1's per-worker caps)."""
    top = problem.s + 1 if problem.pipelined else problem.k
    return np.minimum(np.asarray(problem.capacity, dtype=np.int64), min(top, problem.k))


def reply_times(problem: GradCodeProblem, loads, scenarios: np.ndarray) -> np.ndarray:
    """(R, n) reply times of workers with ``loads`` under delays ``scenarios`` (inf: idle)."""
    loads = np.asarray(loads, dtype=np.float64)
    c = problem.partition_time_s / np.asarray(problem.speeds, dtype=np.float64)
    work = c if problem.pipelined else loads * c
    return np.where(loads > 0, work, np.inf) + scenarios


def coverage_step_times(problem: GradCodeProblem, loads, scenarios: np.ndarray) -> np.ndarray:
    """Per scenario, the first time the replies that arrived hold >= k partitions (inf when all
    of them hold fewer): a lower bound on the step time of every code with these loads."""
    loads = np.asarray(loads, dtype=np.int64)
    T = reply_times(problem, loads, scenarios)
    order = np.argsort(T, axis=1, kind="stable")
    held = np.cumsum(loads[order], axis=1)
    reached = held >= problem.k
    first = np.argmax(reached, axis=1)
    out = np.take_along_axis(T, order, axis=1)[np.arange(T.shape[0]), first]
    return np.where(reached.any(axis=1), out, np.inf)


def admissible_loads(problem: GradCodeProblem, loads) -> bool:
    """Whether ``loads`` satisfy fact 1 (the loads of some checker-valid code may, at most)."""
    loads = np.asarray(loads, dtype=np.int64)
    return bool((loads >= 0).all() and (loads <= load_limits(problem)).all()
                and loads.sum() >= (problem.s + 1) * problem.k)


def relaxed_bound(problem: GradCodeProblem, scenarios: np.ndarray) -> float:
    """Mean over scenarios of the best coverage time with loads chosen for that scenario alone:
    a bound below the MILP's. Without pipelining a worker can hold v partitions by time
    v c_i + D_i, so the earliest time k partitions can be held is the k-th smallest of all
    those times (v = 1..l_max); pipelined, workers bring their l_max partitions at c_i + D_i."""
    L = load_limits(problem)
    c = problem.partition_time_s / np.asarray(problem.speeds, dtype=np.float64)
    if problem.pipelined:
        T = c + scenarios
        order = np.argsort(T, axis=1, kind="stable")
        first = np.argmax(np.cumsum(L[order], axis=1) >= problem.k, axis=1)
        return float(np.take_along_axis(T, order, axis=1)[np.arange(T.shape[0]), first].mean())
    times = np.concatenate([v * c[i] + scenarios[:, [i]] for i in range(problem.n) for v in range(1, int(L[i]) + 1)],
                           axis=1)
    return float(np.partition(times, problem.k - 1, axis=1)[:, problem.k - 1].mean())

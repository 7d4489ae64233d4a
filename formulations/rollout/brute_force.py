"""The optimum of a tiny round by enumeration, to test the exact solver against: every order of
the requests through the serial schedule generator (which reaches an optimal schedule for the
trainer's finish, a regular objective), each with the trainer's best order of updates."""
from __future__ import annotations

import itertools
import math

from pipeplan.formulations.rollout.fixed_model import best_trainer, completions, fixed_model, serial_schedule
from pipeplan.formulations.rollout.problem import RolloutProblem

MAX_REQUESTS = 8


def optimum(problem: RolloutProblem) -> tuple[float, list[float], list[list[int]]]:
    """(least train end, request start times, updates) on a linear engine."""
    if not problem.engine.linear:
        raise ValueError("brute force needs a linear engine (reserve mode, c1 = c2 = 0, no prefill)")
    if problem.n_requests > MAX_REQUESTS or problem.R > 5:
        raise ValueError(f"brute force is for at most {MAX_REQUESTS} requests and 5 groups")
    m = fixed_model(problem)
    best = (math.inf, [], [])
    seen = set()
    for order in itertools.permutations(range(problem.n_requests)):
        starts = tuple(serial_schedule(m, order))
        if starts in seen:
            continue
        seen.add(starts)
        end, batches = best_trainer(problem, completions(problem, m, list(starts)))
        if end < best[0] - 1e-12:
            best = (end, list(starts), batches)
    return best

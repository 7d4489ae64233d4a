"""A lower bound on the train end that holds for every engine configuration (replicas, shared
prefixes) and any number of rounds, for problems outside the analytic engine bound's
assumptions (``bounds.py``: one engine, every request prefilling its own prompt, one round).

The trainer must run every update (at least the least-time updates that hold all groups) and
every publish but the last one (the trainer is busy publishing before the next round trains);
its first update cannot start before some group is complete, and no group completes before
its slowest request could finish alone on a replica (``checker.min_request_time``).
"""
from __future__ import annotations

from pipeplan.formulations.rollout.bounds import least_update_time
from pipeplan.formulations.rollout.checker import min_request_time
from pipeplan.formulations.rollout.problem import RolloutProblem


def any_engine_lower_bound(problem: RolloutProblem) -> float:
    first = min(max(min_request_time(problem, i) for i in problem.group_requests(g)) for g in range(problem.R))
    updates = least_update_time(problem, len(problem.update_sizes()), problem.R)
    return first + updates + (problem.rounds - 1) * problem.trainer.publish_s

"""The online admission policies as registered solvers of the rollout problem. Each runs the
simulator with its policy; the result's figures are the simulator's, checked by the checker."""
from __future__ import annotations

from pipeplan.core.registry import register
from pipeplan.formulations.rollout.simulator import simulate
from pipeplan.solvers.rollout.common import scored_result
from pipeplan.solvers.rollout.policies import (
    CgpPolicy,
    DeadlinePolicy,
    FgdPolicy,
    FifoPolicy,
    LongestFirstPolicy,
    ShortestFirstPolicy,
    SyncPolicy,
)

POLICIES = {
    "sync": (SyncPolicy, "Slime-style synchronous: whole round (arrival order), then train in prompt order"),
    "cgp": (CgpPolicy, "complete-group pipelining: arrival-order engine, complete groups to the trainer FIFO"),
    "fifo": (FifoPolicy, "request-level FIFO in prompt order, with CGP"),
    "fgd-hard": (lambda frontier=2: FgdPolicy(frontier, "hard"), "CGP + frontier-group dispatch, hard gate (F_w groups)"),
    "fgd-soft": (lambda frontier=2: FgdPolicy(frontier, "soft"), "CGP + frontier-group dispatch, frontier first then backfill"),
    "longest-first": (LongestFirstPolicy, "oracle: longest known response first, with CGP"),
    "shortest-first": (ShortestFirstPolicy, "oracle: shortest known response first, with CGP"),
    "deadline": (DeadlinePolicy, "oracle: least laxity to the trainer's projected need of each group, with CGP"),
}
TAKES_FRONTIER = ("fgd-hard", "fgd-soft")


def make_policy(name: str, **params):
    factory, _ = POLICIES[name]
    return factory(**params)


def _register(name: str, description: str):
    """Register policy ``name``; only the frontier policies declare ``frontier`` (F_w groups)."""
    def run(problem, params: dict):
        return scored_result(problem, name, simulate(problem, make_policy(name, **params)), params=params)

    if name in TAKES_FRONTIER:
        def solve(problem, *, frontier: int = 2):
            return run(problem, {"frontier": frontier})
    else:
        def solve(problem):
            return run(problem, {})
    register("rollout", name, description=description)(solve)


for _name, (_factory, _description) in POLICIES.items():
    _register(_name, _description)

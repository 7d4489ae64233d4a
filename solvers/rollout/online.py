"""The online admission policies as registered solvers of the rollout problem. Each runs the
simulator with its policy; the result's figures are the simulator's, checked by the checker.

Every policy takes ``staleness`` (default 0): with several rounds, how many weight versions a
request may lag behind its round. 0 is the paper's on-policy pipeline (round r waits for the
weights trained on round r - 1), 1 is one-step off-policy overlap (slime / verl async: round
r + 1 is generated while round r trains), larger values are AReaL's bounded staleness eta."""
from __future__ import annotations

from pipeplan.core.deadline import Deadline
from pipeplan.core.errors import InputError
from pipeplan.core.registry import register
from pipeplan.core.result import Termination
from pipeplan.formulations.rollout.problem import RolloutProblem
from pipeplan.formulations.rollout.simulator import simulate
from pipeplan.solvers.rollout.common import scored_result
from pipeplan.solvers.rollout.policies import (
    CgpPolicy,
    DeadlinePolicy,
    DeferPolicy,
    FgdPolicy,
    FifoPolicy,
    LongestFirstPolicy,
    ShortestFirstPolicy,
    SlackPolicy,
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
    "slack": (SlackPolicy, "oracle: by group's longest response - alpha x own response (alpha 0.5), with CGP"),
    "defer": (DeferPolicy, "oracle: slack's order, the cheapest groups of each round held to its end "
                           "(how many: chosen per round by simulating it), with CGP"),
}
TAKES_FRONTIER = ("fgd-hard", "fgd-soft")


def make_policy(name: str, staleness: int = 0, **params):
    """Policy ``name``; a staleness that is not a whole number >= 0 raises InputError."""
    if isinstance(staleness, bool) or not isinstance(staleness, int) or staleness < 0:
        raise InputError(name, "staleness", f"expected a whole number of weight versions >= 0, got {staleness!r}")
    factory, _ = POLICIES[name]
    policy = factory(**params)
    policy.staleness = staleness
    return policy


def _register(name: str, description: str):
    """Register policy ``name``; the frontier policies declare ``frontier`` (F_w groups), ``slack``
    its ``alpha``, ``defer`` its ``held`` groups (the count it chose is ``params["chosen"]``),
    ``alpha`` and ``time_limit`` (for choosing), ``deadline`` its ``time_limit`` (past it, CGP's
    order: termination ``time_limit``), every policy ``staleness``."""
    def run(problem, params: dict):
        policy = make_policy(name, **params)
        schedule = simulate(problem, policy)
        cut = policy.cut_note()
        stopped = {} if cut is None else {"termination": Termination.TIME_LIMIT, "stopped_by": "time", "message": cut}
        return scored_result(problem, name, schedule, params={**params, **policy.settled()}, **stopped)

    if name in TAKES_FRONTIER:
        def solve(problem, *, frontier: int = 2, staleness: int = 0):
            return run(problem, {"frontier": frontier, **({"staleness": staleness} if staleness else {})})
    elif name == "slack":
        def solve(problem, *, alpha: float = 0.5, staleness: int = 0):
            return run(problem, {"alpha": alpha, **({"staleness": staleness} if staleness else {})})
    elif name == "deadline":
        def solve(problem, *, staleness: int = 0, time_limit: float | None = None):
            return run(problem, {"time_limit": time_limit, **({"staleness": staleness} if staleness else {})})
    elif name == "defer":
        def solve(problem, *, held: int | str = "auto", alpha: float = 0.5, staleness: int = 0,
                  time_limit: float | None = None):
            return run(problem, {"held": held, "alpha": alpha, "time_limit": time_limit,
                                 **({"staleness": staleness} if staleness else {})})
    else:
        def solve(problem, *, staleness: int = 0):
            return run(problem, {"staleness": staleness} if staleness else {})
    register("rollout", name, description=description)(solve)


def best_policy(problem: RolloutProblem, clock: Deadline, simulated: tuple = ()):
    """(name, schedule) of the online policy whose simulated train end is least (ties: the
    catalogue's first, the slow ones last); ``simulated``: (name, schedule) pairs simulated
    already. The offline planners return it where their own plan replays later: where no
    just-in-time plan keeps to the engine's limits (a group's samples cannot all run at once:
    rollout/tiny-3, 33.6 s against CGP's 26.0 s), or where the moves did not lead back within
    them (sci-jl R = 96 with 3,000 moves: 854.3 s; ``fifo``'s schedule, 675.8 s, stands).
    Past ``clock`` no further policy is simulated (the first always is); the slow ones come
    last: ``defer``, which simulates the round once per count it tries (and stops trying at
    ``clock``), then ``deadline``, which ranks every group at each decision (7.0 s at R = 512
    against 0.05-0.24 s for the others) until ``clock``, then admits in CGP's order."""
    slow = ("defer", "deadline")
    names = sorted(POLICIES, key=lambda name: slow.index(name) + 1 if name in slow else 0)
    runs, done = list(simulated), {name for name, _ in simulated}
    # fifo first: the one simulated when time is short, where sync, first in the catalogue, is
    # the baseline that never wins (lsat-ar R = 1,000: 11,866 s against fifo's 6,421 s)
    for name in sorted(names, key=lambda name: name != "fifo"):
        if name in done:
            continue
        if runs and clock.expired():
            break
        params = {"time_limit": clock.remaining()} if name in slow else {}
        runs.append((name, simulate(problem, make_policy(name, **params))))
    return min(runs, key=lambda run: (run[1].metrics()["train_end_s"], names.index(run[0])))


for _name, (_factory, _description) in POLICIES.items():
    _register(_name, _description)

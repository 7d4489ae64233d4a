"""The trainer's side of a round: which complete groups each update consumes, and when.

* ``stream`` (complete-group pipelining, CGP): complete groups enter a FIFO in completion order
  (ties by group index); the trainer takes U of them as soon as it is free and U are queued.
* ``sync`` (Slime): the trainer starts after the whole round and trains in prompt order.
* ``planned``: a given list of updates (group lists) run in that order, each as soon as its
  groups are complete and the trainer is free (how a plan is replayed).

Weights are published once per round, after its last update (``publish_s``, the trainer busy
meanwhile). With several rounds (``RolloutProblem.rounds``) each round is trained on its own
updates, after the previous round's publish: ``round_updates`` gives one round's.
"""
from __future__ import annotations

from pipeplan.formulations.rollout.problem import RolloutProblem
from pipeplan.formulations.rollout.schedule import Update

MODES = ("stream", "sync", "planned")


def chunks(groups: list[int], sizes: list[int]) -> list[list[int]]:
    out, pos = [], 0
    for n in sizes:
        out.append(groups[pos:pos + n])
        pos += n
    return out


def stream_order(complete_s: list[float]) -> list[int]:
    return sorted(range(len(complete_s)), key=lambda g: (complete_s[g], g))


def run_updates(problem: RolloutProblem, complete_s: list[float], batches: list[list[int]],
                free: float = 0.0) -> list[Update]:
    """Run ``batches`` in order, each once its groups are complete and the trainer is free
    (from ``free`` on)."""
    out = []
    for groups in batches:
        tokens = sum(problem.group_tokens[g] for g in groups)
        start = max(free, max(complete_s[g] for g in groups))
        free = start + problem.trainer.update_time(tokens)
        out.append(Update(tuple(groups), tokens, start, free))
    return out


def trainer_updates(problem: RolloutProblem, complete_s: list[float], mode: str,
                    planned: list[list[int]] | None = None) -> list[Update]:
    sizes = problem.update_sizes()
    if mode == "stream":
        return run_updates(problem, complete_s, chunks(stream_order(complete_s), sizes))
    if mode == "sync":
        done = max(complete_s)
        return run_updates(problem, [done] * len(complete_s), chunks(list(range(problem.R)), sizes))
    if mode == "planned":
        if planned is None or sorted(g for b in planned for g in b) != list(range(problem.R)):
            raise ValueError("a planned trainer needs updates that cover every group once")
        return run_updates(problem, complete_s, planned)
    raise ValueError(f"unknown trainer mode {mode!r} (choose from {', '.join(MODES)})")


def round_updates(problem: RolloutProblem, complete_s: list[float], mode: str, r: int, free: float) -> list[Update]:
    """Round r's updates (``stream`` or ``sync``), the trainer free from ``free`` on; every
    group of the round must be complete."""
    per = problem.groups_per_round
    groups = list(range(r * per, (r + 1) * per))
    sizes = problem.update_sizes()[:len(problem.update_sizes()) // problem.rounds]
    if mode == "stream":
        return run_updates(problem, complete_s, chunks(sorted(groups, key=lambda g: (complete_s[g], g)), sizes), free)
    if mode == "sync":
        done = max(complete_s[g] for g in groups)
        return run_updates(problem, [done] * len(complete_s), chunks(groups, sizes), free)
    raise ValueError(f"several rounds need a stream or sync trainer, got {mode!r}")


class StreamingTrainer:
    """The ``stream`` trainer advanced group by group, for policies that look at the trainer
    while the round runs (the deadline policy): ``free_at`` is when it finishes the updates it
    can already start, ``queued`` how many complete groups wait for it."""

    def __init__(self, problem: RolloutProblem):
        self.problem = problem
        self.free_at = 0.0
        self.queue: list[tuple[int, float]] = []

    @property
    def queued(self) -> int:
        return len(self.queue)

    def push(self, g: int, t: float) -> None:
        self.queue.append((g, t))
        U = self.problem.U
        while len(self.queue) >= U:
            batch, self.queue = self.queue[:U], self.queue[U:]
            tokens = sum(self.problem.group_tokens[h] for h, _ in batch)
            self.free_at = max(self.free_at, batch[-1][1]) + self.problem.trainer.update_time(tokens)

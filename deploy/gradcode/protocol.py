"""The worker and master sides of one training step, shared by the simulated and the Ray
backends (the same update code runs in both).

A worker stores the latest gradient it computed for each of its partitions. In step t it
computes the partition(s) its schedule names (all of them without pipelining; in the first
step of a pipelined scheme all of them, to fill its store), and replies
``sum_j B[i, j] * stored[j]`` tagged with t. A straggler still computes and stores; only its
reply is late, and the master drops replies of past steps.

The master keeps the replies of the first ``needed_replies`` workers, decodes them with the
code's decoder and takes a gradient step ``w <- w - lr * g``.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from pipeplan.formulations.gradcode.decoders import decoding_vector, needed_replies
from pipeplan.formulations.gradcode.gradient_code import GradientCode


class WorkerState:
    def __init__(self, index: int, code: GradientCode):
        self.index = index
        self.row = code.B[index]
        self.held = [int(j) for j in np.flatnonzero(code.support[index])]
        self.schedule = None if code.schedule is None else code.schedule[:, index]
        self.stored: dict[int, np.ndarray] = {}

    def to_compute(self, t: int) -> list[int]:
        if self.schedule is None or not self.stored:
            return self.held
        j = int(self.schedule[t % self.schedule.size])
        return [j] if j >= 0 else []

    def reply(self, t: int, grad_of: Callable[[int], np.ndarray]) -> np.ndarray | None:
        """Compute this step's partitions with ``grad_of(j)`` (gradient of partition j at the
        current weights), store them and return the coded reply (None: nothing to send)."""
        for j in self.to_compute(t):
            self.stored[j] = grad_of(j)
        if not self.held:
            return None
        return sum(self.row[j] * self.stored[j] for j in self.held if self.row[j] != 0)


class Master:
    def __init__(self, code: GradientCode, lr: float):
        self.code = code
        self.lr = lr
        self._vectors: dict[tuple[int, ...], np.ndarray] = {}

    def needed(self, order) -> int:
        return needed_replies(self.code, order)

    def decode(self, survivors, replies: dict[int, np.ndarray]) -> np.ndarray:
        key = tuple(int(w) for w in survivors)
        a = self._vectors.get(key)
        if a is None:
            a = self._vectors[key] = decoding_vector(self.code, key)
        return sum(a[w] * replies[w] for w in key if a[w] != 0)

    def step(self, params: np.ndarray, survivors, replies: dict[int, np.ndarray]) -> np.ndarray:
        return params - self.lr * self.decode(survivors, replies)

"""One clock for every solver's time limit.

A time limit covers the whole solve: building the model, warm starts, seeding and every solver
call. Builders and loops call :meth:`Deadline.check` at least once per unit of work that can
take noticeable time (per unit, per edge batch, per generation); past the deadline it raises
:class:`OutOfTime` and the solver returns the best plan it has (the cheapest heuristic if
nothing else) with termination ``time_limit``.
"""
from __future__ import annotations

import time


class OutOfTime(Exception):
    """The time limit passed during a phase that cannot return a partial answer."""


class Deadline:
    """A point in time ``seconds`` after creation (never, when ``seconds`` is None)."""

    def __init__(self, seconds: float | None):
        self.began = time.perf_counter()
        self.limit = None if seconds is None else float(seconds)
        self.at = None if seconds is None else self.began + float(seconds)

    def elapsed(self) -> float:
        return time.perf_counter() - self.began

    def remaining(self, floor: float = 0.0) -> float | None:
        """Seconds left (at least ``floor``), or None without a limit."""
        if self.at is None:
            return None
        return max(floor, self.at - time.perf_counter())

    def expired(self) -> bool:
        return self.at is not None and time.perf_counter() >= self.at

    def check(self) -> None:
        if self.expired():
            raise OutOfTime

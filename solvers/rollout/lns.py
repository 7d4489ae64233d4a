"""Large-neighbourhood search on the offline model: CP-SAT on a part of the round at a time.

``cpsat`` hands the whole round to CP-SAT. Beyond a few hundred requests its search stays near
its hint: at lsat-ar R = 64 on the linear engine, 90 s of CP-SAT end at 549.8 s while the online
policy ``defer`` ends at 517.1 s. Here the search starts from the best schedule known (the best
online policy's, ``start`` when given, or CP-SAT's own hint, whichever the model scores least),
and repeatedly frees a part of the round and asks CP-SAT (``cpsat.RolloutCpModel``, the same
model) for the best completion with every other request's start fixed; the trainer's updates
stay free throughout. A better completion is kept. The parts (Pisinger and Ropke's
neighbourhoods, shaped by this problem):

- *a window of steps*: the requests running in a window of 10, 17 or 27% of the round's steps
  (at most ``MAX_FREE`` of them, those starting nearest its middle): requests that compete for
  the same KV and can swap places or slide;
- *a few groups*: every request of 4, 6 or 8 groups, so a group's completion can move as a whole;
- *scattered requests*: each request with probability 0.1.

Measured (2 threads, 5 s per part, before this module, 2026-12-05): lsat-ar R = 64, linear
engine, from ``defer``'s 517.1 s (511.2 s with the trainer's updates re-chosen) to 489.3 s in
300 s; the energy ceiling there is 483.1 s. lsat-ar R = 32: from CP-SAT's 60-s schedule, 283.1 s,
to 279.4 s in 480 s (the best of 600 s of CP-SAT alone: 279.9 s). Windows made most of the gains.
Give it two threads: on one, CP-SAT's single worker seldom improves a part (lsat-ar R = 64:
0 of 23 parts in 120 s, the start kept).

A heuristic, never a proof: the result is ``feasible`` and its bound the analytic one. Every
plan is replayed in the simulator (``cpsat.best_replay``); on a linear engine the model is the
simulator, so the replay ends when the model says. The parts are drawn from ``seed``, but CP-SAT
stops each on the wall clock, so two runs may differ.
"""
from __future__ import annotations

import math

import numpy as np

from pipeplan.core.deadline import Deadline, OutOfTime
from pipeplan.core.errors import InputError
from pipeplan.core.registry import problem_params_check, register
from pipeplan.core.result import Termination
from pipeplan.formulations.rollout.fixed_model import fixed_model, list_schedule
from pipeplan.formulations.rollout.problem import RolloutProblem
from pipeplan.solvers.rollout.common import scored_result, search_deadline
from pipeplan.solvers.rollout.cpsat import RolloutCpModel, best_hint, best_replay, measured_tau, model_units, on_grid
from pipeplan.solvers.rollout.online import best_policy

PART_S = 5.0                   # CP-SAT's time on one part
WINDOWS = (0.10, 0.17, 0.27)   # window widths, as fractions of the round's steps
GROUPS = (4, 6, 8)             # groups freed at once
SCATTER = 0.1                  # the chance that a request is freed in a scattered part
MAX_FREE = 200                 # requests freed at most (CP-SAT solves a part of 100-200 in seconds)
TIME_LIMIT = 60.0              # s, where none is given
PATIENCE = 100                 # parts in a row without a better schedule end the search (at lsat-ar R = 32
                               # the longest such run among the first 180 parts was 31)


class _Search:
    """The model, the incumbent (starts in model units, updates, value) and its parts."""

    def __init__(self, problem: RolloutProblem, model: RolloutCpModel, rng: np.random.Generator):
        self.problem, self.model, self.rng = problem, model, rng
        self.base = model.md
        self.lengths = np.array(model.dur) // model.grid
        self.starts = self.batches = self.value = None

    def fixed_solve(self, starts: list[int], batches: list[list[int]], free: np.ndarray, seconds: float,
                    seed: int, threads: int):
        """CP-SAT on the model with the requests not ``free`` held at ``starts``:
        (starts, updates, value) or None when it finds nothing in time."""
        md = self.base.clone()
        for i in np.flatnonzero(~free):
            md.add(self.model.step[i] == int(starts[i]) // self.model.grid)
        self.model.md = md
        try:
            self.model.hint(list(starts), batches)
            status, s, b, _, value = self.model.solve(seconds, seed, threads)
        finally:
            self.model.md = self.base
        return None if s is None else (s, b, value)

    def part(self) -> np.ndarray:
        """Which requests the next part frees (module docstring)."""
        n, rng = self.problem.n_requests, self.rng
        kind = rng.integers(3)
        if kind == 1:
            groups = rng.choice(self.problem.R, size=min(self.problem.R, int(rng.choice(GROUPS))), replace=False)
            return np.isin(np.arange(n) // self.problem.K, groups)
        if kind == 2:
            return rng.random(n) < SCATTER
        step = np.array(self.starts) // self.model.grid
        end = step + self.lengths
        width = max(1, int(rng.choice(WINDOWS) * end.max()))
        a = int(rng.integers(0, max(1, end.max() - width)))
        free = (end >= a) & (step <= a + width)
        if free.sum() > MAX_FREE:
            nearest = np.argsort(np.abs(step - (a + width / 2)) + np.where(free, 0, np.inf), kind="stable")
            free = np.zeros(n, bool)
            free[nearest[:MAX_FREE]] = True
        return free


def _covers(problem: RolloutProblem, plan) -> bool:
    """Whether ``plan`` admits every request of the round (at a finite time) and has updates."""
    try:
        admitted = {int(i) for i, t in plan["admissions"] if math.isfinite(float(t)) and float(t) >= 0}
        updates = [list(u) for u in plan["updates"]]
    except (TypeError, ValueError, KeyError):
        return False
    return (admitted == set(range(problem.n_requests))
            and sorted(g for u in updates for g in u) == list(range(problem.R)))


def _model_starts(problem: RolloutProblem, m, unit: float, grid: int, plan: dict) -> list[int]:
    """A plan's starts in model units: its admission times on the step grid where the model is
    the engine, else the engine-like list schedule of its admission order on the model."""
    admitted = {}
    for i, t in plan["admissions"]:
        admitted.setdefault(i, t)
    if m.exact:
        return [grid * max(0, round(admitted[i] / unit / grid)) for i in range(problem.n_requests)]
    order = sorted(range(problem.n_requests), key=lambda i: (admitted[i], i))
    return on_grid(list_schedule(m, order), unit, grid)


@problem_params_check("rollout", "cpsat-lns")
def _check_start(problem, params: dict) -> None:
    start = params.get("start")
    if start is not None and not _covers(problem, start):
        raise InputError(problem.source or problem.name, "start",
                         "expected a plan of this round: an admission of every request and its updates")


@register("rollout", "cpsat-lns", requires=("ortools",),
          description="offline: CP-SAT on a part of the round at a time (large-neighbourhood search) from the best "
                      "schedule known, re-scored by replay in the simulator (known lengths)")
def solve_lns(problem, *, time_limit: float | None = TIME_LIMIT, seed: int = 0, threads: int = 1,
              part_s: float = PART_S, patience: int = PATIENCE, start: dict | None = None, tau: float | None = None):
    """The search ends after ``patience`` parts in a row without a better schedule, or at
    ``time_limit`` (None: ``TIME_LIMIT``), which covers everything; ``part_s`` is CP-SAT's time
    on one part; ``start``: a plan (``Schedule.plan()``) of this round to start from besides the
    online policies. One round on one engine only (InputError otherwise)."""
    if problem.rounds != 1 or not problem.engine.single:
        field = "rounds" if problem.rounds != 1 else "engine"
        raise InputError(problem.source or problem.name, field,
                         "cpsat-lns plans one round on one engine without shared prefixes")
    time_limit = TIME_LIMIT if time_limit is None else time_limit
    for field, value in (("time_limit", time_limit), ("part_s", part_s)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or math.isinf(value):
            raise InputError(problem.source or problem.name, field, f"expected seconds > 0, got {value!r}")
    _check_start(problem, {"start": start})        # pipeplan.solve has checked it; a direct call has not
    if isinstance(patience, bool) or not isinstance(patience, int) or patience < 1:
        raise InputError(problem.source or problem.name, "patience", f"expected a whole number >= 1, got {patience!r}")
    clock = Deadline(time_limit)
    search_clock = search_deadline(clock, problem)
    if tau is None and not problem.engine.linear:
        tau = measured_tau(problem)
    m = fixed_model(problem, tau)
    unit, grid = model_units(m)
    policy, online = best_policy(problem, search_clock)
    plans = [(policy, online.plan())] + ([("start", start)] if start is not None else [])
    hint = best_hint(problem, m, search_clock)
    try:
        model = RolloutCpModel(problem, m, unit, grid, deadline=search_clock, coarser_unit=False)
    except OutOfTime:
        model = None
    rng = np.random.default_rng(seed)
    search = None if model is None else _Search(problem, model, rng)
    source, first, parts, better, stall = "hint", None, 0, 0, 0
    if search is not None:
        everything = np.zeros(problem.n_requests, bool)
        candidates = [("hint", on_grid(hint[1], unit, grid), hint[2])] + [
            (name, _model_starts(problem, m, unit, grid, plan), [list(u) for u in plan["updates"]])
            for name, plan in plans]
        for name, starts, batches in candidates:   # each with the trainer's updates re-chosen
            if search_clock.expired() and search.value is not None:
                break
            found = search.fixed_solve(starts, batches, everything, min(part_s, search_clock.remaining(floor=0.05)),
                                       seed, threads)
            if found is not None and (search.value is None or found[2] < search.value):
                search.starts, search.batches, search.value = found
                source, first = name, found[2] * unit
        while search.value is not None and search_clock.remaining() > 0.05 and stall < patience:
            parts, stall = parts + 1, stall + 1
            found = search.fixed_solve(search.starts, search.batches, search.part(),
                                       min(part_s, search_clock.remaining(floor=0.05)), seed + parts, threads)
            if found is not None and found[2] < search.value:
                search.starts, search.batches, search.value = found
                better, stall = better + 1, 0
    replays = []
    if search is not None and search.value is not None:
        replays.append(("lns", [s * unit for s in search.starts], search.batches))
    replays.append(("hint", hint[1], hint[2]))
    schedule, name, how = best_replay(problem, replays, clock)
    if online.metrics()["train_end_s"] < schedule.metrics()["train_end_s"] * (1 - 1e-9):
        schedule, name, how = online, policy, "simulated"
    schedule.policy = "cpsat-lns"
    end = schedule.metrics()["train_end_s"]
    params = {"start": source, "start_train_end_s": first, "parts": parts, "improving_parts": better,
              "part_s": part_s, "patience": patience, "seed": seed, "model_exact": m.exact,
              "model_train_end_s": None if search is None or search.value is None else search.value * unit,
              "replay": how, "fallback": name if name not in ("lns", "hint") else None}
    cut = stall < patience       # the clock, not the patience, ended the search (or it never began)
    message = (f"large-neighbourhood search from {source}: {parts} parts, {better} improving, "
               + ("stopped by the time limit" if cut else f"the last {patience} without a better schedule")
               + f"; replayed ({how}) {end:.3f} s")
    return scored_result(problem, "cpsat-lns", schedule, params=params, message=message,
                         termination=Termination.TIME_LIMIT if cut else Termination.COMPLETED,
                         stopped_by="time" if cut else None)

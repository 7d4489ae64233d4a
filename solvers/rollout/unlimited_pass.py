"""A quick test that refuses most update sequences before ``SequencePlanner.place`` runs.

``SequencePlanner.place`` (the backward pass) puts each update at the latest step that meets a
target and then moves it earlier until the plan keeps to the engine's batch and KV limits. The
limits' check (``StepTimeline.fits``) is most of its time: at sci-xw, R = 32 on the paper's
engine, 5.4 of 6.8 s over 300 sequence moves. Here the same pass runs without the limits, on a
profile of forced work over the steps, so each update costs one ``searchsorted``.

Why its refusal is exact. Both passes place the updates from the last back. By induction every
update lands no later here than in ``place``: the forced work of the later updates' requests at a
step only falls as their finish steps move later, so this pass's profile is at most ``place``'s
at every step, its latest step meeting the target at least ``place``'s, and ``place`` moves
that step earlier still for the limits. So when this pass finds no step for some update (none
at or after its longest response meets the target), neither can ``place``. A sequence it lets
through is planned by ``place`` as before: the planner's figures are unchanged, only faster (the
test compares both on random rounds).

Measured with 400 sideways moves (``SequencePlanner.climb``, as ``guided_plan`` walks) from
Johnson's order, one core, the same plans with and without it: R = 32 on the paper's engine,
sci-xw 6.0 -> 3.9 s, lsat-ar 4.0 -> 2.2 s, olyphys 2.8 -> 1.5 s; sci-xw R = 64 31.8 -> 27.0 s
(its KV limit binds, so fewer sequences fail without it); lsat-ar R = 32 on the linear engine
2.3 -> 1.8 s. It refused 395 of the 581 passes at sci-xw R = 32; the rest, and the bisections
of the moves that gain, still check the limits.
"""
from __future__ import annotations

import numpy as np

# steps the tables (one float per step of each group's longest response, 8 MB) and a pass's
# profile over the steps may hold: a round beyond them plans without the filter, as before
# (R = 96 on the paper's presets: about 0.4M table steps and profiles of 0.15M). Building the
# tables costs a pass over every token; a limit keeps it cheap beside a short time limit.
MAX_STEPS = 1 << 20
# slack on the target: the two passes sum the same work in different orders
RELATIVE_SLACK = 1e-9


class UnlimitedPass:
    """``meets(updates, tails, target)``: False only when no just-in-time plan of ``updates``
    meets ``target`` even without the engine's limits (module docstring)."""

    def __init__(self, c0: float, forced: list[np.ndarray], work: np.ndarray, longest: np.ndarray):
        # forced[g][d]: the work group g's requests have made d steps before g completes
        self.c0, self.forced, self.work, self.longest = c0, forced, work, longest

    @classmethod
    def of(cls, planner) -> "UnlimitedPass | None":
        """The filter of a ``SequencePlanner``, or None where it would not pay or fit: no cost per
        step (the latest step meeting a target is then unbounded) or tables beyond ``MAX_STEPS``."""
        tl, e = planner.timeline, planner.problem.engine
        if e.c0_s <= 0 or int(np.sum(tl.longest + 1)) > MAX_STEPS:
            return None
        forced = [np.zeros(int(longest) + 1) for longest in tl.longest]
        for i, n in enumerate(tl.lengths):
            if n:   # d = 0 .. n - 1 steps before its group completes, request i has made n - d tokens
                forced[tl.group[i]][:n] += e.request_work(tl.prompts[i], n - np.arange(n, dtype=float))
        return cls(e.c0_s, forced, planner.group_work, tl.longest)

    def meets(self, updates: list[list[int]], tails: np.ndarray, target: float) -> bool:
        target += RELATIVE_SLACK * max(1.0, abs(target))
        done = float(self.work.sum())
        horizon = int((target - tails[-1] - done) / self.c0) + 2
        if horizon < 1:
            return False
        if horizon > MAX_STEPS:
            return True                       # too long a profile: let ``place`` decide
        profile = self.c0 * np.arange(horizon, dtype=float)
        next_step = horizon - 1
        for j in range(len(updates) - 1, -1, -1):
            step = int(np.searchsorted(profile[:next_step + 1], target - tails[j] - done, side="right")) - 1
            if step < max(int(self.longest[g]) for g in updates[j]):
                return False
            for g in updates[j]:
                table = self.forced[g]
                first = max(0, step - table.size + 1)
                profile[first:step + 1] += table[step - first::-1]
                done -= float(self.work[g])
            next_step = step - 1
        return True

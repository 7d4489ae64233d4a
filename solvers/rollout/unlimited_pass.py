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

# the tables (one float per step of each group's longest response) and one profile over the
# horizon may take this much; a larger round plans without the filter, as before
FILTER_BYTES = 64 << 20
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
        step (the latest step meeting a target is then unbounded) or tables beyond ``FILTER_BYTES``."""
        tl, e = planner.timeline, planner.problem.engine
        if e.c0_s <= 0 or 8.0 * float(np.sum(tl.longest + 1)) > FILTER_BYTES / 2:
            return None
        forced = []
        for g, requests in enumerate(planner.requests):
            before = np.arange(int(tl.longest[g]) + 1, dtype=float)
            n = planner.lengths[requests][:, None]
            made = np.clip(n - before[None, :], 0.0, n)
            forced.append(planner.problem.engine.request_work(tl.prompts[requests][:, None], made).sum(axis=0))
        return cls(e.c0_s, forced, planner.group_work, tl.longest)

    def meets(self, updates: list[list[int]], tails: np.ndarray, target: float) -> bool:
        target += RELATIVE_SLACK * max(1.0, abs(target))
        done = float(self.work.sum())
        horizon = int((target - tails[-1] - done) / self.c0) + 2
        if horizon < 1:
            return False
        if 8.0 * horizon > FILTER_BYTES / 2:
            return True                       # too long a profile: let ``place`` decide
        profile = self.c0 * np.arange(horizon, dtype=float)
        next_step = horizon - 1
        for j in range(len(updates) - 1, -1, -1):
            step = int(np.searchsorted(profile[:next_step + 1], target - tails[j] - done, side="right")) - 1
            if step < max(int(self.longest[g]) for g in updates[j]):
                return False
            for g in updates[j]:
                forced = self.forced[g]
                first = max(0, step - forced.size + 1)
                profile[first:step + 1] += forced[step - first::-1]
                done -= float(self.work[g])
            next_step = step - 1
        return True

"""Feasibility checker for gradient codes: lists every violated rule, not just the first."""
from __future__ import annotations

import numpy as np

from pipeplan.formulations.gradcode.gradient_code import GradientCode
from pipeplan.formulations.gradcode.problem import GradCodeProblem


def max_staleness(code: GradientCode) -> int | None:
    """The oldest stored gradient any worker's reply can contain, in steps (0 without
    pipelining); None when a worker never recomputes a partition it encodes."""
    if code.schedule is None:
        return 0
    period = code.schedule.shape[0]
    worst = 0
    for i in range(code.n):
        for j in np.flatnonzero(code.B[i] != 0):
            steps = np.flatnonzero(code.schedule[:, i] == j)
            if steps.size == 0:
                return None
            gaps = np.diff(np.append(steps, steps[0] + period))
            worst = max(worst, int(gaps.max()) - 1)
    return worst


def violations(code: GradientCode, problem: GradCodeProblem | None = None) -> list[str]:
    """Every rule the code breaks, as readable lines; an empty list means the code is well
    formed. Decodability itself is numeric and left to ``verifier.verify``.

    Rules: B is zero outside the support; every partition is stored on at least s+1 workers;
    the groups decoder's groups are disjoint, have at least s+1 members whose supports are
    equal, and cover every partition; the count rule waits for at most n-s replies; a schedule
    only computes stored partitions and refreshes every encoded partition at least once every
    s+1 steps (staleness <= s); with a problem: n, k, s match and no worker stores more than
    its capacity.
    """
    out: list[str] = []
    n, k, s = code.n, code.k, code.s
    outside = (code.B != 0) & ~code.support
    for i, j in zip(*np.nonzero(outside)):
        out.append(f"B[{i}][{j}] = {code.B[i, j]:g} but worker {i} does not store partition {j}")
    cover = code.support.sum(axis=0)
    for j in np.flatnonzero(cover < s + 1):
        out.append(f"partition {j} is stored on {cover[j]} worker(s), fewer than s+1 = {s + 1}")
    if code.decoder == "groups":
        seen: dict[int, int] = {}
        covered = np.zeros(k, dtype=bool)
        for g, members in enumerate(code.groups):
            for w in members:
                if w in seen:
                    out.append(f"worker {w} is in groups {seen[w]} and {g}")
                seen.setdefault(w, g)
            if len(members) < s + 1:
                out.append(f"group {g} has {len(members)} worker(s), fewer than s+1 = {s + 1}")
            rows = code.support[list(members)]
            if not (rows == rows[0]).all():
                out.append(f"group {g}: its workers store different partitions")
            covered |= rows[0]
        for j in np.flatnonzero(~covered):
            out.append(f"partition {j} belongs to no group")
    elif code.wait > n - s:
        out.append(f"the master waits for {code.wait} replies, more than n-s = {n - s}")
    if code.decoder == "linear" and not code.linear_weight > 0:
        out.append("the linear decoder needs a positive weight")
    if code.schedule is not None:
        for t, row in enumerate(code.schedule):
            for i, j in enumerate(row):
                if j >= 0 and not code.support[i, j]:
                    out.append(f"schedule step {t}: worker {i} computes partition {j}, which it does not store")
                elif j < 0 and code.support[i].any():
                    out.append(f"schedule step {t}: worker {i} stores partitions but computes none")
        stale = max_staleness(code)
        if stale is None:
            out.append("schedule: a worker never recomputes a partition it encodes")
        elif stale > s:
            out.append(f"schedule: staleness {stale} exceeds s = {s}")
    if problem is not None:
        out += [message for _, message in misfits(code, problem)]
    return out


def misfits(code: GradientCode, problem: GradCodeProblem) -> list[tuple[str, str]]:
    """(field of the code, what is wrong) for every way the code does not fit the problem: its
    n, k and s differ from the problem's, or a worker stores more partitions than its capacity."""
    out = []
    for name, mine, theirs in (("n", code.n, problem.n), ("k", code.k, problem.k), ("s", code.s, problem.s)):
        if mine != theirs:
            out.append((name, f"code has {name} = {mine}, problem has {name} = {theirs}"))
    if code.n == problem.n:
        held = code.support.sum(axis=1)
        for i in np.flatnonzero(held > np.array(problem.capacity)):
            out.append((f"support[{i}]", f"worker {i} stores {held[i]} partitions, capacity {problem.capacity[i]}"))
    return out

"""Decoders: which replies the master needs, and the weights a with a^T B_F = 1^T.

``needed_replies`` is the master's stopping rule, shared by the simulator, the simulated trainer
and the Ray master; ``decoding_vector`` turns the replies it kept into decoding weights.
``decodable_stop_times`` is the online rule (``stop = "decodable"``: stop once the replies that
arrived decode) vectorised over steps, for the vectorised step rule.
"""
from __future__ import annotations

import numpy as np

from pipeplan.formulations.gradcode.gradient_code import GradientCode
from pipeplan.formulations.gradcode.verifier import RESIDUAL_TOL


def group_index(code: GradientCode) -> np.ndarray:
    """Group of each worker (-1 for a worker in no group)."""
    out = np.full(code.n, -1, dtype=np.int64)
    for g, members in enumerate(code.groups):
        out[list(members)] = g
    return out


def needed_replies(code: GradientCode, order) -> int:
    """How many of the replies, taken in arrival ``order`` (worker indices), the master waits
    for: the first reply of every group (groups decoder), the first replies that decode (online
    rule) or the first ``wait`` replies."""
    if code.stop == "decodable":
        order = list(order)
        for pos in range(1, len(order) + 1):
            if decodes(code, order[:pos]):
                return pos
        raise ValueError("the replies never decode")
    if code.decoder != "groups":
        return code.wait
    of = group_index(code)
    missing = set(range(len(code.groups)))
    for pos, w in enumerate(order):
        missing.discard(int(of[w]))
        if not missing:
            return pos + 1
    raise ValueError("the replies never cover every group")


def decoding_vector(code: GradientCode, survivors) -> np.ndarray:
    """Weights a (length n, zero off ``survivors``) for the replies of ``survivors`` (in arrival
    order). Groups: the first survivor of each group gets 1. Least squares: the minimum-norm
    solution of B_F^T a = 1. Linear: the fixed weight on every survivor."""
    survivors = np.asarray(list(survivors), dtype=np.int64)
    a = np.zeros(code.n)
    if code.decoder == "groups":
        of = group_index(code)
        taken: set[int] = set()
        for w in survivors:
            if of[w] >= 0 and of[w] not in taken:
                taken.add(int(of[w]))
                a[w] = 1.0
    elif code.decoder == "linear":
        a[survivors] = code.linear_weight
    else:
        sol, *_ = np.linalg.lstsq(code.B[survivors].T, np.ones(code.k), rcond=None)
        a[survivors] = sol
    return a


def can_decode(code: GradientCode, arrived) -> bool:
    """Whether the replies of ``arrived`` (so far) let the master stop: the online form of
    ``needed_replies``, for a master that sees replies one by one."""
    if code.stop == "decodable":
        return decodes(code, arrived)
    if code.decoder != "groups":
        return len(arrived) >= code.wait
    of = group_index(code)
    return len({int(of[w]) for w in arrived if of[w] >= 0}) == len(code.groups)


def decodes(code: GradientCode, rows) -> bool:
    """Whether the replies of workers ``rows`` decode exactly: 1 in the row space of B_rows
    (least-squares residual within the verifier's tolerance)."""
    rows = np.asarray(list(rows), dtype=np.int64)
    if rows.size == 0 or not (code.B[rows] != 0).any(axis=0).all():
        return False
    sol, *_ = np.linalg.lstsq(code.B[rows].T, np.ones(code.k), rcond=None)
    return bool(np.abs(code.B[rows].T @ sol - 1.0).max() <= RESIDUAL_TOL)


def decodable_stop_times(code: GradientCode, T: np.ndarray) -> np.ndarray:
    """The online rule, vectorised: per row of reply times T (steps, n), the time of the first
    reply after which the replies that arrived decode (inf if they never do). Prefixes are
    checked only once they cover every partition, and each distinct set of arrived workers is
    solved once (the sets repeat across steps)."""
    steps, n = T.shape
    order = np.argsort(T, axis=1, kind="stable")
    times = np.take_along_axis(T, order, axis=1)
    held = code.B != 0
    arrived = np.zeros((steps, n), dtype=bool)
    covered = np.zeros((steps, code.k), dtype=bool)
    out = np.full(steps, np.inf)
    pending = np.arange(steps)
    known: dict[bytes, bool] = {}
    for m in range(n):
        w = order[pending, m]
        arrived[pending, w] = True
        covered[pending] |= held[w]
        ready = pending[covered[pending].all(axis=1) & np.isfinite(times[pending, m])]
        if ready.size:
            keys, first, inverse = np.unique(np.packbits(arrived[ready], axis=1), axis=0, return_index=True,
                                             return_inverse=True)
            ok = np.empty(keys.shape[0], dtype=bool)
            for u, (key, f) in enumerate(zip(keys, first)):
                key = key.tobytes()
                if key not in known:
                    known[key] = decodes(code, np.flatnonzero(arrived[ready[f]]))
                ok[u] = known[key]
            done = ready[ok[inverse.ravel()]]
            out[done] = times[done, m]
            pending = np.setdiff1d(pending, done, assume_unique=True)
        if not pending.size:
            break
    return out

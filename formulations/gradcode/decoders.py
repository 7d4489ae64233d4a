"""Decoders: which replies the master needs, and the weights a with a^T B_F = 1^T.

``needed_replies`` is the master's stopping rule, shared by the simulator, the simulated trainer
and the Ray master; ``decoding_vector`` turns the replies it kept into decoding weights.
"""
from __future__ import annotations

import numpy as np

from pipeplan.formulations.gradcode.gradient_code import GradientCode


def group_index(code: GradientCode) -> np.ndarray:
    """Group of each worker (-1 for a worker in no group)."""
    out = np.full(code.n, -1, dtype=np.int64)
    for g, members in enumerate(code.groups):
        out[list(members)] = g
    return out


def needed_replies(code: GradientCode, order) -> int:
    """How many of the replies, taken in arrival ``order`` (worker indices), the master waits
    for: the first reply of every group (groups decoder) or the first ``wait`` replies."""
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
    if code.decoder != "groups":
        return len(arrived) >= code.wait
    of = group_index(code)
    return len({int(of[w]) for w in arrived if of[w] >= 0}) == len(code.groups)

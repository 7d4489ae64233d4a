"""Cyclic repetition (CR; Tandon et al., ICML 2017, Algorithm 2): worker i stores partitions
i, ..., i+s (mod n). Draw a random s x n matrix H with H 1 = 0; row i of B has B[i, i] = 1, is
supported on i..i+s and lies in null(H), which has dimension n-s and contains 1, so any n-s
generic rows span it and decode 1 by least squares.

Random codes are badly conditioned for large n and s (the design notes 1e7-1e8 at n = 24,
s = 5), so several seeds are tried and the one with the smallest worst-case condition number
(from the exhaustive verifier) is kept. Everything is float64.
"""
from __future__ import annotations

import time

import numpy as np

from pipeplan.errors import InputError
from pipeplan.formulations.gradcode.gradient_code import GradientCode
from pipeplan.formulations.gradcode.placement import cyclic_support
from pipeplan.formulations.gradcode.verifier import verify


def cyclic_matrix(n: int, s: int, rng: np.random.Generator) -> np.ndarray:
    B = np.zeros((n, n))
    if s == 0:
        return np.eye(n)
    H = rng.standard_normal((s, n))
    H -= H.mean(axis=1, keepdims=True)          # H 1 = 0
    for i in range(n):
        rest = (i + 1 + np.arange(s)) % n
        B[i, i] = 1.0
        B[i, rest] = np.linalg.solve(H[:, rest], -H[:, i])
    return B


def cyclic_repetition(n: int, s: int, *, seed: int = 0, tries: int = 8, time_limit: float | None = None) -> GradientCode:
    """The best conditioned of ``tries`` random CR codes (seeds seed, seed+1, ...); past
    ``time_limit`` seconds no further seed is tried once one decodes (``meta["tried"]`` says how
    many were)."""
    if not 0 <= s < n:
        raise InputError("--s", "", f"s = {s} must satisfy 0 <= s < n = {n}")
    if tries < 1:
        raise InputError("--tries", "", f"must be >= 1, got {tries}")
    began = time.perf_counter()
    support = cyclic_support(n, s)
    best, tried = None, 0
    for t in range(tries):
        if best is not None and not best[0][0] and time_limit is not None and time.perf_counter() - began >= time_limit:
            break
        tried += 1
        code = GradientCode(scheme="cr", s=s, support=support, B=cyclic_matrix(n, s, np.random.default_rng(seed + t)),
                            decoder="lstsq", wait=n - s)
        v = verify(code)
        key = (not v.decodable, v.worst_condition)
        if best is None or key < best[0]:
            best = (key, code, seed + t, v)
    _, code, chosen, v = best
    if not v.decodable:
        raise ValueError(f"no decodable CR code for n={n}, s={s} in {tries} seeds (worst residual {v.worst_residual:.3g})")
    return GradientCode(scheme="cr", s=s, support=support, B=code.B, decoder="lstsq", wait=n - s,
                        meta={"seed": chosen, "tries": tries, "tried": tried,
                              "worst_condition": v.worst_condition})

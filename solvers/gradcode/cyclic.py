"""Cyclic repetition (CR; Tandon et al., ICML 2017, Algorithm 2): worker i stores partitions
i, ..., i+s (mod n). Draw a random s x n matrix H with H 1 = 0; row i of B has B[i, i] = 1, is
supported on i..i+s and lies in null(H), which has dimension n-s and contains 1, so any n-s
generic rows span it and decode 1 by least squares.

Random codes are badly conditioned for large n and s (the design notes 1e7-1e8 at n = 24,
s = 5), so several seeds are tried and the one with the smallest worst-case condition number
(from the verifier) is kept. Everything is float64.
"""
from __future__ import annotations

import numpy as np

from pipeplan.core.deadline import Deadline
from pipeplan.core.errors import InputError
from pipeplan.core.param_values import MAX_TRIES
from pipeplan.formulations.gradcode.gradient_code import GradientCode
from pipeplan.formulations.gradcode.placement import cyclic_support
from pipeplan.formulations.gradcode.verifier import Verification, verify


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


def best_conditioned(make_B, support: np.ndarray, s: int, wait: int, *, seed: int, tries: int,
                     deadline: Deadline | None) -> tuple[np.ndarray, int, int, Verification]:
    """Draw B = ``make_B(rng)`` for seeds seed, seed+1, ... (``tries`` of them, fewer past the
    ``deadline``: at least one) and keep the decodable one with the smallest worst condition
    (else the smallest); returns (B, its seed, seeds tried, its verification)."""
    best, tried = None, 0
    while tried < tries and not (tried and deadline is not None and deadline.expired()):
        B = make_B(np.random.default_rng(seed + tried))
        v = verify(GradientCode(scheme="search", s=s, support=support, B=B, decoder="lstsq", wait=wait),
                   deadline=deadline)
        key = (not v.decodable, v.worst_condition)
        if best is None or key < best[0]:
            best = (key, B, seed + tried, v)
        tried += 1
    _, B, chosen, v = best
    return B, chosen, tried, v


def best_cyclic(n: int, s: int, *, seed: int = 0, tries: int = 8,
                deadline: Deadline | None = None) -> tuple[GradientCode, Verification]:
    """The best conditioned of ``tries`` random CR codes (seeds seed, seed+1, ...) and its
    verification. Past the ``deadline`` no further seed is tried and a verification stops
    early (see ``verify``); ``meta["tried"]`` says how many seeds were."""
    if not 0 <= s < n:
        raise InputError("--s", "", f"s = {s} must satisfy 0 <= s < n = {n}")
    if not 1 <= tries <= MAX_TRIES:
        raise InputError("--tries", "", f"must be a whole number from 1 to {MAX_TRIES:,}, got {tries}")
    support = cyclic_support(n, s)
    B, chosen, tried, v = best_conditioned(lambda rng: cyclic_matrix(n, s, rng), support, s, n - s,
                                           seed=seed, tries=tries, deadline=deadline)
    if not v.decodable:
        raise ValueError(f"no decodable CR code for n={n}, s={s} in {tried} seeds (worst residual {v.worst_residual:.3g})")
    code = GradientCode(scheme="cr", s=s, support=support, B=B, decoder="lstsq", wait=n - s,
                        meta={"seed": chosen, "tries": tries, "tried": tried, "worst_condition": v.worst_condition})
    return code, v


def cyclic_repetition(n: int, s: int, *, seed: int = 0, tries: int = 8,
                      deadline: Deadline | None = None) -> GradientCode:
    """``best_cyclic``'s code."""
    return best_cyclic(n, s, seed=seed, tries=tries, deadline=deadline)[0]

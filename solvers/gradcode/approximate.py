"""Approximate gradient coding on a sparse random regular graph (Charles, Papailiopoulos and
Ellenberg, "Approximate gradient coding via sparse random graphs", 2017; Raviv, Tamo, Tandon
and Dimakis, ICML 2018, section 4, with expander graphs): worker i stores d partitions, each
partition is stored on d workers (a random d-regular bipartite graph, the union of d random
permutations without repeated edges: an expander with high probability), B is the graph's 0/1
adjacency and k = n.

Decoders: ``lstsq``, the optimal decoder (Raviv et al.: the least-squares a, error bounded
through the graph's spectral gap), or ``linear``, the fixed one-step decoder (Charles et al.)
n / ((n-s) d) x the sum of the n-s replies. Neither decodes exactly in general: the code is
marked ``meta["approximate"]`` and the verifier reports its decoding error ||a^T B_F - 1||^2 / k
(worst and mean over straggler sets), never a plain "decodable". The point is a lower load (d
below s+1) or a larger s than exact codes allow, for an error instead of a guarantee.
"""
from __future__ import annotations

import numpy as np

from pipeplan.core.errors import InputError
from pipeplan.formulations.gradcode.gradient_code import GradientCode

REPAIR_ROUNDS = 10_000


def regular_bipartite(n: int, d: int, rng: np.random.Generator) -> np.ndarray:
    """(n, n) bool: a random d-regular bipartite graph, permutation by permutation; a new
    permutation's clashes (an edge already there) are repaired by swapping targets with random
    workers until none is left."""
    if not 1 <= d <= n:
        raise InputError("--degree", "", f"must be in 1..n = {n}, got {d}")
    adj = np.zeros((n, n), dtype=bool)
    for _ in range(d):
        perm = rng.permutation(n)
        for _ in range(REPAIR_ROUNDS):
            clash = np.flatnonzero(adj[np.arange(n), perm])
            if clash.size == 0:
                break
            other = rng.integers(0, n, clash.size)
            for i, j in zip(clash, other):
                if not adj[i, perm[j]] and not adj[j, perm[i]]:
                    perm[i], perm[j] = perm[j], perm[i]
        else:
            raise ValueError(f"no {d}-regular graph on {n} workers found (d too close to n?)")
        adj[np.arange(n), perm] = True
    return adj


def sparse_graph_code(n: int, s: int, *, degree: int | None = None, seed: int = 0,
                      decoder: str = "lstsq") -> GradientCode:
    """``degree`` d defaults to s+1 (the load of FR and CR)."""
    if not 0 <= s < n:
        raise InputError("--s", "", f"s = {s} must satisfy 0 <= s < n = {n}")
    if decoder not in ("lstsq", "linear"):
        raise InputError("--decoder", "", f"approximate codes decode by lstsq or linear, not {decoder!r}")
    d = s + 1 if degree is None else degree
    support = regular_bipartite(n, d, np.random.default_rng(seed))
    return GradientCode(scheme="approx", s=s, support=support, B=support.astype(np.float64), decoder=decoder,
                        wait=n - s, linear_weight=n / ((n - s) * d) if decoder == "linear" else 0.0,
                        meta={"approximate": True, "degree": d, "seed": seed})

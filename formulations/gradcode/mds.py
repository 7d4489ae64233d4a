"""The encoding matrix of the cyclic-MDS gradient code (Raviv, Tamo, Tandon and Dimakis,
"Gradient coding from cyclic MDS codes and expander graphs", ICML 2018), real-valued and
deterministic. It lives here, not among the solvers, because the verifier checks a code against
it (``verifier``'s structural verdict) and formulations may not import solvers.

The construction. Let C be a real [n, n-s] code, cyclic (x^n - 1) or negacyclic (x^n + 1), with
generator polynomial g of degree s. Column j of B is the codeword x^(j-s) g(x) reduced mod
x^n -/+ 1, so column j is supported on rows j-s..j and row i (worker i) on columns i..i+s
(mod n): CR's support. The columns span C, so rank B = n-s. If C is MDS (Singleton: minimum
distance s+1), any n-s coordinates of C are an information set, so any n-s rows B_F have rank
n-s and the same row space as B: every target in B's row space decodes from every n-s
survivors (Raviv et al., section 3).

The roots of g: s roots of x^n = +-1 spaced 2 pi / n apart and symmetric about -1,
z_u = -exp(i pi (2u - s + 1) / n), u = 0..s-1. They are closed under conjugation (g is real),
consecutive powers of a primitive n-th root times a fixed one (the BCH bound, which holds for
constacyclic codes too, gives distance s+1: MDS), and z_u^n = (-1)^(n-s+1): the code is cyclic
when n-s is odd, negacyclic when n-s is even. Since 1 is never a root, the cyclic B decodes the
all-ones vector as it is (1 is orthogonal to B's null space, spanned by the roots' Fourier
vectors): this is the paper's real construction.

For n-s even this real cyclic code does not exist (a conjugate-closed run of s consecutive
roots of x^n - 1 is then centred at 1 and contains it, or there is none; for s = 2 and n even no
real cyclic [n, n-2] code is MDS at all), so we take the negacyclic code and rescale the
partitions (our extension, not the paper's): with v the projection of the
all-ones vector onto B's row space (1 minus its components on the roots' vectors (z_u^j)_j,
which span B's null space), column j is divided by v_j; then a^T C_F = v^T gives
a^T B_F = 1^T. v stays within s/n-ish of 1 for s well below n; the construction refuses a v
with an entry below ``MIN_SCALE``.

Everything is float64; B[i, i] is positive and the rows are ordered as in CR.
"""
from __future__ import annotations

import numpy as np

MIN_SCALE = 0.05


def generator_roots(n: int, s: int) -> np.ndarray:
    """The s complex roots z_u = -exp(i pi (2u - s + 1) / n) of g."""
    return -np.exp(1j * np.pi * (2 * np.arange(s) - s + 1) / n)


def generator(n: int, s: int) -> np.ndarray:
    """g's real coefficients g_0..g_s (g_s = 1)."""
    return np.real(np.poly(generator_roots(n, s))[::-1]) if s else np.ones(1)


def partition_scale(n: int, s: int) -> np.ndarray:
    """v: the all-ones vector projected onto B's row space (exactly 1 when n-s is odd)."""
    if s == 0 or (n - s) % 2:
        return np.ones(n)
    powers = generator_roots(n, s)[:, None] ** np.arange(n)          # (s, n): B's null space
    q = np.linalg.svd(np.concatenate([powers.real, powers.imag]).T, full_matrices=False)[0][:, :s]  # real span: dim s
    return 1.0 - q @ (q.T @ np.ones(n))


def cyclic_mds_matrix(n: int, s: int) -> np.ndarray:
    """B (n x n): row i supported on partitions i..i+s (mod n); any n-s rows decode 1^T."""
    if not 0 <= s < n:
        raise ValueError(f"s = {s} must satisfy 0 <= s < n = {n}")
    g = generator(n, s)
    sign = 1.0 if (n - s) % 2 else -1.0          # x^n = 1 (cyclic) or x^n = -1 (negacyclic)
    v = partition_scale(n, s)
    if v.min() < MIN_SCALE:
        raise ValueError(f"cyclic-MDS for n={n}, s={s}: a partition scale {v.min():.3g} is too close to 0")
    B = np.zeros((n, n))
    for j in range(n):
        for t in range(s + 1):           # x^(j-s) x^t: row j - s + t, wrapping with the sign
            row = j - s + t
            B[row % n, j] = g[t] * (sign if row < 0 else 1.0)
    return B / v

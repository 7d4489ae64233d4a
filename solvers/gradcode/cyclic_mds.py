"""The cyclic-MDS gradient code (Raviv, Tamo, Tandon and Dimakis, "Gradient coding from cyclic
MDS codes and expander graphs", ICML 2018): CR's placement (worker i stores partitions
i..i+s mod n, k = n) with a deterministic B built from a real BCH-type (nega)cyclic MDS code,
decoded by least squares from any n-s replies. The matrix and the argument are in
``formulations.gradcode.mds`` (the verifier checks codes against it); this module makes the code.

Unlike CR's random H there is no seed search: one matrix, far better conditioned than random-H
CR (results/gradcode/codes.md: worst condition 645 against 1.1e6 for the best of 8 CR seeds at
n = 24, s = 3; 8x to 2e6x over n = 12-100, s = 1-5), though its own grows with n and s (the
roots of g bunch at -1; worst sets: s adjacent stragglers).
"""
from __future__ import annotations

from pipeplan.core.errors import InputError
from pipeplan.formulations.gradcode.gradient_code import GradientCode
from pipeplan.formulations.gradcode.mds import cyclic_mds_matrix


def cyclic_mds(n: int, s: int) -> GradientCode:
    if not 0 <= s < n:
        raise InputError("--s", "", f"s = {s} must satisfy 0 <= s < n = {n}")
    try:
        B = cyclic_mds_matrix(n, s)
    except ValueError as exc:
        raise InputError("--s", "", str(exc)) from None
    return GradientCode(scheme="cyclic-mds", s=s, support=B != 0, B=B, decoder="lstsq", wait=n - s,
                        meta={"construction": "cyclic-mds", "cyclic": bool((n - s) % 2 or s == 0)})

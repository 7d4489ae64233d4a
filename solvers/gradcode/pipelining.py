"""Pipelined gradient coding (Su and Li, arXiv 2607.20739): every worker computes one of its
partitions per step, round-robin, stores it, and replies the coded combination of the latest
stored gradient of each of its partitions; a worker with q partitions refreshes each every q
steps, so with q <= s+1 the oldest gradient in a reply is at most s steps old.

Offsets make the workers that share partitions compute different ones in the same step: in a
FR group of s+1 workers, and in CR (worker i computes partition i + (t mod (s+1))), every
partition is computed exactly once per step.
"""
from __future__ import annotations

import numpy as np

from pipeplan.core.deadline import Deadline
from pipeplan.formulations.gradcode.gradient_code import GradientCode
from pipeplan.formulations.gradcode.placement import cyclic_support, pipelined
from pipeplan.solvers.gradcode.cyclic import cyclic_repetition
from pipeplan.solvers.gradcode.fractional import fractional_repetition


def pgc_fr(n: int, s: int) -> GradientCode:
    return pipelined(fractional_repetition(n, s), "pgc-fr")


def pgc_cr(n: int, s: int, *, seed: int = 0, tries: int = 8, decoder: str = "lstsq",
           deadline: Deadline | None = None) -> GradientCode:
    """``decoder="lstsq"``: CR's random B, exact least-squares decoding of stale replies.
    ``decoder="linear"``: PGC-CR as published, an all-ones cyclic B and the fixed decoder
    n / ((n-s)(s+1)) x (sum of the n-s replies): approximate, no inversion."""
    if decoder == "linear":
        support = cyclic_support(n, s)
        code = GradientCode(scheme="pgc-cr", s=s, support=support, B=support.astype(np.float64), decoder="linear",
                            wait=n - s, linear_weight=n / ((n - s) * (s + 1)))
        return pipelined(code, "pgc-cr")
    if decoder != "lstsq":
        raise ValueError(f"unknown PGC-CR decoder {decoder!r} (lstsq or linear)")
    return pipelined(cyclic_repetition(n, s, seed=seed, tries=tries, deadline=deadline), "pgc-cr")

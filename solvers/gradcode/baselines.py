"""Training baselines that are not straggler-tolerant codes (Su and Li compare against them):

* uncoded: worker i holds partition i; the master waits for all n replies (exact);
* ignore-stragglers SGD: uncoded placement, the first n-s replies scaled by n/(n-s);
* ignore-stragglers GC: CR's placement with all-ones B, every worker computes all s+1 partitions
  fresh, the first n-s replies with the fixed linear decoder n/((n-s)(s+1)): PGC-CR's decoder
  without pipelining (our reading of the baseline).

Their ``s`` is the tolerance they guarantee: 0 except for ignore-stragglers GC, whose placement
puts each partition on s+1 workers.
"""
from __future__ import annotations

import numpy as np

from pipeplan.formulations.gradcode.gradient_code import GradientCode
from pipeplan.formulations.gradcode.placement import cyclic_support


def uncoded(n: int) -> GradientCode:
    eye = np.eye(n, dtype=bool)
    return GradientCode(scheme="uncoded", s=0, support=eye, B=np.eye(n), decoder="groups",
                        groups=tuple((i,) for i in range(n)))


def ignore_stragglers_sgd(n: int, s: int) -> GradientCode:
    eye = np.eye(n, dtype=bool)
    return GradientCode(scheme="ignore-sgd", s=0, support=eye, B=np.eye(n), decoder="linear", wait=n - s,
                        linear_weight=n / (n - s))


def ignore_stragglers_gc(n: int, s: int) -> GradientCode:
    support = cyclic_support(n, s)
    return GradientCode(scheme="ignore-gc", s=s, support=support, B=support.astype(np.float64), decoder="linear",
                        wait=n - s, linear_weight=n / ((n - s) * (s + 1)))

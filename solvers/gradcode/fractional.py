"""Fractional repetition (FR; Tandon et al., ICML 2017, section 3): n/(s+1) groups of s+1
workers; every worker of a group stores the group's s+1 partitions and replies their sum; one
reply per group decodes exactly."""
from __future__ import annotations

from pipeplan.core.errors import InputError
from pipeplan.formulations.gradcode.gradient_code import GradientCode
from pipeplan.formulations.gradcode.placement import groups_code


def fractional_repetition(n: int, s: int) -> GradientCode:
    if not 0 <= s < n:
        raise InputError("--s", "", f"s = {s} must satisfy 0 <= s < n = {n}")
    if n % (s + 1):
        raise InputError("--n", "", f"FR needs (s+1) | n: s+1 = {s + 1} does not divide n = {n}")
    groups = [list(range(g, g + s + 1)) for g in range(0, n, s + 1)]
    return groups_code("fr", s, n, groups, [s + 1] * len(groups))

"""Synthetic heterogeneous gradient-coding clusters of any size, for scaling runs.

``synthetic_gradcode(n, seed)``: n workers drawn (seeded) from the catalogue's three tiers
(fast, medium, slow; see ``instances/gradcode.py``), k = n partitions, s = 2 stragglers unless
told, exponential straggler delays. Also loadable by name: ``gradcode/synthetic-n<N>``, with
optional ``-s<S>``, ``-pipe`` and ``-seed<SEED>`` suffixes in that order (e.g.
``gradcode/synthetic-n2000-s3-pipe-seed1``).
"""
from __future__ import annotations

import re

import numpy as np

from pipeplan.core.errors import InputError, brief_value
from pipeplan.core.io import name_number
from pipeplan.core.param_values import MAX_SEED, check_seed
from pipeplan.formulations.gradcode.problem import MAX_SIZE, GradCodeProblem
from pipeplan.instances.gradcode_clusters import TIERS, heterogeneous_problem

NAME = re.compile(r"^gradcode/synthetic-n(?P<n>\d+)(?:-s(?P<s>\d+))?(?P<pipe>-pipe)?(?:-seed(?P<seed>\d+))?$",
                  re.ASCII)     # ASCII digits: a full-width n１２ had been n = 12


def synthetic_gradcode(n: int, seed: int = 0, *, s: int = 2, pipelined: bool = False) -> GradCodeProblem:
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_SIZE:
        # before the n tiers are drawn: n = 2e7 had taken 2.5 GB, 1e8 a MemoryError
        raise InputError("--n", "", f"need 1 to {MAX_SIZE:,} workers, got {n!r}")
    if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s < n:     # "2" had been a TypeError
        raise InputError("--s", "", f"s = {brief_value(s)} must be an integer with 0 <= s < n = {n}")
    check_seed(seed)
    pattern = "".join(np.random.default_rng(seed).choice(sorted(TIERS), size=n))
    name = f"gradcode/synthetic-n{n}-s{s}" + ("-pipe" if pipelined else "") + (f"-seed{seed}" if seed else "")
    return heterogeneous_problem(name, s, pipelined=pipelined, pattern=pattern)


def synthetic_by_name(name: str) -> GradCodeProblem | None:
    """The synthetic instance a ``gradcode/synthetic-...`` name stands for (None: not such a name).
    Its numbers are checked as text first: n of 5,000 digits had been a ValueError traceback
    (past Python's digit limit for int()), n = 2e7 had drawn 2.5 GB of tiers before a refusal."""
    m = NAME.match(name)
    if m is None:
        return None
    shown = name if len(name) <= 80 else f"{name[:60]}... ({len(name):,} characters)"

    def number(group: str, most: int, default: int) -> int:
        return default if m[group] is None else name_number(m[group], most, shown, group)

    n = number("n", MAX_SIZE, 0)
    if n < 1:
        raise InputError(shown, "n", "need at least one worker")
    s = number("s", MAX_SIZE, 2)
    if s >= n:
        raise InputError(shown, "s", f"s = {s} must be below n = {n}")
    return synthetic_gradcode(n, number("seed", MAX_SEED, 0), s=s, pipelined=bool(m["pipe"]))

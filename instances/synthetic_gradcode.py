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

from pipeplan.core.errors import InputError
from pipeplan.formulations.gradcode.problem import GradCodeProblem
from pipeplan.instances.gradcode_clusters import TIERS, heterogeneous_problem

NAME = re.compile(r"^gradcode/synthetic-n(?P<n>\d+)(?:-s(?P<s>\d+))?(?P<pipe>-pipe)?(?:-seed(?P<seed>\d+))?$")


def synthetic_gradcode(n: int, seed: int = 0, *, s: int = 2, pipelined: bool = False) -> GradCodeProblem:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InputError("--n", "", f"need at least one worker, got {n!r}")
    if not 0 <= s < n:
        raise InputError("--s", "", f"s = {s} must satisfy 0 <= s < n = {n}")
    pattern = "".join(np.random.default_rng(seed).choice(sorted(TIERS), size=n))
    name = f"gradcode/synthetic-n{n}-s{s}" + ("-pipe" if pipelined else "") + (f"-seed{seed}" if seed else "")
    return heterogeneous_problem(name, s, pipelined=pipelined, pattern=pattern)


def synthetic_by_name(name: str) -> GradCodeProblem | None:
    """The synthetic instance a ``gradcode/synthetic-...`` name stands for (None: not such a name)."""
    m = NAME.match(name)
    if m is None:
        return None
    return synthetic_gradcode(int(m["n"]), int(m["seed"] or 0), s=int(m["s"] or 2), pipelined=bool(m["pipe"]))

"""A gradient code: placement (support), encoding matrix B, decoder and, for pipelined
schemes, the per-step computation schedule. Plain data, loadable from and written to JSON.

Worker i stores partitions ``support[i]`` and replies ``sum_j B[i, j] g_j`` (g_j the gradient of
partition j it holds). The master decodes the full gradient ``sum_j g_j`` from the replies of
the survivors F with a vector a, a^T B_F = 1^T:

* ``groups``: fractional repetition; one reply from each group decodes (weight 1 each);
* ``lstsq``: least squares on the survivors (cyclic repetition, any code);
* ``linear``: the fixed linear decoder ``linear_weight * sum of the replies`` (approximate:
  PGC-CR as published with an all-ones B, and the ignore-stragglers baselines).

With the count rule (``lstsq``, ``linear``) the master waits for the first ``wait`` replies;
with ``groups`` for the first reply of every group. ``stop = "decodable"`` (least squares only)
is the online rule: the master stops as soon as the replies that arrived decode (1 lies in the
row space of their rows of B), which for a code that decodes from any n-s replies is never
later than the count rule's (n-s)-th reply, and can be much earlier for codes whose early
replies already decode (0/1 rows over disjoint supports, e.g. ``general_assignment``'s team
codes).

``schedule[t % period][i]`` is the partition worker i computes in step t (pipelined schemes; -1
for a worker with no partition). Without a schedule every worker computes all its partitions
every step.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipeplan.core.errors import InputError, brief_value
from pipeplan.core.io import check_fields, check_name, finite_number
from pipeplan.core.result import check_result_fields
from pipeplan.formulations.gradcode.problem import MAX_SIZE

SCHEMA = "pipeplan.gradcode-code/1"
DECODERS = ("groups", "lstsq", "linear")
STOPS = ("count", "decodable")          # the stopping rule of the lstsq decoder
# The linear decoder's weight: the published n / ((n - s) x load) is at most n <= MAX_SIZE; at
# 1e200 the decoding error (the weight squared) passed float range and verify printed inf with
# a numpy RuntimeWarning
MAX_LINEAR_WEIGHT = 1e6
# B's entries: the project's cyclic-MDS codes reach about 1e28 at n = 2,000; past 1e100 a
# worker's coded gradient and the residuals' squares leave float range (a B scaled by 1e300
# verified with residual 1e300 and trained to a loss of 501 without a word)
MAX_B_ENTRY = 1e100
# Workers of a code decoded by least squares: every decode of a straggler set (each verified set,
# and at least one is always verified) is an SVD of an (n - s) x k matrix, cubic in n: about 1 s
# at n = 2,000, the largest size the time-limit guarantee is measured at (results/limits.md), 50 s
# at 4,000 and minutes at 10,000 (`gradcode place --scheme cr --n 10000 --time-limit 2` had run
# past 449 s on its first verified set, at 3.4 GB, and not stopped at SIGTERM)
MAX_LSTSQ_N = 2048


def check_lstsq_size(n: int, source: str, field: str, what: str) -> None:
    """Refuse a least-squares code of more than MAX_LSTSQ_N workers before any is built or decoded."""
    if n > MAX_LSTSQ_N:
        raise InputError(source, field, f"{what} decodes by least squares, at most {MAX_LSTSQ_N:,} workers, got "
                                        f"n = {n:,} (each decode is an SVD of an (n - s) x k matrix, cubic in n; "
                                        f"fr, pgc-fr and the linear decoder have no such limit)")


@dataclass(frozen=True, eq=False)
class GradientCode:
    scheme: str
    s: int
    support: np.ndarray            # (n, k) bool
    B: np.ndarray                  # (n, k) float64
    decoder: str
    wait: int = 0                  # replies awaited by the count rule (lstsq, linear)
    groups: tuple[tuple[int, ...], ...] = ()
    linear_weight: float = 0.0
    schedule: np.ndarray | None = None   # (period, n) int
    meta: dict[str, Any] = field(default_factory=dict)
    stop: str = "count"            # "decodable": stop once the arrived replies decode (lstsq only)

    def __post_init__(self):
        for arr in (self.support, self.B, self.schedule):
            if arr is not None:
                arr.flags.writeable = False
        if self.stop not in STOPS or (self.stop != "count" and self.decoder != "lstsq"):
            raise ValueError(f"stop {self.stop!r}: the lstsq decoder stops by {' or '.join(STOPS)}, the others by count")

    @property
    def n(self) -> int:
        return self.support.shape[0]

    @property
    def k(self) -> int:
        return self.support.shape[1]

    @property
    def pipelined(self) -> bool:
        return self.schedule is not None

    def loads(self) -> np.ndarray:
        """Partitions each worker computes per step (0 for a worker with no partition)."""
        held = self.support.sum(axis=1)
        return np.minimum(held, 1) if self.pipelined else held

    def same_as(self, other: "GradientCode") -> bool:
        """The same code: ``wait`` counts only where the count rule reads it (the groups decoder
        never does, and ``to_dict`` leaves it out there)."""
        return (self.scheme == other.scheme and self.s == other.s and self.decoder == other.decoder
                and (self.decoder == "groups" or self.wait == other.wait)
                and self.groups == other.groups and self.stop == other.stop
                and self.linear_weight == other.linear_weight
                and np.array_equal(self.support, other.support) and np.array_equal(self.B, other.B)
                and ((self.schedule is None and other.schedule is None)
                     or (self.schedule is not None and other.schedule is not None
                         and np.array_equal(self.schedule, other.schedule))))

    def to_dict(self) -> dict:
        d = {"schema": SCHEMA, "scheme": self.scheme, "n": self.n, "k": self.k, "s": self.s,
             "decoder": self.decoder, "pipelined": self.pipelined,
             "support": self.support.astype(int).tolist(), "B": self.B.tolist()}
        if self.decoder == "groups":
            d["groups"] = [list(g) for g in self.groups]
        else:
            d["wait"] = self.wait
        if self.stop != "count":
            d["stop"] = self.stop
        if self.decoder == "linear":
            d["linear_weight"] = self.linear_weight
        if self.schedule is not None:
            d["schedule"] = self.schedule.tolist()
        if self.meta:
            d["meta"] = self.meta
        return d


def _matrix(d: dict, key: str, source: str, dtype) -> np.ndarray:
    rows = d.get(key)
    if not isinstance(rows, list) or not rows or not all(isinstance(r, list) for r in rows):
        raise InputError(source, key, "expected a non-empty list of rows")
    width = len(rows[0])
    # rows and width before any entry: a 2.1 M-row schedule had been checked entry by entry
    # (9 s, 540 MB) and accepted
    for what, size in (("rows", len(rows)), ("entries a row", width)):
        if size > MAX_SIZE:
            raise InputError(source, key, f"{size:,} {what}, more than {MAX_SIZE:,}")
    for i, r in enumerate(rows):
        if len(r) != width or width == 0:
            raise InputError(source, f"{key}[{i}]", f"{len(r)} entries, expected {width} (one per partition)")
        for j, v in enumerate(r):
            if not finite_number(v):
                raise InputError(source, f"{key}[{i}][{j}]", f"not a finite number: {v!r}")
    return np.array(rows, dtype=dtype)


# What ``GradientCode.to_dict`` writes, what a solver's result adds to it (solvers/gradcode/common.py)
# and the solve summary `gradcode place` adds
CODE_FIELDS = ("schema", "scheme", "n", "k", "s", "decoder", "pipelined", "support", "B", "groups", "wait", "stop",
               "linear_weight", "schedule", "meta", "instance", "verification", "max_staleness", "solve")


def code_from_dict(d: dict, source: str = "code") -> GradientCode:
    """Read a code (or a bare placement: ``support`` and ``s``; B defaults to the support's
    ones with the least-squares decoder). Shapes and types are checked here; the rules a code
    must obey (coverage, staleness, ...) by ``checker.violations``."""
    if not isinstance(d, dict):
        raise InputError(source, "", "expected a JSON object")
    if isinstance(d.get("plan"), dict) and "support" in d["plan"]:   # a SolveResult file
        check_result_fields(d, source, "gradcode")
        d = d["plan"]
    if d.get("schema", SCHEMA) != SCHEMA:
        raise InputError(source, "schema", f"expected {SCHEMA}, got {d.get('schema')!r}")
    check_fields(d, CODE_FIELDS, source)
    support_raw = _matrix(d, "support", source, float)
    if not np.isin(support_raw, (0, 1)).all():
        raise InputError(source, "support", "entries must be 0 or 1")
    support = support_raw.astype(bool)
    n, k = support.shape
    for name, have in (("n", n), ("k", k)):     # the problem's limit: a code at n = 20,001 was verified
        if have > MAX_SIZE:
            raise InputError(source, "support", f"{have} {'workers' if name == 'n' else 'partitions'}, "
                                                f"more than {MAX_SIZE:,}")
        if name in d and (isinstance(d[name], bool) or d[name] != have):
            raise InputError(source, name, f"{d[name]!r}, but the support has {have} "
                                           f"{'rows (workers)' if name == 'n' else 'columns (partitions)'}")
    B = _matrix(d, "B", source, np.float64) if "B" in d else support.astype(np.float64)
    if B.shape != support.shape:
        raise InputError(source, "B", f"shape {B.shape}, support is {support.shape}")
    if B.size and np.abs(B).max() > MAX_B_ENTRY:
        i, j = np.unravel_index(int(np.abs(B).argmax()), B.shape)
        raise InputError(source, f"B[{i}][{j}]", f"{B[i, j]:g}: entries must lie within +-{MAX_B_ENTRY:g}")
    s = d.get("s")
    if isinstance(s, bool) or not isinstance(s, int):
        raise InputError(source, "s", f"expected an integer straggler tolerance, got {s!r}")
    if not 0 <= s < n:
        raise InputError(source, "s", f"s = {s} must satisfy 0 <= s < n = {n}")
    decoder = d.get("decoder", "lstsq")
    if decoder not in DECODERS:
        raise InputError(source, "decoder", f"unknown decoder {decoder!r} (known: {', '.join(DECODERS)})")
    if decoder == "lstsq":
        check_lstsq_size(n, source, "decoder", "a code that")
    groups: tuple[tuple[int, ...], ...] = ()
    if decoder == "groups":
        g = d.get("groups")
        if not isinstance(g, list) or not all(isinstance(x, list) and x for x in g):
            raise InputError(source, "groups", "the groups decoder needs a list of non-empty worker lists")
        for gi, members in enumerate(g):
            for w in members:
                if isinstance(w, bool) or not isinstance(w, int) or not 0 <= w < n:
                    raise InputError(source, f"groups[{gi}]", f"not a worker index in 0..{n - 1}: {w!r}")
        groups = tuple(tuple(x) for x in g)
    wait = d.get("wait", n - s)
    if isinstance(wait, bool) or not isinstance(wait, int) or not 1 <= wait <= n:
        raise InputError(source, "wait", f"must be an integer in 1..{n}, got {wait!r}")
    weight = d.get("linear_weight", n / ((n - s) * max(1, int(support.sum(axis=1).max()))))
    if not finite_number(weight) or not 0 < weight <= MAX_LINEAR_WEIGHT:   # true, 1e999, 10**400 had passed
        raise InputError(source, "linear_weight", f"must be a number above 0 and at most {MAX_LINEAR_WEIGHT:g}, "
                                                  f"got {weight!r}")
    stop = d.get("stop", "count")
    if stop not in STOPS or (stop != "count" and decoder != "lstsq"):
        raise InputError(source, "stop", f"expected {' or '.join(STOPS)} ('decodable' only with the lstsq decoder), "
                                         f"got {stop!r}")
    schedule = None
    if d.get("schedule") is not None:
        schedule = _matrix(d, "schedule", source, float)
        if schedule.shape[1] != n or not (schedule == np.round(schedule)).all():
            raise InputError(source, "schedule", f"expected rows of {n} integer partition indices (one per worker)")
        if ((schedule < -1) | (schedule >= k)).any():     # before the cast (1e300 warned in it)
            raise InputError(source, "schedule", f"partition indices must be in -1..{k - 1}")
        schedule = schedule.astype(np.int64)
    # ``pipelined`` is what the schedule makes the code (to_dict writes both): one that says
    # otherwise had been ignored, so "pipelined": true without a schedule ran every partition a
    # worker stores in every step
    pipelined = d.get("pipelined", schedule is not None)
    if not isinstance(pipelined, bool):
        raise InputError(source, "pipelined", f"expected true or false, got {brief_value(pipelined)}")
    if pipelined != (schedule is not None):
        raise InputError(source, "pipelined", "true, but the code has no schedule (a pipelined code's schedule says which "
                                              "partition each worker computes in each step)" if pipelined else
                                              "false, but the code has a schedule (which makes it pipelined: each worker "
                                              "computes one partition a step)")
    scheme, meta = check_name(d.get("scheme", "custom"), source, "scheme"), d.get("meta", {})
    if not isinstance(meta, dict):            # 5, "ab" and [1, 2] had been tracebacks from dict(...)
        raise InputError(source, "meta", f"expected an object, got {meta!r}")
    return GradientCode(scheme=scheme, s=s, support=support, B=B, decoder=decoder,
                        wait=wait, groups=groups, linear_weight=float(weight) if decoder == "linear" else 0.0,
                        schedule=schedule, meta=dict(meta), stop=stop)

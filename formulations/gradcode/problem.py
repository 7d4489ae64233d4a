"""Gradient-coding problem data: n workers, k data partitions, straggler tolerance s.

Plain frozen data, no solver code. Worker i computes the gradient of one partition in
``partition_time_s / speeds[i]`` seconds, straggles in a step with probability
``straggle_prob[i]`` (extra delay from the straggler model) and can store at most
``capacity[i]`` partitions. ``pipelined`` asks for schemes in which every worker computes one of
its partitions per step (Su and Li's pipelined gradient coding).

Timing options (all off by default, which is the historical model of independent steps with
free communication; their semantics are in ``queueing``): ``carry_over`` makes workers queues
whose straggles delay their next work; ``link_mb_per_s`` and ``gradient_mb`` charge the weight
broadcast and the replies on the master's link (gradient_mb 0: the trained model's size when
training); ``decode_s_per_reply`` charges the master's decoding.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from pipeplan.core.errors import InputError
from pipeplan.core.io import check_fields, check_name, finite_number
from pipeplan.formulations.gradcode.straggler import MAX_SECONDS, StragglerModel, model_from_dict

SCHEMA = "pipeplan.gradcode-problem/1"


# Workers and partitions: the verifier and the simulator hold n x k matrices and per-step
# n-vectors; 10,000 is far beyond the clusters the codes target and keeps a typo from
# allocating terabytes.
MAX_SIZE = 10_000
TIMING_FIELDS = ("link_mb_per_s", "gradient_mb", "decode_s_per_reply")
PROBLEM_FIELDS = ("schema", "name", "n", "s", "k", "speeds", "straggle_prob", "capacity", "straggler",
                  "partition_time_s", "pipelined", "carry_over", *TIMING_FIELDS)
# Ranges of the other time and rate fields (``straggler.MAX_SECONDS`` bounds every time term):
# worker speeds relative to speed 1, a gradient's size (MB), a link's bandwidth (MB/s: 0 is a
# free link, else at least a byte per second; a reply's transfer, gradient_mb / link_mb_per_s,
# at most MAX_SECONDS). --gradient-mb 1e308 --link-mb-per-s 1e-300 made every step inf.
SPEEDS = (1e-6, 1e6)
MAX_GRADIENT_MB = 1e9
LINK_MB_PER_S = (1e-6, 1e12)


@dataclass(frozen=True)
class GradCodeProblem:
    name: str
    n: int
    s: int
    k: int
    speeds: tuple[float, ...]
    straggle_prob: tuple[float, ...]
    capacity: tuple[int, ...]
    straggler: StragglerModel = field(default_factory=StragglerModel)
    partition_time_s: float = 0.5
    pipelined: bool = False
    carry_over: bool = False
    link_mb_per_s: float = 0.0
    gradient_mb: float = 0.0
    decode_s_per_reply: float = 0.0
    source: str = ""

    kind = "gradcode"

    def __post_init__(self):
        where = self.source or self.name
        for name in ("n", "s", "k"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise InputError(where, name, f"must be an integer, got {v!r}")
        if not 1 <= self.n <= MAX_SIZE:
            raise InputError(where, "n", f"need 1 to {MAX_SIZE} workers, got {self.n}")
        if self.k > MAX_SIZE:
            raise InputError(where, "k", f"at most {MAX_SIZE} partitions, got {self.k}")
        if self.s < 0:
            raise InputError(where, "s", f"must be >= 0, got {self.s}")
        if self.s >= self.n:
            raise InputError(where, "s", f"s = {self.s} >= n = {self.n}: at least one worker must reply")
        if self.k < 1:
            raise InputError(where, "k", f"need at least one partition, got {self.k}")
        for name in ("speeds", "straggle_prob", "capacity"):
            v = getattr(self, name)
            if len(v) != self.n:
                raise InputError(where, name, f"{len(v)} values for n = {self.n} workers")
        for i, v in enumerate(self.speeds):
            if not finite_number(v) or not SPEEDS[0] <= v <= SPEEDS[1]:
                raise InputError(where, f"speeds[{i}]", f"must be a positive number from {SPEEDS[0]:g} to {SPEEDS[1]:g} "
                                                        f"(relative to speed 1), got {v!r}")
        for i, v in enumerate(self.straggle_prob):
            if not finite_number(v) or not 0 <= v <= 1:      # true had been taken as 1.0
                raise InputError(where, f"straggle_prob[{i}]", f"must be a number in [0, 1], got {v!r}")
        for i, v in enumerate(self.capacity):
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_SIZE:   # partitions: at most n
                raise InputError(where, f"capacity[{i}]", f"must be an integer from 1 to {MAX_SIZE:,}, got {v!r}")
        if not (finite_number(self.partition_time_s) and 0 < self.partition_time_s <= MAX_SECONDS):
            raise InputError(where, "partition_time_s", f"must be a positive number of seconds, at most "
                                                        f"{MAX_SECONDS:g}, got {self.partition_time_s!r}")
        for name in ("pipelined", "carry_over"):        # "false" had been taken as true
            if not isinstance(getattr(self, name), bool):
                raise InputError(where, name, f"must be true or false, got {getattr(self, name)!r}")
        for name, most in (("link_mb_per_s", LINK_MB_PER_S[1]), ("gradient_mb", MAX_GRADIENT_MB),
                           ("decode_s_per_reply", MAX_SECONDS)):
            v = getattr(self, name)
            if not finite_number(v) or not 0 <= v <= most:
                raise InputError(where, name, f"must be a finite number from 0 to {most:g}, got {v!r}")
        if 0 < self.link_mb_per_s < LINK_MB_PER_S[0]:
            raise InputError(where, "link_mb_per_s", f"must be 0 (a free link) or at least {LINK_MB_PER_S[0]:g} "
                                                     f"MB/s, got {self.link_mb_per_s!r}")
        if self.link_mb_per_s > 0 and self.gradient_mb / self.link_mb_per_s > MAX_SECONDS:
            raise InputError(where, "link_mb_per_s", f"a reply of gradient_mb = {self.gradient_mb:g} MB takes "
                             f"{self.gradient_mb / self.link_mb_per_s:.3g} s at {self.link_mb_per_s:g} MB/s, "
                             f"more than {MAX_SECONDS:g} s")
        if self.straggler.kind == "trace" and len(self.straggler.trace[0]) < self.n:
            raise InputError(self.straggler.trace_file or where, "columns",
                             f"delay trace has {len(self.straggler.trace[0])} columns for n = {self.n} workers")

    def compute_time(self, i: int) -> float:
        """Seconds worker ``i`` needs for one partition's gradient."""
        return self.partition_time_s / self.speeds[i]

    def to_dict(self) -> dict:
        return {"schema": SCHEMA, "name": self.name, "n": self.n, "s": self.s, "k": self.k,
                "partition_time_s": self.partition_time_s, "pipelined": self.pipelined,
                "speeds": list(self.speeds), "straggle_prob": list(self.straggle_prob),
                "capacity": list(self.capacity), "straggler": self.straggler.to_dict(), **self.timing_dict()}

    def timing_dict(self) -> dict:
        """The timing options that differ from their defaults (none: the historical model)."""
        out = {"carry_over": True} if self.carry_over else {}
        out.update({name: getattr(self, name) for name in TIMING_FIELDS if getattr(self, name) != 0})
        return out


def homogeneous_problem(n: int, s: int, *, k: int | None = None, name: str | None = None, speed: float = 1.0,
                        prob: float = 0.2, capacity: int | None = None, straggler: StragglerModel | None = None,
                        partition_time_s: float = 0.5, pipelined: bool = False) -> GradCodeProblem:
    """n identical workers, each able to store s+1 partitions (the storage of FR and CR) unless
    ``capacity`` says otherwise."""
    for label, v in (("--n", n), ("--s", s)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise InputError(label, "", f"must be an integer, got {v!r}")
    if not 1 <= n <= MAX_SIZE:      # before the n-vectors are built (n = 1e20 crashed there)
        raise InputError("--n", "", f"need 1 to {MAX_SIZE} workers, got {n}")
    if not 0 <= s < n:
        raise InputError("--s", "", f"s = {s} must satisfy 0 <= s < n = {n}")
    cap = capacity if capacity is not None else s + 1
    return GradCodeProblem(name=name or f"gradcode/n{n}-s{s}", n=n, s=s, k=n if k is None else k,
                           speeds=(float(speed),) * n, straggle_prob=(float(prob),) * n, capacity=(cap,) * n,
                           straggler=straggler or StragglerModel(), partition_time_s=partition_time_s,
                           pipelined=pipelined)


def problem_from_dict(d: dict, source: str = "problem") -> GradCodeProblem:
    if not isinstance(d, dict):
        raise InputError(source, "", "expected a JSON object")
    if d.get("schema", SCHEMA) != SCHEMA:
        raise InputError(source, "schema", f"expected {SCHEMA}, got {d.get('schema')!r}")
    check_fields(d, PROBLEM_FIELDS, source)
    try:
        n, s = d["n"], d["s"]
    except KeyError as exc:
        raise InputError(source, exc.args[0], "missing") from None
    def seq(key, default):
        v = d.get(key, default)
        if not isinstance(v, list):
            raise InputError(source, key, "expected a list")
        return tuple(v)
    n_ok = n if isinstance(n, int) and 0 < n <= MAX_SIZE else 0
    name = check_name(d["name"], source, "name") if "name" in d else source
    return GradCodeProblem(
        name=name, n=n, s=s, k=d.get("k", n),
        speeds=seq("speeds", [1.0] * n_ok), straggle_prob=seq("straggle_prob", [0.2] * n_ok),
        capacity=seq("capacity", [s + 1 if isinstance(s, int) else 1] * n_ok),
        straggler=model_from_dict(d.get("straggler", {"kind": "exponential"}), source),
        partition_time_s=d.get("partition_time_s", 0.5), pipelined=d.get("pipelined", False),
        carry_over=d.get("carry_over", False), **{name: d.get(name, 0.0) for name in TIMING_FIELDS},
        source=source)

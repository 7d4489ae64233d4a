"""Straggler models: what extra delay each worker adds to its reply in each step.

Plain data. Sampling lives in ``delays``. The delay is *extra* time on top of the worker's
computation; a straggling worker still finishes its computation (and, in pipelined schemes,
stores the gradient it computed), only its reply arrives late.

Kinds (a worker straggles in a step with its own probability ``p_i`` from the problem):

* ``none``: no extra delay.
* ``exponential``: Bernoulli(p_i) x Exp(mean ``mean_s``); the PGC experiments use mean 1 s and
  2 s (Su and Li, arXiv 2607.20739, section on experiments, as summarised in design.md 4.2).
* ``shifted-exponential``: Bernoulli(p_i) x (``shift_s`` + Exp(mean ``mean_s``)).
* ``pareto``: Bernoulli(p_i) x Pareto(scale ``scale_s``, shape ``alpha``): heavy tail.
* ``markov``: persistent stragglers, a two-state chain per worker that stays a straggler with
  probability ``stay`` (0.95) and is a straggler p_i of the time; a straggler's delay is
  Exp(mean ``mean_s``).
* ``trace``: replay a measured delay trace (CSV, one row per step, one column per worker,
  seconds; cycled when shorter than the run); p_i is not used.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pipeplan.core.errors import InputError
from pipeplan.core.io import check_fields, finite_number, inside_folder, load_text, parse_csv, parse_number
from pipeplan.core.sizes import check_memory

KINDS = ("none", "exponential", "shifted-exponential", "pareto", "markov", "trace")
# The most seconds one time term may take: a straggler's mean, shift or scale, a trace's delay
# (and, in the problem, a partition's computation, a reply's transfer, a decode per reply). A
# step sums at most 10,000 partitions, and the statistics of the longest runs stay finite: at
# --mean 1e308 simulate printed inf and NaN statistics with exit 0.
MAX_SECONDS = 1e6
# pareto's shape: a draw is scale x exp(E / alpha) with E at most about 44 (numpy's exponential
# from a 53-bit uniform), so below 0.5 draws pass 10^38 x scale (--alpha 1e-300: every one inf)
PARETO_ALPHA = (0.5, 1000.0)


@dataclass(frozen=True)
class StragglerModel:
    kind: str = "exponential"
    mean_s: float = 1.0
    shift_s: float = 0.0
    scale_s: float = 0.5
    alpha: float = 1.5
    stay: float = 0.95
    trace_file: str = ""
    trace: tuple[tuple[float, ...], ...] = field(default=(), repr=False)

    def __post_init__(self):
        where = "straggler"
        if self.kind not in KINDS:
            raise InputError(where, "kind", f"unknown straggler model {self.kind!r} (known: {', '.join(KINDS)})")
        for name, most in (("mean_s", MAX_SECONDS), ("shift_s", MAX_SECONDS), ("scale_s", MAX_SECONDS),
                           ("alpha", PARETO_ALPHA[1])):
            v = getattr(self, name)
            if not finite_number(v) or not 0 <= v <= most:
                raise InputError(where, name, f"must be a finite number from 0 to {most:g}, got {v!r}")
        if self.kind == "pareto" and not (PARETO_ALPHA[0] <= self.alpha and self.scale_s > 0):
            raise InputError(where, "alpha" if self.alpha < PARETO_ALPHA[0] else "scale_s",
                             f"pareto needs alpha from {PARETO_ALPHA[0]:g} to {PARETO_ALPHA[1]:g} and scale_s > 0, "
                             f"got alpha {self.alpha!r}, scale_s {self.scale_s!r}")
        if not finite_number(self.stay) or not 0 <= self.stay < 1:     # "0.5" had been a TypeError
            raise InputError(where, "stay", f"must be a number in [0, 1), got {self.stay!r}")
        if not isinstance(self.trace_file, str):
            raise InputError(where, "trace_file", f"expected a file name, got {self.trace_file!r}")
        if self.kind == "trace" and not self.trace:
            raise InputError(where, "trace_file", "the trace model needs a delay trace (--trace FILE)")

    def to_dict(self) -> dict:
        d = {"kind": self.kind}
        if self.kind in ("exponential", "shifted-exponential", "markov"):
            d["mean_s"] = self.mean_s
        if self.kind == "shifted-exponential":
            d["shift_s"] = self.shift_s
        if self.kind == "pareto":
            d.update(scale_s=self.scale_s, alpha=self.alpha)
        if self.kind == "markov":
            d["stay"] = self.stay
        if self.kind == "trace":
            d["trace_file"] = self.trace_file
        return d


# Peak memory per cell of a delay trace while it is read: its text, the csv module's string, the
# float and its slot in the row (measured: a 50 MB trace of 12.5M cells peaked at 2.1 GB, 170
# bytes a cell; it had been read whatever the memory cap)
BYTES_PER_TRACE_CELL = 200


def load_trace(path: str | Path) -> tuple[tuple[float, ...], ...]:
    """Rows of per-worker delays (s) from a CSV file; a first row that is not numeric is a header.
    A trace whose cells the memory cap cannot hold is refused before they are parsed."""
    path = Path(path)
    text = load_text(path, what="delay trace")
    check_memory(f"{path}: cells", text.count(",") + text.count("\n") + 1, BYTES_PER_TRACE_CELL)
    rows = parse_csv(text, str(path))
    if rows and not _numeric(rows[0][1][0]):
        rows = rows[1:]
    if not rows:
        raise InputError(str(path), "", "delay trace has no data rows")
    out = []
    width = len(rows[0][1])
    for line, row in rows:
        if len(row) != width:
            raise InputError(str(path), f"line {line}", f"{len(row)} columns, expected {width}")
        vals = tuple(parse_number(c, str(path), f"line {line}: column {col}") for col, c in enumerate(row, start=1))
        for col, v in enumerate(vals, start=1):
            if not 0 <= v <= MAX_SECONDS:
                raise InputError(str(path), f"line {line}: column {col}",
                                 f"delays must be >= 0 and at most {MAX_SECONDS:g} s, got {v}")
        out.append(vals)
    return tuple(out)


def _numeric(cell: str) -> bool:
    try:
        float(cell)
        return True
    except ValueError:
        return False


def model_from_dict(d: dict, source: str = "straggler") -> StragglerModel:
    """The ``straggler`` object of a problem file. A ``trace_file`` is read only from inside the
    folder of ``source`` (the working folder when ``source`` is no file): an absolute path, ``../``
    or a link pointing out is refused before anything is opened, so the error tells nothing about
    the outside file. Errors name ``source`` and ``straggler.<field>``."""
    if not isinstance(d, dict):
        raise InputError(source, "straggler", "expected an object")
    check_fields(d, ("kind", "mean_s", "shift_s", "scale_s", "alpha", "stay", "trace_file"), source, "straggler")
    kw = dict(d)
    if kw.get("kind") == "trace":
        if "trace_file" not in kw:
            raise InputError(source, "straggler.trace_file", "the trace model needs a delay trace file")
        folder = Path(source).parent if Path(source).is_file() else Path(".")
        trace_file = inside_folder(folder, kw["trace_file"], source, "straggler.trace_file")
        if not trace_file.is_file():
            raise InputError(source, "straggler.trace_file", f"no delay trace file {kw['trace_file']!r} in {folder}")
        kw["trace_file"], kw["trace"] = str(trace_file), load_trace(trace_file)
    elif "trace_file" in kw:
        raise InputError(source, "straggler.trace_file", f"only the trace model reads a trace file (kind is "
                                                         f"{kw.get('kind', 'exponential')!r})")
    try:
        return StragglerModel(**kw)
    except InputError as exc:
        raise InputError(source, f"straggler.{exc.field}", exc.message) from None

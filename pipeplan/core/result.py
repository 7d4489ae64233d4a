"""SolveResult: the one result type every solver of every problem returns.

Termination (why the solver stopped) and quality (what the returned plan is known to be) are
two separate statuses, as in Pyomo: a run can stop on its time limit with a feasible plan, or
prove optimality before it.

A run cut short has termination ``time_limit`` whichever limit cut it; ``stopped_by`` says
which: ``"work"`` (a work limit: CP-SAT's deterministic time, NSGA-II's evaluations, HiGHS's
branch-and-bound nodes; the same seed and work limit give the same plan on any machine load)
or ``"time"`` (the wall clock, the safety net: the plan then depends on the machine's speed).
It is None when the run was not cut short (optimal, completed, infeasible, error).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from importlib import metadata
from typing import Any

from pipeplan.core.errors import InputError, brief_value
from pipeplan.core.io import check_fields, parse_json

RESULT_SCHEMA = "pipeplan.result/1"


class Termination(str, Enum):
    OPTIMAL = "optimal"            # the solver proved optimality
    COMPLETED = "completed"        # a heuristic ran to its end
    TIME_LIMIT = "time_limit"      # cut short by a limit: ``SolveResult.stopped_by`` says which
    INFEASIBLE = "infeasible"
    ERROR = "error"


STOPPED_BY = ("work", "time")   # the values of SolveResult.stopped_by besides None


def stop_note(stopped_by: str | None, work: str = "") -> str:
    """The phrase a message gives for what cut a run short ("" when nothing did); ``work``
    says how much work the run did, e.g. "12.5 deterministic s"."""
    if stopped_by == "work":
        return "stopped by its work limit" + (f" ({work})" if work else "")
    if stopped_by == "time":
        return "stopped by its wall-clock time limit"
    return ""


class Quality(str, Enum):
    PROVEN_OPTIMAL = "proven_optimal"
    FEASIBLE = "feasible"
    NONE = "none"


_LIBRARIES = ("pipeplan", "ortools", "pulp", "highspy", "pymoo", "onnx", "onnxruntime", "numpy", "networkx")


def library_versions() -> dict[str, str]:
    out = {}
    for lib in _LIBRARIES:
        try:
            out[lib] = metadata.version(lib)
        except metadata.PackageNotFoundError:
            pass
    return out


@dataclass
class SolveResult:
    problem_kind: str
    instance: str
    solver: str
    termination: Termination
    quality: Quality
    objectives: dict[str, float] = field(default_factory=dict)
    bound: dict[str, float] = field(default_factory=dict)
    bound_source: dict[str, str] = field(default_factory=dict)   # objective key -> the argument behind its bound
    gap: float | None = None
    wall_time_s: float = 0.0
    params: dict[str, Any] = field(default_factory=dict)
    plan: dict[str, Any] | None = None
    front: list[dict[str, Any]] = field(default_factory=list)  # [{"objectives": {...}, "plan": {...}}]
    message: str = ""
    stopped_by: str | None = None      # "work", "time" or None: which limit cut the run short
    versions: dict[str, str] = field(default_factory=library_versions)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["schema"] = RESULT_SCHEMA
        d["termination"] = self.termination.value
        d["quality"] = self.quality.value
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "result") -> "SolveResult":
        """A result as ``to_dict`` writes it. Its fields are checked, not its values' meaning:
        a missing or unknown field, or a termination or quality no result has, is an
        InputError (they had been KeyError, TypeError and ValueError)."""
        if not isinstance(d, dict):
            raise InputError(source, "", f"expected a JSON object, got {type(d).__name__}")
        check_result_fields(d, source)
        missing = next((k for k in ("problem_kind", "instance", "solver", "termination", "quality") if k not in d), None)
        if missing:
            raise InputError(source, missing, "missing")
        d = {k: v for k, v in d.items() if k != "schema"}
        for key, kind in (("termination", Termination), ("quality", Quality)):
            if d[key] not in {m.value for m in kind}:
                raise InputError(source, key, f"unknown {key} {brief_value(d[key])} "
                                              f"(known: {', '.join(m.value for m in kind)})")
            d[key] = kind(d[key])
        return cls(**d)

    @classmethod
    def from_json(cls, text: str, source: str = "result") -> "SolveResult":
        return cls.from_dict(parse_json(text, source), source)


# What SolveResult.to_dict writes (every field of a result file pipeplan writes)
RESULT_FIELDS = ("schema", *(f.name for f in fields(SolveResult)))


def check_result_fields(doc: dict, source: str, kind: str | None = None) -> None:
    """A SolveResult file given where a plan or a code is expected (only its ``plan`` is read):
    refuse a top-level field that no result pipeplan writes has (``"stoped_by"``, ``"note"``: the
    fields outside ``plan`` had not been checked at all), and a result of another problem kind
    than ``kind`` (a gradcode result had been read as a mapping plan)."""
    check_fields(doc, RESULT_FIELDS, source)
    if kind is not None and "problem_kind" in doc and doc["problem_kind"] != kind:
        raise InputError(source, "problem_kind", f"a result of {brief_value(doc['problem_kind'])}, "
                                                 f"where a {kind} plan is expected")

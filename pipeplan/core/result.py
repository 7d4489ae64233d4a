"""SolveResult: the one result type every solver of every problem returns.

Termination (why the solver stopped) and quality (what the returned plan is known to be) are
two separate statuses, as in Pyomo: a run can stop on its time limit with a feasible plan, or
prove optimality before it.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import Enum
from importlib import metadata
from typing import Any

RESULT_SCHEMA = "pipeplan.result/1"


class Termination(str, Enum):
    OPTIMAL = "optimal"            # the solver proved optimality
    COMPLETED = "completed"        # a heuristic ran to its end
    TIME_LIMIT = "time_limit"
    INFEASIBLE = "infeasible"
    ERROR = "error"


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
    gap: float | None = None
    wall_time_s: float = 0.0
    params: dict[str, Any] = field(default_factory=dict)
    plan: dict[str, Any] | None = None
    front: list[dict[str, Any]] = field(default_factory=list)  # [{"objectives": {...}, "plan": {...}}]
    message: str = ""
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
    def from_dict(cls, d: dict[str, Any]) -> "SolveResult":
        d = {k: v for k, v in d.items() if k != "schema"}
        d["termination"] = Termination(d["termination"])
        d["quality"] = Quality(d["quality"])
        return cls(**d)

    @classmethod
    def from_json(cls, text: str) -> "SolveResult":
        return cls.from_dict(json.loads(text))

"""The words every layer shares, spelled once: the systems pipeplan plans for and the objectives
of each (the key under which a SolveResult holds it, its unit, its direction).

Everything that lists systems (registry, bench, report, CLI, tests) or names an objective
(evaluators, solvers, studies, CLI options) reads it from here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

SYSTEMS: tuple[str, ...] = ("mapping", "gradcode", "rollout", "multi")   # multi: several DNNs on one SoC


@dataclass(frozen=True)
class Objective:
    name: str        # as given on the command line and to solvers (``objective="period"``)
    key: str         # key in ``SolveResult.objectives`` and in evaluator dictionaries
    unit: str
    direction: str   # "min" or "max"
    label: str       # for tables and axes


MAPPING_OBJECTIVES: dict[str, Objective] = {o.name: o for o in (
    Objective("period", "period_ms", "ms", "min", "period (ms)"),
    Objective("latency", "latency_ms", "ms", "min", "latency (ms)"),
    Objective("energy", "energy_mj", "mJ", "min", "energy/frame (mJ)"),
    # a running pipeline's energy per inference: static power once per period (evaluator.py)
    Objective("energy_ss", "energy_ss_mj", "mJ", "min", "steady-state energy (mJ)"),
)}
MAPPING_AXES: tuple[str, ...] = tuple(MAPPING_OBJECTIVES)
MappingAxis = Literal[MAPPING_AXES]     # a solver's ``objective`` parameter: one of these
MAPPING_KEYS: dict[str, str] = {o.name: o.key for o in MAPPING_OBJECTIVES.values()}
# The exact mapping solvers' second objective once the first is proven optimal.
MAPPING_TIE_BREAK: dict[str, str] = {"period": "latency", "latency": "period", "energy": "period",
                                     "energy_ss": "period"}

# Several networks on one SoC (formulations/mapping/multi): what a joint plan is scored on.
MULTI_OBJECTIVES: dict[str, Objective] = {o.name: o for o in (
    # HaX-CoNN's fairness: every network's rate over its rate alone on its best PU, the least of them
    Objective("fairness", "min_norm_throughput", "x", "max", "min normalised throughput"),
    Objective("total", "weighted_fps", "fps", "max", "weighted total throughput (fps)"),
    # Puzzle's measure: the request rate every network sustains at once within its deadline
    Objective("rate", "sustained_fps", "fps", "max", "sustained request rate (fps)"),
    Objective("energy", "power_mw", "mW", "min", "power at the demanded rates (mW)"),
)}
MultiAxis = Literal[tuple(MULTI_OBJECTIVES)]

GRADCODE_OBJECTIVES: dict[str, Objective] = {o.name: o for o in (
    Objective("expected", "saa_step_s", "s", "min", "expected step time (s)"),
    Objective("worst", "worst_step_s", "s", "min", "worst-case step time (s)"),
)}
GradcodeAxis = Literal[tuple(GRADCODE_OBJECTIVES)]


def mapping_key(objective: str) -> str:
    """``period`` -> ``period_ms``; a ValueError names the known objectives."""
    try:
        return MAPPING_KEYS[objective]
    except KeyError:
        raise ValueError(f"unknown objective {objective!r} (choose from {', '.join(MAPPING_AXES)})") from None

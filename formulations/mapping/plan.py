"""A mapping plan: ordered stages, the PUs of each stage, where each unit runs, the order of
the units on each PU inside a stage, and the DVFS level of each unit.

JSON form (``"schema": "pipeplan.plan/1"``)::

    {"schema": "pipeplan.plan/1", "instance": "khadas-vim3/Google", "mode": "pipelined",
     "shared_pus": false,
     "stages": [{"pus": ["G"], "order": {"G": ["b0", "b1", "b2", "b3"]}}, ...],
     "levels": {"b0": "4", ...}}          # optional; a missing unit runs at its PU's top level

``order`` both assigns units to PUs and fixes the intra-stage schedule (list order per PU).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pipeplan.core.errors import InputError
from pipeplan.core.io import check_fields
from pipeplan.core.result import check_result_fields
from pipeplan.formulations.mapping.graph_limits import MAX_UNITS

PLAN_SCHEMA = "pipeplan.plan/1"
MODES = ("pipelined", "serial")


@dataclass(frozen=True)
class Stage:
    pus: tuple[str, ...]
    order: dict[str, tuple[str, ...]]  # PU -> units in execution order

    @property
    def units(self) -> tuple[str, ...]:
        return tuple(u for pu in self.pus for u in self.order.get(pu, ()))


@dataclass(frozen=True)
class Plan:
    stages: tuple[Stage, ...]
    mode: str = "pipelined"
    levels: dict[str, str] = field(default_factory=dict)
    shared_pus: bool = False
    instance: str = ""

    def placement(self) -> dict[str, tuple[int, str]]:
        """unit -> (stage index, PU); the first occurrence wins (the checker reports repeats)."""
        out: dict[str, tuple[int, str]] = {}
        for s, stage in enumerate(self.stages):
            for pu in stage.pus:
                for u in stage.order.get(pu, ()):
                    out.setdefault(u, (s, pu))
        return out

    def mapping_string(self, units: tuple[str, ...]) -> str:
        """One letter per unit (the PU's name when it is one letter), as in the measured data."""
        place = self.placement()
        return "".join(place[u][1] if u in place else "?" for u in units)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": PLAN_SCHEMA,
            "instance": self.instance,
            "mode": self.mode,
            "shared_pus": self.shared_pus,
            "stages": [{"pus": list(s.pus), "order": {p: list(v) for p, v in s.order.items()}}
                       for s in self.stages],
            "levels": dict(self.levels),
        }


def _check_plan_size(d: dict, stages_raw: list, source: str) -> None:
    """A plan places each unit once, so none holds more stages, placed units or levels than the
    largest graph pipeplan takes has units; checked before its stages are read (a 60 MB joint
    plan of 200,000 stages had taken 22 s and 2.7 GB before the checker refused it)."""
    placed = sum(sum(len(v) for v in s["order"].values() if isinstance(v, list))
                 for s in stages_raw if isinstance(s, dict) and isinstance(s.get("order"), dict))
    levels = d.get("levels")
    for fld, count in (("stages", len(stages_raw)), ("stages[].order", placed),
                       ("levels", len(levels) if isinstance(levels, dict) else 0)):
        if count > MAX_UNITS:
            raise InputError(source, fld, f"{count:,} entries, more than the {MAX_UNITS:,} units a graph may hold")


def plan_from_dict(d: Any, source: str = "<plan>") -> Plan:
    def fail(fld: str, msg: str) -> InputError:
        return InputError(source, fld, msg)

    if not isinstance(d, dict):
        raise fail("", "expected a JSON object")
    if "plan" in d and "stages" not in d:  # a SolveResult file: take its plan
        check_result_fields(d, source, "mapping")
        d = d["plan"]
        if not isinstance(d, dict):
            raise fail("plan", "the result holds no plan")
    if d.get("schema", PLAN_SCHEMA) != PLAN_SCHEMA:
        raise fail("schema", f"unsupported schema {d.get('schema')!r} (expected {PLAN_SCHEMA!r})")
    check_fields(d, ("schema", "instance", "mode", "shared_pus", "stages", "levels"), source)   # Plan.to_dict's
    mode = d.get("mode", "pipelined")
    if mode not in MODES:
        raise fail("mode", f"must be one of {', '.join(MODES)}")
    stages_raw = d.get("stages")
    if not isinstance(stages_raw, list) or not stages_raw:
        raise fail("stages", "expected a non-empty list of stages")
    _check_plan_size(d, stages_raw, source)
    stages = []
    for i, s in enumerate(stages_raw):
        if not isinstance(s, dict):
            raise fail(f"stages[{i}]", "expected an object")
        check_fields(s, ("pus", "order"), source, f"stages[{i}]")
        pus = s.get("pus")
        order = s.get("order", {})
        if not isinstance(pus, list) or not pus or not all(isinstance(p, str) for p in pus):
            raise fail(f"stages[{i}].pus", "expected a non-empty list of PU names")
        if not isinstance(order, dict):
            raise fail(f"stages[{i}].order", "expected an object PU -> list of units")
        for pu, units in order.items():
            if not isinstance(units, list) or not all(isinstance(u, str) for u in units):
                raise fail(f"stages[{i}].order.{pu}", "expected a list of unit names")
            if pu not in pus:
                raise fail(f"stages[{i}].order.{pu}", f"PU not in the stage's pus {pus}")
        stages.append(Stage(tuple(pus), {p: tuple(v) for p, v in order.items()}))
    levels = d.get("levels", {})        # [], false and 0 had been taken as no levels
    if not isinstance(levels, dict) or not all(isinstance(v, str) for v in levels.values()):
        raise fail("levels", "expected an object unit -> level name")
    shared = d.get("shared_pus", False)
    if not isinstance(shared, bool):      # "no" had been true
        raise fail("shared_pus", f"expected true or false, got {shared!r}")
    return Plan(tuple(stages), mode=mode, levels=dict(levels), shared_pus=shared,
                instance=str(d.get("instance", "")))


def plan_from_assignment(units: tuple[str, ...], stage_of: dict[str, int], pu_of: dict[str, str], *,
                         mode: str = "pipelined", levels: dict[str, str] | None = None,
                         shared_pus: bool = False, instance: str = "") -> Plan:
    """Build a plan from unit -> stage and unit -> PU; units keep ``units`` order on each PU
    (a topological order, so the intra-stage schedule respects precedence)."""
    n_stages = max(stage_of.values()) + 1
    orders: list[dict[str, list[str]]] = [dict() for _ in range(n_stages)]
    for u in units:
        orders[stage_of[u]].setdefault(pu_of[u], []).append(u)
    stages = tuple(Stage(tuple(o), {p: tuple(v) for p, v in o.items()}) for o in orders if o)
    return Plan(stages, mode=mode, levels=dict(levels or {}), shared_pus=shared_pus, instance=instance)


def plan_from_string(units: tuple[str, ...], pus: tuple[str, ...], mapping: str, *, mode: str = "pipelined",
                     levels: dict[str, str] | None = None, instance: str = "", source: str = "--mapping") -> Plan:
    """A mapping string has one PU letter per unit of a chain; consecutive equal letters form
    one stage (in serial mode too: the stages then simply run one after the other)."""
    if len(mapping) != len(units):
        raise InputError(source, "", f"mapping {mapping!r} has {len(mapping)} letters, the instance has {len(units)} units")
    for i, ch in enumerate(mapping):
        if ch not in pus:
            raise InputError(source, f"letter {i + 1}", f"unknown PU {ch!r} (PUs: {', '.join(pus)})")
    stage_of, s = {}, 0
    for i, u in enumerate(units):
        if i and mapping[i] != mapping[i - 1]:
            s += 1
        stage_of[u] = s
    pu_of = dict(zip(units, mapping))
    shared = len(set(mapping)) < s + 1
    return plan_from_assignment(units, stage_of, pu_of, mode=mode, levels=levels, shared_pus=shared,
                                instance=instance)

"""A joint plan: one mapping plan per network of a multi-network instance.

JSON form (``"schema": "pipeplan.multi-plan/1"``)::

    {"schema": "pipeplan.multi-plan/1", "instance": "khadas-vim3/yolo+mobile",
     "plans": {"yolo": {...a pipeplan.plan/1 object...}, "mobile": {...}}}

The rates the networks run at are not part of the plan: the evaluator derives them for each
objective (evaluator.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipeplan.core.errors import InputError, brief_value
from pipeplan.core.io import check_fields
from pipeplan.core.result import check_result_fields
from pipeplan.formulations.mapping.multi.problem import MAX_NETWORKS
from pipeplan.formulations.mapping.plan import Plan, plan_from_dict

MULTI_PLAN_SCHEMA = "pipeplan.multi-plan/1"


@dataclass(frozen=True)
class JointPlan:
    plans: dict[str, Plan]     # network name -> its plan
    instance: str = ""

    def pus_of(self, network: str) -> set[str]:
        """The PUs the network's plan runs units on."""
        return {pu for _, pu in self.plans[network].placement().values()}

    def to_dict(self) -> dict[str, Any]:
        return {"schema": MULTI_PLAN_SCHEMA, "instance": self.instance,
                "plans": {n: p.to_dict() for n, p in self.plans.items()}}


def joint_plan_from_dict(d: Any, source: str = "<plan>") -> JointPlan:
    if isinstance(d, dict) and "plan" in d and "plans" not in d:   # a SolveResult file: take its plan
        check_result_fields(d, source, "multi")
        d = d["plan"]
    if not isinstance(d, dict):
        raise InputError(source, "", "expected a JSON object")
    if d.get("schema") != MULTI_PLAN_SCHEMA:
        raise InputError(source, "schema", f"unsupported schema {d.get('schema')!r} (expected {MULTI_PLAN_SCHEMA!r})")
    check_fields(d, ("schema", "instance", "plans"), source)
    raw = d.get("plans")
    if not isinstance(raw, dict) or not raw:
        raise InputError(source, "plans", "expected an object network -> plan")
    if len(raw) > MAX_NETWORKS:       # before any plan is read, as an instance's networks
        raise InputError(source, "plans", f"{len(raw):,} networks, at most {MAX_NETWORKS}")
    plans = {}
    for name, p in raw.items():
        plans[name] = plan_from_dict(p, f"{source}: plans.{name}")
    instance = d.get("instance", "")
    if not isinstance(instance, str):       # 5 had been read as the instance "5"
        raise InputError(source, "instance", f"expected an instance name, got {brief_value(instance)}")
    return JointPlan(plans, instance=instance)

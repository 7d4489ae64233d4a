"""A SolveResult file given where a plan, a joint plan or a gradient code is expected: its plan is
read, and its own top-level fields are those pipeplan writes (core.result.RESULT_FIELDS)."""
import json
from pathlib import Path

import pytest

from pipeplan.core.errors import InputError
from pipeplan.core.result import RESULT_FIELDS, Quality, SolveResult, Termination, check_result_fields
from pipeplan.formulations.gradcode.gradient_code import code_from_dict
from pipeplan.formulations.mapping.multi.plan import joint_plan_from_dict
from pipeplan.formulations.mapping.plan import plan_from_dict

ROOT = Path(__file__).parents[2]
LOADERS = {"mapping": plan_from_dict, "multi": joint_plan_from_dict, "gradcode": code_from_dict}
SHIPPED = sorted(p for p in (ROOT / "results").rglob("*.json")
                 if isinstance(doc := json.loads(p.read_text()), dict) and doc.get("problem_kind") in LOADERS
                 and doc.get("plan") is not None)


def test_what_to_dict_writes_is_known():
    result = SolveResult("mapping", "x", "heft", Termination.COMPLETED, Quality.FEASIBLE, plan={})
    assert list(result.to_dict()) == [f for f in RESULT_FIELDS if f != "schema"] + ["schema"]
    check_result_fields(result.to_dict(), "r.json")


def test_shipped_results_are_found():
    assert {json.loads(p.read_text())["problem_kind"] for p in SHIPPED} >= {"mapping", "multi"}


@pytest.mark.parametrize("path", SHIPPED, ids=[str(p.relative_to(ROOT)) for p in SHIPPED])
def test_every_shipped_result_loads_as_its_plan(path):
    doc = json.loads(path.read_text())
    LOADERS[doc["problem_kind"]](doc, str(path))


@pytest.mark.parametrize("kind", sorted(LOADERS))
def test_an_unknown_top_level_field_of_a_result_is_refused_by_name(kind):
    plan = {"mapping": {"stages": [{"pus": ["A"]}]},
            "multi": {"schema": "pipeplan.multi-plan/1", "plans": {"a": {"stages": [{"pus": ["A"]}]}}},
            "gradcode": {"support": [[1, 0], [0, 1]], "s": 0}}[kind]
    doc = SolveResult(kind, "x", "s", Termination.COMPLETED, Quality.FEASIBLE, plan=plan).to_dict()
    LOADERS[kind](doc, "r.json")                 # as pipeplan writes it: read
    with pytest.raises(InputError, match=r"^r\.json: stoped_by: unknown field \(known: schema, problem_kind"):
        LOADERS[kind]({**doc, "stoped_by": "time"}, "r.json")

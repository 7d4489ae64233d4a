"""A mapping instance's numbers (a unit's flops and byte sizes, an edge's bytes) are JSON numbers:
finite, not negative, not text, not bools; an integer beyond float range is an InputError naming
the field, not an OverflowError."""
import copy
import json
from pathlib import Path

import pytest

from pipeplan.core.errors import InputError
from pipeplan.formulations.mapping.instance_io import problem_from_dict

GOOD = Path(__file__).parents[1] / "bad_inputs" / "good"
INSTANCE = json.loads((GOOD / "diamond.json").read_text())
INSTANCE["profile"] = json.loads((GOOD / "profile.json").read_text())

FIELDS = [(("graph", "units", 0, "flops"), "graph.units[0].flops"),
          (("graph", "units", 1, "param_bytes"), "graph.units[1].param_bytes"),
          (("graph", "units", 3, "out_bytes"), "graph.units[3].out_bytes"),
          (("graph", "edges", 2, "bytes"), "graph.edges[2].bytes")]


def _with(path, value):
    doc = copy.deepcopy(INSTANCE)
    obj = doc
    for key in path[:-1]:
        obj = obj[key]
    obj[path[-1]] = value
    return doc


@pytest.mark.parametrize("path,field", FIELDS, ids=[f for _, f in FIELDS])
@pytest.mark.parametrize("value,says", [(10**400, "not a finite number: 1000"), (-(10**400), "not a finite number"),
                                        ("1e300", "expected a number, got '1e300'"), ("5", "expected a number"),
                                        (True, "expected a number, got True"), (-1, "negative value -1")])
def test_a_bad_number_is_an_input_error_naming_its_field(path, field, value, says):
    with pytest.raises(InputError) as err:
        problem_from_dict(_with(path, value), "inst.json")
    assert err.value.source == "inst.json" and err.value.field == field
    assert says in err.value.message
    assert len(err.value.one_line()) < 200          # a 400-digit integer is quoted cut short


@pytest.mark.parametrize("path,field", FIELDS, ids=[f for _, f in FIELDS])
def test_whole_and_fractional_json_numbers_are_taken_as_floats(path, field):
    problem = problem_from_dict(_with(path, 12345), "inst.json")
    where, i, attr = path[1], path[2], path[3]
    value = getattr((problem.units if where == "units" else problem.edges)[i], attr)
    assert value == 12345.0 and isinstance(value, float)
    problem = problem_from_dict(_with(path, 0.5), "inst.json")
    assert getattr((problem.units if where == "units" else problem.edges)[i], attr) == 0.5


def test_missing_sizes_default_to_zero_and_a_missing_edge_size_stays_unknown():
    doc = copy.deepcopy(INSTANCE)
    del doc["graph"]["units"][0]["flops"]
    doc["graph"]["edges"][0].pop("bytes", None)
    problem = problem_from_dict(doc, "inst.json")
    assert problem.units[0].flops == 0.0 and problem.edges[0].bytes is None

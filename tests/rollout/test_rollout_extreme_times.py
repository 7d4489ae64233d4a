"""Rollout rounds at the edges of the time rules: a decode step's fixed cost the offline
planners cannot divide by is refused; the smallest one accepted plans with finite results."""
import copy
import json
import math
from pathlib import Path

import pytest

import pipeplan
from pipeplan.core.errors import InputError
from pipeplan.formulations.rollout.problem import problem_from_dict

GOOD = Path(__file__).resolve().parents[1] / "bad_inputs" / "good" / "rollout_problem.json"


def _doc(c0_s: float, trainer_s: float = 0.5) -> dict:
    doc = copy.deepcopy(json.loads(GOOD.read_text()))
    doc["engine"]["c0_s"] = c0_s
    doc["trainer"].update(s_per_token=trainer_s, s_per_microbatch=trainer_s, optimizer_step_s=trainer_s)
    return doc


@pytest.mark.parametrize("c0_s", [5e-324, 1e-300, 9.9e-13])
def test_a_decode_step_below_a_picosecond_is_refused(c0_s):
    # 5e-324 had made CP-SAT's unit 0 (ZeroDivisionError), 1e-300 beside a 1e6 s trainer step-plan's
    # and CP-SAT's step counts infinite (OverflowError): `rollout optimum` ended with exit 1
    with pytest.raises(InputError) as err:
        problem_from_dict(_doc(c0_s, 1e6), "p.json")
    assert err.value.field == "engine.c0_s"


def test_the_smallest_decode_step_plans_finitely():
    problem = problem_from_dict(_doc(1e-12, 1e6), "p.json")
    r = pipeplan.solve(problem, "step-plan", time_limit=2, seed=0)
    assert r.objectives and all(math.isfinite(v) and v >= 0 for v in r.objectives.values()), r.message
    r = pipeplan.solve(problem, "cpsat", time_limit=2, seed=0)
    # the round spans 1e24 units of c0_s / 1000: the documented error result, not a crash
    assert r.objectives or "64-bit integer time" in r.message, r.message

"""Rollout rounds at the edges of the time rules: a decode step's fixed cost the offline
planners cannot divide by is refused; the smallest one accepted plans with finite results."""
import copy
import json
import math
import re
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


def test_optimum_prints_no_nan_when_cpsat_fails(tmp_path):
    # a round CP-SAT's integers cannot hold (the documented error result): its line had read
    # "train end nan s, bound nan s, gap nan%"
    from tests.cli_helpers import run_cli

    f = tmp_path / "p.json"
    f.write_text(json.dumps(_doc(1e-12, 1e6)))
    proc = run_cli("rollout", "optimum", f, "--time-limit", "0.5", "--threads", "1")
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.startswith("cpsat: error/none train end -, bound -, gap -"), proc.stdout
    assert not re.search(r"\bnan\b", proc.stdout, re.IGNORECASE), proc.stdout

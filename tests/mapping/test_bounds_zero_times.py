"""Zero times are valid profile entries: the analytic bounds must not read them as "cannot run"."""
import json
from pathlib import Path

import pipeplan
from pipeplan.formulations.mapping.bounds import analytic_bounds
from pipeplan.formulations.mapping.instance_io import problem_from_dict

GOOD = Path(__file__).resolve().parents[1] / "bad_inputs" / "good"


def test_a_first_unit_of_zero_ms_keeps_the_input_bound_valid():
    doc = json.loads((GOOD / "diamond.json").read_text())
    prof = json.loads((GOOD / "profile.json").read_text())
    prof["time_ms"]["A"]["max"][0] = 0.0       # the first unit takes no time on A
    prof["time_ms"]["B"]["max"][0] = 50.0
    doc["profile"] = prof
    problem = problem_from_dict(doc, "zero_first.json", GOOD)
    first = {b.source: b.value for b in analytic_bounds(problem)["period_ms"]}["input+first"]
    assert first == prof["input_stage"]["A"]["max"]["time_ms"]     # input on A + 0 ms (it had been 51.7)
    # the single-PU plan on A (10.12 ms) had been reported with bound 10.12, gap 0, the optimum being 8.906
    r = pipeplan.solve(problem, "single", seed=0)
    assert r.bound["period_ms"] < r.objectives["period_ms"] and r.gap > 0

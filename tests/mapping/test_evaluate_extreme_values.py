"""`evaluate` at the edges the profile rules accept: zero times give a period of 0 ms."""
import json
from pathlib import Path

from pipeplan.formulations.mapping.instance_io import problem_from_dict
from pipeplan.formulations.mapping.scoring import evaluate_one

GOOD = Path(__file__).resolve().parents[1] / "bad_inputs" / "good"


def test_evaluate_of_a_zero_period_is_valid_json():
    # zero times are allowed; a period of 0 ms had printed "throughput_fps": Infinity (not JSON)
    doc = json.loads((GOOD / "diamond.json").read_text())
    prof = json.loads((GOOD / "profile.json").read_text())
    for pu in prof["time_ms"].values():
        for level in pu:
            pu[level] = [0.0] * len(pu[level])
    for phase in ("input_stage", "output_stage"):
        for pu in prof[phase].values():
            for level in pu.values():
                level["time_ms"] = 0.0
    prof["transfers"]["default"]["fixed_ms"] = 0.0
    doc["profile"] = prof
    out = evaluate_one(problem_from_dict(doc, "zero.json", GOOD), mapping="AABB", plan_file=None, mode="pipelined",
                       freq="max", detail=False)
    assert out["period_ms"] == 0.0 and out["throughput_fps"] is None
    json.dumps(out, allow_nan=False)

"""Networks at the edges the profile rules accept: zero (or denormal) times make a rate the
joint evaluator cannot normalise; such an instance is refused up front, naming the network."""
import json
from pathlib import Path

import pytest

from tests.cli_helpers import assert_input_error, run_cli

GOOD = Path(__file__).resolve().parents[1] / "bad_inputs" / "good"


def _instance(tmp_path, time_ms: float, reference_fps: float | None = None) -> Path:
    doc = json.loads((GOOD / "diamond.json").read_text())
    prof = json.loads((GOOD / "profile.json").read_text())
    for pu in prof["time_ms"].values():
        for level in pu:
            pu[level] = [time_ms] * len(pu[level])
    for phase in ("input_stage", "output_stage"):
        for pu in prof[phase].values():
            for level in pu.values():
                level["time_ms"] = time_ms
    prof["transfers"]["default"]["fixed_ms"] = time_ms
    doc["profile"] = prof
    (tmp_path / "net.json").write_text(json.dumps(doc))
    nets = [{"name": name, "instance": "net.json"} for name in ("a", "b")]
    if reference_fps is not None:
        for n in nets:
            n["reference_fps"] = reference_fps
    f = tmp_path / "m.json"
    f.write_text(json.dumps({"schema": "pipeplan.multi-instance/1", "name": "m", "networks": nets}))
    return f


@pytest.mark.parametrize("time_ms, reference_fps", [(0.0, None), (0.0, 10.0), (5e-324, None)])
def test_a_network_of_no_time_is_refused(tmp_path, time_ms, reference_fps):
    # had been: every solver's result an error (ZeroDivisionError in the joint evaluator), exit 1
    f = _instance(tmp_path, time_ms, reference_fps)
    assert_input_error(run_cli("multi", "solve", f, "--solver", "greedy-partition"),
                       "networks[0].instance", "at least 0.001 ms a frame")


def test_a_network_at_the_least_period_is_planned(tmp_path):
    f = _instance(tmp_path, 1.0)
    proc = run_cli("multi", "solve", f, "--solver", "greedy-partition")
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("objective", ["fairness", "rate"])
def test_the_joint_cpsat_model_plans_networks_at_the_profile_limits(objective):
    # two networks of 1e7 ms blocks: Z's domain had reached 1.4e19 units, past int64 (OR-Tools:
    # TypeError, exit 1); the joint model now counts time coarser there, and matches the MILP
    import pipeplan
    from pipeplan.core.vocabulary import MULTI_OBJECTIVES
    from pipeplan.formulations.mapping.multi.evaluator import evaluate_joint
    from pipeplan.formulations.mapping.multi.plan import joint_plan_from_dict
    from pipeplan.instances.multi import load_multi_file

    problem = load_multi_file(Path(__file__).resolve().parent / "limits" / "m_cap.json")
    r = pipeplan.solve(problem, "cpsat", objective=objective, time_limit=10)
    assert r.termination.value == "optimal" and r.quality.value == "proven_optimal", r.message
    milp = pipeplan.solve(problem, "milp", objective=objective, time_limit=10)
    assert milp.quality.value == "proven_optimal", milp.message
    key = MULTI_OBJECTIVES[objective].key
    assert r.objectives[key] == pytest.approx(milp.objectives[key], rel=1e-6)
    assert r.bound[key] == pytest.approx(r.objectives[key], rel=1e-5) and r.bound[key] >= r.objectives[key]
    ev = evaluate_joint(problem, joint_plan_from_dict(r.plan))       # re-scored: the reported figures hold
    assert ev.objectives()[key] == pytest.approx(r.objectives[key])

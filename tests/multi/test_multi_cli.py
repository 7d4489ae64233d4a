"""``pipeplan multi``: solve, evaluate and instances from the command line; bad input is one
``error:`` line naming the file and field, exit status 2, nothing written."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_helpers import assert_input_error, run_cli


def instance_file(tmp_path, networks, name="m.json"):
    f = tmp_path / name
    f.write_text(json.dumps({"schema": "pipeplan.multi-instance/1", "name": "m", "networks": networks}))
    return f


def test_solve_writes_a_result_the_evaluator_reproduces(tmp_path):
    out = tmp_path / "joint.json"
    proc = run_cli("multi", "solve", "multi/alex+mobile", "--solver", "cpsat", "--objective", "fairness", "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("cpsat: optimal/proven_optimal, min normalised throughput")
    assert proc.stdout.splitlines()[1].startswith("  alex: ") and proc.stdout.splitlines()[2].startswith("  mobile: ")
    result = json.loads(out.read_text())
    proc = run_cli("multi", "evaluate", "multi/alex+mobile", "--plan", out)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["min_norm_throughput"] == pytest.approx(result["objectives"]["min_norm_throughput"])


def test_instances_lists_the_multi_catalogue():
    proc = run_cli("instances", "--system", "multi")
    assert proc.returncode == 0 and "multi/yolo+mobile" in proc.stdout and "time-shared PUs" in proc.stdout


@pytest.mark.parametrize("networks,field,words", [
    ([{"instance": "khadas-vim3/Alex", "weight": 0}], "networks[0].weight", "> 0"),
    ([{"instance": "khadas-vim3/Alex", "min_fps": 100}], "networks[0].min_fps", "at most"),
    ([{"instance": "khadas-vim3/Alex", "latency_ms": 5}], "networks[0].latency_ms", "least latency"),
    ([{"instance": "khadas-vim3/Alex", "name": "a", "min_fps": 15},
      {"instance": "khadas-vim3/MobileV1", "name": "b", "min_fps": 40}], "networks", "infeasible"),
])
def test_bad_or_contradictory_demands_exit_2_and_write_nothing(tmp_path, networks, field, words):
    out = tmp_path / "r.json"
    proc = run_cli("multi", "solve", instance_file(tmp_path, networks), "--solver", "cpsat", "--objective", "rate",
               "--out", out)
    assert_input_error(proc, f"m.json: {field}", words)
    assert not out.exists()


@pytest.mark.parametrize("solver,objective,words", [("cpsat", "total", "not"), ("milp", "energy", "min_fps"),
                                                    ("nsga2", "energy", "min_fps"), ("cpsat", "speed", "unknown")])
def test_objectives_a_solver_cannot_take_are_refused_first(solver, objective, words):
    assert_input_error(run_cli("multi", "solve", "multi/alex+mobile", "--solver", solver, "--objective", objective),
                   "--objective", words)


def test_a_plan_for_other_networks_is_refused(tmp_path):
    plan = tmp_path / "p.json"
    plan.write_text(json.dumps({"schema": "pipeplan.multi-plan/1", "plans": {"x": {"stages": [{"pus": ["G"]}]}}}))
    assert_input_error(run_cli("multi", "evaluate", "multi/alex+mobile", "--plan", plan), "p.json", "no plan for network alex")


@pytest.mark.parametrize("key", ["weight", "min_fps", "latency_ms", "reference_fps"])
@pytest.mark.parametrize("value,words", [(10**400, "finite number > 0, got 1000"), (-(10**400), "finite number > 0"),
                                         (10**30, "must be from"), ("5", "got '5'"), (True, "got True")])
def test_a_network_number_that_is_no_finite_json_number_is_refused_naming_it(tmp_path, key, value, words):
    """An integer beyond float range had made math.isfinite raise OverflowError (a traceback)."""
    from pipeplan.core.errors import InputError
    from pipeplan.instances.multi import load_multi_file

    with pytest.raises(InputError) as err:
        load_multi_file(instance_file(tmp_path, [{"instance": "khadas-vim3/Alex", key: value}]))
    assert err.value.field == f"networks[0].{key}" and words in err.value.message
    assert len(err.value.one_line()) < 300


@pytest.mark.parametrize("solver, why", [("nsga2", "network squeeze (host/squeezenet) is an operator graph: nsga2"),
                                         ("cpsat", "network squeeze (host/squeezenet) is an operator graph: cpsat"),
                                         ("npu-only", "npu-only needs an NPU: the platform has none")])
def test_a_solver_that_cannot_take_the_networks_is_refused_before_any_work(solver, why, tmp_path):
    """nsga2 and npu-only had failed inside the solver (exit 1, `ValueError: ... | at nsga2.py:101`,
    an error result written), and the exact solvers named --objective (found by a hostile-input
    audit)."""
    good = Path(__file__).resolve().parents[1] / "bad_inputs" / "good" / "multi_instance.json"
    out = tmp_path / "result.json"
    proc = run_cli("multi", "solve", good, "--solver", solver, "--objective", "fairness", "--out", out)
    assert_input_error(proc, f"{good}: networks: {why}")
    assert not out.exists()

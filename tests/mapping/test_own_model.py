"""Bring your own model: a network built here (two parallel branches) goes from its ONNX file
to a profile, an instance, a plan, an export and a running, checked pipeline, through the CLI
only, as docs/formats.md describes."""
import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.cli_helpers import assert_input_error, run_cli


def tiny_branchy_net(path):
    """conv -> (relu -> conv | sigmoid -> conv) -> add -> global pool: 7 operators, two branches."""
    rng = np.random.default_rng(0)
    w = lambda name, *dims: numpy_helper.from_array(rng.standard_normal(dims).astype(np.float32), name)
    nodes = [
        helper.make_node("Conv", ["X", "W0"], ["A"], name="stem", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["A"], ["B1"], name="relu"),
        helper.make_node("Conv", ["B1", "W1"], ["C1"], name="left", pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["A"], ["B2"], name="gate"),
        helper.make_node("Conv", ["B2", "W2"], ["C2"], name="right", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["C1", "C2"], ["D"], name="join"),
        helper.make_node("GlobalAveragePool", ["D"], ["Y"], name="pool"),
    ]
    graph = helper.make_graph(nodes, "branchy", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 3, 32, 32])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 16, 1, 1])],
                              initializer=[w("W0", 16, 3, 3, 3), w("W1", 16, 16, 3, 3), w("W2", 16, 16, 3, 3)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)


def test_from_onnx_to_a_running_checked_pipeline(tmp_path):
    tiny_branchy_net(tmp_path / "net.onnx")
    # 1. profile this host, 2. the instance from the model and that profile
    assert run_cli("profile", "net.onnx", "--runs", "3", "--out", "host.json", cwd=tmp_path).returncode == 0
    proc = run_cli("instance", "net.onnx", "--profile", "host.json", "--out", "net.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "net.json").read_text())
    assert doc["schema"] == "pipeplan.mapping-instance/1" and len(doc["graph"]["units"]) == 7
    assert {(e["src"], e["dst"]) for e in doc["graph"]["edges"]} >= {("stem", "relu"), ("stem", "gate"),
                                                                     ("left", "join"), ("right", "join")}
    # 3. solve it, 4. export the plan, 5. run the export and check it against the unsplit model
    proc = run_cli("solve", "net.json", "--solver", "cpsat", "--time-limit", "20", "--out", "plan.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    proc = run_cli("export", "plan.json", "--model", "net.onnx", "--out", "deployed", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    proc = run_cli("run", "deployed", "--frames", "5", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["outputs_match"] is True


def test_instance_measures_this_host_by_default_and_takes_a_platform(tmp_path):
    tiny_branchy_net(tmp_path / "net.onnx")
    proc = run_cli("instance", "net.onnx", "--runs", "2", "--out", "host.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert set(json.loads((tmp_path / "host.json").read_text())["profile"]["pus"]) == {"C0", "C1"}
    proc = run_cli("instance", "net.onnx", "--platform", "a311d", "--out", "board.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert set(json.loads((tmp_path / "board.json").read_text())["profile"]["pus"]) == {"B", "L", "G", "N"}
    assert run_cli("solve", "board.json", "--solver", "heft", cwd=tmp_path).returncode == 0


def test_model_given_where_an_instance_is_expected_says_what_to_do(tmp_path):
    tiny_branchy_net(tmp_path / "net.onnx")
    proc = run_cli("solve", "net.onnx", "--solver", "heft", cwd=tmp_path)
    assert_input_error(proc, "net.onnx", "pipeplan instance net.onnx")


def test_a_profile_of_another_model_is_refused(tmp_path):
    tiny_branchy_net(tmp_path / "net.onnx")
    assert run_cli("profile", "squeezenet", "--runs", "1", "--out", "sq.json", cwd=tmp_path).returncode == 0
    proc = run_cli("instance", "net.onnx", "--profile", "sq.json", "--out", "x.json", cwd=tmp_path)
    assert_input_error(proc, "units")
    assert not (tmp_path / "x.json").exists()


def test_a_profile_given_as_an_instance_names_the_command_that_makes_one(tmp_path):
    tiny_branchy_net(tmp_path / "net.onnx")
    assert run_cli("profile", "net.onnx", "--runs", "1", "--out", "host.json", cwd=tmp_path).returncode == 0
    assert_input_error(run_cli("solve", "host.json", "--solver", "heft", cwd=tmp_path), "schema", "pipeplan instance")

"""Bounds on an untrusted ONNX model's own computation: refused from its shapes before a session
exists (onnx_bounds), or stopped by ONNX Runtime's memory cap and the run's time limit (ort_guard)."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from pipeplan.core.errors import InputError
from pipeplan.deploy.weights import with_random_weights
from pipeplan.formulations.mapping import onnx_bounds
from pipeplan.formulations.mapping.onnx_bounds import MAX_LOOP_TRIPS, MAX_PROPAGATED, check_model_bounds
from pipeplan.formulations.mapping.onnx_graph import LIGHT_MODELS, light_model_path
from tests.cli_helpers import assert_input_error, run_cli

GOOD = Path(__file__).parents[1] / "bad_inputs" / "good"
X = h.make_tensor_value_info("X", T.FLOAT, [1, 4])


def model(nodes, inits=(), outputs=None) -> onnx.ModelProto:
    out = outputs or [h.make_tensor_value_info("Y", T.FLOAT, None)]
    m = h.make_model(h.make_graph(nodes, "g", [X], out, list(inits)), opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def huge_constant(n: int = 3_000_000_000) -> onnx.ModelProto:
    """A 200-byte model whose ConstantOfShape asks for n floats (3e9: 12 GB)."""
    return model([h.make_node("ConstantOfShape", ["s"], ["c"], name="big"),
                  h.make_node("ReduceSum", ["c"], ["r"], keepdims=0), h.make_node("Add", ["X", "r"], ["Y"])],
                 [h.make_tensor("s", T.INT64, [1], [n])])


def loop_node(trips: int | None, value: str, out: str, shape: list[int]) -> tuple[onnx.NodeProto, list]:
    """A Loop carrying ``value`` (of ``shape``) to ``out`` unchanged, and its initializers; with trips
    None it has no trip count and a condition that stays true."""
    body = h.make_graph([h.make_node("Identity", ["c_in"], ["c_out"]), h.make_node("Identity", ["v_in"], ["v_out"])],
                        "body", [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("c_in", T.BOOL, []),
                                 h.make_tensor_value_info("v_in", T.FLOAT, shape)],
                        [h.make_tensor_value_info("c_out", T.BOOL, []), h.make_tensor_value_info("v_out", T.FLOAT, shape)])
    inits = [h.make_tensor("c", T.BOOL, [], [True])]
    if trips is not None:
        inits.append(h.make_tensor("M", T.INT64, [], [trips]))
    return h.make_node("Loop", ["M" if trips is not None else "", "c", value], [out], body=body, name="loop"), inits


def loop(trips: int | None) -> onnx.ModelProto:
    """X -> Loop -> Y (:func:`loop_node`)."""
    node, inits = loop_node(trips, "X", "Y", [1, 4])
    return model([node], inits, [h.make_tensor_value_info("Y", T.FLOAT, [1, 4])])


def input_sized_constant(scale: float) -> onnx.ModelProto:
    """ConstantOfShape of max|X| * scale floats: a size only the run knows."""
    return model([h.make_node("Abs", ["X"], ["a"]), h.make_node("ReduceMax", ["a"], ["m"], keepdims=0),
                  h.make_node("Mul", ["m", "k"], ["mk"]), h.make_node("Cast", ["mk"], ["s0"], to=T.INT64),
                  h.make_node("Unsqueeze", ["s0", "ax"], ["s"]), h.make_node("ConstantOfShape", ["s"], ["c"], name="dyn"),
                  h.make_node("ReduceSum", ["c"], ["Y"], keepdims=0)],
                 [h.make_tensor("k", T.FLOAT, [], [scale]), h.make_tensor("ax", T.INT64, [1], [0])])


def test_a_tensor_above_the_limit_is_refused_naming_it():
    with pytest.raises(InputError) as e:
        check_model_bounds(huge_constant(), "m.onnx")
    assert e.value.source == "m.onnx" and e.value.field == "graph.tensor[c]"
    check_model_bounds(huge_constant(1000), "m.onnx")


def test_a_constant_loop_count_above_the_limit_is_refused_and_one_at_it_accepted():
    with pytest.raises(InputError) as e:
        check_model_bounds(loop(2**62), "m.onnx")
    assert e.value.field == "graph.node[loop]" and str(2**62) in e.value.message
    check_model_bounds(loop(MAX_LOOP_TRIPS), "m.onnx")
    check_model_bounds(loop(None), "m.onnx")      # decided at run time: the time limit bounds it


def test_a_size_from_constants_that_inference_cannot_bound_is_refused():
    """Abs has no shape-data propagation, so the ConstantOfShape's size is unknown though constant."""
    m = model([h.make_node("Abs", ["s"], ["s2"]), h.make_node("ConstantOfShape", ["s2"], ["Y"], name="cos")],
              [h.make_tensor("s", T.INT64, [1], [-3_000_000_000])])
    with pytest.raises(InputError) as e:
        check_model_bounds(m, "m.onnx")
    assert e.value.field == "graph.node[cos]"


def test_a_size_from_the_input_values_passes_the_static_check():
    check_model_bounds(input_sized_constant(1e9), "m.onnx")


@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_every_shipped_model_is_within_the_bounds(name):
    check_model_bounds(onnx.load(str(light_model_path(name))), name)


def test_long_integer_tensors_are_inferred_without_data_propagation(monkeypatch, tmp_path):
    """ONNX propagates an integer tensor as shape data element by element (1.4 GB for 1e7).
    Inference runs in a child process, which records its calls in a file."""
    log = tmp_path / "calls"
    real = onnx_bounds.shape_inference.infer_shapes

    def logged(m, **kw):
        with log.open("a") as f:
            f.write(f"{kw.get('data_prop', False)}\n")
        return real(m, **kw)
    monkeypatch.setattr(onnx_bounds.shape_inference, "infer_shapes", logged)

    def cast_of(n: int) -> onnx.ModelProto:
        return model([h.make_node("ConstantOfShape", ["s"], ["c"], value=h.make_tensor("v", T.INT64, [1], [1])),
                      h.make_node("Cast", ["c"], ["Y"], to=T.FLOAT)], [h.make_tensor("s", T.INT64, [1], [n])])
    onnx_bounds.infer_shapes_safely(cast_of(MAX_PROPAGATED + 1), "m.onnx", strict=False)
    assert log.read_text().split() == ["False"]
    log.unlink()
    onnx_bounds.infer_shapes_safely(cast_of(MAX_PROPAGATED), "m.onnx", strict=False)
    assert log.read_text().split() == ["False", "True"]


def propagated_constant(n: int) -> onnx.ModelProto:
    """Shape -> Mul by n -> int64 ConstantOfShape -> Cast: the n-element tensor exists only in
    data propagation, which ONNX does element by element (1.6e7 had taken 2.2 GB)."""
    return model([h.make_node("Shape", ["X"], ["s"], start=0, end=1), h.make_node("Mul", ["s", "k"], ["n"]),
                  h.make_node("ConstantOfShape", ["n"], ["c"], value=h.make_tensor("v", T.INT64, [1], [1])),
                  h.make_node("Cast", ["c"], ["d"], to=T.INT64), h.make_node("ReduceSum", ["d"], ["r"], keepdims=0),
                  h.make_node("Cast", ["r"], ["r2"], to=T.FLOAT), h.make_node("Add", ["X", "r2"], ["Y"])],
                 [h.make_tensor("k", T.INT64, [1], [n])])


def test_shape_inference_beyond_the_memory_cap_is_refused(tmp_path):
    """1e8 propagated elements would take about 14 GB; the inference child may grow by 64 MiB."""
    onnx.save(propagated_constant(100_000_000), str(tmp_path / "m.onnx"))
    proc = run_cli("profile", tmp_path / "m.onnx", "--runs", 1, "--warmup", 0, "--out", tmp_path / "p.json",
                   env={"PIPEPLAN_MAX_MEMORY_MB": "64"})
    assert_input_error(proc, "m.onnx", "model", "shape inference needs more than 64 MB")
    assert not (tmp_path / "p.json").exists()
    check_model_bounds(propagated_constant(1000), "m.onnx")     # a short propagation passes


def test_shape_inference_beyond_its_time_limit_is_refused(monkeypatch):
    """2e6 propagated elements take about 0.3 s (and 280 MB); the child is stopped at 0.05 s."""
    monkeypatch.setattr(onnx_bounds, "INFERENCE_TIME_S", 0.05)
    with pytest.raises(InputError) as e:
        check_model_bounds(propagated_constant(2_000_000), "m.onnx")
    assert e.value.source == "m.onnx" and "shape inference takes more than 0.05 s" in e.value.message


@pytest.mark.parametrize("make, field", [(huge_constant, "graph.tensor[c]"),
                                         (lambda: loop(2**62), "graph.node[loop]")])
def test_profile_refuses_before_onnx_runtime_starts(tmp_path, make, field):
    onnx.save(make(), str(tmp_path / "m.onnx"))
    proc = run_cli("profile", tmp_path / "m.onnx", "--runs", 1, "--warmup", 0, "--out", tmp_path / "p.json")
    assert_input_error(proc, "m.onnx", field)
    assert not (tmp_path / "p.json").exists()


def test_a_size_only_the_run_knows_is_stopped_by_the_memory_cap(tmp_path):
    """max|X| * 1e9 floats: about 2.5 GB, asked of an ONNX Runtime capped at 64 MiB (it had
    allocated it); the cap refuses the allocation, so the test allocates nothing of the kind."""
    onnx.save(input_sized_constant(1e9), str(tmp_path / "m.onnx"))
    proc = run_cli("profile", tmp_path / "m.onnx", "--runs", 1, "--warmup", 0, "--out", tmp_path / "p.json",
                   env={"PIPEPLAN_MAX_MEMORY_MB": "64"})
    assert_input_error(proc, "m.onnx", "ONNX Runtime cannot run it", "memory")
    assert not (tmp_path / "p.json").exists()


def export_with_stage(tmp_path: Path, stage: onnx.ModelProto) -> Path:
    """The good export (X -> Relu -> Y) with its stage model replaced, the manifest's hash with it."""
    folder = tmp_path / "export"
    shutil.copytree(GOOD / "manifest", folder)
    onnx.save(stage, str(folder / "stage0.onnx"))
    doc = json.loads((folder / "manifest.json").read_text())
    doc["stages"][0]["groups"][0]["sha256"] = hashlib.sha256((folder / "stage0.onnx").read_bytes()).hexdigest()
    (folder / "manifest.json").write_text(json.dumps(doc))
    return folder


def test_run_stops_a_model_that_never_ends_at_its_time_limit(tmp_path):
    """A Loop whose condition stays true had made `run` hang until a signal."""
    folder = export_with_stage(tmp_path, loop(None))
    proc = run_cli("run", folder, "--frames", 2, "--time-limit", 2)
    assert_input_error(proc, "--time-limit", "after 2 s")


@pytest.mark.parametrize("command", ["profile", "instance"])
def test_profiling_stops_a_model_that_never_ends_at_its_time_limit(tmp_path, command):
    """profile, and instance MODEL (which profiles the host the same way), had no time limit:
    such a model ran until Ctrl-C or SIGTERM."""
    onnx.save(loop(None), str(tmp_path / "m.onnx"))
    proc = run_cli(command, tmp_path / "m.onnx", "--runs", 1, "--warmup", 0, "--out", tmp_path / "out.json",
                   "--time-limit", 1)
    assert_input_error(proc, "--time-limit", "still running", "m.onnx", "after 1 s")
    assert not (tmp_path / "out.json").exists()


def test_profiling_of_many_short_runs_stops_at_its_time_limit(tmp_path):
    """The limit had been checked only while a single ONNX Runtime call ran longer than the
    guard's 0.1 s poll: squeezenet's millisecond runs went on past it (a 1e-6 s limit, exit 0)."""
    proc = run_cli("profile", "squeezenet", "--runs", 50, "--warmup", 0, "--out", tmp_path / "out.json",
                   "--time-limit", 1e-6)
    assert_input_error(proc, "--time-limit", "still running", "squeezenet", "after 1e-06 s")
    assert not (tmp_path / "out.json").exists()


def test_run_refuses_a_sub_model_beyond_the_bounds(tmp_path):
    folder = export_with_stage(tmp_path, loop(2**62))
    assert_input_error(run_cli("run", folder, "--frames", 2), "stage0.onnx", "graph.node[loop]")


def test_a_failing_batch_norm_calibration_is_one_input_error():
    """The probe that calibrates the random batch norms ran ONNX Runtime without a guard: an index
    out of range after the batch norm was ORT's traceback instead of an error naming the model."""
    x = h.make_tensor_value_info("X", T.FLOAT, [1, 2, 2, 2])
    stand_ins = [h.make_node("ConstantOfShape", [f"s_{p}"], [p], name=f"w_{p}") for p in ("g", "b", "mu", "var")]
    nodes = stand_ins + [h.make_node("BatchNormalization", ["X", "g", "b", "mu", "var"], ["bn"], name="bn"),
                         h.make_node("Gather", ["bn", "idx"], ["Y"], axis=1, name="gather")]
    inits = [h.make_tensor(f"s_{p}", T.INT64, [1], [2]) for p in ("g", "b", "mu", "var")]
    inits.append(h.make_tensor("idx", T.INT64, [1], [5]))
    graph = h.make_graph(nodes, "g", [x], [h.make_tensor_value_info("Y", T.FLOAT, None)], inits)
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    with pytest.raises(InputError) as e:
        with_random_weights(m, 0, "bn.onnx")
    assert e.value.source == "bn.onnx" and e.value.field == "model" and "calibrate" in e.value.message


def test_the_batch_norm_calibration_stops_at_its_time_limit():
    """export's calibration probe runs the model up to its batch norms: one whose input comes out
    of a Loop that never ends had run until a signal; it is now export's --time-limit error."""
    x = h.make_tensor_value_info("X", T.FLOAT, [1, 4, 1, 1])
    endless, inits = loop_node(None, "X", "looped", [1, 4, 1, 1])
    stand_ins = [h.make_node("ConstantOfShape", [f"s_{p}"], [p], name=f"w_{p}") for p in ("g", "b", "mu", "var")]
    nodes = [endless, h.make_node("Reshape", ["looped", "shape"], ["r"], name="rank4")] + stand_ins + [  # a known rank
        h.make_node("BatchNormalization", ["r", "g", "b", "mu", "var"], ["Y"], name="bn")]
    inits += [h.make_tensor(f"s_{p}", T.INT64, [1], [4]) for p in ("g", "b", "mu", "var")]
    inits.append(h.make_tensor("shape", T.INT64, [4], [1, 4, 1, 1]))
    graph = h.make_graph(nodes, "g", [x], [h.make_tensor_value_info("Y", T.FLOAT, [1, 4, 1, 1])], inits)
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    with pytest.raises(InputError) as e:
        with_random_weights(m, 0, "bn.onnx", time_limit_s=1)
    assert e.value.source == "--time-limit" and "bn.onnx" in e.value.message and "after 1 s" in e.value.message


def big_inputs(n: int, count: int = 1) -> onnx.ModelProto:
    """A model of a few hundred bytes whose ``count`` float inputs of [n] feed one ReduceSum (one
    input) or Sum: its random inputs are numpy arrays outside ONNX Runtime's capped arena."""
    xs = [h.make_tensor_value_info(f"X{i}", T.FLOAT, [n]) for i in range(count)]
    node = (h.make_node("ReduceSum", ["X0"], ["Y"], name="sum", keepdims=1) if count == 1
            else h.make_node("Sum", [x.name for x in xs], ["Y"], name="sum"))
    m = h.make_model(h.make_graph([node], "g", xs, [h.make_tensor_value_info("Y", T.FLOAT, None)]),
                     opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("command", ["profile", "instance"])
@pytest.mark.parametrize("n, count, words", [(50_000_000, 1, "(X0 [50000000] float32)"),
                                             (10_000_000, 4, "(X0 [10000000] float32 and 3 more)")])
def test_random_inputs_above_the_memory_cap_are_refused_before_they_are_drawn(tmp_path, command, n, count, words):
    """One float input of [3e8] had taken 3.6 GB under a cap of 256 MiB (exit 0). Four inputs of
    40 MB each fit a cap of 128 MiB alone, not together: their total counts."""
    onnx.save(big_inputs(n, count), str(tmp_path / "m.onnx"))
    proc = run_cli(command, tmp_path / "m.onnx", "--runs", 1, "--warmup", 0, "--out", tmp_path / "out.json",
                   env={"PIPEPLAN_MAX_MEMORY_MB": "64" if count == 1 else "128"})
    assert_input_error(proc, "m.onnx: graph.input: one frame of random inputs " + words, "above the limit")
    assert not (tmp_path / "out.json").exists()


def test_random_inputs_within_the_cap_are_profiled(tmp_path):
    onnx.save(big_inputs(1_000_000, 4), str(tmp_path / "m.onnx"))
    proc = run_cli("profile", tmp_path / "m.onnx", "--runs", 1, "--warmup", 0, "--out", tmp_path / "p.json",
                   env={"PIPEPLAN_MAX_MEMORY_MB": "128"})
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "p.json").read_text())["units"] == ["sum"]


def test_the_batch_norm_calibration_input_above_the_memory_cap_is_refused(monkeypatch):
    """export's calibration draws one frame of the model's inputs too (64 MiB here, as a float64
    draw and its cast before): refused above the cap before it is drawn."""
    monkeypatch.setenv("PIPEPLAN_MAX_MEMORY_MB", "64")
    x = h.make_tensor_value_info("X", T.FLOAT, [1, 1, 4096, 4096])
    stand_ins = [h.make_node("ConstantOfShape", [f"s_{p}"], [p], name=f"w_{p}") for p in ("g", "b", "mu", "var")]
    nodes = stand_ins + [h.make_node("BatchNormalization", ["X", "g", "b", "mu", "var"], ["Y"], name="bn")]
    inits = [h.make_tensor(f"s_{p}", T.INT64, [1], [1]) for p in ("g", "b", "mu", "var")]
    graph = h.make_graph(nodes, "g", [x], [h.make_tensor_value_info("Y", T.FLOAT, [1, 1, 4096, 4096])], inits)
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    with pytest.raises(InputError) as e:
        with_random_weights(m, 0, "bn.onnx")
    assert (e.value.source, e.value.field) == ("bn.onnx", "graph.input")
    assert "X [1, 1, 4096, 4096] float32" in e.value.message and "above the limit of 64 MiB" in e.value.message
    monkeypatch.setenv("PIPEPLAN_MAX_MEMORY_MB", "1024")
    assert with_random_weights(m, 0, "bn.onnx")[1] == 4                  # it fits a larger cap

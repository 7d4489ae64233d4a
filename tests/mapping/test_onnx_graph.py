"""Loading ONNX models as operator DAGs: the shipped light models, hand-computed FLOPs, and
bad files."""
from __future__ import annotations

import math

import networkx as nx
import onnx
import pytest
from onnx import TensorProto, helper

from pipeplan.core.errors import InputError
from pipeplan.formulations.mapping.onnx_graph import LIGHT_MODELS, light_model_path, load_onnx, onnx_node_names

F32 = TensorProto.FLOAT


def save(model: onnx.ModelProto, path) -> str:
    onnx.save(model, str(path))
    return str(path)


def make_model(nodes, inputs, outputs, initializers=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "t", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def zeros(name: str, dims: list[int]) -> onnx.TensorProto:
    return helper.make_tensor(name, F32, dims, [0.0] * math.prod(dims))


@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_light_models_load_as_dags(name):
    g = load_onnx(light_model_path(name))
    assert nx.is_directed_acyclic_graph(g)
    assert g.number_of_nodes() > 10
    assert not any(d["op"] == "ConstantOfShape" for _, d in g.nodes(data=True))
    for n, d in g.nodes(data=True):
        for key in ("flops", "param_bytes", "out_bytes", "in_bytes"):
            assert math.isfinite(d[key]) and d[key] >= 0, (n, key, d[key])
        assert d["out_bytes"] > 0, n  # every shape is inferred in these models
    assert all(d["bytes"] > 0 and d["tensor"] for *_, d in g.edges(data=True))
    assert sum(d["flops"] for _, d in g.nodes(data=True)) > 1e8
    [(_, shape, dtype)] = g.graph["inputs"]
    assert shape == (1, 3, 224, 224) and dtype == "float32"
    assert len(g.graph["outputs"]) == 1


def test_inception_v1_weights_count_as_parameters():
    g = load_onnx(light_model_path("inception_v1"))
    params = sum(d["param_bytes"] for _, d in g.nodes(data=True))
    assert 26e6 < params < 30e6  # GoogLeNet has ~7M float32 parameters
    flops = sum(d["flops"] for _, d in g.nodes(data=True))
    assert 2.8e9 < flops < 3.4e9  # ~1.5 G multiply-adds


def test_hand_built_conv_model_flops_and_bytes(tmp_path):
    nodes = [
        helper.make_node("Conv", ["X", "W1", "B1"], ["Y"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["Y", "W2"], ["Z"], group=4, pads=[1, 1, 1, 1]),  # unnamed
        helper.make_node("Relu", ["Z"], ["R"], name="relu"),
        helper.make_node("MaxPool", ["R"], ["P"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
    ]
    model = make_model(nodes, [helper.make_tensor_value_info("X", F32, ["N", 3, 8, 8])],
                       [helper.make_tensor_value_info("P", F32, None)],
                       [zeros("W1", [4, 3, 3, 3]), zeros("B1", [4]), zeros("W2", [4, 1, 3, 3])])
    g = load_onnx(save(model, tmp_path / "conv.onnx"))
    assert list(g.nodes) == ["conv1", "Conv_1", "relu", "pool"]
    out = 1 * 4 * 8 * 8  # symbolic batch N counts as 1
    assert g.nodes["conv1"]["flops"] == 2 * out * 3 * 3 * 3 + out  # MACs x 2 + bias adds
    assert g.nodes["Conv_1"]["flops"] == 2 * out * 1 * 3 * 3  # depthwise: C_in / group = 1
    assert g.nodes["relu"]["flops"] == out
    assert g.nodes["pool"]["flops"] == (out // 4) * 4  # output elements x kernel area
    assert g.nodes["conv1"]["param_bytes"] == (4 * 3 * 3 * 3 + 4) * 4
    assert g.nodes["Conv_1"]["param_bytes"] == 4 * 9 * 4
    assert g.nodes["conv1"]["in_bytes"] == 3 * 8 * 8 * 4
    assert g.nodes["conv1"]["out_bytes"] == out * 4
    assert g.edges["conv1", "Conv_1"] == {"bytes": out * 4, "tensor": "Y", "tensors": ("Y",)}
    assert g.graph["inputs"] == [("X", ("N", 3, 8, 8), "float32")]


def test_gemm_and_matmul_flops(tmp_path):
    nodes = [helper.make_node("Gemm", ["A", "B", "C"], ["Y"], name="fc", transB=1),
             helper.make_node("MatMul", ["Y", "M"], ["Z"], name="mm")]
    model = make_model(nodes, [helper.make_tensor_value_info("A", F32, [2, 5])],
                       [helper.make_tensor_value_info("Z", F32, None)],
                       [zeros("B", [3, 5]), zeros("C", [3]), zeros("M", [3, 7])])
    g = load_onnx(save(model, tmp_path / "fc.onnx"))
    assert g.nodes["fc"]["flops"] == 2 * (2 * 3) * 5 + 2 * 3
    assert g.nodes["mm"]["flops"] == 2 * (2 * 7) * 3


def test_unknown_shapes_count_zero_bytes(tmp_path):
    nodes = [helper.make_node("Reshape", ["X", "S"], ["Y"], name="reshape"),
             helper.make_node("Relu", ["Y"], ["Z"], name="relu")]
    model = make_model(nodes, [helper.make_tensor_value_info("X", F32, [2, 3]),
                               helper.make_tensor_value_info("S", TensorProto.INT64, [2])],
                       [helper.make_tensor_value_info("Z", F32, None)])
    g = load_onnx(save(model, tmp_path / "dyn.onnx"))
    assert g.nodes["relu"]["flops"] == 0.0 and g.nodes["relu"]["out_bytes"] == 0.0
    assert g.edges["reshape", "relu"]["bytes"] == 0.0


def test_duplicate_and_missing_names_get_unique_generated_names():
    graph = helper.make_graph(
        [helper.make_node("Relu", ["X"], ["A"], name="dup"),
         helper.make_node("Relu", ["A"], ["B"], name="dup"),
         helper.make_node("Relu", ["B"], ["C"]),
         helper.make_node("Relu", ["C"], ["D"], name="Relu_1")],
        "t", [helper.make_tensor_value_info("X", F32, [1])],
        [helper.make_tensor_value_info("D", F32, [1])])
    names = onnx_node_names(graph)
    assert names[0] == "dup" and names[2] == "Relu_2" and names[3] == "Relu_1"
    assert len(set(names)) == 4


def expect_error(path, field=None) -> InputError:
    with pytest.raises(InputError) as info:
        load_onnx(path)
    err = info.value
    assert err.source == str(path) and str(err).startswith(str(path))
    if field is not None:
        assert err.field == field
    return err


@pytest.mark.parametrize("fraction", [0.1, 0.5, 0.9])
def test_truncated_file(tmp_path, fraction):
    data = light_model_path("inception_v1").read_bytes()
    path = tmp_path / "truncated.onnx"
    path.write_bytes(data[: int(len(data) * fraction)])
    expect_error(path)


def test_garbage_bytes(tmp_path):
    path = tmp_path / "garbage.onnx"
    path.write_bytes(b"this is not an ONNX model\n" * 10)
    expect_error(path, "model")


def test_missing_file(tmp_path):
    err = expect_error(tmp_path / "absent.onnx")
    assert "cannot read" in err.message


def test_cycle_is_reported_with_a_node_on_it(tmp_path):
    nodes = [helper.make_node("Add", ["X", "Z"], ["Y"], name="add"),
             helper.make_node("Relu", ["Y"], ["Z"], name="relu")]
    model = make_model(nodes, [helper.make_tensor_value_info("X", F32, [4])],
                       [helper.make_tensor_value_info("Z", F32, [4])])
    err = expect_error(save(model, tmp_path / "cycle.onnx"), "graph")
    assert "cycle" in err.message and ("'add'" in err.message or "'relu'" in err.message)


def test_dangling_input(tmp_path):
    nodes = [helper.make_node("Relu", ["nowhere"], ["Y"], name="relu")]
    model = make_model(nodes, [], [helper.make_tensor_value_info("Y", F32, [4])])
    err = expect_error(save(model, tmp_path / "dangling.onnx"), "graph.node[relu].input")
    assert "nowhere" in err.message


def test_shape_inference_failure(tmp_path):
    nodes = [helper.make_node("Add", ["X", "W"], ["Y"], name="add")]  # [3] + [4] cannot broadcast
    model = make_model(nodes, [helper.make_tensor_value_info("X", F32, [3])],
                       [helper.make_tensor_value_info("Y", F32, None)], [zeros("W", [4])])
    err = expect_error(save(model, tmp_path / "bad_shapes.onnx"), "model")
    assert "shape inference" in err.message


def test_unknown_light_model_name():
    with pytest.raises(InputError, match="unknown light model"):
        light_model_path("lenet")

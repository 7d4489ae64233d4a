"""Coarsening operator DAGs into block DAGs."""
from __future__ import annotations

import math

import networkx as nx
import onnx
import pytest
from onnx import TensorProto, helper

from pipeplan.core.errors import InputError
from pipeplan.formulations.mapping.coarsen import coarsen
from pipeplan.formulations.mapping.onnx_graph import LIGHT_MODELS, light_model_path, load_onnx

F32 = TensorProto.FLOAT


@pytest.fixture(scope="module")
def graphs():
    return {name: load_onnx(light_model_path(name)) for name in LIGHT_MODELS}


def check_blocks(g: nx.DiGraph, blocks: nx.DiGraph) -> None:
    """Blocks partition the operators, form a DAG named in topological order, and keep the
    totals and the operator edges."""
    assert nx.is_directed_acyclic_graph(blocks)
    assert list(blocks) == [f"b{i}" for i in range(blocks.number_of_nodes())]
    assert all(int(u[1:]) < int(v[1:]) for u, v in blocks.edges)
    members = [m for _, d in blocks.nodes(data=True) for m in d["members"]]
    assert sorted(members) == sorted(g.nodes) and len(members) == len(set(members))
    block_of = {m: b for b, d in blocks.nodes(data=True) for m in d["members"]}
    for b, d in blocks.nodes(data=True):
        assert d["op"] == "block"
        assert set(d["inner"]) == set(d["members"])
        assert d["inner"].number_of_edges() == g.subgraph(d["members"]).number_of_edges()
        position = {m: i for i, m in enumerate(d["members"])}
        assert all(position[a] < position[c] for a, c in d["inner"].edges)
    for u, v in g.edges:
        if block_of[u] != block_of[v]:
            assert blocks.has_edge(block_of[u], block_of[v])
    for key in ("flops", "param_bytes"):
        assert math.isclose(sum(d[key] for _, d in blocks.nodes(data=True)),
                            sum(d[key] for _, d in g.nodes(data=True)))


@pytest.mark.parametrize("mode", ["modules", "chains"])
@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_light_models_coarsen_to_valid_block_dags(graphs, name, mode):
    check_blocks(graphs[name], coarsen(graphs[name], mode))


@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_modules_mode_gives_a_chain_of_blocks(graphs, name):
    blocks = coarsen(graphs[name], "modules")
    names = list(blocks)
    assert list(blocks.edges) == list(zip(names, names[1:]))
    assert all(d["bytes"] > 0 for *_, d in blocks.edges(data=True))


def test_inception_v1_one_block_per_inception_module(graphs):
    g = graphs["inception_v1"]
    blocks = coarsen(g, "modules")
    # stem: conv1 (+pool, LRN), conv2-reduce, conv2 (+LRN, pool); 9 modules; the classifier
    assert blocks.number_of_nodes() == 13
    modules = [b for b, d in blocks.nodes(data=True)
               if sum(g.nodes[m]["op"] == "Concat" for m in d["members"]) == 1]
    assert modules == [f"b{i}" for i in range(3, 12)]
    for b in modules:  # the four parallel branches stay inside the block
        inner = blocks.nodes[b]["inner"]
        assert sum(1 for n in inner if inner.in_degree(n) == 0) == 4
    first, last = blocks.nodes["b0"], blocks.nodes[f"b{blocks.number_of_nodes() - 1}"]
    assert first["in_bytes"] == 3 * 224 * 224 * 4
    assert last["out_bytes"] == 1000 * 4
    for u, v, d in blocks.edges(data=True):
        assert d["bytes"] == blocks.nodes[u]["out_bytes"] == blocks.nodes[v]["in_bytes"]


def test_chains_mode_merges_linear_runs(graphs):
    assert coarsen(graphs["vgg19"], "chains").number_of_nodes() == 1
    g = graphs["inception_v1"]
    blocks = coarsen(g, "chains")
    for _, d in blocks.nodes(data=True):
        inner = d["inner"]
        assert nx.is_directed_acyclic_graph(inner)
        assert all(inner.in_degree(n) <= 1 and inner.out_degree(n) <= 1 for n in inner)
        assert inner.number_of_edges() == len(d["members"]) - 1


def test_cut_points_and_constant_only_operators(tmp_path):
    """conv -> (relu | sigmoid) -> add -> conv2 -> relu2, where conv2's weight is computed by
    a constant-only operator: blocks [conv], [relu, sigmoid, add], [neg, conv2, relu2]."""
    nodes = [
        helper.make_node("Conv", ["X", "W"], ["A"], name="conv"),
        helper.make_node("Relu", ["A"], ["B"], name="relu"),
        helper.make_node("Sigmoid", ["A"], ["C"], name="sigmoid"),
        helper.make_node("Add", ["B", "C"], ["D"], name="add"),
        helper.make_node("Neg", ["W"], ["W2"], name="neg"),  # reads only a weight
        helper.make_node("Conv", ["D", "W2"], ["E"], name="conv2"),
        helper.make_node("Relu", ["E"], ["Y"], name="relu2"),
    ]
    graph = helper.make_graph(
        nodes, "t", [helper.make_tensor_value_info("X", F32, [1, 2, 4, 4])],
        [helper.make_tensor_value_info("Y", F32, None)],
        initializer=[helper.make_tensor("W", F32, [2, 2, 1, 1], [0.0] * 4)])
    path = tmp_path / "diamond.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    g = load_onnx(path)
    blocks = coarsen(g, "modules")
    check_blocks(g, blocks)
    assert [d["members"] for _, d in blocks.nodes(data=True)] == [
        ["conv"], ["relu", "sigmoid", "add"], ["neg", "conv2", "relu2"]]
    assert blocks.edges["b0", "b1"]["bytes"] == 2 * 4 * 4 * 4  # A counted once, read twice


def test_unknown_mode(graphs):
    with pytest.raises(InputError, match="unknown coarsening mode"):
        coarsen(graphs["squeezenet"], "layers")

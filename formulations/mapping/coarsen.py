"""Coarsen an operator DAG (from :func:`onnx_graph.load_onnx`) into a DAG of blocks.

Modes:

* ``"chains"``: merge maximal linear chains (runs where each node has one successor and the
  next has one predecessor).
* ``"modules"``: cut the graph at its *cut points*, the nodes that every input-to-output path
  passes through, so everything between two consecutive cut points (an Inception module's
  branches and the Concat closing them, a residual unit) is one block. For a DAG this is
  cheap: in a topological order a node is a cut point exactly when no edge jumps over it.
  A pure chain (VGG) has a cut point at every node; one block per operator there would make
  ReLUs and pools pipeline stages of their own, so a run of single-operator segments is
  split only before compute operators (Conv, Gemm, MatMul, ...): each block is then a
  module or a compute operator together with the light operators (activation, pool,
  normalisation, reshape) that follow it, which is how inference runtimes fuse layers.
  Operators not reachable from a graph input (constant-only work such as ``Unsqueeze`` of a
  weight) lie on no input-to-output path; they join the block of their first consumer.

Each block node has ``op="block"``, ``members`` (operator names in topological order),
``inner`` (the operator subgraph of its members, keeping parallel branches), summed
``flops`` and ``param_bytes``, ``in_bytes``/``out_bytes`` (bytes of the distinct tensors
entering/leaving the block; graph inputs/outputs count) and ``in_tensors``/``out_tensors``.
Edges carry the summed ``bytes`` of the distinct tensors crossing them and their ``tensors``.
Blocks are named ``b0, b1, ...`` in topological order.
"""
from __future__ import annotations

import networkx as nx

from pipeplan.core.errors import InputError

MODES = ("chains", "modules")
ANCHOR_OPS = frozenset({"Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "Gemm",
                        "MatMul", "MatMulInteger", "QLinearMatMul"})


def coarsen(g: nx.DiGraph, mode: str = "modules") -> nx.DiGraph:
    """The block DAG of operator DAG ``g`` (see the module docstring)."""
    if mode not in MODES:
        raise InputError(g.graph.get("name", "graph"), "mode",
                         f"unknown coarsening mode {mode!r} (modes: {', '.join(MODES)})")
    order = list(nx.lexicographical_topological_sort(g, key=_insertion_key(g)))
    groups = _chains(g, order) if mode == "chains" else _modules(g, order)
    blocks = _block_graph(g, groups)
    blocks.graph["coarsen_mode"] = mode
    return blocks


def _insertion_key(g: nx.DiGraph):
    index = {n: i for i, n in enumerate(g.nodes)}
    return index.__getitem__


def _chains(g: nx.DiGraph, order: list[str]) -> list[list[str]]:
    groups: list[list[str]] = []
    group_of: dict[str, int] = {}
    for n in order:
        preds = list(g.predecessors(n))
        if len(preds) == 1 and g.out_degree(preds[0]) == 1:
            group_of[n] = group_of[preds[0]]
            groups[group_of[n]].append(n)
        else:
            group_of[n] = len(groups)
            groups.append([n])
    return groups


def _modules(g: nx.DiGraph, order: list[str]) -> list[list[str]]:
    graph_inputs = {name for name, *_ in g.graph.get("inputs", [])}
    sources = [n for n in order if set(g.nodes[n].get("in_tensors", ())) & graph_inputs]
    sources = sources or [n for n in order if g.in_degree(n) == 0]
    main_set = set(sources).union(*(nx.descendants(g, s) for s in sources))
    main = [n for n in order if n in main_set]

    groups: list[list[str]] = []
    for segment in _segments(g, main, set(sources)):
        light = len(segment) == 1 and g.nodes[segment[0]].get("op") not in ANCHOR_OPS
        if light and groups:
            groups[-1].extend(segment)
        else:
            groups.append(list(segment))

    position = {n: i for i, n in enumerate(main)}
    group_of = {n: k for k, members in enumerate(groups) for n in members}
    for n in order:
        if n not in main_set:
            first = min((d for d in nx.descendants(g, n) if d in position),
                        key=position.__getitem__, default=None)
            groups[group_of[first] if first is not None else -1].append(n)
    rank = {n: i for i, n in enumerate(order)}
    return [sorted(members, key=rank.__getitem__) for members in groups]


def _segments(g: nx.DiGraph, main: list[str], sources: set[str]) -> list[list[str]]:
    """Split ``main`` (topologically ordered) after each cut point: a node that no edge jumps
    over, counting edges from a virtual source to ``sources`` and from the sinks to a
    virtual sink."""
    position = {n: i for i, n in enumerate(main)}
    end = len(main)
    reach = max(position[s] for s in sources)  # furthest position an edge so far reaches
    segments: list[list[str]] = [[]]
    for i, n in enumerate(main):
        segments[-1].append(n)
        if reach <= i and i < end - 1:
            segments.append([])
        targets = [position[s] for s in g.successors(n)] or [end]
        reach = max(reach, *targets)
    return segments


def _block_graph(g: nx.DiGraph, groups: list[list[str]]) -> nx.DiGraph:
    """Blocks from ``groups``, which both modes list in a topological order of the blocks."""
    tensor_bytes: dict[str, float] = g.graph.get("tensor_bytes", {})
    graph_outputs = {name for name, *_ in g.graph.get("outputs", [])}
    block_of = {n: k for k, members in enumerate(groups) for n in members}
    names = {k: f"b{k}" for k in range(len(groups))}

    crossing: dict[tuple[str, str], dict[str, None]] = {}
    leaving: dict[int, dict[str, None]] = {k: {} for k in names}
    for u, v, data in g.edges(data=True):
        if block_of[u] != block_of[v]:
            key = (names[block_of[u]], names[block_of[v]])
            crossing.setdefault(key, {}).update(dict.fromkeys(data.get("tensors", ())))
            leaving[block_of[u]].update(dict.fromkeys(data.get("tensors", ())))

    blocks = nx.DiGraph(**g.graph)
    for k, members in enumerate(groups):
        produced = {t for n in members for t in g.nodes[n].get("out_tensors", ())}
        outs = dict(leaving[k])
        outs.update(dict.fromkeys(t for t in produced if t in graph_outputs))
        ins = dict.fromkeys(t for n in members for t in g.nodes[n].get("in_tensors", ())
                            if t not in produced)
        blocks.add_node(names[k], op="block", members=list(members),
                        inner=g.subgraph(members).copy(),
                        flops=sum(g.nodes[n]["flops"] for n in members),
                        param_bytes=sum(g.nodes[n]["param_bytes"] for n in members),
                        in_bytes=float(sum(tensor_bytes.get(t, 0) for t in ins)),
                        out_bytes=float(sum(tensor_bytes.get(t, 0) for t in outs)),
                        in_tensors=tuple(ins), out_tensors=tuple(outs))
    for (a, b), tensors in crossing.items():
        blocks.add_edge(a, b, bytes=float(sum(tensor_bytes.get(t, 0) for t in tensors)),
                        tensors=tuple(tensors))
    return blocks

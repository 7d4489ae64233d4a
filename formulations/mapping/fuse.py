"""Fuse an operator DAG (from :func:`onnx_graph.load_onnx`) into the graph a runtime executes.

Inference runtimes do not run an ONNX graph operator by operator: they rewrite it first, and
a plan cut along the operators a runtime never runs separately (a Conv apart from its ReLU)
costs transfers and launches no deployment pays. ``fuse`` applies the rewrites of ONNX
Runtime's graph optimisations up to level "extended" (``ORT_ENABLE_EXTENDED``, which runs the
"basic" level first; docs: onnxruntime.ai/docs/performance/model-optimizations/
graph-optimizations.html, code: onnxruntime/core/optimizer/) that the ARM Compute Library's
graph API also does (``arm_compute/graph/mutators``: ``NodeFusionMutator``), in four rules:

1. **Constant folding** (ORT basic level: ``ConstantFolding``; ARM-CL computes constant
   inputs once, when a function is configured): an operator that depends on no graph input,
   transitively (a ``Reshape`` or ``Unsqueeze`` of a weight stand-in, which ``load_onnx`` did
   not fold since it is no ``Constant``), is computed once when the session is created. It
   joins the unit of the operator that reads its output (its first consumer, through chains
   of such operators) and costs nothing at run time: its output counts as that unit's
   parameter bytes. It stays a member so that deployment places it. A constant read by
   operators of *several* units stays a unit of its own (sharing it would create an edge
   between the units; no model of the onnx wheel has one).
2. **Identity and Dropout elimination** (ORT basic level: ``EliminateIdentity``,
   ``EliminateDropout``; Dropout is the identity at inference): the operator joins its
   producer's unit.
3. **Anchor fusion**: an anchor (Conv, ConvTranspose, Gemm, MatMul) absorbs the chain that
   follows it of BatchNormalization (ORT basic level: ``ConvBNFusion``; ARM-CL
   ``fuse_convolution_with_batch_normalization``), Add or Mul with a parameter as the other
   input (ORT basic: ``ConvAddFusion``, ``ConvMulFusion``; extended: ``MatMulAddFusion``,
   MatMul + bias -> Gemm), ended by at most one activation: Relu, LeakyRelu, Clip, Sigmoid,
   Tanh, HardSigmoid, PRelu (ORT extended: ``ConvActivationFusion``,
   ``GemmActivationFusion``; ARM-CL fuses the activation into Convolution and
   FullyConnected nodes). BatchNormalization after a Gemm/MatMul or ConvTranspose is folded
   as well (its scale and shift fold into the weights and bias the same way).
   Identity/Dropout on the chain are absorbed on the way (rule 2). A step is taken only when
   the unit's output has exactly one consumer and is no graph output: otherwise the
   intermediate tensor must exist in memory anyway, and both runtimes check the same
   condition before fusing.
4. **Residual add + activation**: an activation that follows an element-wise Add or Sum of
   two activations joins it (ARM-CL ``NodeFusionMutator`` fuses activations into Eltwise
   nodes; ORT on CPU fuses Add + Relu into the Conv's ``FusedConv`` ``Z`` input, of which
   keeping the add and the activation one unit apart from the Conv is the conservative
   version). Same single-consumer rule.

Not applied, and why:

* *Add + activation into the preceding Conv* (ORT CPU ``FusedConv`` with ``Z``): ORT does it
  on its CPU provider only; the NPU and GPU runtimes keep the residual add separate (rule 4).
* *A standalone BatchNormalization (+ Mul/Add + activation)*, as in DenseNet's pre-activation
  units: ARM-CL fuses an activation into a BatchNormalization node, but ONNX Runtime runs
  both as their own kernels (there is no BN-activation fusion), so the portable graph keeps them.
* *Concat elimination* (ARM-CL writes branch outputs straight into the concatenated buffer,
  ORT does not): a Concat stays a unit, a copy.
* *Reshape, Flatten, Transpose* stay units: both runtimes run them as operators of their
  own. *Layout transforms* (ORT level "all", NCHWc) are beyond level "extended" and specific
  to one provider.
* *Pooling or LRN into a Conv*: neither runtime does it.

The fused graph has one node per unit, in a topological order, named after its first
operator that does run (an anchor for rule 3, the Add for rule 4, else the operator itself),
so plans stay readable. Node attributes: ``op`` (that operator's op_type), ``fused=True``,
``members`` (every ONNX node name of the unit in topological order, folded constants
included), ``folded`` (the constant members), ``inner`` (the operator subgraph of the
members that run, kept for the PU-support check), ``flops`` (sum over the members that run),
``param_bytes`` (the running members' parameters plus the folded constant tensors they read),
``in_bytes``/``in_tensors`` (activations entering the unit) and ``out_bytes``/``out_tensors``
(tensors leaving it, graph outputs included): intermediates inside the unit stay in registers
or cache and are in neither. Edges are the tensors that cross units (``bytes``, ``tensor``,
``tensors``), as in the operator graph.
"""
from __future__ import annotations

import networkx as nx

ANCHOR_OPS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul"})
NORM_OPS = frozenset({"BatchNormalization"})
AFFINE_OPS = frozenset({"Add", "Mul"})           # with a parameter as the other input
ACTIVATION_OPS = frozenset({"Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh", "HardSigmoid", "PRelu"})
RESIDUAL_OPS = frozenset({"Add", "Sum"})
PASS_OPS = frozenset({"Identity", "Dropout"})


def constant_nodes(g: nx.DiGraph) -> set[str]:
    """Operators that depend on no graph input (transitively): computed once, at load time."""
    graph_inputs = {name for name, *_ in g.graph.get("inputs", [])}
    sources = [n for n in g if set(g.nodes[n].get("in_tensors", ())) & graph_inputs]
    if not sources:          # no operator reads a graph input: nothing is known to be constant
        return set()
    live = set(sources).union(*(nx.descendants(g, s) for s in sources))
    return set(g.nodes) - live


def fuse_groups(g: nx.DiGraph) -> list[list[str]]:
    """The units of ``g`` as lists of operator names (topological order inside a unit; units
    ordered by their first running operator), by the rules of the module docstring."""
    order = list(g.nodes)        # load_onnx adds operators in a topological order
    rank = {n: i for i, n in enumerate(order)}
    const = constant_nodes(g)
    const_tensors = {t for n in const for t in g.nodes[n].get("out_tensors", ())}
    graph_outputs = {name for name, *_ in g.graph.get("outputs", [])}
    readers: dict[str, list[str]] = {}
    for n in order:
        for t in g.nodes[n].get("in_tensors", ()):
            readers.setdefault(t, []).append(n)

    group_of: dict[str, int] = {}
    groups: list[list[str]] = []

    def live_inputs(n: str) -> set[str]:
        return {t for t in g.nodes[n].get("in_tensors", ()) if t not in const_tensors}

    def produced(members: list[str]) -> set[str]:
        return {t for m in members for t in g.nodes[m].get("out_tensors", ())}

    def sole_consumer(members: list[str]) -> str | None:
        """The one operator outside ``members`` that reads what they produce, if there is
        exactly one and no graph output is among their tensors."""
        outs = produced(members)
        if outs & graph_outputs:
            return None
        inside = set(members)
        consumers = {r for t in outs for r in readers.get(t, ()) if r not in inside}
        return consumers.pop() if len(consumers) == 1 else None

    def fed_only_by(n: str, members: list[str]) -> bool:
        ins = live_inputs(n)
        return bool(ins) and ins <= produced(members)

    def has_parameter(n: str) -> bool:
        d = g.nodes[n]
        return d.get("param_bytes", 0.0) > 0 or any(t in const_tensors for t in d.get("in_tensors", ()))

    def extend(members: list[str], take) -> None:
        """Absorb the sole consumer while ``take(c, op)`` says "more" (absorb, go on) or
        "last" (absorb, stop); Identity/Dropout are absorbed on the way."""
        done = False
        while True:
            c = sole_consumer(members)
            if c is None or c in group_of or not fed_only_by(c, members):
                return
            op = g.nodes[c]["op"]
            if op in PASS_OPS:
                members.append(c)
                continue
            step = None if done else take(c, op)
            if step is None:
                return
            members.append(c)
            done = step == "last"

    def anchor_chain(c: str, op: str) -> str | None:
        if op in NORM_OPS or (op in AFFINE_OPS and has_parameter(c)):
            return "more"
        return "last" if op in ACTIVATION_OPS else None   # the activation ends the chain

    def residual_chain(c: str, op: str) -> str | None:
        return "last" if op in ACTIVATION_OPS else None

    for n in order:
        if n in const or n in group_of:
            continue
        op = g.nodes[n]["op"]
        if op in PASS_OPS:
            producers = [p for p in g.predecessors(n) if p not in const]
            if len(producers) == 1 and live_inputs(n):
                k = group_of[producers[0]]
                groups[k].append(n)
                group_of[n] = k
                continue
        members = [n]
        if op in ANCHOR_OPS:
            extend(members, anchor_chain)
        elif op in RESIDUAL_OPS and len(live_inputs(n)) >= 2:
            extend(members, residual_chain)
        for m in members:
            group_of[m] = len(groups)
        groups.append(members)

    # rule 1: a constant operator joins the unit whose operators read its output (directly
    # or through other constants), when that is one unit; reversed order sees readers first
    for n in reversed(order):
        if n in const:
            targets = {group_of.get(s) for s in g.successors(n)}
            if len(targets) == 1 and None not in targets:
                group_of[n] = targets.pop()
    for n in order:
        if n not in const:
            continue
        if n in group_of:
            groups[group_of[n]].append(n)
        else:            # read by several units, or by none: a unit of its own
            group_of[n] = len(groups)
            groups.append([n])
    return [sorted(members, key=rank.__getitem__) for members in groups]


def fuse(g: nx.DiGraph) -> nx.DiGraph:
    """The fused graph of operator DAG ``g`` (see the module docstring)."""
    groups = fuse_groups(g)
    const = constant_nodes(g)
    tensor_bytes: dict[str, float] = g.graph.get("tensor_bytes", {})
    graph_outputs = {name for name, *_ in g.graph.get("outputs", [])}
    const_tensors = {t for n in const for t in g.nodes[n].get("out_tensors", ())}
    rank = {n: i for i, n in enumerate(g.nodes)}

    def name_of(members: list[str]) -> str:
        running = [m for m in members if m not in const]
        return (running or members)[0]

    names = [name_of(members) for members in groups]
    unit_of = {m: names[k] for k, members in enumerate(groups) for m in members}

    crossing: dict[tuple[str, str], dict[str, None]] = {}
    leaving: dict[str, dict[str, None]] = {name: {} for name in names}
    for u, v, data in g.edges(data=True):
        if unit_of[u] != unit_of[v]:
            tensors = dict.fromkeys(data.get("tensors", (data.get("tensor"),)))
            crossing.setdefault((unit_of[u], unit_of[v]), {}).update(tensors)
            leaving[unit_of[u]].update(tensors)
    # units in a topological order, by their first running operator where that leaves a choice
    dag = nx.DiGraph()
    dag.add_nodes_from(names)
    dag.add_edges_from(crossing)
    members_of = dict(zip(names, groups))
    names = list(nx.lexicographical_topological_sort(dag, key=lambda name: rank[name]))

    fused = nx.DiGraph(**g.graph)
    for name in names:
        members = members_of[name]
        running = [m for m in members if m not in const] or members   # a lone constant runs
        produced = {t for m in members for t in g.nodes[m].get("out_tensors", ())}
        read = dict.fromkeys(t for m in running for t in g.nodes[m].get("in_tensors", ()))
        params = [t for t in read if t in const_tensors]
        ins = [t for t in read if t not in produced and t not in const_tensors]
        outs = dict(leaving[name])
        outs.update(dict.fromkeys(t for m in members for t in g.nodes[m].get("out_tensors", ())
                                  if t in graph_outputs))
        fused.add_node(name, op=g.nodes[name]["op"], fused=True, members=list(members),
                       folded=[m for m in members if m in const and m not in running],
                       inner=g.subgraph(running).copy(),
                       flops=float(sum(g.nodes[m]["flops"] for m in running)),
                       param_bytes=float(sum(g.nodes[m]["param_bytes"] for m in running)
                                         + sum(tensor_bytes.get(t, 0) for t in params)),
                       in_bytes=float(sum(tensor_bytes.get(t, 0) for t in ins)),
                       out_bytes=float(sum(tensor_bytes.get(t, 0) for t in outs)),
                       in_tensors=tuple(ins), out_tensors=tuple(outs))
    for (a, b), tensors in crossing.items():
        ts = tuple(tensors)
        fused.add_edge(a, b, bytes=float(sum(tensor_bytes.get(t, 0) for t in ts)), tensor=ts[0], tensors=ts)
    fused.graph["granularity"] = "fused"
    return fused

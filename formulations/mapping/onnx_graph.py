"""Load an ONNX model as an operator DAG annotated with FLOP and byte estimates.

One node per ONNX operator, named by :func:`onnx_node_names`. Node attributes:

* ``op``: the ONNX op_type;
* ``flops``: estimated floating-point operations (a multiply-add counts as 2);
* ``param_bytes``: bytes of the constant tensors the node reads (initializers and the outputs
  of folded constant nodes, see below);
* ``in_bytes`` / ``out_bytes``: bytes of the activation tensors it reads / writes;
* ``in_tensors`` / ``out_tensors``: the names of those tensors (bytes in
  ``graph["tensor_bytes"]``), so coarsening can tell which tensors cross a block boundary.

An edge ``u -> v`` carries ``bytes``, ``tensor`` (the tensor name) and ``tensors`` (all names
when ``u`` feeds ``v`` more than one tensor, which is rare; ``bytes`` is then their sum).

Weights in the ``light_*`` models shipped with the onnx wheel are ``ConstantOfShape`` nodes
fed by an initializer holding the weight's shape. Such stand-ins, and ``Constant`` nodes, are
parameters rather than work: they are folded away and their output bytes count as their
consumers' ``param_bytes``. A ``ConstantOfShape`` fed by a computed shape is a real operator
and stays.

Shapes come from ONNX shape inference. A symbolic dimension (``dim_param``, typically the
batch) counts as 1, since plans are made for one inference at a time; a tensor whose shape or
element type is unknown counts as 0 bytes and contributes no FLOPs.
"""
from __future__ import annotations

import math
from pathlib import Path

import networkx as nx
import onnx
from onnx import GraphProto, ModelProto, NodeProto, TensorProto, helper

from pipeplan.core.errors import InputError, brief_error
from pipeplan.core.io import check_name, read_input
from pipeplan.formulations.mapping.onnx_bounds import infer_shapes_safely

LIGHT_MODELS = ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
                "shufflenet", "squeezenet", "vgg19", "zfnet512")
LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"

# FLOP estimate classes; an op in none of them costs one FLOP per output element.
_MAC_WEIGHT_INPUT = {"Conv": 1, "ConvInteger": 1, "QLinearConv": 3}
_MATMUL_OPS = {"MatMul", "MatMulInteger"}
_WINDOW_POOL_OPS = {"MaxPool", "AveragePool", "LpPool"}
_INPUT_SIZED_OPS = {"GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "ReduceMean",
                    "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                    "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin"}
_VARIADIC_OPS = {"Sum", "Max", "Min", "Mean"}
_NO_FLOP_OPS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Identity",
                "Dropout", "Concat", "Split", "Slice", "Gather", "GatherElements", "GatherND",
                "Shape", "Size", "Expand", "Tile", "Pad", "DepthToSpace", "SpaceToDepth",
                "Constant", "ConstantOfShape", "ScatterND", "ScatterElements"}
_FOLDABLE_OPS = {"Constant", "ConstantOfShape"}

Shape = tuple  # of int | str | None per dimension; None for a tensor of unknown shape


def light_model_path(name: str) -> Path:
    """Path of ``light_<name>.onnx`` in the installed onnx wheel (``name`` in LIGHT_MODELS)."""
    if name not in LIGHT_MODELS:
        raise InputError(name, "model", f"unknown light model (known: {', '.join(LIGHT_MODELS)})")
    return LIGHT_DIR / f"light_{name}.onnx"


def model_path(model: str | Path) -> Path:
    """An ONNX file given by path, or by the name of a model shipped in the onnx wheel
    (``squeezenet``): every command that takes a model takes both."""
    path = Path(model)
    if path.suffix == ".onnx" or path.exists():
        if not path.is_file():
            raise InputError(str(model), "model", "no such ONNX file")
        return path
    if str(model) in LIGHT_MODELS:
        return light_model_path(str(model))
    raise InputError(str(model), "model", f"neither an ONNX file nor a model of the onnx wheel "
                                          f"({', '.join(LIGHT_MODELS)})")


def load_onnx(path: str | Path) -> nx.DiGraph:
    """The operator DAG of the ONNX model at ``path`` (see the module docstring)."""
    return graph_from_model(read_model(path), str(path))


def read_model(path: str | Path) -> ModelProto:
    """Parse an ONNX file (external weight data is not needed and not loaded)."""
    source = str(path)
    data = read_input(path, what="ONNX model")
    try:
        model = onnx.load_model_from_string(data)
    except Exception as exc:  # protobuf DecodeError and friends: the bytes are not a model
        raise InputError(source, "model", f"not a valid ONNX protobuf ({brief_error(exc)})") from None
    if not model.graph.node:
        raise InputError(source, "model.graph.node", "no operator nodes (empty or truncated model)")
    return model


def onnx_node_names(graph: GraphProto) -> list[str]:
    """A unique name per node of ``graph``, in order: its own name when set and not used
    before, else ``"{op_type}_{i}"`` (``i`` its index; ONNX Runtime's convention)."""
    taken = {n.name for n in graph.node if n.name}
    names: list[str] = []
    used: set[str] = set()
    for i, node in enumerate(graph.node):
        name = node.name
        if not name or name in used:
            name = base = f"{node.op_type}_{i}"
            k = 1
            while name in taken or name in used:
                name, k = f"{base}_{k}", k + 1
        used.add(name)
        names.append(name)
    return names


def graph_from_model(model: ModelProto, source: str) -> nx.DiGraph:
    """The annotated operator DAG of a parsed model; ``source`` names it in errors."""
    nodes = list(model.graph.node)
    names = onnx_node_names(model.graph)
    for i, name in enumerate(names):    # the rule instance files hold their units to: a name with a line
        check_name(name, source, f"graph.node[{i}].name", capped=False)  # break had made files solve refused
    initializers = {t.name for t in model.graph.initializer}
    initializers |= {t.values.name for t in model.graph.sparse_initializer}
    inputs = [_node_inputs(n) for n in nodes]
    producer = _producers(nodes, names, source)
    known = initializers | {v.name for v in model.graph.input}
    for i, node_inputs in enumerate(inputs):
        for t in node_inputs:
            if t not in producer and t not in known:
                raise InputError(source, f"graph.node[{names[i]}].input",
                                 f"tensor {t!r} is produced by no node, input or initializer")
    order = _topological_order(inputs, producer, names, source)
    shapes = _tensor_types(_infer_shapes(model, order, source))

    folded: set[int] = set()
    params = set(initializers)
    for i in order:
        if nodes[i].op_type in _FOLDABLE_OPS and all(t in params for t in inputs[i]):
            folded.add(i)
            params.update(t for t in nodes[i].output if t)

    def nbytes(t: str) -> int:
        return _tensor_bytes(*shapes.get(t, (None, 0)))

    g = nx.DiGraph()
    tensor_bytes: dict[str, int] = {}
    for i in order:
        if i in folded:
            continue
        node = nodes[i]
        acts = tuple(t for t in inputs[i] if t not in params)
        outs = tuple(dict.fromkeys(t for t in node.output if t))
        tensor_bytes.update((t, nbytes(t)) for t in acts + outs)
        g.add_node(names[i], op=node.op_type, flops=_flops(node, shapes),
                   param_bytes=float(sum(nbytes(t) for t in inputs[i] if t in params)),
                   in_bytes=float(sum(nbytes(t) for t in acts)),
                   out_bytes=float(sum(nbytes(t) for t in outs)),
                   in_tensors=acts, out_tensors=outs)
        for t in acts:
            if t in producer:
                _add_tensor_edge(g, names[producer[t]], names[i], t, nbytes(t))
    if g.number_of_nodes() == 0:
        raise InputError(source, "model.graph.node", "only constant nodes, no operators")

    def io(values) -> list[tuple[str, Shape | None, str]]:
        return [(v.name, shapes[v.name][0], _dtype_name(shapes[v.name][1]))
                for v in values if v.name not in initializers]

    g.graph.update(name=model.graph.name or Path(source).stem, inputs=io(model.graph.input),
                   outputs=io(model.graph.output), tensor_bytes=tensor_bytes)
    return g


# ------------------------------------------------------------------------------ structure


def _node_inputs(node: NodeProto) -> tuple[str, ...]:
    """Distinct tensors ``node`` reads, including outer-scope names used in its subgraphs
    (If/Loop/Scan bodies), which are real dependencies too."""
    names = [t for t in node.input if t]
    for attr in node.attribute:
        for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
            names.extend(_outer_references(sub))
    return tuple(dict.fromkeys(names))


def _outer_references(graph: GraphProto) -> list[str]:
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    used: list[str] = []
    for node in graph.node:
        used.extend(t for t in _node_inputs(node) if t not in defined)
        defined.update(node.output)
    return used


def _producers(nodes: list[NodeProto], names: list[str], source: str) -> dict[str, int]:
    producer: dict[str, int] = {}
    for i, node in enumerate(nodes):
        for t in node.output:
            if not t:
                continue
            if t in producer:
                raise InputError(source, f"graph.node[{names[i]}].output",
                                 f"tensor {t!r} is also produced by node {names[producer[t]]!r}")
            producer[t] = i
    return producer


def _topological_order(inputs: list[tuple[str, ...]], producer: dict[str, int],
                       names: list[str], source: str) -> list[int]:
    """Node indices in dependency order, the file's order where that is valid."""
    dep = nx.DiGraph()
    dep.add_nodes_from(range(len(inputs)))
    dep.add_edges_from((producer[t], i) for i, ts in enumerate(inputs) for t in ts if t in producer)
    try:
        return list(nx.lexicographical_topological_sort(dep))
    except nx.NetworkXUnfeasible:
        cycle = [names[u] for u, _ in nx.find_cycle(dep)]
        raise InputError(source, "graph", f"cycle through node {cycle[0]!r}: "
                         + " -> ".join(cycle + cycle[:1])) from None


def _infer_shapes(model: ModelProto, order: list[int], source: str) -> ModelProto:
    if order != sorted(order):  # shape inference walks nodes in file order
        reordered = ModelProto()
        reordered.CopyFrom(model)
        del reordered.graph.node[:]
        reordered.graph.node.extend(model.graph.node[i] for i in order)
        model = reordered
    return infer_shapes_safely(model, source, strict=True)


# ---------------------------------------------------------------------------------- sizes


def _tensor_types(model: ModelProto) -> dict[str, tuple[Shape | None, int]]:
    """Tensor name -> (shape, ONNX element type) for every tensor with a known type."""
    out: dict[str, tuple[Shape | None, int]] = {}
    g = model.graph
    for v in list(g.input) + list(g.output) + list(g.value_info):
        if v.type.HasField("tensor_type"):
            tt = v.type.tensor_type
            shape = (tuple(_dim(d) for d in tt.shape.dim) if tt.HasField("shape") else None)
            out[v.name] = (shape, tt.elem_type)
        else:
            out[v.name] = (None, 0)
    for t in g.initializer:
        out[t.name] = (tuple(t.dims), t.data_type)
    return out


def _dim(d) -> int | str | None:
    kind = d.WhichOneof("value")
    return d.dim_value if kind == "dim_value" else (d.dim_param if kind == "dim_param" else None)


def _numel(shape: Shape | None) -> int | None:
    """Element count; symbolic dimensions count as 1, unknown ones make it unknown."""
    if shape is None or any(d is None for d in shape):
        return None
    return math.prod(d if isinstance(d, int) else 1 for d in shape)


def _tensor_bytes(shape: Shape | None, elem_type: int) -> int:
    n = _numel(shape)
    if n is None or elem_type in (TensorProto.UNDEFINED, TensorProto.STRING):
        return 0
    try:
        return n * helper.tensor_dtype_to_np_dtype(elem_type).itemsize
    except (KeyError, ValueError, TypeError):
        return 0


def _dtype_name(elem_type: int) -> str:
    try:
        return str(helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, ValueError, TypeError):
        return "unknown"


def _add_tensor_edge(g: nx.DiGraph, u: str, v: str, tensor: str, nbytes: int) -> None:
    if g.has_edge(u, v):
        data = g.edges[u, v]
        data["bytes"] += nbytes
        data["tensors"] += (tensor,)
    else:
        g.add_edge(u, v, bytes=float(nbytes), tensor=tensor, tensors=(tensor,))


# ---------------------------------------------------------------------------------- flops


def _flops(node: NodeProto, shapes: dict[str, tuple[Shape | None, int]]) -> float:
    """Estimated FLOPs of one operator (0.0 where the shapes it needs are unknown)."""
    def numel(i: int, outputs: bool = False) -> int | None:
        names = node.output if outputs else node.input
        if i >= len(names) or not names[i]:
            return None
        return _numel(shapes.get(names[i], (None, 0))[0])

    def shape(i: int) -> Shape | None:
        return shapes.get(node.input[i], (None, 0))[0] if i < len(node.input) else None

    op = node.op_type
    out = numel(0, outputs=True)
    if op in _NO_FLOP_OPS:
        return 0.0
    if op in _MAC_WEIGHT_INPUT:  # 2 x output elements x (C_in / group) x kernel area
        w = shape(_MAC_WEIGHT_INPUT[op])
        per_output = _numel(w[1:]) if w else None
        bias = out if op == "Conv" and len(node.input) > 2 and node.input[2] else 0
        value = 2 * out * per_output + bias if out is not None and per_output is not None else None
    elif op == "ConvTranspose":  # every input element meets C_out / group x kernel area weights
        w, x = shape(1), numel(0)
        value = 2 * x * _numel(w[1:]) if w and x is not None and _numel(w[1:]) is not None else None
    elif op == "Gemm":
        a = shape(0)
        k = (a[0] if _attr(node, "transA", 0) else a[1]) if a and len(a) == 2 else None
        bias = out if len(node.input) > 2 and node.input[2] else 0
        value = 2 * out * k + bias if out is not None and isinstance(k, int) else None
    elif op in _MATMUL_OPS:
        a = shape(0)
        k = a[-1] if a else None
        value = 2 * out * k if out is not None and isinstance(k, int) else None
    elif op in _WINDOW_POOL_OPS:
        value = out * math.prod(_attr(node, "kernel_shape", [1])) if out is not None else None
    elif op == "LRN":
        value = out * _attr(node, "size", 1) if out is not None else None
    elif op in _INPUT_SIZED_OPS:
        value = numel(0)
    elif op in _VARIADIC_OPS:
        value = out * max(1, len(node.input) - 1) if out is not None else None
    else:
        value = out
    return float(value) if value is not None else 0.0


def _attr(node: NodeProto, name: str, default):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default

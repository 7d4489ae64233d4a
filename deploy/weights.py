"""Deterministic random weights for weightless graphs (the onnx wheel's ``light_*`` models).

Those models hold every weight as a ``ConstantOfShape`` node fed by a constant shape tensor
(a stand-in that fills the weight with 0.02). Exported as they are, every sub-model would
compute nearly constant outputs, and checking that the sub-models compose to the whole network
would prove little. :func:`with_random_weights` replaces each stand-in (and its shape input,
once unused) by an initializer of random values drawn from one seeded generator, in node
order, so the same seed always gives the same weights. The scale depends on what reads the
weight, so activations stay finite and vary with the input:

* convolution / Gemm / MatMul weights: He normal, std = sqrt(2 / fan_in), which keeps the
  activation variance of a ReLU network constant from layer to layer;
* batch-norm scale and variance, and factors of a ``Mul``: uniform in [0.5, 1.5] (positive);
* everything else (biases, batch-norm means, addends): normal with std 0.05.

Every node is given its :func:`onnx_node_names` name first, so the unit names of the DAG do
not change when stand-ins disappear from the node list. Initializers are removed from the
graph inputs (IR version 4 or later allows that), so the model's inputs are the real ones.

Models that keep their weights in files beside the ``.onnx`` are read with
:func:`~pipeplan.formulations.mapping.onnx_external.inline_external_data` first, so every
exported sub-model holds its weights and the export folder is self-contained.
"""
from __future__ import annotations

import math

import numpy as np
import onnxruntime as ort
from onnx import ModelProto, TensorProto, helper, numpy_helper

from pipeplan.core.errors import InputError, brief_error
from pipeplan.core.sizes import memory_cap_bytes
from pipeplan.formulations.mapping.onnx_bounds import infer_shapes_safely
from pipeplan.formulations.mapping.onnx_external import MAX_PROTOBUF
from pipeplan.formulations.mapping.onnx_graph import onnx_node_names
from pipeplan.profiles.ort_guard import RunGuard, session_options
from pipeplan.profiles.random_feeds import check_feeds, random_feeds

# Ops that pass a weight on unchanged in value (only in layout); the role is decided further on.
_LAYOUT_OPS = {"Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity", "Transpose"}
_MATRIX_WEIGHT = {("Conv", 1), ("ConvTranspose", 1), ("Gemm", 1), ("MatMul", 1)}
_POSITIVE = {("BatchNormalization", 1), ("BatchNormalization", 4), ("Mul", 0), ("Mul", 1)}
BIAS_STD = 0.05
DRAW_BYTES = 8            # a weight is drawn as a float64, then cast


def with_random_weights(model: ModelProto, seed: int, source: str = "<model>",
                        time_limit_s: float | None = None) -> tuple[ModelProto, int]:
    """A copy of ``model`` with every constant-fed ``ConstantOfShape`` replaced by random
    weights; returns (model, number of weights generated). ``source`` names the model in errors;
    ``time_limit_s`` bounds the batch-norm calibration's ONNX Runtime run (None: no limit)."""
    out = ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    for node, name in zip(graph.node, onnx_node_names(graph)):
        node.name = name
    constants = _constant_values(out)
    _check_stand_in_sizes(graph, constants, source)
    consumers = _consumers(out)
    rng = np.random.default_rng(seed)
    generated: list[TensorProto] = []
    keep = []
    for node in graph.node:
        if node.op_type == "ConstantOfShape" and node.input and node.input[0] in constants:
            shape = tuple(int(d) for d in constants[node.input[0]].reshape(-1))
            dtype = _fill_dtype(node)
            role = _role(node.output[0], consumers)
            values = _draw(rng, role, shape).astype(dtype)
            generated.append(numpy_helper.from_array(values, node.output[0]))
        else:
            keep.append(node)
    del graph.node[:]
    graph.node.extend(keep)
    graph.initializer.extend(generated)
    used = {t for n in graph.node for t in n.input} | {v.name for v in graph.output}
    unused = [t for t in graph.initializer if t.name not in used]
    for t in unused:
        graph.initializer.remove(t)
    initializers = {t.name for t in graph.initializer}
    real_inputs = [v for v in graph.input if v.name not in initializers and v.name in used]
    del graph.input[:]
    graph.input.extend(real_inputs)
    out.ir_version = max(out.ir_version, 4)
    _calibrate_batch_norms(out, {t.name for t in generated}, rng, source, RunGuard(time_limit_s))
    return out, len(generated)


def _check_stand_in_sizes(graph, constants: dict, source: str) -> None:
    """The weights the stand-ins ask for fit one ONNX model and memory: a 200-byte model whose
    ConstantOfShape asks for 3e9 floats had made export draw 22 GiB (a MemoryError traceback,
    or the machine's memory)."""
    total = need = 0
    for node in graph.node:
        if node.op_type == "ConstantOfShape" and node.input and node.input[0] in constants:
            dims = [int(d) for d in constants[node.input[0]].reshape(-1)]
            if any(d < 0 for d in dims):
                raise InputError(source, f"graph.node[{node.name}]", f"ConstantOfShape of negative shape {dims}")
            n, itemsize = math.prod(dims), _fill_dtype(node).itemsize
            total += n * itemsize
            need += n * (DRAW_BYTES + itemsize)
            if total > MAX_PROTOBUF or need > memory_cap_bytes():
                raise InputError(source, f"graph.node[{node.name}]", f"the ConstantOfShape stand-ins up to here "
                                 f"ask for {total} bytes of random weights, and drawing them about {need} bytes of "
                                 f"memory; one ONNX model holds at most {MAX_PROTOBUF} bytes, and the memory "
                                 f"limit is {memory_cap_bytes()} bytes (PIPEPLAN_MAX_MEMORY_MB)")


def _calibrate_batch_norms(model: ModelProto, generated: set[str], rng: np.random.Generator, source: str,
                           guard: RunGuard) -> None:
    """Set the generated mean and variance of every 4-D batch-norm to the statistics of its
    input on one random frame, so it normalises as a trained one does.

    Random statistics do not normalise: in a residual network the activation variance then
    doubles at every residual sum and the softmax saturates to the same one-hot vector for
    every input. With batch 1, InstanceNormalization with the batch-norm's scale and bias is
    exactly a batch-norm that uses the frame's own statistics, so one run of a copy in which
    those batch-norms are InstanceNormalization gives every batch-norm's input as it will be
    once all of them are calibrated. Edits ``model`` in place. The probe runs the model, so
    ONNX Runtime failing on it is the model's fault: a one-line error naming ``source``; ``guard``
    stops it at its time limit (``export --time-limit``).
    """
    ranks = _ranks(model, source)
    targets = [n for n in model.graph.node
               if n.op_type == "BatchNormalization" and len([o for o in n.output if o]) == 1
               and n.input[3] in generated and n.input[4] in generated and ranks.get(n.input[0]) == 4]
    if not targets:
        return
    probe = ModelProto()
    probe.CopyFrom(model)
    by_name = {n.name: n for n in probe.graph.node}
    for bn in targets:
        node = by_name[bn.name]
        eps = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "epsilon"), 1e-5)
        node.op_type = "InstanceNormalization"
        del node.input[3:]
        del node.attribute[:]
        node.attribute.append(helper.make_attribute("epsilon", eps))
    probe.graph.output.extend(helper.make_empty_tensor_value_info(bn.input[0]) for bn in targets)
    opts = session_options(1)
    try:
        session = ort.InferenceSession(probe.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        # one float frame of every input, refused above the memory cap before it is drawn and
        # drawn without a float64 copy (the same values: profiles/random_feeds.py)
        inputs = [(arg.name, tuple(d if isinstance(d, int) and d > 0 else 1 for d in arg.shape), np.dtype(np.float32))
                  for arg in session.get_inputs()]
        check_feeds(inputs, source, "graph.input")
        seen = guard.run_stoppable(session, [bn.input[0] for bn in targets], random_feeds(rng, inputs))
    except InputError:        # the inputs above the memory cap
        raise
    except Exception as exc:  # ORT raises its own exception types for a model it cannot run
        guard.check_time_limit(source)
        raise InputError(source, "model", f"ONNX Runtime cannot run it to calibrate its batch norms "
                         f"({brief_error(exc)})") from None
    inits = {t.name: t for t in model.graph.initializer}
    for bn, x in zip(targets, seen):
        for name, value in ((bn.input[3], x.mean(axis=(0, 2, 3))), (bn.input[4], x.var(axis=(0, 2, 3)))):
            dtype = helper.tensor_dtype_to_np_dtype(inits[name].data_type)
            inits[name].CopyFrom(numpy_helper.from_array(value.astype(dtype), name))


def _ranks(model: ModelProto, source: str) -> dict[str, int]:
    inferred = infer_shapes_safely(model, source, strict=False)
    g = inferred.graph
    return {v.name: len(v.type.tensor_type.shape.dim) for v in list(g.value_info) + list(g.input)
            if v.type.tensor_type.HasField("shape")}


def _constant_values(model: ModelProto) -> dict[str, np.ndarray]:
    """Initializers and the outputs of ``Constant`` nodes holding a tensor."""
    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant":
            for a in node.attribute:
                if a.name == "value" and a.type == a.TENSOR:
                    values[node.output[0]] = numpy_helper.to_array(a.t)
    return values


def _consumers(model: ModelProto) -> dict[str, list[tuple[str, int, object]]]:
    """Tensor name -> (op type, input index, node) of every node reading it."""
    out: dict[str, list] = {}
    for node in model.graph.node:
        for i, t in enumerate(node.input):
            if t:
                out.setdefault(t, []).append((node.op_type, i, node))
    return out


def _fill_dtype(node) -> np.dtype:
    for a in node.attribute:
        if a.name == "value":
            return helper.tensor_dtype_to_np_dtype(a.t.data_type)
    return np.dtype(np.float32)  # ConstantOfShape's default fill is float32


def _role(tensor: str, consumers: dict) -> tuple[str, object]:
    """("matrix", node), ("positive", None) or ("bias", None), from the first consumer that
    is not a layout op (following the weight through Reshape, Unsqueeze, ...)."""
    seen = set()
    frontier = [tensor]
    while frontier:
        t = frontier.pop(0)
        for op, index, node in consumers.get(t, []):
            if op in _LAYOUT_OPS and index == 0 and node.output[0] not in seen:
                seen.add(node.output[0])
                frontier.append(node.output[0])
            elif (op, index) in _MATRIX_WEIGHT:
                return "matrix", node
            elif (op, index) in _POSITIVE:
                return "positive", None
            else:
                return "bias", None
    return "bias", None


def _draw(rng: np.random.Generator, role: tuple[str, object], shape: tuple[int, ...]) -> np.ndarray:
    kind, node = role
    if kind == "matrix" and len(shape) >= 2:
        std = math.sqrt(2.0 / max(1, _fan_in(node, shape)))
        return rng.standard_normal(shape) * std
    if kind == "positive":
        return rng.uniform(0.5, 1.5, size=shape)
    return rng.standard_normal(shape) * BIAS_STD


def _fan_in(node, shape: tuple[int, ...]) -> int:
    """Inputs feeding one output: C_in/group x kernel area for a convolution weight
    (M, C/g, kH, kW); K for Gemm's B (K, N), or (N, K) with transB; K for MatMul's (.., K, N)."""
    if node.op_type == "Gemm":
        trans_b = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "transB"), 0)
        return shape[-1] if trans_b else shape[0]
    if node.op_type == "MatMul":
        return shape[-2]
    return math.prod(shape[1:])

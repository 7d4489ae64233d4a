"""Bounds on what an ONNX model asks ONNX Runtime to compute, checked before any session exists.

A model is untrusted input, and a few hundred bytes can ask for any amount of work: a
``ConstantOfShape`` of 3e9 floats had made ONNX Runtime allocate 12 GB, a ``Loop`` of 2^62
steps never ended. :func:`check_model_bounds` refuses such a model from its shapes alone:

* every tensor whose size shape inference knows (graph inputs' symbolic or unknown dimensions
  set to 1, as profile and run feed them) holds at most :data:`MAX_TENSOR_BYTES`, in
  sub-graphs too. That is the most one ONNX model can store as a weight (2 GiB - 1, protobuf's
  limit), about 5x the largest tensor of the models we ship (vgg19's first fully connected
  weight, 392 MiB), so no real model reaches it;
* a size-making op (:data:`SIZE_INPUTS`) whose size inputs follow from constants and shapes
  alone must have an output shape that inference knows. Its size is then fixed before the run,
  and not knowing it means the inference could not bound it. Where the size depends on the
  input's values it is known only at run time and is bounded there by ONNX Runtime's memory cap
  (:mod:`pipeplan.profiles.ort_guard`);
* a ``Loop`` whose trip count is a constant runs at most :data:`MAX_LOOP_TRIPS` times. No model
  we ship or test has a Loop; a loop over a sequence runs thousands of steps. A trip count or
  condition computed at run time is bounded by the run's time limit instead.

:func:`infer_shapes_safely` is ONNX shape inference made safe to run on such a model. ONNX
propagates an integer tensor element by element as shape data (about 140 bytes and 150 ns each:
Shape -> Mul by 1.6e7 -> ConstantOfShape -> Cast took 2.2 GB and 2.5 s; 3e9 would take 400 GB).
So the inference runs in a forked child (:func:`~pipeplan.core.deadline.run_within`) whose
memory may grow by at most the memory cap (:mod:`pipeplan.core.sizes`; at least
:data:`INFERENCE_MIN_BYTES`) and which is stopped
after :data:`INFERENCE_TIME_S`; past either the model is refused. Within them, data propagation
is still skipped for a model that holds an integer tensor over :data:`MAX_PROPAGATED` elements
(a quantized weight, say), which it would propagate at that cost for no shape a plan needs. The
child infers the model without the values of its weights (:func:`_drop_weight_values`; no
inference reads a float tensor of that size) and sends back only that, so a large model costs
neither a copy of its weights through the pipe nor their (de)serialisation: vgg19 with its
548 MiB of weights had taken 6 s to check, now 0.05 s.
"""
from __future__ import annotations

import math
import time

from onnx import GraphProto, ModelProto, NodeProto, TensorProto, helper, numpy_helper, shape_inference

from pipeplan.core.deadline import check_stop, run_within
from pipeplan.core.errors import InputError, brief_error
from pipeplan.core.sizes import memory_cap_bytes
from pipeplan.formulations.mapping.onnx_external import MAX_PROTOBUF

MAX_TENSOR_BYTES = MAX_PROTOBUF
MAX_LOOP_TRIPS = 1_000_000
# Integer tensors longer than this are not propagated as shape data (a shape has a few entries).
MAX_PROPAGATED = 1 << 16
# Shape inference of a shipped model takes under 0.1 s; a propagation that fills the memory cap
# (8 GiB: about 6e7 elements) about 10 s.
INFERENCE_TIME_S = 60.0
# The least memory the inference may use whatever the memory cap: the cap bounds what a run holds
# (frames, weights), and a cap set low for that (a test's 1.2 MB) must not refuse every model.
# The shipped models' inference grows the child by 4-12 MB (densenet121 the most).
INFERENCE_MIN_BYTES = 64 << 20
# op type -> the inputs that set the size of its output
SIZE_INPUTS = {"ConstantOfShape": (0,), "Expand": (1,), "Tile": (1,), "Range": (0, 1, 2),
               "Resize": (1, 2, 3), "Upsample": (1,), "Pad": (1,), "OneHot": (1,), "MaxUnpool": (2,),
               "CenterCropPad": (1,), "Col2Im": (1, 2)}
_INTEGER = {TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64, TensorProto.UINT8,
            TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64}


def infer_shapes_safely(model: ModelProto, source: str, *, strict: bool, inputs_as_run: bool = False,
                        time_s: float | None = None) -> ModelProto:
    """``model`` with inferred shapes, for reading shapes only: its weights over
    :data:`MAX_PROPAGATED` elements have no values (module docstring); with ``inputs_as_run``,
    its inputs' unknown dimensions are 1 (:func:`_set_unknown_input_dims`). A model whose inference
    fails or exceeds the memory cap or :data:`INFERENCE_TIME_S` (or ``time_s`` where that is
    less: the time a caller's own limit leaves) is an InputError naming ``source``."""
    cap = max(memory_cap_bytes(), INFERENCE_MIN_BYTES)
    seconds = INFERENCE_TIME_S if time_s is None else max(0.0, min(INFERENCE_TIME_S, time_s))
    began = time.monotonic()
    answer = run_within(lambda: _infer(model, strict, inputs_as_run), seconds, grace=0.0,
                        memory_bytes=cap)
    if answer is None:
        check_stop()    # None at once when the process is being stopped
        if time.monotonic() - began < seconds:   # the child died: an allocation past the cap
            answer = (False, None)
        else:
            raise InputError(source, "model", f"shape inference takes more than {seconds:g} s; refused")
    done, value = answer
    if done:
        return ModelProto.FromString(value)
    if value is None:
        raise InputError(source, "model", f"shape inference needs more than {cap >> 20} MB of memory "
                         "(the memory cap; raise it with PIPEPLAN_MAX_MEMORY_MB); refused")
    raise InputError(source, "model", f"shape inference failed ({value})")


def _infer(model: ModelProto, strict: bool, inputs_as_run: bool) -> tuple[bool, bytes | str | None]:
    """In :func:`infer_shapes_safely`'s child: (True, the inferred model's bytes), or (False,
    why it failed), (False, None) when it ran out of memory. Changes ``model`` (the child's copy)."""
    try:
        _drop_weight_values(model.graph)
        if inputs_as_run:
            _set_unknown_input_dims(model.graph)
        inferred = shape_inference.infer_shapes(model, strict_mode=strict)
        if not _has_long_integer_tensor(inferred.graph):
            inferred = shape_inference.infer_shapes(model, strict_mode=strict, data_prop=True)
        return True, inferred.SerializeToString()
    except MemoryError:
        return False, None
    except Exception as exc:  # InferenceError, ValidationError, ...
        return False, brief_error(exc)


def _drop_weight_values(graph: GraphProto) -> None:
    """Empty the initializers that only weigh: not integer (never shape data), over
    :data:`MAX_PROPAGATED` elements (no float input inference reads, such as Resize's scales,
    is that long). Their names, types and dimensions stay."""
    for t in graph.initializer:
        if t.data_type not in _INTEGER and math.prod(t.dims) > MAX_PROPAGATED:
            t.CopyFrom(TensorProto(name=t.name, data_type=t.data_type, dims=t.dims))


def check_model_bounds(model: ModelProto, source: str, *, time_s: float | None = None) -> None:
    """Refuse ``model`` (``source`` names it) when it breaks a bound of the module docstring;
    ``time_s``: at most this long for its shape inference (:func:`infer_shapes_safely`)."""
    inferred = infer_shapes_safely(model, source, strict=False, inputs_as_run=True, time_s=time_s)
    _check_graph(inferred.graph, source, "graph", outer_static=set())


def _set_unknown_input_dims(graph: GraphProto) -> None:
    """Give the graph inputs' symbolic and unknown dimensions 1, as profile and run feed them."""
    initializers = {t.name for t in graph.initializer}
    for value in graph.input:
        if value.name not in initializers and value.type.tensor_type.HasField("shape"):
            for d in value.type.tensor_type.shape.dim:
                if not d.HasField("dim_value"):
                    d.dim_value = 1


def _check_graph(graph: GraphProto, source: str, where: str, outer_static: set[str]) -> None:
    """Check ``graph`` (a sub-graph when ``outer_static`` holds its enclosing graph's static tensors)."""
    types = _tensor_types(graph)
    for name, (dims, elem) in types.items():
        n = _numel(dims)
        if n is not None and n * _itemsize(elem) > MAX_TENSOR_BYTES:
            raise InputError(source, f"{where}.tensor[{name}]", f"shape {list(dims)} holds {n * _itemsize(elem)} "
                             f"bytes, above the limit of {MAX_TENSOR_BYTES} bytes for one tensor")
    static = set(outer_static) | {t.name for t in graph.initializer}
    constants = {t.name: t for t in graph.initializer}
    for i, node in enumerate(graph.node):
        label = f"{where}.node[{node.name or f'{node.op_type}_{i}'}]"
        size_inputs = [node.input[k] for k in SIZE_INPUTS.get(node.op_type, ()) if k < len(node.input) and node.input[k]]
        if size_inputs and all(t in static for t in size_inputs):
            for out in (t for t in node.output if t):
                if _numel(types.get(out, (None, 0))[0]) is None:
                    raise InputError(source, label, f"{node.op_type} makes {out!r} of a size set by constants that "
                                     "shape inference cannot bound; refused before ONNX Runtime allocates it")
        if node.op_type == "Loop":
            _check_trip_count(node, constants, source, label)
        if node.op_type == "Constant":
            constants.update((node.output[0], a.t) for a in node.attribute if a.name == "value" and a.HasField("t"))
        for a in node.attribute:
            for k, sub in enumerate([a.g] if a.HasField("g") else list(a.graphs)):
                _check_graph(sub, source, f"{label}.{a.name}" + (f"[{k}]" if a.graphs else ""), static)
        if _is_static(node, static, types):
            static.update(t for t in node.output if t)


def _is_static(node: NodeProto, static: set[str], types: dict) -> bool:
    """Whether the node's outputs follow from constants and known shapes, not from input values."""
    if node.op_type in ("Shape", "Size"):
        return bool(node.input) and _numel(types.get(node.input[0], (None, 0))[0]) is not None
    has_subgraph = any(a.HasField("g") or a.graphs for a in node.attribute)
    return not has_subgraph and all(t in static for t in node.input if t)


def _check_trip_count(node: NodeProto, constants: dict[str, TensorProto], source: str, label: str) -> None:
    if not node.input or node.input[0] not in constants:
        return   # no trip count, or one computed at run time: the run's time limit bounds it
    values = numpy_helper.to_array(constants[node.input[0]]).reshape(-1)
    if values.size == 1 and int(values[0]) > MAX_LOOP_TRIPS:
        raise InputError(source, label, f"Loop of {int(values[0])} steps, above the limit of {MAX_LOOP_TRIPS}")


def _tensor_types(graph: GraphProto) -> dict[str, tuple[tuple | None, int]]:
    """Tensor name -> (dims, element type); dims None where the shape is unknown, and a
    dimension None where it is not a number (after inference, a symbolic one is unknown)."""
    out: dict[str, tuple[tuple | None, int]] = {}
    for v in list(graph.input) + list(graph.value_info) + list(graph.output):
        tt = v.type.tensor_type
        if v.type.HasField("tensor_type"):
            dims = (tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim)
                    if tt.HasField("shape") else None)
            out[v.name] = (dims, tt.elem_type)
    for t in graph.initializer:
        out[t.name] = (tuple(t.dims), t.data_type)
    return out


def _has_long_integer_tensor(graph: GraphProto) -> bool:
    for dims, elem in _tensor_types(graph).values():
        n = _numel(dims)
        if elem in _INTEGER and n is not None and n > MAX_PROPAGATED:
            return True
    for node in graph.node:
        for a in node.attribute:
            if a.HasField("t") and a.t.data_type in _INTEGER and math.prod(a.t.dims) > MAX_PROPAGATED:
                return True
            if any(_has_long_integer_tensor(sub) for sub in ([a.g] if a.HasField("g") else list(a.graphs))):
                return True
    return False


def _numel(dims: tuple | None) -> int | None:
    if dims is None or any(d is None for d in dims):
        return None
    return math.prod(dims)


def _itemsize(elem: int) -> int:
    try:
        return helper.tensor_dtype_to_np_dtype(elem).itemsize
    except (KeyError, ValueError, TypeError):
        return 1   # strings and unknown types: at least a byte each

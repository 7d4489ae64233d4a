"""ONNX models whose weights lie in files beside them (``onnx.save_model(...,
save_as_external_data=True)``).

A model is untrusted input: each tensor's ``location`` must lie inside the model's folder (links
followed), checked before the file is opened, and its ``offset``/``length`` must lie inside
that file. :func:`inline_external_data` reads the weights into the model, so ONNX Runtime (which
resolves external files against the working directory when it loads a model from bytes) never
looks for them, and exported sub-models are self-contained.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

from onnx import GraphProto, ModelProto, TensorProto

from pipeplan.core.errors import InputError
from pipeplan.core.io import inside_folder, read_input

MAX_PROTOBUF = 2**31 - 1   # bytes: the most one serialised ONNX model may hold


def _tensors(graph: GraphProto) -> Iterator[TensorProto]:
    """Every tensor stored in ``graph``: initializers (sparse ones too) and node attributes,
    in subgraphs as well."""
    yield from graph.initializer
    for s in graph.sparse_initializer:
        yield from (s.values, s.indices)
    yield from _node_tensors(graph.node)


def _node_tensors(nodes) -> Iterator[TensorProto]:
    """Every tensor in the attributes of ``nodes`` (and of their subgraphs)."""
    for node in nodes:
        for a in node.attribute:
            if a.HasField("t"):
                yield a.t
            yield from a.tensors
            sparse = ([a.sparse_tensor] if a.HasField("sparse_tensor") else []) + list(a.sparse_tensors)
            for s in sparse:
                yield from (s.values, s.indices)
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                yield from _tensors(sub)


def _model_tensors(model: ModelProto) -> Iterator[TensorProto]:
    """Every tensor of ``model``: its graph's, its local functions' (a Constant inside a
    function is loaded by ONNX Runtime like any other) and its training graphs'."""
    yield from _tensors(model.graph)
    for f in model.functions:
        yield from _node_tensors(f.node)
    for info in model.training_info:
        yield from _tensors(info.initialization)
        yield from _tensors(info.algorithm)


def external_tensors(model: ModelProto) -> list[TensorProto]:
    """The tensors of ``model`` whose data lies in an external file."""
    return [t for t in _model_tensors(model) if t.data_location == TensorProto.EXTERNAL]


def inline_external_data(model: ModelProto, model_file: Path) -> ModelProto:
    """``model`` (read from ``model_file`` without its external data) with every external
    tensor's bytes read into the tensor. A model is untrusted input: each ``location`` must lie
    inside the model's folder (links followed), checked before the file is opened. Edits
    ``model`` in place and returns it."""
    files: dict[Path, bytes] = {}
    for tensor in external_tensors(model):
        info = {e.key: e.value for e in tensor.external_data}
        fld = f"external_data[{tensor.name}]"
        path = inside_folder(model_file.parent, info.get("location"), str(model_file), f"{fld}.location")
        if path not in files:
            files[path] = read_input(path, what="external data file")
        tensor.raw_data = _extent(files[path], info, str(model_file), fld)
        del tensor.external_data[:]
        tensor.data_location = TensorProto.DEFAULT
    size = model.ByteSize() if files else 0
    if size > MAX_PROTOBUF:
        raise InputError(str(model_file), "external_data", f"the weights do not fit in one ONNX model "
                         f"({size} bytes, at most {MAX_PROTOBUF}); export needs them inline")
    return model


def _extent(data: bytes, info: dict[str, str], source: str, fld: str) -> bytes:
    """The bytes ``info``'s ``offset`` and ``length`` (both optional) pick from ``data``."""
    try:
        offset = int(info.get("offset", 0))
        length = int(info.get("length", len(data) - offset))
    except ValueError:
        raise InputError(source, fld, "offset and length must be integers") from None
    if not 0 <= offset <= offset + length <= len(data):
        raise InputError(source, fld, f"bytes {offset} to {offset + length} are not in the "
                         f"{len(data)}-byte file {info['location']!r}")
    return data[offset:offset + length]

"""The export manifest (``manifest.json``, schema ``pipeplan.manifest/1``): what ``pipeplan
export`` writes and ``pipeplan run`` reads. README.md ("Deploying a plan") documents it field
by field; :func:`load_manifest` checks the part the executor relies on, including that every
sub-model file is the one exported (sha256), so a corrupt export fails with one line naming the
file and field instead of a traceback in a worker thread.

An export folder is untrusted input (it may come from elsewhere): every file the manifest names
goes through :func:`inside_folder` before it is opened, sub-models that keep weights in external
files are refused (ONNX Runtime would look for those files relative to the working directory),
and ``session_config`` is an allow-list (:func:`pipeplan.deploy.runtime.check_session_config`).
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from pipeplan.core.errors import InputError, brief_value
from pipeplan.core.io import inside_folder, load_json, read_input
from pipeplan.deploy.runtime import GRAPH_OPTIMIZATION, check_session_config
from pipeplan.formulations.mapping.graph_limits import MAX_UNITS
from pipeplan.formulations.mapping.onnx_bounds import check_model_bounds
from pipeplan.formulations.mapping.onnx_external import external_tensors
from pipeplan.formulations.mapping.profile import Reader
from pipeplan.profiles.ort_guard import RunGuard
from pipeplan.profiles.roofline import MAX_THREADS

MAX_ELEMENTS = 2**31 - 1   # elements of one tensor of one frame (ONNX Runtime's int32 limit)
# The tensor types a manifest may declare: ONNX's numeric and bool types that numpy has, one value
# per element. A subarray ('(15000,15000)f4'), structured ('i4,i4'), object, string, void, datetime
# or byte-swapped dtype is refused: its elements are not one value each (a subarray dtype made the
# element-count check bound nothing), and ONNX Runtime takes none of them.
DTYPES = tuple(np.dtype(name) for name in ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                                           "uint64", "float16", "float32", "float64", "complex64", "complex128"))

# How long past the run's deadline a model file's shape inference may go before it is stopped (it
# is then the run's time-limit error, so the child is given a little more than the time left).
INFERENCE_OVERRUN_S = 0.05

MANIFEST_SCHEMA = "pipeplan.manifest/1"
MANIFEST_FILE = "manifest.json"


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple            # int per dimension; a symbolic (str) or unknown (None) one
    dtype: np.dtype

    def concrete_shape(self) -> tuple[int, ...]:
        """The shape of one frame: symbolic or unknown dimensions (the batch) become 1."""
        return tuple(d if isinstance(d, int) and d >= 0 else 1 for d in self.shape)


@dataclass(frozen=True)
class GroupSpec:
    id: str
    pu: str
    path: Path
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    depends_on: tuple[str, ...]
    output_specs: tuple[TensorSpec, ...] = ()   # the declared shape and dtype of each of ``outputs``


@dataclass(frozen=True)
class StageSpec:
    index: int
    groups: tuple[GroupSpec, ...]
    sends: tuple[str, ...]   # tensors handed to the next stage (the network's outputs at the end)


@dataclass(frozen=True)
class Manifest:
    source: str
    reference: Path
    graph_optimization: str
    pus: dict[str, dict[str, Any]]
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    stages: tuple[StageSpec, ...]
    predicted: dict[str, float]
    platform: str | None = None   # the platform the plan was made for (export's platform.name)
    instance: str | None = None


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _checked_model(r: Reader, folder: Path, spec: Any, fld: str, checked: dict[Path, str],
                   guard: RunGuard | None = None) -> Path:
    """The sub-model or reference file ``spec`` names: inside ``folder``, unchanged since the
    export (sha256), with its weights inline and within the bounds of
    :func:`~pipeplan.formulations.mapping.onnx_bounds.check_model_bounds`.

    ``checked``: file -> sha256 of the files checked so far; a file named again (a manifest may
    name one file for many groups) is only compared with its hash, not read and checked again
    (a 1001-stage manifest naming two files had spent 24 s in 1001 forked shape inferences).
    ``guard``: the run's time limit, checked before the file, and the shape inference of the
    file stopped at it."""
    spec = r.obj(spec, fld)
    file = inside_folder(folder, r.get(spec, "file", fld), r.source, f"{fld}.file")
    if file in checked:
        if checked[file] != r.get(spec, "sha256", fld):
            raise r.fail(f"{fld}.sha256", f"{file.name} differs from the exported file (sha256)")
        return file
    doing = f"loading the export {folder} ({fld}, {file.name})"
    if guard is not None:
        guard.check_time_left(doing)
    if not file.is_file():
        raise r.fail(f"{fld}.file", f"missing file {file}")
    data = read_input(file, what="ONNX model")
    digest = hashlib.sha256(data).hexdigest()
    if digest != r.get(spec, "sha256", fld):
        raise r.fail(f"{fld}.sha256", f"{file.name} differs from the exported file (sha256)")
    try:
        model = onnx.load_model_from_string(data)
    except Exception as exc:  # protobuf DecodeError and friends
        raise r.fail(f"{fld}.file", f"{file.name} is not a valid ONNX model ({exc})") from None
    external = external_tensors(model)
    if external:
        raise r.fail(f"{fld}.file", f"{file.name} keeps tensor {external[0].name!r} in an external "
                     "file; an export holds its weights inline")
    if guard is None:
        check_model_bounds(model, str(file))
    else:
        try:   # the inference child may run until just past the run's deadline, not its own 60 s
            check_model_bounds(model, str(file), time_s=guard.time_left() + INFERENCE_OVERRUN_S)
        except InputError:
            guard.check_time_left(doing)   # stopped by the run's time limit: say so
            raise
    checked[file] = digest
    return file


def load_manifest(folder: str | Path, guard: RunGuard | None = None) -> Manifest:
    """The manifest of the export in ``folder``, every file it names checked (each file once).
    ``guard``: the run's time limit (``run --time-limit``), which covers loading too: checked
    once the JSON is read, then before each group and each model file; past it the run's
    time-limit error."""
    folder = Path(folder)
    source = str(folder / MANIFEST_FILE)
    r = Reader(source)
    doc = r.obj(load_json(inside_folder(folder, MANIFEST_FILE, source, "")), "")
    if guard is not None:
        guard.check_time_left(f"loading the export {folder} (its {MANIFEST_FILE})")
    checked: dict[Path, str] = {}
    if doc.get("schema") != MANIFEST_SCHEMA:
        raise r.fail("schema", f"expected {MANIFEST_SCHEMA!r}, got {doc.get('schema')!r}")

    def tensors(value: Any, fld: str) -> tuple[TensorSpec, ...]:
        if not isinstance(value, list):
            raise r.fail(fld, "expected a list of tensors")
        out = []
        for i, t in enumerate(value):
            t = r.obj(t, f"{fld}[{i}]")
            shape = r.get(t, "shape", f"{fld}[{i}]")
            if not isinstance(shape, list) or not all(
                    d is None or isinstance(d, str)
                    or (isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= MAX_ELEMENTS) for d in shape):
                raise r.fail(f"{fld}[{i}].shape", "expected a list of dimensions (sizes >= 0, names or null)")
            if math.prod(d if isinstance(d, int) else 1 for d in shape) > MAX_ELEMENTS:
                raise r.fail(f"{fld}[{i}].shape", f"more than {MAX_ELEMENTS} elements in one frame")
            dtype = _plain_dtype(r, r.get(t, "dtype", f"{fld}[{i}]"), f"{fld}[{i}].dtype")
            out.append(TensorSpec(r.string(r.get(t, "name", f"{fld}[{i}]"), f"{fld}[{i}].name"),
                                  tuple(shape), dtype))
        return tuple(out)

    def names(value: Any, fld: str) -> tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(x, str) and x for x in value):
            raise r.fail(fld, "expected a list of names")
        return tuple(value)

    reference = _checked_model(r, folder, r.get(doc, "reference", ""), "reference", checked, guard)
    session = r.obj(r.get(doc, "session", ""), "session")
    graph_optimization = session.get("graph_optimization")
    if not isinstance(graph_optimization, str) or graph_optimization not in GRAPH_OPTIMIZATION:
        raise r.fail("session.graph_optimization", f"expected one of {', '.join(GRAPH_OPTIMIZATION)}")
    # every session runs sequentially on its group's own threads (runtime.make_session): other
    # values had been read and run as these without a word
    for key, only in (("execution_mode", "sequential"), ("inter_op_threads", 1)):
        if key in session and (session[key] != only or isinstance(session[key], bool)):
            raise r.fail(f"session.{key}", f"only {only!r} runs here (each group's session is sequential on its "
                                           f"own intra-op threads), got {brief_value(session[key])}")
    pus = {name: _pu_runtime(r, spec, f"pus.{name}") for name, spec in r.obj(r.get(doc, "pus", ""), "pus").items()}
    inputs = tensors(r.get(doc, "inputs", ""), "inputs")
    outputs = tensors(r.get(doc, "outputs", ""), "outputs")
    if not outputs:
        raise r.fail("outputs", "the network has no outputs")
    raw_stages = r.get(doc, "stages", "")
    if not isinstance(raw_stages, list) or not raw_stages:
        raise r.fail("stages", "expected a non-empty list")
    # every group runs a part of one graph, at least one of its units, and pipeplan plans graphs
    # of at most MAX_UNITS units; counted before the groups are read (200,000 groups had been
    # bounded by `run --time-limit` alone, each a session to create)
    if len(raw_stages) > MAX_UNITS:
        raise r.fail("stages", f"{len(raw_stages)} stages, at most {MAX_UNITS} (the units of the largest graph pipeplan plans)")
    stages, total_groups = [], 0
    for s, raw in enumerate(raw_stages):
        fld = f"stages[{s}]"
        raw = r.obj(raw, fld)
        if r.get(raw, "index", fld) != s:
            raise r.fail(f"{fld}.index", f"expected {s}")
        raw_groups = r.get(raw, "groups", fld)
        if not isinstance(raw_groups, list) or not raw_groups:
            raise r.fail(f"{fld}.groups", "expected a non-empty list")
        total_groups += len(raw_groups)
        if total_groups > MAX_UNITS:
            raise r.fail(f"{fld}.groups", f"{total_groups} groups in stages 0-{s}, at most {MAX_UNITS} in all (the units "
                                          "of the largest graph pipeplan plans)")
        groups: list[GroupSpec] = []
        earlier: set[str] = set()    # the ids of the stage's groups so far
        for j, grp in enumerate(raw_groups):
            gfld = f"{fld}.groups[{j}]"
            if guard is not None:
                guard.check_time_left(f"loading the export {folder} ({gfld})")
            grp = r.obj(grp, gfld)
            pu = r.string(r.get(grp, "pu", gfld), f"{gfld}.pu")
            if pu not in pus:
                raise r.fail(f"{gfld}.pu", f"PU {pu!r} not in pus")
            deps = names(r.get(grp, "depends_on", gfld), f"{gfld}.depends_on")
            for d in deps:
                if d not in earlier:
                    raise r.fail(f"{gfld}.depends_on", f"{d!r} is not an earlier group of the stage")
            gid = r.string(r.get(grp, "id", gfld), f"{gfld}.id")
            path = _checked_model(r, folder, grp, gfld, checked, guard)
            reads = tensors(r.get(grp, "inputs", gfld), f"{gfld}.inputs")
            made = tensors(r.get(grp, "outputs", gfld), f"{gfld}.outputs")
            groups.append(GroupSpec(gid, pu, path, tuple(t.name for t in reads), tuple(t.name for t in made),
                                    deps, made))
            earlier.add(groups[-1].id)
        stages.append(StageSpec(s, tuple(groups), names(r.get(raw, "sends", fld), f"{fld}.sends")))
    _check_data_flow(r, inputs, outputs, stages)
    predicted = r.obj(r.get(doc, "predicted", ""), "predicted")
    # optional (exports name them; a hand-made manifest may not): what the run warns about
    platform = doc.get("platform")
    # both printed by run: a line break or an ESC in them had reached the terminal raw
    platform_name = None if platform is None else r.name(r.get(r.obj(platform, "platform"), "name", "platform"),
                                                         "platform.name")
    instance = None if doc.get("instance") is None else r.name(doc["instance"], "instance")
    return Manifest(source=source, reference=reference, graph_optimization=graph_optimization, pus=pus,
                    inputs=inputs, outputs=outputs, stages=tuple(stages),
                    predicted={k: r.number(r.get(predicted, k, "predicted"), f"predicted.{k}")
                               for k in ("period_ms", "latency_ms")},
                    platform=platform_name, instance=instance)


def _plain_dtype(r: Reader, value: Any, fld: str) -> np.dtype:
    """The dtype ``value`` names, one of :data:`DTYPES`. numpy's parser raises TypeError,
    ValueError or SyntaxError (``'i4,('``), and more, for strings it cannot read: each is this
    field's one-line error."""
    text = r.string(value, fld)
    try:
        dtype = np.dtype(text)
    except Exception:  # noqa: BLE001  (whatever numpy's dtype parser raises)
        raise r.fail(fld, f"unknown dtype {text[:40]!r}") from None
    if dtype not in DTYPES:
        raise r.fail(fld, f"expected a plain numeric or bool dtype ({', '.join(d.name for d in DTYPES)}), "
                          f"got {text[:40]!r}")
    return dtype


def _check_data_flow(r: Reader, inputs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...],
                     stages: list[StageSpec]) -> None:
    """Every group reads only tensors its stage received or its dependencies produce, every
    stage sends only tensors it has, and the last one sends the network's outputs."""
    have = {t.name for t in inputs}
    for s, stage in enumerate(stages):
        made_by = {t: g.id for g in stage.groups for t in g.outputs}
        for j, grp in enumerate(stage.groups):
            for t in grp.inputs:
                if t not in have and made_by.get(t) not in grp.depends_on:
                    raise r.fail(f"stages[{s}].groups[{j}].inputs",
                                 f"{t!r} is neither received by the stage nor made by a group it depends on")
        have |= set(made_by)
        lacking = [t for t in stage.sends if t not in have]
        if lacking:
            raise r.fail(f"stages[{s}].sends", f"the stage does not have {lacking[0]!r}")
        have = set(stage.sends)
    missing = {t.name for t in outputs} - have
    if missing:
        raise r.fail(f"stages[{len(stages) - 1}].sends", f"lacks network outputs {sorted(missing)}")


def _pu_runtime(r: Reader, spec: Any, fld: str) -> dict[str, Any]:
    spec = r.obj(spec, fld)
    providers = r.get(spec, "providers", fld)
    if not isinstance(providers, list) or not providers or not all(isinstance(p, str) for p in providers):
        raise r.fail(f"{fld}.providers", "expected a non-empty list of provider names")
    for i, p in enumerate(providers):
        r.name(p, f"{fld}.providers[{i}]")
    if "kind" in spec:                      # what the export copies from the profile; not used by the run
        r.name(spec["kind"], f"{fld}.kind")
    threads = r.get(spec, "intra_op_threads", fld)
    if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= MAX_THREADS:
        raise r.fail(f"{fld}.intra_op_threads", f"expected an integer from 1 to {MAX_THREADS}, got {threads!r}")
    cores = spec.get("cores")
    if cores is not None and (not isinstance(cores, list) or not cores
                              or not all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c < MAX_THREADS for c in cores)):
        raise r.fail(f"{fld}.cores", "expected null or a non-empty list of CPU ids")
    config = check_session_config(r.obj(spec.get("session_config", {}), f"{fld}.session_config"),
                                  threads, r.source, f"{fld}.session_config")
    return {"providers": providers, "intra_op_threads": threads, "cores": cores, "session_config": config}

"""``pipeplan export``: cut an ONNX model along a plan into one sub-model per stage and per
branch group (see :mod:`partition`), with a manifest that says how to chain and run them.

A plan places the units of the instance it names; a unit that stands for several ONNX nodes
(a fused unit, a block: ``members``) is expanded into them first (:func:`partition.expand_plan`),
and the prediction is the evaluator's on that instance, for the plan as it is.

The model gets deterministic random weights first (:mod:`weights`; a no-op for a model without
``ConstantOfShape`` stand-ins), and the whole model with those weights is kept as
``model_full.onnx``: the reference the executor checks every frame against. Sub-models are cut
with ``onnx.utils.Extractor`` by their input and output tensor names.

A model that keeps its weights in external files gets them inline first
(:func:`~pipeplan.formulations.mapping.onnx_external.inline_external_data`; each file must lie in the model's
folder), so the export folder is self-contained.

The export is atomic: everything is built in a temporary folder beside ``out`` and renamed to
``out`` at the end, so an error leaves no partial export. Replacing ``out`` deletes what is in
it, so an existing ``out`` is replaced only when it is an empty folder or an intact earlier
export holding nothing else (:func:`_check_target`); a symlink, file, device or FIFO is refused.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import networkx as nx
import onnx
from onnx import ModelProto, helper
from onnx.utils import Extractor

from pipeplan.core.deadline import MODEL_RUN_LIMIT_S
from pipeplan.core.errors import InputError, brief_value
from pipeplan.core.io import check_output, folder_mode, load_json, make_folders, remove_folders
from pipeplan.deploy.manifest import MANIFEST_FILE, MANIFEST_SCHEMA, load_manifest, sha256_of
from pipeplan.deploy.partition import Group, branch_groups, check_plan, expand_plan, unit_nodes
from pipeplan.deploy.runtime import pu_runtime
from pipeplan.deploy.weights import with_random_weights
from pipeplan.formulations.mapping.evaluator import Evaluation, InfeasiblePlan, evaluate
from pipeplan.formulations.mapping.onnx_bounds import check_model_bounds, infer_shapes_safely
from pipeplan.formulations.mapping.onnx_external import inline_external_data
from pipeplan.formulations.mapping.onnx_graph import graph_from_model, read_model
from pipeplan.formulations.mapping.plan import Plan, plan_from_dict
from pipeplan.formulations.mapping.problem import MappingProblem
from pipeplan.instances.catalog import load_mapping
from pipeplan.instances.paths import PLATFORMS_DIR
from pipeplan.profiles.roofline import load_platform

REFERENCE_FILE = "model_full.onnx"
# Graph optimisations stay off, as in `pipeplan profile`, so a deployed stage runs the same
# kernels the host profile timed and the sub-models compute exactly what the whole model does.
GRAPH_OPTIMIZATION = "disabled"


def _named_instance(name: str | None, plan_file: Path) -> str | None:
    """The instance a plan names. A plan may come from someone else: an instance *file* it names
    (a path as `solve` writes it, from the working folder) is read only when it lies inside the
    plan's own folder, links followed; catalogue names are not files and pass."""
    if not name:
        return name
    if Path(name).suffix != ".json":    # a catalogue name: never a path (khadas-vim3/../../x was read)
        if Path(name).is_absolute() or ".." in Path(name).parts:
            raise InputError(str(plan_file), "instance", f"{name!r} is neither a catalogue name nor a file "
                             "in the plan's folder; give --instance to read it")
        return name
    try:
        path = Path(name).resolve()
    except (OSError, RuntimeError, ValueError) as exc:     # a link loop, a NUL byte
        raise InputError(str(plan_file), "instance", f"cannot resolve {name!r} ({exc})") from None
    if not path.is_relative_to(plan_file.parent.resolve()):
        raise InputError(str(plan_file), "instance", f"{name!r} lies outside the plan's folder (links followed); "
                         "give --instance to read it")
    return name


def export_plan(plan_file: str | Path, model_file: str | Path, out: str | Path, *,
                instance: str | None = None, platform_file: str | Path | None = None,
                seed: int = 0, time_limit_s: float = MODEL_RUN_LIMIT_S) -> dict[str, Any]:
    """Export ``plan_file`` (a plan or SolveResult) applied to ``model_file`` into ``out``;
    returns the manifest. ``instance`` is used when the plan names none; ``platform_file``
    defaults to the instance's platform (``<platform>/<model>``) or profiles/platforms/host.json.
    ``time_limit_s`` bounds the batch-norm calibration's run of a weightless model."""
    plan_file, model_file, out = Path(plan_file), Path(model_file), Path(out)
    _check_target(out)
    plan = plan_from_dict(load_json(plan_file), str(plan_file))
    model = inline_external_data(read_model(model_file), model_file)
    g = graph_from_model(model, str(model_file))
    check_model_bounds(model, str(model_file))
    instance_name = instance or _named_instance(plan.instance, plan_file)
    if not instance_name:
        raise InputError(str(plan_file), "instance", "the plan names no instance; give --instance")
    try:
        problem = load_mapping(instance_name)
    except InputError as exc:       # a name the plan gives is the plan's fault: it had read "host: instance: ..."
        if instance or exc.source != instance_name:
            raise
        raise InputError(str(plan_file), "instance", f"{brief_value(instance_name)}: {exc.message}") from None
    nodes_plan = expand_plan(plan, problem, g, str(plan_file))   # units -> ONNX nodes
    check_plan(nodes_plan, g, str(plan_file))
    unit_nodes(problem, g, str(plan_file))
    predicted = _predict(plan, problem, str(plan_file))
    platform_path = Path(platform_file) if platform_file else default_platform(instance_name)
    platform = load_platform(platform_path)
    pus = {pu: pu_runtime(platform, pu, str(platform_path)) for stage in plan.stages for pu in stage.pus}
    stages = branch_groups(nodes_plan, g)

    full, n_weights = with_random_weights(model, seed, str(model_file), time_limit_s)
    inferred = _with_inferred_shapes(full, str(model_file))
    specs = _tensor_specs(inferred, stages, str(model_file))
    doc = {
        "schema": MANIFEST_SCHEMA,
        "model": {"file": model_file.name, "sha256": sha256_of(model_file), "name": g.graph["name"]},
        "reference": {"file": REFERENCE_FILE, "random_weights": {"seed": seed, "generated": n_weights}},
        "instance": instance_name,
        "plan": {"source": str(plan_file), "sha256": sha256_of(plan_file), "mode": plan.mode},
        "platform": {"name": platform.name, "file": str(platform_path)},
        "session": {"graph_optimization": GRAPH_OPTIMIZATION, "execution_mode": "sequential",
                    "inter_op_threads": 1},
        "pus": pus,
        "inputs": [specs[name] for name, *_ in g.graph["inputs"]],
        "outputs": [specs[name] for name, *_ in g.graph["outputs"]],
        "predicted": {"period_ms": predicted.period_ms, "latency_ms": predicted.latency_ms,
                      "energy_mj": predicted.energy_mj, "stage_times_ms": predicted.stage_times_ms,
                      "pu_busy_ms": predicted.pu_busy_ms},
        "stages": [],
        "transfers": _transfers(stages, g, specs),
    }
    sends = _sends(stages, g)
    receives = [[name for name, *_ in g.graph["inputs"]]] + sends[:-1]
    with temp_export_folder(out) as tmp:
        onnx.save(full, str(tmp / REFERENCE_FILE))
        doc["reference"]["sha256"] = sha256_of(tmp / REFERENCE_FILE)
        extractor = Extractor(inferred)
        for s, groups in enumerate(stages):
            entries = [_export_group(extractor, grp, tmp, specs, str(model_file)) for grp in groups]
            doc["stages"].append({"index": s, "pus": list(plan.stages[s].pus),
                                  "receives": receives[s], "sends": sends[s], "groups": entries})
        (tmp / MANIFEST_FILE).write_text(json.dumps(doc, indent=2) + "\n")
        _publish(tmp, out)
    return doc


def default_platform(instance: str) -> Path:
    """profiles/platforms/<platform>.json for an instance ``<platform>/<model>``, else host.json."""
    platform, sep, _ = instance.partition("/")
    candidate = PLATFORMS_DIR / f"{platform}.json"
    return candidate if sep and candidate.is_file() else PLATFORMS_DIR / "host.json"


def _predict(plan: Plan, problem: MappingProblem, plan_source: str) -> Evaluation:
    """The evaluator's figures for the plan (on its own units) on the instance it names."""
    try:
        return evaluate(problem, plan)
    except InfeasiblePlan as exc:
        raise InputError(plan_source, "stages", f"infeasible for {problem.name}: {exc}") from None


def _with_inferred_shapes(model: ModelProto, source: str) -> ModelProto:
    """A copy of ``model`` (its weights kept, for cutting) with the value infos of the capped and
    timed shape inference (:func:`~pipeplan.formulations.mapping.onnx_bounds.infer_shapes_safely`,
    which does not send the weights through its child). ONNX's own inference, run here, had been
    neither capped nor timed."""
    shapes = infer_shapes_safely(model, source, strict=False)
    out = ModelProto()
    out.CopyFrom(model)
    del out.graph.value_info[:]
    out.graph.value_info.extend(shapes.graph.value_info)
    return out


def _tensor_specs(model: ModelProto, stages: list[list[Group]], source: str) -> dict[str, dict[str, Any]]:
    """Tensor name -> {"name", "shape", "dtype"} from the shape-inferred model; every tensor
    on a group boundary needs one (the extractor and the executor rely on it)."""
    out = {}
    g = model.graph
    for v in list(g.input) + list(g.value_info) + list(g.output):
        tt = v.type.tensor_type
        if tt.elem_type and tt.HasField("shape"):
            shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim]
            out[v.name] = {"name": v.name, "shape": shape,
                           "dtype": str(helper.tensor_dtype_to_np_dtype(tt.elem_type))}
    for groups in stages:
        for grp in groups:
            for t in grp.inputs + grp.outputs:
                if t not in out:
                    raise InputError(source, "model", f"shape inference gives no type and shape for "
                                     f"tensor {t!r} (on the boundary of group {grp.id})")
    return out


def _sends(stages: list[list[Group]], g: nx.DiGraph) -> list[list[str]]:
    """Per stage: the tensors handed on after it: those a later stage reads and the network
    outputs made so far (a tensor rides along until its last reader is done)."""
    outputs = [name for name, *_ in g.graph["outputs"]]
    have = {name for name, *_ in g.graph["inputs"]}
    result = []
    for s, groups in enumerate(stages):
        have |= {t for grp in groups for t in grp.outputs}
        later = [t for later_groups in stages[s + 1:] for grp in later_groups for t in grp.inputs]
        result.append([t for t in dict.fromkeys(later + outputs) if t in have])
    return result


def _transfers(stages: list[list[Group]], g: nx.DiGraph, specs: dict) -> list[dict[str, Any]]:
    """Every tensor that crosses a group boundary: from its producing group (or the network
    input) to the groups that read it (and "output" for the network's outputs)."""
    made_by = {t: grp.id for groups in stages for grp in groups for t in grp.outputs}
    read_by: dict[str, list[str]] = {}
    for groups in stages:
        for grp in groups:
            for t in grp.inputs:
                read_by.setdefault(t, []).append(grp.id)
    for name, *_ in g.graph["outputs"]:
        read_by.setdefault(name, []).append("output")
    return [{**specs[t], "bytes": g.graph["tensor_bytes"].get(t, 0), "from": made_by.get(t, "input"),
             "to": readers} for t, readers in read_by.items()]


def _export_group(extractor: Extractor, grp: Group, folder: Path, specs: dict, model_source: str) -> dict:
    file = f"stage{grp.stage}_{re.sub(r'[^A-Za-z0-9_.-]', '_', grp.pu)}_p{grp.phase}.onnx"
    try:
        sub = extractor.extract_model(list(grp.inputs), list(grp.outputs))
        onnx.checker.check_model(sub)
    except (ValueError, onnx.checker.ValidationError) as exc:
        raise InputError(model_source, "model", f"cannot cut group {grp.id}: {exc}") from None
    onnx.save(sub, str(folder / file))
    return {"id": grp.id, "pu": grp.pu, "phase": grp.phase, "file": file, "sha256": sha256_of(folder / file),
            "nodes": list(grp.nodes), "inputs": [specs[t] for t in grp.inputs],
            "outputs": [specs[t] for t in grp.outputs], "depends_on": list(grp.depends_on)}


# ------------------------------------------------------------------------- atomic folder


def _check_target(out: Path) -> None:
    """Refuse ``out`` unless it is new, an empty folder or an earlier export that may be
    replaced (:func:`_exported_names`). Links, files, devices and FIFOs are refused, never
    written through or replaced."""
    if out.parent.exists() and not out.parent.is_dir():
        raise InputError(str(out), "", f"cannot write: {out.parent} is a file, not a folder")
    check_output(out, folder=True)
    if not out.exists():
        return
    try:
        written = _exported_names(out)
        entries = list(out.iterdir())
    except OSError as exc:
        raise InputError(str(out), "", f"cannot read the folder ({exc.strerror or exc})") from None
    for entry in entries:
        if entry.name not in written or entry.is_symlink() or not entry.is_file():
            raise InputError(str(out), "", f"holds {entry.name!r}, which export does not write, so it is "
                             "not an earlier export; choose another folder")


def _exported_names(out: Path) -> set[str]:
    """The entries an earlier export in ``out`` consists of: its manifest.json and the files it
    names. The manifest must load as ``pipeplan run`` loads it (so every file it names is
    inside ``out`` and unchanged since the export); an empty folder consists of nothing."""
    if not any(out.iterdir()):
        return set()
    try:
        m = load_manifest(out)
    except InputError as exc:
        raise InputError(str(out), "", f"not an earlier export ({exc}); choose another folder") from None
    root = out.resolve()
    files = [m.reference] + [g.path for stage in m.stages for g in stage.groups]
    return {MANIFEST_FILE} | {str(f.relative_to(root)) for f in files}


@contextmanager
def temp_export_folder(out: Path) -> Iterator[Path]:
    """A temporary folder beside ``out`` to build an export in, of a short fixed-length name
    (``out``'s own name in it had made a 250-character ``--out``, which the file system takes,
    fail as too long). If the body fails, the folder goes, and so do the parents of ``out`` it
    made (they had stayed, empty)."""
    created: list[Path] = []
    try:
        created = make_folders(out.parent)
        tmp = Path(tempfile.mkdtemp(prefix=".pp-export-", dir=out.parent))
    except OSError as exc:
        remove_folders(created)
        raise InputError(str(out), "", f"cannot write ({exc.strerror or exc})") from None
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        remove_folders(created)
        raise


def _publish(tmp: Path, out: Path, check: Callable[[Path], None] | None = None) -> None:
    """Rename ``tmp`` to ``out``; an earlier export there is swapped out, then deleted.
    ``check(out)``: refuses an ``out`` this kind of export may not replace (default: a single
    export's rule; a joint export passes its own)."""
    (check or _check_target)(out)
    os.chmod(tmp, folder_mode())    # mkdtemp's owner-only mode had stayed on the published export
    try:
        if out.is_dir() and any(out.iterdir()):
            old = Path(tempfile.mkdtemp(prefix=".pp-export-old-", dir=out.parent))
            try:
                os.replace(out, old)
            except OSError:
                os.rmdir(old)
                raise
            try:
                os.replace(tmp, out)
            except OSError:
                os.replace(old, out)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    except OSError as exc:      # e.g. a mount point as --out: it cannot be renamed (EBUSY)
        raise InputError(str(out), "", f"cannot replace this folder ({exc.strerror or exc}); give a folder "
                                       "inside it or elsewhere") from None

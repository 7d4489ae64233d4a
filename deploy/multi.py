"""Several DNNs on one SoC, deployed: ``pipeplan multi export`` cuts every network of a joint
plan into its own export folder, and ``pipeplan run`` on the joint folder streams all of them at
the same time on ONNX Runtime.

A joint export is a folder holding ``joint.json`` (schema ``pipeplan.multi-export/1``) and one
single-network export (:mod:`pipeplan.deploy.export`, ``manifest.json`` and sub-models) per
network, in a sub-folder named after the network. ``joint.json`` records the instance, how the
networks share the PUs and, per network, its folder and what the cost model predicts for it:
alone (its period and latency, the manifest's figures) and next to the others
(:func:`~pipeplan.formulations.mapping.multi.evaluator.evaluate_joint`: the rates of the fairness
objective, of the total objective, the common sustained rate, the worst-case latency and its
busy time per frame on every PU).

Only networks with an ONNX model behind them can be exported: operator-level instances
``<platform>/<model>`` of the models shipped in the onnx wheel. The measured block-level ones
(``khadas-vim3/...``) have no model to cut and are refused before anything is written.

The export is atomic as a whole: every network is exported into a temporary folder beside
``out``, which replaces ``out`` only at the end. An existing ``out`` is replaced only when it is
empty or an intact earlier joint export holding nothing else (its ``joint.json`` and the network
folders it names, each an intact single-network export), so nothing the tool did not write is
ever deleted.

Running: one thread per network calls the single-network executor
(:func:`~pipeplan.deploy.executor.run_export`) on its folder; a barrier makes the pipelines start
streaming together once all their sessions are loaded, and the reference checks start only when
every network's frames are out. ONNX Runtime releases the GIL while it computes, so the
networks' pipelines really run at once, contending for the PUs as the plan shares them. The
faster networks finish first and the rest then run alone, so the report measures each network's
rate under concurrency only over the frames that left while every network was still streaming
(``concurrent_fps``); its whole-run figures (latency included) are there too.
"""
from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pipeplan.core.deadline import MODEL_RUN_LIMIT_S
from pipeplan.core.errors import InputError
from pipeplan.core.io import check_output, inside_folder, load_json
from pipeplan.core.sizes import check_memory
from pipeplan.deploy.executor import (
    OVERSUBSCRIPTION,
    check_frames,
    check_run_memory,
    check_threads,
    run_export,
    thread_ceiling,
)
from pipeplan.deploy.export import _check_target as check_single_target
from pipeplan.deploy.export import _publish, export_plan, temp_export_folder
from pipeplan.deploy.manifest import MANIFEST_FILE, load_manifest, sha256_of
from pipeplan.formulations.mapping.multi.evaluator import JointEvaluation, evaluate_plan_file
from pipeplan.formulations.mapping.multi.problem import MultiProblem, Network
from pipeplan.formulations.mapping.onnx_graph import LIGHT_MODELS, light_model_path
from pipeplan.formulations.mapping.profile import Reader
from pipeplan.instances.multi import load_multi
from pipeplan.instances.paths import PLATFORMS_DIR
from pipeplan.profiles.ort_guard import RunGuard, reserve_outside_arena

JOINT_FILE = "joint.json"
JOINT_SCHEMA = "pipeplan.multi-export/1"
JOINT_RATES = ("fair_fps", "total_fps", "sustained_fps")
FOLDER_NAME_MAX = 120     # characters of a network's name kept in its folder's name (file systems hold 255 bytes)


# ------------------------------------------------------------------------------------ export


def export_joint(plan_file: str | Path, instance: str, out: str | Path, seed: int = 0) -> dict[str, Any]:
    """Export the joint plan in ``plan_file`` (a joint plan or SolveResult) for the multi-network
    ``instance`` into ``out``; returns the content of ``joint.json``."""
    plan_file, out = Path(plan_file), Path(out)
    _check_target(out)
    problem = load_multi(instance)
    joint, ev = evaluate_plan_file(problem, plan_file)
    models = {net.name: _model_of(problem, i, net) for i, net in enumerate(problem.networks)}
    folders = _folder_names([net.name for net in problem.networks])
    plan_sha = sha256_of(plan_file)
    doc: dict[str, Any] = {
        "schema": JOINT_SCHEMA,
        "instance": problem.name,
        "sharing": problem.sharing,
        "plan": {"source": str(plan_file), "sha256": plan_sha},
        "predicted": {**ev.objectives(), "pu_load_ms": ev.pu_load_ms},
        "networks": {},
    }
    with temp_export_folder(out) as tmp:
        for net in problem.networks:
            # the network's plan for its own instance, so the export predicts and picks the
            # platform as the joint evaluation did (a plan may name another instance)
            single = tmp / f".plan-{folders[net.name]}.json"
            single.write_text(json.dumps(replace(joint.plans[net.name], instance=net.problem.name).to_dict()))
            manifest = export_plan(single, models[net.name][1], tmp / folders[net.name],
                                   instance=_instance_of(problem, net), seed=seed)
            single.unlink()
            manifest["plan"].update(source=str(plan_file), sha256=plan_sha, network=net.name)
            (tmp / folders[net.name] / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n")
            doc["networks"][net.name] = {"folder": folders[net.name], "instance": net.problem.name,
                                         "model": models[net.name][0], "weight": net.weight,
                                         "predicted": _predicted(ev, net.name, manifest["predicted"])}
        (tmp / JOINT_FILE).write_text(json.dumps(doc, indent=2) + "\n")
        _publish(tmp, out, check=_check_target)
    return doc


def _model_of(problem: MultiProblem, index: int, net: Network) -> tuple[str, Path]:
    """(name, path) of the ONNX model behind a network: its ``model`` (a model of the onnx wheel,
    or an ONNX file inside the instance file's folder), else the wheel's model behind an
    operator-level instance ``<platform>/<model>[@granularity]``."""
    source = problem.source or problem.name
    if net.model:
        if net.model in LIGHT_MODELS:
            return net.model, light_model_path(net.model)
        path = inside_folder(Path(source).parent, net.model, source, f"networks[{index}].model")
        if path.suffix != ".onnx" or not path.is_file():
            raise InputError(source, f"networks[{index}].model", f"{net.model!r} is neither a model of the onnx "
                             f"wheel ({', '.join(LIGHT_MODELS)}) nor an ONNX file in {Path(source).parent}")
        return net.model, path
    name = net.instance or net.problem.name
    platform, _, model = name.partition("@")[0].partition("/")
    if Path(name).suffix == ".json" or model not in LIGHT_MODELS or not (PLATFORMS_DIR / f"{platform}.json").is_file():
        raise InputError(source, f"networks[{index}].instance",
                         f"network {net.name} ({name}) has no ONNX model to export; name one in networks[{index}]."
                         f"model, or use an operator-level instance <platform>/<model> "
                         f"({', '.join(LIGHT_MODELS)})")
    return model, light_model_path(model)


def _instance_of(problem: MultiProblem, net: Network) -> str:
    """How export_plan finds the network's instance: its catalogue name, or the instance file's
    path (inside the multi-instance file's folder, as the loader checked)."""
    if Path(net.instance).suffix == ".json":      # as the loader tells a file (instances/multi.py)
        return str(inside_folder(Path(problem.source).parent, net.instance, problem.source, "instance"))
    return net.problem.name


def _folder_names(names: list[str]) -> dict[str, str]:
    """network -> its sub-folder: the name itself when it is a plain file name, else the name
    with other characters as '_' (numbered when that collides), never hidden nor joint.json, and
    at most ``FOLDER_NAME_MAX`` characters of it (a 300-character name had been an OSError
    traceback, File name too long)."""
    out: dict[str, str] = {}
    for name in names:
        base = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:FOLDER_NAME_MAX]
        if base.startswith(".") or base == JOINT_FILE:
            base = "_" + base
        folder, k = base, 2
        while folder in out.values():
            folder, k = f"{base}-{k}", k + 1
        out[name] = folder
    return out


def _predicted(ev: JointEvaluation, name: str, alone: dict[str, Any]) -> dict[str, Any]:
    score = ev.networks[name]
    return {"alone": {"period_ms": alone["period_ms"], "latency_ms": alone["latency_ms"],
                      "fps": 1000.0 / alone["period_ms"]},
            "joint": {"period_ms": score.period_ms, "latency_ms": score.latency_ms,
                      "worst_latency_ms": score.worst_latency_ms, "fair_fps": ev.fair_fps[name],
                      "total_fps": ev.total_fps[name], "sustained_fps": ev.sustained_fps,
                      "busy_ms": score.busy_ms}}


def _check_target(out: Path) -> None:
    """Refuse ``out`` unless it is new, an empty folder or an intact earlier joint export that
    holds nothing else. Links, files, devices and FIFOs are refused, never written through."""
    if out.parent.exists() and not out.parent.is_dir():
        raise InputError(str(out), "", f"cannot write: {out.parent} is a file, not a folder")
    check_output(out, folder=True)
    if not out.exists():
        return
    try:
        entries = list(out.iterdir())
    except OSError as exc:
        raise InputError(str(out), "", f"cannot read the folder ({exc.strerror or exc})") from None
    if not entries:
        return
    if not is_joint_export(out):
        raise InputError(str(out), "", f"holds {sorted(e.name for e in entries)[0]!r}, which export does not "
                         "write, so it is not an earlier joint export; choose another folder")
    try:
        written = {n.folder.name: n.folder for n in load_joint(out).networks
                   if n.folder.parent == out.resolve()}
    except InputError as exc:
        raise InputError(str(out), "", f"not an earlier joint export ({exc}); choose another folder") from None
    for entry in entries:
        if entry.name == JOINT_FILE and entry.is_file() and not entry.is_symlink():
            continue
        if entry.name in written and entry.is_dir() and not entry.is_symlink():
            check_single_target(entry)
            continue
        raise InputError(str(out), "", f"holds {entry.name!r}, which export does not write, so it is "
                         "not an earlier joint export; choose another folder")


# ------------------------------------------------------------------------------------ read


@dataclass(frozen=True)
class ExportedNetwork:
    name: str
    folder: Path                 # resolved, inside the joint folder
    predicted: dict[str, Any]    # {"alone": {...}, "joint": {...}} as export_joint writes it


@dataclass(frozen=True)
class JointExport:
    source: str
    instance: str
    sharing: str
    networks: tuple[ExportedNetwork, ...]


def is_joint_export(folder: str | Path) -> bool:
    """Whether ``folder`` holds a joint.json (as an entry: a link there counts, and is refused later)."""
    return os.path.lexists(Path(folder) / JOINT_FILE)


def load_joint(folder: str | Path) -> JointExport:
    """Read and check ``joint.json``: every network folder it names must lie inside ``folder``
    (links followed), and the predicted figures ``pipeplan run`` reports must be numbers."""
    folder = Path(folder)
    source = str(folder / JOINT_FILE)
    r = Reader(source)
    doc = r.obj(load_json(inside_folder(folder, JOINT_FILE, source, "")), "")
    if doc.get("schema") != JOINT_SCHEMA:
        raise r.fail("schema", f"expected {JOINT_SCHEMA!r}, got {doc.get('schema')!r}")
    raw = r.obj(r.get(doc, "networks", ""), "networks")
    if not raw:
        raise r.fail("networks", "expected at least one network")
    networks, seen = [], {}
    for name, entry in raw.items():
        r.name(name, "networks")    # run prints it: a line break had forged an error line
        fld = f"networks.{name}"
        entry = r.obj(entry, fld)
        path = inside_folder(folder, r.get(entry, "folder", fld), source, f"{fld}.folder")
        if path in seen:
            raise r.fail(f"{fld}.folder", f"is also the folder of network {seen[path]}")
        seen[path] = name
        pred = r.obj(r.get(entry, "predicted", fld), f"{fld}.predicted")
        alone = r.obj(r.get(pred, "alone", f"{fld}.predicted"), f"{fld}.predicted.alone")
        together = r.obj(r.get(pred, "joint", f"{fld}.predicted"), f"{fld}.predicted.joint")
        busy = r.obj(r.get(together, "busy_ms", f"{fld}.predicted.joint"), f"{fld}.predicted.joint.busy_ms")
        predicted = {
            "alone": {k: r.number(r.get(alone, k, f"{fld}.predicted.alone"), f"{fld}.predicted.alone.{k}")
                      for k in ("period_ms", "latency_ms", "fps")},
            "joint": {**{k: r.number(r.get(together, k, f"{fld}.predicted.joint"), f"{fld}.predicted.joint.{k}")
                         for k in ("worst_latency_ms", *JOINT_RATES)},
                      "busy_ms": {pu: r.number(v, f"{fld}.predicted.joint.busy_ms.{pu}") for pu, v in busy.items()}},
        }
        networks.append(ExportedNetwork(name, path, predicted))
    return JointExport(source=source, instance=r.name(r.get(doc, "instance", ""), "instance"),
                       sharing=r.string(r.get(doc, "sharing", ""), "sharing"), networks=tuple(networks))


# ------------------------------------------------------------------------------------ run


def run_joint(folder: str | Path, frames: int = 200, seed: int = 0,
              progress: Callable[[int, int], None] | None = None,
              time_limit_s: float = MODEL_RUN_LIMIT_S) -> dict[str, Any]:
    """Stream ``frames`` frames through every network of the joint export in ``folder`` at
    once; returns the report (per network: measured, predicted, their ratios, the whole
    single-network run report).

    Checked before any session loads: the number of networks (:func:`check_network_count`), each
    network's threads (:func:`~pipeplan.deploy.executor.check_threads`) and all of them together
    (:func:`check_joint_threads`), and ``frames`` against
    the memory cap for all networks together, since every network holds its input frames and
    keeps its frames' outputs until the end at the same time. ``time_limit_s`` bounds each
    network's run, counted from the start: loading the manifests is under it too."""
    began = time.monotonic()
    check_frames(frames)
    joint = load_joint(folder)
    nets = joint.networks
    check_network_count(joint)
    guard = RunGuard(time_limit_s, began=began)
    manifests = {n.name: load_manifest(n.folder, guard) for n in nets}
    check_joint_threads(joint, sum(check_threads(m) for m in manifests.values()))
    kept, held = map(sum, zip(*(check_run_memory(m, frames) for m in manifests.values())))
    check_memory("--frames", frames, kept, fixed=held)
    reserve_outside_arena(held)    # every network's input frames at once, outside ONNX Runtime's arena
    together = threading.Barrier(len(nets))
    left: dict[str, list[float]] = {n.name: [] for n in nets}   # when each frame left the pipeline
    lock = threading.Lock()
    reports: dict[str, dict[str, Any]] = {}
    errors: list[BaseException] = []

    def one(net: ExportedNetwork) -> None:
        def tick(done: int, total: int) -> None:
            now = time.perf_counter()
            with lock:
                left[net.name].append(now)
                if progress:
                    progress(sum(map(len, left.values())), frames * len(nets))
        try:
            reports[net.name] = run_export(net.folder, frames=frames, seed=seed, progress=tick, together=together,
                                          manifest=manifests[net.name], time_limit_s=time_limit_s, began=began)
        except BaseException as exc:   # handed to the caller below
            errors.append(exc)
            together.abort()           # the others stop waiting for this one

    threads = [threading.Thread(target=one, args=(n,), name=f"net-{n.name}", daemon=True) for n in nets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:   # the first real failure; the others only saw the barrier break
        raise next((e for e in errors if not isinstance(e, threading.BrokenBarrierError)), errors[0])
    return _joint_report(joint, reports, left, frames, seed)


def check_network_count(joint: JointExport) -> None:
    """Refuse more networks than OVERSUBSCRIPTION x this host's CPUs: each network streams its
    own pipeline at the same time (a thread of its own and at least one computing), so past that
    the host runs more computing threads per CPU than ``run`` allows one PU, and the rates
    measured under concurrency would measure the oversubscription, not the plan."""
    host_cpus, most = thread_ceiling()
    if len(joint.networks) > most:
        raise InputError(joint.source, "networks", f"{len(joint.networks)} networks to run at once on a host with "
                         f"{host_cpus} CPUs (at most {OVERSUBSCRIPTION}x as many networks as CPUs)")


def check_joint_threads(joint: JointExport, threads: int) -> None:
    """Refuse networks whose runs together make more than OVERSUBSCRIPTION x this host's CPUs
    threads (``check_threads`` counts each): they run at once, so the rule for one run holds for
    all of them (four networks each within the rule had made four times the threads it allows)."""
    host_cpus, most = thread_ceiling()
    if threads > most:
        raise InputError(joint.source, "networks", f"{threads} threads to run its {len(joint.networks)} networks at "
                         f"once on a host with {host_cpus} CPUs (at most {OVERSUBSCRIPTION}x as many threads as "
                         "CPUs in all)")


def _joint_report(joint: JointExport, reports: dict[str, dict], left: dict[str, list[float]],
                  frames: int, seed: int) -> dict[str, Any]:
    end = min(times[-1] for times in left.values())   # the first network done: concurrency ends
    out: dict[str, Any] = {}
    for net in joint.networks:
        rep, times = reports[net.name], left[net.name]
        inside = [t for t in times if t <= end]
        period_ms = (inside[-1] - inside[0]) / (len(inside) - 1) * 1e3 if len(inside) > 1 else None
        fps = 1000.0 / period_ms if period_ms else None
        alone, together = net.predicted["alone"], net.predicted["joint"]
        out[net.name] = {
            "folder": str(net.folder),
            "outputs_match": rep["outputs_match"],
            "max_abs_diff": rep["max_abs_diff"],
            "measured": {"concurrent_fps": fps, "concurrent_period_ms": period_ms, "concurrent_frames": len(inside),
                         "throughput_fps": rep["throughput_fps"], "period_ms": rep["measured_period_ms"],
                         "latency_ms_median": rep["latency_ms_median"], "latency_ms_p90": rep["latency_ms_p90"],
                         "service_ms_median": rep["service_ms_median"],
                         "queueing_ms_median": rep["queueing_ms_median"], "pu_busy_share": rep["pu_busy_share"]},
            "predicted": net.predicted,
            "ratios": {**{f"fps_vs_{k}": _ratio(fps, v) for k, v in
                          [("alone", alone["fps"])] + [(k.removesuffix("_fps"), together[k]) for k in JOINT_RATES]},
                       "latency_vs_alone": _ratio(rep["latency_ms_median"], alone["latency_ms"]),
                       "latency_vs_worst": _ratio(rep["latency_ms_median"], together["worst_latency_ms"])},
            "run": rep,
        }
    # the cost model's PU utilisation at the measured rates: near 1 on a PU the pipelines keep
    # busy when the model's busy times are right; above 1, the PU did more than the model allows
    pus = sorted({pu for n in joint.networks for pu in n.predicted["joint"]["busy_ms"]})
    load = {pu: sum((out[n.name]["measured"]["concurrent_fps"] or 0.0) * n.predicted["joint"]["busy_ms"].get(pu, 0.0)
                    for n in joint.networks) / 1000.0 for pu in pus}
    return {"export": str(Path(joint.source).parent), "instance": joint.instance, "sharing": joint.sharing,
            "frames": frames, "seed": seed, "outputs_match": all(n["outputs_match"] for n in out.values()),
            "predicted_pu_utilisation_at_measured_rates": load, "networks": out}


def _ratio(measured: float | None, predicted: float) -> float | None:
    return measured / predicted if measured is not None and predicted > 0 else None

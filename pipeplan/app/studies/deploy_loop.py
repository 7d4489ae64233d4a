"""``pipeplan deploy-loop``: plan on a measured host profile, deploy the plans, measure them.

Per model: profile the host with ONNX Runtime (per node, PUs C0 and C1: two identical
single-threaded workers, one per core) -> a mapping instance from the model's operator DAG and
that profile -> solve it with each solver -> export each plan -> run the export -> one row of
predicted vs measured period and latency. Everything a row needs to be reproduced is written
under ``out/<model>/``: profile.json, instance.json (its name is its own path, which the plans
name, so ``pipeplan export`` finds it again from the same working folder), <solver>.result.json,
the export folder <solver>/ and <solver>.run.json. The table goes to ``out/deploy.csv`` and
``out/deploy.md``, each written atomically.
"""
from __future__ import annotations

import platform as host_platform
import statistics
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import onnxruntime as ort
from onnx import helper

import pipeplan
from pipeplan.core.api import check_limits
from pipeplan.core.errors import InputError
from pipeplan.core.io import check_out_folder, check_output, mark_out_folder, write_atomic, write_json
from pipeplan.core.registry import get_solver
from pipeplan.core.sizes import check_memory
from pipeplan.core.tables import cell, csv_text, markdown_table
from pipeplan.deploy.executor import MIN_INPUT_FRAMES_HELD, QUEUE_DEPTH, check_frames, kept_bytes_per_frame, run_export
from pipeplan.deploy.export import export_plan
from pipeplan.deploy.manifest import TensorSpec
from pipeplan.formulations.mapping.onnx_graph import LIGHT_MODELS, graph_from_model, model_path, read_model
from pipeplan.formulations.mapping.plan import plan_from_dict
from pipeplan.formulations.mapping.problem import MappingProblem
from pipeplan.instances.catalog import forget_loaded_mappings, load_mapping
from pipeplan.instances.from_model import HOST_PUS, check_instance_path, model_instance
from pipeplan.instances.paths import PLATFORMS_DIR
from pipeplan.profiles.ort_guard import reserve_outside_arena
from pipeplan.profiles.ort_profiler import TRACE_BYTES_PER_NODE_RUN
from pipeplan.profiles.random_feeds import check_feeds, draw_bytes, feed_bytes, graph_feeds

DEFAULT_SOLVERS = ("single", "pipeline-dp", "heft", "cpsat")
FILES = ("deploy.csv", "deploy.md")     # the tables it writes into --out, beside a folder per model
COLUMNS = ("model", "solver", "termination", "stages", "groups", "predicted_period_ms", "measured_period_ms",
           "period_ratio", "predicted_latency_ms", "measured_latency_ms", "latency_ms_p90", "latency_ratio",
           "throughput_fps", "busy_C0", "busy_C1", "outputs_match")

CAVEATS = """\
## What the cost model does not capture

- **Python and thread overhead.** Every sub-model is one `InferenceSession.run` call from a
  Python thread, plus a queue hand-off per stage and an event per branch group. The profile only
  has per-kernel times (0.01 ms per hand-off is assumed), so plans with many branch groups
  (HEFT alternates PUs inside a module) pay more than predicted.
- **The GIL.** ONNX Runtime releases the GIL while a kernel runs, so two stages compute in
  parallel, but the Python glue between calls (feeds, queue operations, bookkeeping) is
  serialised across all threads; with short operators this glue becomes a shared bottleneck.
- **Cache and memory effects.** The profile is measured one node after the other on one core,
  alone. In the pipeline both cores run at once and share the last-level cache and memory
  bandwidth; a tensor handed from C0 to C1 may be read from L3 or DRAM instead of C0's caches;
  the per-node profile cannot see these interactions.
- **Per-session effects.** Each sub-model is its own session: its first and last operators do
  not share memory arenas or buffer reuse with neighbours in other groups, and profiling itself
  (per-node timestamps) adds a little to the profiled times.
- **The rest of the machine.** Anything else running on the two cores (another benchmark, the
  OS) takes time from the pinned workers; nothing here reserves the cores.
- **Latency definition.** Measured latency runs from the moment stage 0 takes a frame to the
  moment the last stage hands it out, so it includes waits in the queues between stages when
  the pipeline is saturated; the model's latency is the sum of stage times without waits.
"""


def model_label(model: str) -> str:
    """The row label and folder name of a model: its name in the onnx wheel, or its file's stem
    (for any file, with or without the .onnx suffix: a path never becomes a folder name, where
    ``out / "/abs/model"`` would be the model file itself)."""
    return model if model in LIGHT_MODELS and not Path(model).exists() else Path(model).stem


def check_models(models: list[str], *, frames: int, runs: int, warmup: int) -> None:
    """Everything about the models that can be refused, refused before the first one is
    profiled: two models sharing a folder name (the second would overwrite the first's
    exports), and ``--frames`` and ``--runs`` past the memory cap (the checks ``pipeplan run``
    and ``pipeplan profile`` make, from the whole model's outputs, inputs and node count). Then
    the input frames the runs will hold are reserved beside ONNX Runtime's arena."""
    seen: dict[str, str] = {}
    held = 0
    for model in models:
        label = model_label(model)
        if label in seen or not label or label in (".", ".."):
            why = f"same folder name {label!r} as {seen[label]!r}" if label in seen else "no usable folder name"
            raise InputError("--models", model, f"{why} (rename the file)")
        seen[label] = model
        onnx_model = read_model(model_path(model))
        check_memory("--runs", runs + warmup,
                     TRACE_BYTES_PER_NODE_RUN * len(graph_from_model(onnx_model, model).nodes))
        outputs = [TensorSpec(out.name, tuple(d.dim_value if d.HasField("dim_value") else None
                                              for d in out.type.tensor_type.shape.dim),
                              helper.tensor_dtype_to_np_dtype(out.type.tensor_type.elem_type))
                   for out in onnx_model.graph.output]
        # the random inputs profile draws and the fewest input frames a run holds, as they check them
        feeds = graph_feeds(onnx_model)
        check_feeds(feeds, model, "graph.input", frames=MIN_INPUT_FRAMES_HELD)
        check_memory("--frames", frames, kept_bytes_per_frame(outputs),     # as run_export
                     fixed=MIN_INPUT_FRAMES_HELD * feed_bytes(feeds) + draw_bytes(feeds))
        held = max(held, most_frames_held(frames) * feed_bytes(feeds) + draw_bytes(feeds))
    # the profiles come first and make ONNX Runtime's arena, once per process: the runs' input
    # frames, numpy's, are left out of it from the start (as ``pipeplan run`` leaves them)
    reserve_outside_arena(held)


def most_frames_held(frames: int) -> int:
    """The most input frames a run of a host plan holds at once (``input_frames_held``): at most
    one stage per PU, each of them handing the inputs on."""
    return min(frames, MIN_INPUT_FRAMES_HELD + (QUEUE_DEPTH + 1) * len(HOST_PUS))


def host_instance(model: str, folder: Path, *, runs: int, warmup: int) -> MappingProblem:
    """Profile ``model`` (an ONNX file or a model of the onnx wheel) on this host and write
    profile.json and instance.json into ``folder``; returns the instance as loaded back from its
    file (its name is that file's path)."""
    instance_file = folder / "instance.json"
    problem = model_instance(model, name=str(instance_file), runs=runs, warmup=warmup)
    write_json(folder / "profile.json", problem.profile.to_dict())
    write_json(instance_file, problem.to_dict())
    forget_loaded_mappings()    # the file may have been rewritten since an earlier load
    return load_mapping(str(instance_file))


def deploy_loop(models: list[str], out: Path, *, solvers: tuple[str, ...] = DEFAULT_SOLVERS, frames: int = 200,
                runs: int = 10, warmup: int = 3, cpsat_time_limit: float = 30.0, seed: int = 0,
                command: str = "", progress: Callable[[int, int, str], None] | None = None) -> str:
    """Run the loop for each model; returns the markdown report (also written to ``out``)."""
    check_frames(frames)
    if runs < 1 or warmup < 0:
        raise InputError("--runs", "", f"need at least 1 profiling run, got {runs}")
    # what the solves, the export's weights and the runs would refuse, refused before any profile
    check_limits(cpsat_time_limit, option="--cpsat-time-limit", seed=seed)
    for name in solvers:
        get_solver("mapping", name)  # unknown names fail before any work
    check_out_folder(out, writes=FILES)     # a linked deploy.md had been refused after every model had run
    check_models(models, frames=frames, runs=runs, warmup=warmup)
    for model in models:     # a model's folder linked out of a pipeplan --out had been written through
        check_output(out / model_label(model), folder=True)
        check_instance_path(out / model_label(model) / "instance.json", "--out")
    mark_out_folder(out)         # it writes one model at a time: a rerun of a stopped loop is pipeplan's folder
    rows: list[dict] = []
    total, step = len(models) * (1 + len(solvers)), 0
    for model in models:
        folder = out / model_label(model)
        if progress:
            progress(step, total, f"{model}: profiling")
        problem = host_instance(model, folder, runs=runs, warmup=warmup)
        step += 1
        best = None
        for solver in solvers:
            if progress:
                progress(step, total, f"{model}: {solver}")
            rows.append(_one_solver(problem, model, solver, folder, best, frames=frames, seed=seed,
                                    cpsat_time_limit=cpsat_time_limit))
            ok = [r for r in rows if r["model"] == model_label(model) and r["plan"] is not None]
            best = min(ok, key=lambda r: r["predicted_period_ms"])["plan"] if ok else None
            step += 1
    if progress:
        progress(step, total, "writing tables")
    md = _markdown(rows, frames=frames, runs=runs, command=command)
    write_atomic(out / "deploy.csv", csv_text(rows, COLUMNS, float_format=".4f"))
    write_atomic(out / "deploy.md", md)
    return md


def _one_solver(problem: MappingProblem, model: str, solver: str, folder: Path, warm_start, *, frames: int,
                seed: int, cpsat_time_limit: float) -> dict:
    """Solve, export, run; the row (with the plan, for warm-starting the next solver)."""
    exact = get_solver("mapping", solver).exact
    result = pipeplan.solve(problem, solver, time_limit=cpsat_time_limit if exact else None, seed=seed,
                            threads=2, warm_start=warm_start if exact else None)
    result_file = write_atomic(folder / f"{solver}.result.json", result.to_json())
    row = {"model": model_label(model), "solver": solver, "termination": result.termination.value, "plan": None}
    if not result.plan:
        return row
    manifest = export_plan(result_file, model_path(model), folder / solver,
                           platform_file=PLATFORMS_DIR / "host.json", seed=seed)
    report = run_export(folder / solver, frames=frames, seed=seed)
    write_json(folder / f"{solver}.run.json", report)
    busy = report["pu_busy_share"]
    row.update(
        plan=plan_from_dict(result.plan), stages=len(manifest["stages"]),
        groups=sum(len(s["groups"]) for s in manifest["stages"]),
        predicted_period_ms=report["predicted_period_ms"], measured_period_ms=report["measured_period_ms"],
        period_ratio=report["measured_period_ms"] / report["predicted_period_ms"],
        predicted_latency_ms=report["predicted_latency_ms"], measured_latency_ms=report["latency_ms_median"],
        latency_ms_p90=report["latency_ms_p90"],
        latency_ratio=report["latency_ms_median"] / report["predicted_latency_ms"],
        throughput_fps=report["throughput_fps"], busy_C0=busy.get("C0", 0.0), busy_C1=busy.get("C1", 0.0),
        outputs_match=report["outputs_match"])
    return row


def _markdown(rows: list[dict], *, frames: int, runs: int, command: str) -> str:
    shown = ("model", "solver", "stages", "groups", "predicted_period_ms", "measured_period_ms", "period_ratio",
             "predicted_latency_ms", "measured_latency_ms", "latency_ms_p90", "latency_ratio", "busy_C0",
             "busy_C1", "outputs_match")
    lines = ["# Plan -> deploy -> measure on the host", "",
             f"Command: `{command or 'pipeplan deploy-loop'}` "
             f"({datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}, "
             f"{host_platform.processor() or host_platform.machine()}, ONNX Runtime {ort.__version__}).", "",
             f"Host profile: ONNX Runtime per-node profiling, one thread, graph optimisations off, median of "
             f"{runs} runs, the same times for C0 and C1 (two identical single-threaded workers). The "
             f"executor runs each PU's sessions with one intra-op thread on the worker pinned to the PU's "
             f"core (C0 -> CPU 0, C1 -> CPU 1), {frames} frames per plan. Ratios are measured / predicted. "
             "busy = a PU's time inside ONNX Runtime calls / wall time. outputs_match: every frame's outputs "
             "equal those of the unsplit model (rtol 1e-4, atol 1e-5).", "",
             *markdown_table(shown, ([cell(r.get(k), none="") for k in shown] for r in rows))]
    measured = [r for r in rows if r["plan"] is not None]
    if measured:
        period = statistics.median(abs(r["period_ratio"] - 1) for r in measured) * 100
        latency = statistics.median(abs(r["latency_ratio"] - 1) for r in measured) * 100
        lines += ["", f"Median |error| over {len(measured)} deployed plans: period {period:.1f}%, "
                  f"latency {latency:.1f}%."]
    failed = [r for r in rows if r["plan"] is None]
    for r in failed:
        lines.append(f"\n{r['model']} / {r['solver']}: no plan ({r['termination']}).")
    return "\n".join(lines) + "\n\n" + CAVEATS

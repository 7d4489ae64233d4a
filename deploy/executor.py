"""``pipeplan run``: stream frames through an export on ONNX Runtime, as a pipeline.

One worker thread per stage, joined by bounded queues: while stage 1 works on frame *k*,
stage 0 already works on frame *k + 1*. Inside a stage that uses several PUs, each PU has a
helper thread that runs its groups in order, each group once the groups it depends on are done
(per-frame events), so branches on different PUs run at the same time. The thread that calls
ONNX Runtime for a PU is pinned to the PU's cores (see :mod:`runtime`). ONNX Runtime releases
the GIL while it computes, so the threads really run in parallel.

A run stops at its time limit (``time_limit_s``, ``run --time-limit``): every ONNX Runtime call
goes through one :class:`~pipeplan.profiles.ort_guard.RunGuard`, which ends them all at the
deadline or when the main thread is interrupted (Ctrl-C, SIGTERM), so a model that computes for
ever (a Loop whose end is decided at run time) cannot hang the run.

Frames are random with a fixed seed (one generator per frame, so a frame can be rebuilt).
After the run every frame is run again through the unsplit ``model_full.onnx`` and its outputs
compared with ``numpy.allclose(rtol=1e-4, atol=1e-5)``.

Measures: throughput in steady state, (frames - 1) / (time between the first and the last
frame leaving the pipeline); latency of a frame, from the moment stage 0 takes it to the moment
the last stage hands it out (waits between stages included, the wait before stage 0 not), split
into service (the frame's time computing in the stages) and queueing (the rest: waiting between
stages for the next stage to be free, and the hand-offs), since the plan's predicted latency
has no queueing in it; each PU's busy share, the time its ONNX Runtime calls took over the
run's wall time.

An export made for another platform (a311d, bst, ...) still runs here, each PU as ONNX Runtime
threads on this host's CPUs; :func:`platform_warning` says so, since the times then measure
this host, not the platform the plan was made for.
"""
from __future__ import annotations

import math
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from pipeplan.core.deadline import MODEL_RUN_LIMIT_S
from pipeplan.core.errors import InputError, brief_error
from pipeplan.core.sizes import check_bytes, check_memory, human_bytes
from pipeplan.deploy.manifest import GroupSpec, Manifest, StageSpec, TensorSpec, load_manifest
from pipeplan.deploy.runtime import CPU_PROVIDER, make_session, pin_current_thread, usable_cores
from pipeplan.profiles.ort_guard import RunGuard, reserve_outside_arena
from pipeplan.profiles.random_feeds import Feed, draw_bytes, random_feeds

HOST_PLATFORM = "host"  # profiles/platforms/host.json: its PUs C0, C1... are this machine's CPU threads
OVERSUBSCRIPTION = 4  # threads of one PU per host CPU beyond which a run is refused, not attempted
QUEUE_DEPTH = 2  # frames waiting between two stages; enough to absorb jitter, bounded memory
# input frames a run holds at once at least: the one the feeder draws, QUEUE_DEPTH before stage 0, one in it
MIN_INPUT_FRAMES_HELD = QUEUE_DEPTH + 2
RTOL, ATOL = 1e-4, 1e-5
# Elements compared at a time by the reference check: its float64 differences take at most
# 512 KiB beside the outputs (input frames are drawn a chunk at a time too: random_feeds.py)
CHUNK = 1 << 16
# what one ONNX Runtime session holds outside the capped arena beside its model: 27.9 KB measured
# (onnxruntime 1.x, a one-node model, 400 sessions, resident memory; a model of 1 or 10 MB adds
# 0.98 of its size, which the arena's cap covers)
SESSION_BYTES = 32 << 10


def run_export(folder: str | Path, *, frames: int = 200, seed: int = 0,
               progress: Callable[[int, int], None] | None = None,
               together: threading.Barrier | None = None, manifest: Manifest | None = None,
               time_limit_s: float = MODEL_RUN_LIMIT_S, began: float | None = None) -> dict[str, Any]:
    """Run ``frames`` frames through the export in ``folder``; returns the report.

    ``together``: a barrier shared by runs of several exports at once (a joint export,
    :mod:`pipeplan.deploy.multi`). Each run waits at it once its sessions are ready, so the
    pipelines start streaming together, and again when its frames are out, so no run's
    reference check competes with another's frames. ``manifest``: the folder's manifest, when the
    caller loaded it already (to check all networks' frames together). ``time_limit_s``: the
    most the run may take, loading the manifest, creating the sessions and the reference check
    included; counted from ``began`` (a ``time.monotonic()``, for a caller that loaded the
    manifest under the same limit), else from here."""
    check_frames(frames)
    guard = RunGuard(time_limit_s, began=began)
    m = manifest or load_manifest(folder, guard)
    check_threads(m)
    _, held_bytes = check_run_memory(m, frames)
    reserve_outside_arena(held_bytes)   # the input frames are numpy's; outputs and the rest ONNX Runtime's
    cores = {pu: usable_cores(rt["cores"]) for pu, rt in m.pus.items()}
    sessions = _sessions(m, cores, guard)
    failures: list[InputError] = []
    stages = [_StageWorker(m, spec, sessions, cores, failures, guard) for spec in m.stages]
    queues = [queue.Queue(maxsize=QUEUE_DEPTH) for _ in range(len(stages) + 1)]

    def feed() -> None:
        try:
            for f in range(frames):
                if failures:
                    break
                queues[0].put((f, frame_inputs(m.inputs, seed, f)))
        except Exception as exc:  # e.g. no memory for a frame: stop the run, do not hang it
            failures.append(InputError(m.source, "inputs", f"cannot build an input frame ({brief_error(exc, limit=300)})"))
        finally:
            queues[0].put(None)

    outputs: dict[int, list[np.ndarray]] = {}
    leave: dict[int, float] = {}
    all_out = threading.Event()

    def collect() -> None:
        try:
            while (item := queues[-1].get()) is not None:
                f, tensors = item
                got = [tensors[t.name] for t in m.outputs]
                fault = _unlike_declared(m.outputs, got, "the pipeline")
                if fault:    # a group's own declaration may differ from the network's: keep no more
                    failures.append(InputError(m.source, f"outputs[{fault[0]}]", fault[1]))
                    continue
                leave[f] = time.perf_counter()
                outputs[f] = got
                if progress:
                    progress(len(outputs), frames)
        finally:
            all_out.set()

    if together is not None:
        together.wait()
    threads = [threading.Thread(target=feed, name="feeder", daemon=True)]
    threads += [threading.Thread(target=w.serve, args=(queues[i], queues[i + 1]), name=f"stage{i}", daemon=True)
                for i, w in enumerate(stages)]
    threads.append(threading.Thread(target=collect, name="collector", daemon=True))
    for t in threads:
        t.start()
    guard.wait(all_out)     # this thread stays free for signals and the deadline
    for t in threads:
        t.join()
    guard.check_time_limit(str(Path(m.source).parent))
    if failures:
        raise failures[0]
    if together is not None:
        together.wait()
    match, max_diff = _compare_with_reference(m, outputs, seed, guard)
    return _report(m, stages, sessions, cores, leave, match, max_diff)


def check_frames(frames: int) -> None:
    if frames < 2:
        raise InputError("--frames", "", f"need at least 2 frames to measure a period, got {frames}")


# What a kept frame costs beside its tensors' data: its entries in the collector's dicts (the
# outputs' list, its leave time) and each output array's header and ONNX Runtime allocation.
# Measured with the one-Relu manifest (one [1, 4] float32 output): 100,000 frames added 140 MB,
# about 1.4 KB a frame, where the data alone had been charged (32 bytes: a run under a 100 MiB
# cap took 373 MiB at the frame count the check let through).
FRAME_BYTES, OUTPUT_BYTES = 1024, 512


def kept_bytes_per_frame(outputs: Iterable[TensorSpec]) -> int:
    """Memory a run holds per frame until its end: every frame's network ``outputs`` are kept
    for the reference check, twice (ours and the reference's), with ``FRAME_BYTES`` and
    ``OUTPUT_BYTES`` a tensor of Python's and ONNX Runtime's own."""
    return FRAME_BYTES + sum(2 * _bytes(t) + OUTPUT_BYTES for t in outputs)


def _bytes(t: TensorSpec) -> int:
    return math.prod(t.concrete_shape()) * t.dtype.itemsize


def input_frames_held(m: Manifest, frames: int) -> int:
    """The most frames whose network inputs a run holds at once (at most ``frames``): the one the
    feeder builds, :data:`QUEUE_DEPTH` waiting for stage 0 and the one stage 0 works on
    (:data:`MIN_INPUT_FRAMES_HELD`); then, after each stage that hands a network input on,
    :data:`QUEUE_DEPTH` more waiting and the one the next stage (or the collector) holds. The
    reference check after the run builds one frame at a time again, by then alone."""
    names = {t.name for t in m.inputs}
    held = MIN_INPUT_FRAMES_HELD + sum(QUEUE_DEPTH + 1 for stage in m.stages if names & set(stage.sends))
    return min(frames, held)


def check_run_memory(m: Manifest, frames: int) -> tuple[int, int]:
    """Refuse a run whose frames would not fit the memory cap, before anything is allocated;
    returns (bytes kept per frame, bytes held outside ONNX Runtime's arena: the input frames
    held at once with one draw's buffer, and the sessions' own memory, :data:`SESSION_BYTES`
    each) for a caller adding up several runs. The input frames a run holds at once
    (:func:`input_frames_held`, from the manifest's declared input shapes) are the manifest's
    to answer for: past the cap alone they are its one-line error naming the largest input; what
    the frames kept to the end add (:func:`kept_bytes_per_frame`) is ``--frames``' error."""
    held = input_frames_held(m, frames)
    in_bytes = sum(_bytes(t) for t in m.inputs)
    held_bytes = held * in_bytes + draw_bytes(_feeds(m.inputs))
    if m.inputs:
        k, big = max(enumerate(m.inputs), key=lambda e: _bytes(e[1]))
        check_bytes(m.source, f"inputs[{k}].shape",
                    f"holding {held} frames of the network's inputs at once while the pipeline streams "
                    f"({human_bytes(in_bytes)} a frame; {big.name} {list(big.concrete_shape())} "
                    f"{big.dtype.name} the largest)", held_bytes)
    sessions = sum(len(stage.groups) for stage in m.stages)
    held_bytes += sessions * SESSION_BYTES
    check_bytes(m.source, "stages", f"its input frames and {sessions} ONNX Runtime sessions (one per group, "
                f"{human_bytes(SESSION_BYTES)} each beside its model)", held_bytes)
    kept = kept_bytes_per_frame(m.outputs)
    check_memory("--frames", frames, kept, fixed=held_bytes)
    return kept, held_bytes


def _feeds(specs: Iterable[TensorSpec]) -> list[Feed]:
    return [(t.name, t.concrete_shape(), t.dtype) for t in specs]


def thread_ceiling() -> tuple[int, int]:
    """(this host's CPUs, the most threads or streams pipeplan runs at once on it): the one
    rule behind ``check_threads`` and the joint runs' checks (``multi.check_network_count``,
    ``multi.check_joint_threads``)."""
    host_cpus = os.cpu_count() or 1
    return host_cpus, OVERSUBSCRIPTION * host_cpus


def check_threads(m: Manifest) -> int:
    """Refuse more threads than :data:`OVERSUBSCRIPTION` x this host's CPUs: for one PU
    (``pus.PU.intra_op_threads``), and for the whole run (``pus``), counted as the run makes
    them: every group's session has an intra-op pool of ``intra_op_threads - 1`` threads (ONNX
    Runtime's own; they spin a while for work after each run and after their start), and the
    executor calls the sessions from one thread per PU of each stage. An export that gives each
    PU one group makes exactly its PUs' ``intra_op_threads`` summed. 100 PUs of 8 threads (each
    within the rule for one PU) had made 800 on two CPUs, whose sessions alone took over 60 s to
    create; one 8-thread PU with 100 groups, 700. Returns the run's threads (for a joint run,
    which holds its networks together to the same rule)."""
    host_cpus, most = thread_ceiling()
    for pu, rt in m.pus.items():
        if rt["intra_op_threads"] > most:
            raise InputError(m.source, f"pus.{pu}.intra_op_threads",
                             f"{rt['intra_op_threads']} threads on a host with {host_cpus} CPUs "
                             f"(at most {OVERSUBSCRIPTION}x as many threads as CPUs)")
    groups = [g for stage in m.stages for g in stage.groups]
    pools = sum(m.pus[g.pu]["intra_op_threads"] - 1 for g in groups)
    callers = sum(len({g.pu for g in stage.groups}) for stage in m.stages)
    if pools + callers > most:
        raise InputError(m.source, "pus", f"{pools + callers} threads to run it ({pools} in the intra-op pools of "
                         f"{len(groups)} sessions, intra_op_threads - 1 each, and {callers} calling them, one per "
                         f"PU of each stage) on a host with {host_cpus} CPUs (at most {OVERSUBSCRIPTION}x as many "
                         "threads as CPUs in all)")
    return pools + callers


def frame_inputs(specs: tuple[TensorSpec, ...], seed: int, frame: int) -> dict[str, np.ndarray]:
    """The network inputs of frame ``frame``: standard-normal floats, random booleans,
    integers 0 or 1 (valid as indices), drawn a chunk at a time into the tensor's own dtype
    (profiles/random_feeds.py: the same values as drawn whole before, no float64 copy)."""
    return random_feeds(np.random.default_rng([seed, frame]), _feeds(specs))


def _sessions(m: Manifest, cores: dict[str, list[int] | None], guard: RunGuard) -> dict[str, ort.InferenceSession]:
    """One session per group, checked against the group's inputs and outputs; the time limit
    is checked before each (creating a session runs no call ``guard`` could stop)."""
    out = {}
    for s, stage in enumerate(m.stages):
        for j, grp in enumerate(stage.groups):
            guard.check_time_left(f"creating the ONNX Runtime sessions of {Path(m.source).parent} "
                                  f"(stages[{s}].groups[{j}], {grp.path.name})")
            try:
                sess = make_session(grp.path.read_bytes(), m.pus[grp.pu], m.graph_optimization,
                                    pin=cores[grp.pu] is not None)
            except Exception as exc:  # ORT raises its own types for a model it cannot load
                raise InputError(str(grp.path), "", f"ONNX Runtime cannot load it ({brief_error(exc, limit=300)})") from None
            have_in = {a.name for a in sess.get_inputs()}
            have_out = {a.name for a in sess.get_outputs()}
            if have_in != set(grp.inputs) or not set(grp.outputs) <= have_out:
                raise InputError(m.source, f"stages[{s}].groups[{j}]",
                                 f"{grp.path.name} has inputs {sorted(have_in)} and outputs {sorted(have_out)}, "
                                 f"the manifest says {list(grp.inputs)} -> {list(grp.outputs)}")
            out[grp.id] = sess
    return out


class _PuRunner:
    """Runs one stage's groups that belong to one PU, in order, each after its dependencies."""

    def __init__(self, m: Manifest, stage: StageSpec, pu: str, sessions: dict, failures: list, guard: RunGuard):
        self.m, self.stage, self.pu, self.failures, self.guard = m, stage, pu, failures, guard
        self.groups = [(j, g) for j, g in enumerate(stage.groups) if g.pu == pu]
        self.sessions = sessions
        self.busy_s = 0.0

    def run(self, tensors: dict[str, np.ndarray], done: dict[str, threading.Event]) -> None:
        try:
            for j, grp in self.groups:
                for dep in grp.depends_on:
                    done[dep].wait()
                if self.failures:
                    return
                self._run_group(j, grp, tensors)
                done[grp.id].set()
        finally:  # on failure too, so nobody waits forever on this PU's groups
            for _, grp in self.groups:
                done[grp.id].set()

    def _run_group(self, j: int, grp: GroupSpec, tensors: dict[str, np.ndarray]) -> None:
        start = time.perf_counter()
        try:
            values = self.guard.run(self.sessions[grp.id], list(grp.outputs), {t: tensors[t] for t in grp.inputs})
        except Exception as exc:  # ORT's own error types: a sub-model that does not fit its inputs
            self.failures.append(InputError(self.m.source, f"stages[{self.stage.index}].groups[{j}]",
                                            f"ONNX Runtime failed on {grp.path.name} ({brief_error(exc, limit=300)})"))
            return
        self.busy_s += time.perf_counter() - start
        fault = _unlike_declared(grp.output_specs, values, grp.path.name)
        if fault:
            k, message = fault
            self.failures.append(InputError(self.m.source, f"stages[{self.stage.index}].groups[{j}].outputs[{k}]",
                                            message))
            return
        tensors.update(zip(grp.outputs, values))


def _unlike_declared(specs: tuple[TensorSpec, ...], values: list[Any], file: str) -> tuple[int, str] | None:
    """The first of ``values`` (what ``file`` made) that is not the tensor ``specs`` declare:
    (its index, why). A declared size must be the size made; a named dimension (the batch, or a
    size only the run decides) may take any size. The memory estimate counts declared sizes, so
    a model making more than its manifest says (a Relu of symbolic length declared [1]) stops
    at its first frame instead of filling the memory cap frame after frame."""
    for k, (spec, value) in enumerate(zip(specs, values)):
        if not isinstance(value, np.ndarray):
            return k, f"{file} makes {spec.name} as a {type(value).__name__}, the manifest declares a tensor"
        if value.dtype != spec.dtype or value.ndim != len(spec.shape) or any(
                isinstance(d, int) and d != n for d, n in zip(spec.shape, value.shape)):
            return k, (f"{file} makes {spec.name} of shape {list(value.shape)} {value.dtype.name}, the manifest "
                       f"declares {list(spec.shape)} {spec.dtype.name}")
    return None


class _StageWorker:
    """The thread of one stage: takes a frame, runs the stage's groups, hands the frame on."""

    def __init__(self, m: Manifest, spec: StageSpec, sessions: dict, cores: dict, failures: list, guard: RunGuard):
        self.spec, self.cores, self.failures, self.source = spec, cores, failures, m.source
        self.runners = [_PuRunner(m, spec, pu, sessions, failures, guard)
                        for pu in dict.fromkeys(g.pu for g in spec.groups)]
        self.spans: dict[int, tuple[float, float]] = {}  # frame -> (start, end) in this stage

    def serve(self, inbox: queue.Queue, outbox: queue.Queue) -> None:
        helpers = []
        if len(self.runners) == 1:
            pin_current_thread(self.cores[self.runners[0].pu])
        else:
            helpers = [self._helper(r) for r in self.runners]
        try:
            while (item := inbox.get()) is not None:
                if self.failures:
                    continue  # drain, so the feeder never blocks
                try:
                    self._frame(*item, helpers, outbox)
                except Exception as exc:  # never leave the next stage waiting for a frame
                    self.failures.append(InputError(self.source, f"stages[{self.spec.index}]",
                                                    f"stage failed ({brief_error(exc, limit=300)})"))
        finally:
            for jobs, thread in helpers:
                jobs.put(None)
                thread.join()
            outbox.put(None)

    def _frame(self, f: int, tensors: dict, helpers: list, outbox: queue.Queue) -> None:
        start = time.perf_counter()
        done = {g.id: threading.Event() for g in self.spec.groups}
        if helpers:
            for jobs, _ in helpers:
                jobs.put((tensors, done))
            for event in done.values():
                event.wait()
        else:
            self.runners[0].run(tensors, done)
        self.spans[f] = (start, time.perf_counter())
        if not self.failures:
            outbox.put((f, {t: tensors[t] for t in self.spec.sends}))

    def _helper(self, runner: _PuRunner) -> tuple[queue.Queue, threading.Thread]:
        jobs: queue.Queue = queue.Queue()

        def loop() -> None:
            pin_current_thread(self.cores[runner.pu])
            while (job := jobs.get()) is not None:
                runner.run(*job)

        thread = threading.Thread(target=loop, name=f"stage{self.spec.index}-{runner.pu}", daemon=True)
        thread.start()
        return jobs, thread


def _compare_with_reference(m: Manifest, outputs: dict[int, list[np.ndarray]], seed: int,
                            guard: RunGuard) -> tuple[bool, float]:
    guard.check_time_left(f"creating the ONNX Runtime session of {m.reference}")
    try:
        ref = make_session(m.reference.read_bytes(), {"intra_op_threads": 1, "session_config": {},
                                                      "providers": [CPU_PROVIDER]},
                           m.graph_optimization, pin=False)
    except Exception as exc:
        raise InputError(str(m.reference), "", f"ONNX Runtime cannot load it ({brief_error(exc, limit=300)})") from None
    names = [t.name for t in m.outputs]
    match, max_diff = True, 0.0
    for f, got in sorted(outputs.items()):
        try:
            want = guard.run_stoppable(ref, names, frame_inputs(m.inputs, seed, f))
        except Exception as exc:  # ORT's own error types, or the stop at the deadline
            guard.check_time_limit(str(Path(m.source).parent))
            raise InputError(str(m.reference), "", f"ONNX Runtime failed on it ({brief_error(exc, limit=300)})") from None
        fault = _unlike_declared(m.outputs, want, m.reference.name)
        if fault:
            raise InputError(m.source, f"outputs[{fault[0]}]", fault[1])
        for a, b in zip(got, want):
            if a.shape != b.shape:    # both as declared, a named dimension apart
                match = False
                continue
            a, b = a.reshape(-1), b.reshape(-1)
            for start in range(0, a.size, CHUNK):   # float64 differences a piece at a time
                x, y = a[start:start + CHUNK], b[start:start + CHUNK]
                match &= bool(np.allclose(x, y, rtol=RTOL, atol=ATOL))
                max_diff = max(max_diff, float(np.max(np.abs(x.astype(np.float64) - y))))
    return match, max_diff


def _report(m: Manifest, stages: list[_StageWorker], sessions: dict, cores: dict,
            leave: dict[int, float], match: bool, max_diff: float) -> dict[str, Any]:
    frames = sorted(leave)
    first_start = min(stages[0].spans[f][0] for f in frames)
    wall = leave[frames[-1]] - first_start
    out_times = sorted(leave.values())
    period_s = (out_times[-1] - out_times[0]) / (len(out_times) - 1)
    latency_ms = np.array([(leave[f] - stages[0].spans[f][0]) * 1e3 for f in frames])
    service_ms = np.array([sum(w.spans[f][1] - w.spans[f][0] for w in stages) * 1e3 for f in frames])
    queueing_ms = np.maximum(latency_ms - service_ms, 0.0)
    busy: dict[str, float] = {}
    for w in stages:
        for r in w.runners:
            busy[r.pu] = busy.get(r.pu, 0.0) + r.busy_s
    groups = [g for stage in m.stages for g in stage.groups]
    used = {pu: list(dict.fromkeys(p for g in groups if g.pu == pu for p in sessions[g.id].get_providers()))
            for pu in busy}
    return {
        "export": str(Path(m.source).parent),
        "frames": len(frames),
        "outputs_match": match,
        "max_abs_diff": max_diff,
        "throughput_fps": 1.0 / period_s if period_s > 0 else float("inf"),
        "measured_period_ms": period_s * 1e3,
        "predicted_period_ms": m.predicted["period_ms"],
        "latency_ms_median": float(np.median(latency_ms)),
        "latency_ms_p90": float(np.percentile(latency_ms, 90)),
        "predicted_latency_ms": m.predicted["latency_ms"],
        "service_ms_median": float(np.median(service_ms)),
        "service_ms_p90": float(np.percentile(service_ms, 90)),
        "queueing_ms_median": float(np.median(queueing_ms)),
        "queueing_ms_p90": float(np.percentile(queueing_ms, 90)),
        "stage_ms_median": [float(np.median([(w.spans[f][1] - w.spans[f][0]) * 1e3 for f in frames]))
                            for w in stages],
        "pu_busy_share": {pu: b / wall for pu, b in busy.items()},
        "wall_s": wall,
        "pus": {pu: {"providers_asked": m.pus[pu]["providers"], "providers_used": used[pu],
                     "intra_op_threads": m.pus[pu]["intra_op_threads"], "pinned_cores": cores[pu],
                     "planned_cores": m.pus[pu]["cores"]}
                for pu in used},
        "platform": m.platform,
        "instance": m.instance,
        "planned_for_this_host": m.platform in (None, HOST_PLATFORM),
    }


def platform_warning(report: dict[str, Any]) -> str | None:
    """One line for a run of an export planned for another platform: what each PU really ran
    on here (provider, threads, pinning), since the measured times are this host's."""
    if report.get("planned_for_this_host", True):
        return None
    parts = []
    for pu, rt in report["pus"].items():
        n = rt["intra_op_threads"]
        if rt["pinned_cores"]:
            pin = f"pinned to CPU {','.join(map(str, rt['pinned_cores']))}"
        elif rt["planned_cores"]:
            pin = f"not pinned (planned CPUs {','.join(map(str, rt['planned_cores']))} not all here)"
        else:
            pin = "not pinned"
        parts.append(f"{pu} on {'+'.join(rt['providers_used'])}, {n} thread{'s' if n > 1 else ''}, {pin}")
    on_cpu = all(rt["providers_used"] == [CPU_PROVIDER] for rt in report["pus"].values())
    made = f"platform {report['platform']}" + (f" ({report['instance']})" if report.get("instance") else "")
    return (f"warning: the plan was made for {made}, not this host; "
            + ("each PU ran as a CPU thread on this host: " if on_cpu else "each PU ran on this host as: ")
            + "; ".join(parts) + f". The times measured are this host's, not {report['platform']}'s.")

"""Measure per-operator times on the host CPU with ONNX Runtime's profiler.

The model runs with graph optimisations disabled, so every ONNX node is one ORT kernel, and
with its nodes renamed to the names :func:`onnx_graph.onnx_node_names` gives them, so each
trace event ``"<node>_kernel_time"`` maps to one unit of :func:`onnx_graph.load_onnx`.
Inputs are random with a fixed seed (symbolic dimensions set to 1); the weightless
``light_*`` models run their ``ConstantOfShape`` stand-ins, which make zero weights: the
time is the same as with real weights.

Units are the DAG nodes of :func:`load_onnx`. The ``ConstantOfShape``/``Constant`` stand-ins
are not units and their kernel time is dropped (a deployed model holds real initializers).
A unit that never appears in the trace (ORT skipped it, e.g. inside an untaken ``If``
branch) gets 0.0 ms. Every listed PU gets the same times: they stand for identical
single-threaded CPU workers. Power is not measured, so the profile has no power entries.
"""
from __future__ import annotations

import json
import platform as host_platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import ModelProto, helper

from pipeplan.core.errors import InputError
from pipeplan.core.sizes import check_memory
from pipeplan.formulations.mapping.onnx_bounds import check_model_bounds
from pipeplan.formulations.mapping.onnx_external import inline_external_data
from pipeplan.formulations.mapping.onnx_graph import graph_from_model, onnx_node_names, read_model
from pipeplan.formulations.mapping.profile import PU, AffineTransfer, Profile, Transfers
from pipeplan.profiles.ort_guard import RunGuard, session_options
from pipeplan.profiles.random_feeds import check_feeds, frame_shape, random_feeds

LEVEL = "max"
TRANSFER_FIXED_MS = 0.01  # hand-off between two host threads: a queue push and a wake-up
_SEED = 0
# ORT's trace holds one JSON event per node and run (about 400 bytes), read whole and parsed
TRACE_BYTES_PER_NODE_RUN = 2048
# ORT reports input types as strings; map them to ONNX element types.
_ORT_TYPES = {"tensor(float)": 1, "tensor(uint8)": 2, "tensor(int8)": 3, "tensor(uint16)": 4,
              "tensor(int16)": 5, "tensor(int32)": 6, "tensor(int64)": 7, "tensor(bool)": 9,
              "tensor(float16)": 10, "tensor(double)": 11, "tensor(uint32)": 12,
              "tensor(uint64)": 13}


def profile_host(model_path: str | Path, *, pus: tuple[str, ...] = ("C0", "C1"), runs: int = 10,
                 warmup: int = 3, threads: int = 1,
                 progress: Callable[[int, int], None] | None = None,
                 time_limit_s: float | None = None) -> Profile:
    """Per-unit median times (ms) over ``runs`` timed runs after ``warmup`` untimed ones.

    ``progress(done, total)`` is called after every run, warm-up included. ONNX Runtime is
    stopped ``time_limit_s`` after the first session starts (None: no limit), which is then
    ``--time-limit``'s error.
    """
    source = str(model_path)
    if runs < 1 or warmup < 0 or threads < 1 or not pus or len(set(pus)) != len(pus):
        raise InputError(source, "profile_host", "need runs >= 1, warmup >= 0, threads >= 1 "
                         "and distinct PU names")
    model = inline_external_data(read_model(model_path), Path(model_path))   # ORT would look in the cwd
    g = graph_from_model(model, source)
    check_model_bounds(model, source)
    check_memory("--runs", runs + warmup, TRACE_BYTES_PER_NODE_RUN * g.number_of_nodes())
    trace = _run_profiled(_renamed(model), source, runs=runs, warmup=warmup, threads=threads,
                          progress=progress, guard=RunGuard(time_limit_s))
    times = tuple(statistics.median(trace[u][-runs:]) if u in trace else 0.0 for u in g.nodes)
    return Profile(
        name=f"host/{Path(source).stem}",
        source=(f"ONNX Runtime {ort.__version__} per-node profiling on {_cpu_name()}, "
                f"{threads} thread(s), graph optimisations off, median of {runs} runs "
                f"after {warmup} warm-up"),
        power_model="per_pu",
        pus={p: PU(p, "cpu", (LEVEL,), 0.0, "host CPU worker") for p in pus},
        units=tuple(g.nodes), time_ms={p: {LEVEL: times} for p in pus}, power_mw={},
        transfers=Transfers(default=AffineTransfer(TRANSFER_FIXED_MS, _memcpy_ms_per_mb())),
        host_pu=pus[0],
        notes="power not measured; transfers between host PUs: fixed hand-off plus measured "
              "memcpy speed")


def _renamed(model: ModelProto) -> bytes:
    """The model with every node named as load_onnx names it, serialised for ORT."""
    copy = ModelProto()
    copy.CopyFrom(model)
    for node, name in zip(copy.graph.node, onnx_node_names(copy.graph)):
        node.name = name
    return copy.SerializeToString()


def _run_profiled(model_bytes: bytes, source: str, *, runs: int, warmup: int, threads: int,
                  progress: Callable[[int, int], None] | None, guard: RunGuard) -> dict[str, list[float]]:
    """Node name -> kernel times (ms) in run order, from ORT's JSON trace."""
    with tempfile.TemporaryDirectory(prefix="pipeplan-ort-") as tmp:
        opts = session_options(threads)
        opts.enable_profiling = True
        opts.profile_file_prefix = str(Path(tmp) / "trace")
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        session = None
        try:
            session = ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])
            feeds = _random_inputs(session, source)
            for done in range(1, warmup + runs + 1):
                guard.run_stoppable(session, None, feeds)
                if progress:
                    progress(done, warmup + runs)
        except InputError:        # inputs above the memory cap: refused before they are drawn
            raise
        except Exception as exc:  # ORT raises its own exception types for bad models
            guard.check_time_limit(source)
            raise InputError(source, "model", f"ONNX Runtime cannot run it ({exc})") from None
        finally:  # end profiling while the folder exists, also when a run failed
            trace_file = session.end_profiling() if session is not None else None
        events = json.loads(Path(trace_file).read_text())
    trace: dict[str, list[float]] = {}
    for e in sorted((e for e in events if e.get("cat") == "Node"), key=lambda e: e["ts"]):
        if e["name"].endswith("_kernel_time"):
            trace.setdefault(e["name"][: -len("_kernel_time")], []).append(e["dur"] / 1000.0)
    return trace


def _random_inputs(session: ort.InferenceSession, source: str) -> dict[str, np.ndarray]:
    """Standard-normal floats, random booleans, and integers 0 or 1 (valid as indices), one
    frame of every input (symbolic dimensions 1), refused above the memory cap before any is
    drawn (profiles/random_feeds.py)."""
    inputs = [(arg.name, frame_shape(arg.shape),
               np.dtype(helper.tensor_dtype_to_np_dtype(_ORT_TYPES.get(arg.type, 1)))) for arg in session.get_inputs()]
    check_feeds(inputs, source, "graph.input")
    return random_feeds(np.random.default_rng(_SEED), inputs)


def _memcpy_ms_per_mb(nbytes: int = 64_000_000, repeats: int = 3) -> float:
    """Best-of-``repeats`` time to copy ``nbytes`` with numpy, in ms per MB (1e6 bytes)."""
    src = np.ones(nbytes, dtype=np.uint8)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    return best * 1e3 / (nbytes / 1e6)


def _cpu_name() -> str:
    return host_platform.processor() or host_platform.machine() or "unknown CPU"

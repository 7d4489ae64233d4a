"""How each PU's ONNX Runtime sessions are configured: chosen at export from the platform file,
applied at run time.

Per PU the manifest records:

* ``providers``: the execution providers asked for, in order: the PU's ``runtime.provider``
  (if the platform names one; a GPU or NPU PU should) followed by ``CPUExecutionProvider``, so
  the session falls back to the CPU where that provider is not built into ONNX Runtime (a PU
  without a provider asks for the CPU only). ``providers_available_at_export`` is the part
  of that list this host's ONNX Runtime has; the run report says what each session really used.
* ``intra_op_threads``: ONNX Runtime's intra-op thread count (default 1).
* ``cores``: logical CPU ids (Linux numbering, from 0) for the PU, or null (no pinning).
* ``session_config``: ONNX Runtime session config entries. With more than one thread and known
  cores, ``session.intra_op_thread_affinities`` pins the intra-op pool's *extra* threads: ONNX
  Runtime creates threads - 1 of them and never pins the thread that calls ``run``. The string
  has one ``;``-separated entry per extra thread, and ONNX Runtime counts processors from 1, so
  Linux CPU c is written c + 1. The calling thread (the executor's worker for the PU) is
  pinned with ``os.sched_setaffinity`` instead, where the OS offers it (Linux).

An export folder is untrusted input, and some ONNX Runtime config entries name files that the
session then writes (``session.collect_node_memory_stats_to_file``, an optimised-model path, ...).
So ``session_config`` is an allow-list, :data:`SESSION_CONFIG`: entries that tune threads and
arithmetic and cannot name a path, each with a check of its value; :func:`check_session_config`
refuses anything else.
"""
from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

import onnxruntime as ort

from pipeplan.core.errors import InputError
from pipeplan.profiles.ort_guard import session_options
from pipeplan.profiles.roofline import MAX_THREADS, Platform

CPU_PROVIDER = "CPUExecutionProvider"
AFFINITY_KEY = "session.intra_op_thread_affinities"
# What the executor accepts for the manifest's session.graph_optimization.
GRAPH_OPTIMIZATION = {"disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
                      "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
                      "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
                      "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}
MAX_CONFIG_VALUE = 1024   # characters: ONNX Runtime refuses longer config values


def _flag(value: str, threads: int) -> str | None:
    return None if value in ("0", "1") else "expected \"0\" or \"1\""


def _block_base(value: str, threads: int) -> str | None:
    if re.fullmatch(r"[0-9]{1,4}", value) and int(value) <= MAX_THREADS:
        return None
    return f"expected an integer from 0 to {MAX_THREADS}"


_PROCESSORS = re.compile(r"([0-9]{1,4})-([0-9]{1,4})|[0-9]{1,4}(,[0-9]{1,4})*")   # ASCII digits only, as ORT


def _processor_ids(entry: str) -> list[int] | None:
    """The processor ids of one affinity entry; None when it is malformed or a range runs backwards."""
    match = _PROCESSORS.fullmatch(entry)
    if not match:
        return None
    ids = [int(x) for x in re.split("[,-]", entry)]
    return None if match.group(1) and ids[0] > ids[1] else ids


def _affinities(value: str, threads: int) -> str | None:
    """ONNX Runtime's format: one entry per extra intra-op thread (threads - 1), separated by
    ``;``; an entry is ``a,b,c`` or a range ``a-b`` of processor ids counted from 1."""
    entries = value.split(";")
    if len(entries) != threads - 1:
        return f"expected {threads - 1} ';'-separated entries (one per extra intra-op thread), got {len(entries)}"
    for entry in entries:
        ids = _processor_ids(entry)
        if not ids or not all(1 <= i <= MAX_THREADS for i in ids):
            return f"bad entry {entry!r}: expected processor ids 1 to {MAX_THREADS} as 'a,b,c' or 'a-b'"
    return None


# key -> check(value, intra-op threads) giving what is wrong, or None. None of them names a file.
SESSION_CONFIG: dict[str, Callable[[str, int], str | None]] = {
    AFFINITY_KEY: _affinities,
    "session.intra_op.allow_spinning": _flag,
    "session.inter_op.allow_spinning": _flag,
    "session.force_spinning_stop": _flag,
    "session.set_denormal_as_zero": _flag,
    "session.disable_prepacking": _flag,
    "session.enable_quant_qdq": _flag,
    "optimization.enable_gelu_approximation": _flag,
    "session.dynamic_block_base": _block_base,
}


def check_session_config(config: dict[str, Any], threads: int, source: str, field: str) -> dict[str, str]:
    """``config`` (a manifest PU's ``session_config``) when every key is in
    :data:`SESSION_CONFIG` and its value a string that passes the key's check."""
    for key, value in config.items():
        check = SESSION_CONFIG.get(key)
        if check is None:
            raise InputError(source, f"{field}.{key}", "not an allowed ONNX Runtime config entry "
                             f"(allowed: {', '.join(SESSION_CONFIG)})")
        if not isinstance(value, str) or len(value) > MAX_CONFIG_VALUE:
            raise InputError(source, f"{field}.{key}", f"expected a string of at most {MAX_CONFIG_VALUE} characters")
        fault = check(value, threads)
        if fault:
            raise InputError(source, f"{field}.{key}", f"{fault}, got {value[:40]!r}")
    return config


def pu_runtime(platform: Platform, pu: str, source: str) -> dict[str, Any]:
    """The manifest entry for ``pu`` of ``platform`` (``source``: the platform file)."""
    if pu not in platform.pus:
        raise InputError(source, "pus", f"the plan uses PU {pu!r}, which the platform does not "
                         f"declare (PUs: {', '.join(platform.pus)})")
    spec = platform.pus[pu]
    rt = spec.runtime
    if rt.provider is not None and rt.provider not in ort.get_all_providers():
        raise InputError(source, f"pus.{pu}.runtime.provider",
                         f"unknown ONNX Runtime provider {rt.provider!r}")
    providers = list(dict.fromkeys([rt.provider, CPU_PROVIDER] if rt.provider else [CPU_PROVIDER]))
    threads = rt.threads or 1
    cores = list(rt.cores) if rt.cores else None
    config = {}
    if threads > 1 and cores:
        config[AFFINITY_KEY] = ";".join(str(cores[k % len(cores)] + 1) for k in range(1, threads))
    available = set(ort.get_available_providers())
    return {"kind": spec.kind, "providers": providers,
            "providers_available_at_export": [p for p in providers if p in available],
            "intra_op_threads": threads, "cores": cores, "session_config": config}


def make_session(model_bytes: bytes, runtime: dict[str, Any], graph_optimization: str,
                 *, pin: bool) -> ort.InferenceSession:
    """An ORT session configured as ``runtime`` (a manifest PU entry) says, allocating from the
    capped arena (:func:`~pipeplan.profiles.ort_guard.session_options`). The affinity entry
    is only applied when ``pin`` (the PU's cores exist on this host); ORT rejects processor ids
    the machine does not have."""
    opts = session_options(runtime["intra_op_threads"])
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = GRAPH_OPTIMIZATION[graph_optimization]
    for key, value in runtime["session_config"].items():
        if key != AFFINITY_KEY or pin:
            opts.add_session_config_entry(key, value)
    available = set(ort.get_available_providers())
    providers = [p for p in runtime["providers"] if p in available] or [CPU_PROVIDER]
    return ort.InferenceSession(model_bytes, opts, providers=providers)


def usable_cores(cores: list[int] | None) -> list[int] | None:
    """``cores`` when this OS can pin threads and every one of them is available, else None."""
    if not cores or not hasattr(os, "sched_setaffinity"):
        return None
    return cores if set(cores) <= os.sched_getaffinity(0) else None


def pin_current_thread(cores: list[int] | None) -> None:
    """Pin the calling thread (Linux: pid 0 is the calling thread) to ``cores``."""
    if cores:
        os.sched_setaffinity(0, cores)

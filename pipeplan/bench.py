"""``pipeplan bench``: run a suite of instances x solvers x seeds of every system.

A suite is a TOML file under instances/suites/ with one ``[[<system>]]`` group per block of
runs (``mapping``, ``gradcode``, ``rollout``): instance and solver patterns (shell globs over
the catalogue and the registry), seeds, a time limit per run, solver parameters.

Reliability: each run executes in its own process, killed when it overruns its time limit
(recorded as ``time_limit``); a crash is recorded as ``error`` with its message and the suite
goes on. Every finished run is appended to ``runs.jsonl`` and flushed at once, so killing the
bench loses no finished record, and a rerun skips the runs already recorded (resume). The
engine is local processes by default, or Ray tasks (``--engine ray``) on a local Ray or an
existing cluster (``RAY_ADDRESS``).
"""
from __future__ import annotations

import fnmatch
import json
import multiprocessing as mp
import os
import time
import tomllib
import traceback
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from pipeplan.errors import InputError
from pipeplan.instances.catalog import INSTANCES_DIR
from pipeplan.io import write_json

SUITES_DIR = INSTANCES_DIR / "suites"
RECORDS = "runs.jsonl"
SYSTEMS = ("mapping", "gradcode", "rollout")
GRACE_S = 10.0  # start-up allowance on top of a run's time limit before it is killed
RAY_START_S = 30.0  # Ray starts worker processes lazily: extra allowance for a task's first start


@dataclass(frozen=True)
class Run:
    system: str
    instance: str
    solver: str
    seed: int
    time_limit: float
    params: dict = field(default_factory=dict, hash=False, compare=False)

    @property
    def key(self) -> str:
        return f"{self.system}|{self.instance}|{self.solver}|{self.seed}"


# ----------------------------------------------------------------------------- catalogues

def catalogue(system: str) -> tuple[Callable[[], list[str]], Callable[[str], object]]:
    """(instance names, loader) of a system."""
    if system == "mapping":
        from pipeplan.instances.catalog import load_mapping, mapping_instance_names
        return mapping_instance_names, load_mapping
    if system == "gradcode":
        from pipeplan.instances.gradcode import instance_names, load_instance
        return instance_names, load_instance
    if system == "rollout":
        from pipeplan.instances.rollout import instance_names, load_instance
        return instance_names, load_instance
    raise KeyError(system)


def load_suite(name: str) -> tuple[Path, dict]:
    path = Path(name) if name.endswith(".toml") else SUITES_DIR / f"{name}.toml"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in SUITES_DIR.glob("*.toml")))
        raise InputError(name, "--suite", f"unknown suite (known: {known})")
    try:
        suite = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise InputError(str(path), "", f"invalid TOML ({exc})") from None
    unknown = [k for k in suite if k not in SYSTEMS and k != "description"]
    if unknown:
        raise InputError(str(path), unknown[0], f"unknown section (expected description, {', '.join(SYSTEMS)})")
    groups = [k for k in suite if k in SYSTEMS]
    if not groups:
        raise InputError(str(path), "", f"no [[{']], [['.join(SYSTEMS)}]] groups")
    for system in groups:
        blocks = suite[system] if isinstance(suite[system], list) else [suite[system]]
        for i, g in enumerate(blocks):
            where = f"{system}[{i}]"
            if not isinstance(g, dict) or not isinstance(g.get("instances"), list) or not g["instances"]:
                raise InputError(str(path), f"{where}.instances", "expected a non-empty list of instance patterns")
            limit = g.get("time_limit", 30.0)
            if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not limit > 0:
                raise InputError(str(path), f"{where}.time_limit", f"expected a positive number, got {limit!r}")
            solver_patterns = g.get("solvers", ["*"])
            if not isinstance(solver_patterns, list) or not all(isinstance(x, str) for x in solver_patterns):
                raise InputError(str(path), f"{where}.solvers", "expected a list of solver patterns")
            seeds = g.get("seeds", [0])
            if not isinstance(seeds, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
                raise InputError(str(path), f"{where}.seeds", "expected a list of integers")
            if not isinstance(g.get("params", {}), dict):
                raise InputError(str(path), f"{where}.params", "expected a table of solver parameters")
        suite[system] = blocks
    return path, suite


def _select(patterns: list[str], names: list[str]) -> list[str]:
    return [n for n in names if any(fnmatch.fnmatch(n, p) for p in patterns)]


def plan_runs(suite: dict, time_limit: float | None = None, source: str = "suite") -> list[Run]:
    """Every run of the suite in order; ``time_limit`` overrides the groups' limits."""
    from pipeplan.registry import solvers

    runs: list[Run] = []
    for system in SYSTEMS:
        if system not in suite:
            continue
        names_of, _ = catalogue(system)
        names = names_of()
        available = [s.name for s in solvers(system) if s.available()[0]]
        for i, g in enumerate(suite[system]):
            instances = _select(g["instances"], names)
            if not instances:
                raise InputError(source, f"{system}[{i}].instances", f"no instance matches {g['instances']}")
            chosen = _select(g.get("solvers", ["*"]), available)
            if not chosen:
                raise InputError(source, f"{system}[{i}].solvers",
                                 f"no available solver matches {g.get('solvers')} (see `pipeplan solvers`)")
            for inst in instances:
                for solver in chosen:
                    for seed in g.get("seeds", [0]):
                        runs.append(Run(system, inst, solver, seed, time_limit or float(g.get("time_limit", 30.0)),
                                        dict(g.get("params", {}))))
    return runs


# ----------------------------------------------------------------------------- one run

def execute(run: Run) -> dict:
    """Solve one run in this process and return its record (never raises)."""
    import pipeplan
    from pipeplan.result import library_versions

    began = time.perf_counter()
    record = {"system": run.system, "instance": run.instance, "solver": run.solver, "seed": run.seed,
              "time_limit": run.time_limit}
    try:
        _, load = catalogue(run.system)
        problem = load(run.instance)
        result = pipeplan.solve(problem, run.solver, time_limit=run.time_limit, seed=run.seed, threads=1,
                                **run.params)
        record.update({"termination": result.termination.value, "quality": result.quality.value,
                       "objectives": result.objectives, "bound": result.bound, "gap": result.gap,
                       "wall_time_s": result.wall_time_s, "message": result.message,
                       "front": [p.get("objectives", {}) for p in result.front],
                       "versions": result.versions})
    except Exception as exc:  # a crashed run is a record, not the end of the suite
        record.update({"termination": "error", "quality": "none", "objectives": {}, "bound": {}, "gap": None,
                       "wall_time_s": time.perf_counter() - began,
                       "message": f"{type(exc).__name__}: {exc} | {traceback.format_exc(limit=2).splitlines()[-1]}",
                       "front": [], "versions": library_versions()})
    return record


def _child(run: Run, conn) -> None:
    conn.send(execute(run))
    conn.close()


def _stopped(run: Run, why: str, elapsed: float) -> dict:
    from pipeplan.result import library_versions
    return {"system": run.system, "instance": run.instance, "solver": run.solver, "seed": run.seed,
            "time_limit": run.time_limit, "termination": why, "quality": "none", "objectives": {}, "bound": {},
            "gap": None, "wall_time_s": elapsed,
            "message": ("killed: ran past its time limit" if why == "time_limit" else "the run's process died"),
            "front": [], "versions": library_versions()}


def run_local(runs: list[Run], jobs: int, on_record: Callable[[dict], None], grace_s: float = GRACE_S) -> None:
    """Each run in its own process (at most ``jobs`` at once), killed past its limit + grace."""
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    pending = list(runs)
    active: list[tuple[Run, mp.Process, object, float]] = []
    while pending or active:
        while pending and len(active) < jobs:
            run = pending.pop(0)
            recv, send = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_child, args=(run, send), daemon=True)
            proc.start()
            send.close()
            active.append((run, proc, recv, time.perf_counter()))
        time.sleep(0.02)
        still = []
        for run, proc, recv, started in active:
            elapsed = time.perf_counter() - started
            if recv.poll():
                try:
                    record = recv.recv()
                except EOFError:
                    record = _stopped(run, "error", elapsed)
                proc.join()
                on_record(record)
            elif not proc.is_alive():
                on_record(_stopped(run, "error", elapsed))
            elif elapsed > run.time_limit * 1.1 + grace_s:
                proc.kill()
                proc.join()
                on_record(_stopped(run, "time_limit", elapsed))
            else:
                still.append((run, proc, recv, started))
        active = still


def run_ray(runs: list[Run], jobs: int, on_record: Callable[[dict], None], grace_s: float = GRACE_S) -> None:
    """The same runs as Ray tasks (local Ray, or the cluster at RAY_ADDRESS); records stream back
    as tasks finish; a task past its limit + grace (+ Ray's worker start-up allowance, since the
    clock runs from submission) is cancelled and recorded as time_limit."""
    try:
        import ray
    except ImportError:
        raise InputError("--engine", "ray", "Ray is not installed (pip install 'pipeplan[ray]')") from None
    started_here = not ray.is_initialized()
    if started_here:
        address = os.environ.get("RAY_ADDRESS")
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False,
                 **({} if address else {"num_cpus": jobs}))
    remote = ray.remote(num_cpus=1, max_retries=0)(execute)
    try:
        pending = list(runs)
        inflight: dict = {}
        while pending or inflight:
            while pending and len(inflight) < jobs:
                run = pending.pop(0)
                inflight[remote.remote(run)] = (run, time.perf_counter())
            done, _ = ray.wait(list(inflight), num_returns=1, timeout=0.5)
            for ref in done:
                run, started = inflight.pop(ref)
                try:
                    on_record(ray.get(ref))
                except Exception as exc:  # the task itself died
                    rec = _stopped(run, "error", time.perf_counter() - started)
                    rec["message"] = f"ray task failed: {type(exc).__name__}: {exc}"
                    on_record(rec)
            for ref, (run, started) in list(inflight.items()):
                if time.perf_counter() - started > run.time_limit * 1.1 + grace_s + RAY_START_S:
                    ray.cancel(ref, force=True)
                    inflight.pop(ref)
                    on_record(_stopped(run, "time_limit", time.perf_counter() - started))
    finally:
        if started_here:
            ray.shutdown()


# ----------------------------------------------------------------------------- the suite

RECORD_KEYS = ("system", "instance", "solver", "seed", "termination")


def read_records(path: Path) -> list[dict]:
    """Records of a runs.jsonl. A torn last line (the bench was killed mid-write) is ignored;
    any other line that is not a record is an InputError naming it."""
    if not path.exists():
        return []
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(str(path), "", f"cannot read records ({getattr(exc, 'strerror', None) or exc})") from None
    out = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            if n == len(lines):
                break
            raise InputError(str(path), f"line {n}", f"invalid JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise InputError(str(path), f"line {n}", "expected a JSON object")
        missing = [k for k in RECORD_KEYS if k not in record]
        if missing:
            raise InputError(str(path), f"line {n}: {missing[0]}", "missing field of a run record")
        out.append(record)
    return out


def record_key(r: dict) -> str:
    return f"{r['system']}|{r['instance']}|{r['solver']}|{r['seed']}"


def run_suite(suite_name: str, out: Path, *, time_limit: float | None = None, jobs: int = 1,
              engine: str = "local", progress=None, grace_s: float = GRACE_S) -> dict:
    """Run every run of the suite not yet in ``out/runs.jsonl``; returns counts."""
    path, suite = load_suite(suite_name)
    runs = plan_runs(suite, time_limit, str(path))
    cores = os.cpu_count() or 1
    if jobs > cores:
        warnings.warn(f"--jobs {jobs} exceeds the {cores} cores of this machine: runs will compete for CPU")
    out.mkdir(parents=True, exist_ok=True)
    records_path = out / RECORDS
    done = {record_key(r) for r in read_records(records_path)}
    todo = [r for r in runs if r.key not in done]
    total, finished = len(runs), len(runs) - len(todo)
    began = time.perf_counter()
    write_json(out / "suite.json", {
        "suite": suite_name, "source": str(path), "engine": engine, "jobs": jobs,
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": _machine()})
    with records_path.open("a") as fh:
        def on_record(record: dict) -> None:
            nonlocal finished
            fh.write(json.dumps(record) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
            finished += 1
            if progress:
                progress(finished, total, f"{record['system']} {record['instance']} {record['solver']}")

        if progress:
            progress(finished, total, "")
        if engine == "local":
            run_local(todo, jobs, on_record, grace_s)
        elif engine == "ray":
            run_ray(todo, jobs, on_record, grace_s)
        else:
            raise InputError("--engine", "", f"unknown engine {engine!r} (local, ray)")
    return {"runs": total, "skipped": total - len(todo), "ran": len(todo),
            "wall_time_s": time.perf_counter() - began}


def _machine() -> dict:
    import platform
    return {"machine": platform.machine(), "processor": platform.processor(), "cores": os.cpu_count(),
            "python": platform.python_version(), "system": platform.system()}

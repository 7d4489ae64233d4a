"""``pipeplan bench``: run a suite of instances x solvers x seeds of every system.

A suite is a TOML file under instances/suites/ with one ``[[<system>]]`` group per block of
runs (``mapping``, ``gradcode``, ``rollout``): instance and solver patterns (shell globs over
the catalogue and the registry), seeds, a time limit per run, solver parameters (``params``,
e.g. a work limit: ``work_limit`` for CP-SAT, ``max_evaluations`` for NSGA-II, ``node_limit``
for the MILPs; then the time limit is the safety net, and each record's ``stopped_by`` says
whether the work limit or the wall clock stopped the run).

Reliability: each run executes in its own process, killed when it overruns its time limit
(recorded as ``time_limit``); a crash is recorded as ``error`` with its message and the suite
goes on. Every finished run is appended to ``runs.jsonl`` as one line by one ``os.write`` on an
``O_APPEND`` descriptor and fsynced, so killing the bench (or the machine) loses no finished
record and leaves at most a torn last line, and a rerun skips the runs already recorded
(resume). The engine is local processes by default, or Ray tasks (``--engine ray``) on a local
Ray or an existing cluster (``RAY_ADDRESS``).

Faults: a damaged last line of ``runs.jsonl`` (not UTF-8, not JSON, or naming a key twice: a crash
mid-write, or a hand edit) is set aside by the next bench, appended to
``runs.jsonl.damaged-<UTC time>`` beside it, with a one-line warning, and its run is redone;
``pipeplan report`` ignores it with a warning. A damaged line before the last is no crash
signature and stays an error naming the line. One bench at a time
per results folder: ``bench.lock`` there, created with ``O_CREAT|O_EXCL`` and holding the owner's
pid, host and boot id, refuses a second bench; a lock whose owner is gone (same host, pid not
alive or another boot) is taken over with a warning; the lock is removed when the bench ends,
by error and Ctrl-C too. Everything that can be refused (the suite, a run selected twice, the
engine, the results folder) is checked before anything is written.
"""
from __future__ import annotations

import fnmatch
import json
import multiprocessing as mp
import os
import re
import signal
import socket
import stat
import sys
import time
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from pipeplan.app.stored_optima import COLUMNS as OPTIMA_COLUMNS
from pipeplan.app.stored_optima import SNAPSHOT, read_optima
from pipeplan.core.api import MAX_SEED
from pipeplan.core.deadline import check_stop
from pipeplan.core.errors import InputError, brief_value, crash_message
from pipeplan.core.io import (
    JSON_BYTES_PER_CHAR,
    OUT_MARKER,
    DuplicateKey,
    check_fields,
    check_out_folder,
    check_output,
    finite_number,
    json_loads,
    load_toml,
    mark_out_folder,
    read_input,
    write_atomic,
    write_json,
)
from pipeplan.core.sizes import check_bytes
from pipeplan.core.tables import csv_text
from pipeplan.core.vocabulary import SYSTEMS
from pipeplan.instances.paths import INSTANCES_DIR

SUITES_DIR = INSTANCES_DIR / "suites"
RECORDS = "runs.jsonl"
LOCK = "bench.lock"
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
    if system == "multi":
        from pipeplan.instances.multi import load_multi, multi_names
        return multi_names, load_multi
    raise KeyError(system)


def load_suite(name: str) -> tuple[Path, dict]:
    """A suite by name (instances/suites/<name>.toml) or by path (a name ending in .toml or
    holding a path separator), read through pipeplan.core.io (a folder, FIFO, oversized or
    non-UTF-8 file is an InputError) and checked group by group."""
    is_path = name.endswith(".toml") or "/" in name or os.sep in name
    path = Path(name) if is_path else SUITES_DIR / f"{name}.toml"
    if not is_path and not path.exists():
        known = ", ".join(sorted(p.stem for p in SUITES_DIR.glob("*.toml")))
        raise InputError(name, "--suite", f"unknown suite (known: {known})")
    suite = load_toml(path)
    source = str(path)
    unknown = [k for k in suite if k not in SYSTEMS and k != "description"]
    if unknown:
        raise InputError(source, unknown[0], f"unknown section (expected description, {', '.join(SYSTEMS)})")
    if not isinstance(suite.get("description", ""), str):
        raise InputError(source, "description", f"expected text, got {_shown(suite['description'])}")
    groups = [k for k in suite if k in SYSTEMS]
    if not groups:
        raise InputError(source, "", f"no [[{']], [['.join(SYSTEMS)}]] groups")
    for system in groups:
        blocks = suite[system] if isinstance(suite[system], list) else [suite[system]]
        for i, g in enumerate(blocks):
            _check_group(g, source, f"{system}[{i}]")
        suite[system] = blocks
    return path, suite


GROUP_KEYS = ("instances", "solvers", "seeds", "time_limit", "params")
# Runs one suite may plan (each group's instances x solvers x seeds, all groups together): each
# run is a process of its own, and planning holds every run (and suite.json lists their keys), so
# a suite asking for millions is refused before they are listed; the full suite plans 545. A
# group's seeds, each at least one run, are held to the same number: 100,000 seeds had taken 84 s
# to check for repeats (200,000: past 120 s) before the suite's other errors were found.
MAX_SUITE_RUNS = 100_000
# Patterns in one group's instances or solvers list: the catalogue holds 73 instances and a system
# registers at most 13 solvers, so a longer list only costs (each glob is compiled and tried on
# every name: 100,000 had taken 63 s)
MAX_SUITE_PATTERNS = 10_000


def _shown(value) -> str:
    """A bad value as the suite and record errors quote it (60 characters at most)."""
    return brief_value(value, 60)


def _check_group(g, source: str, where: str) -> None:
    """One ``[[<system>]]`` group of a suite: every field of its type (a list's elements too),
    unknown fields refused, seeds in range, none twice, at most ``MAX_SUITE_RUNS``; linear in the
    group's size. Each error names the field (``rollout[0].instances[2]``)."""
    if not isinstance(g, dict):
        raise InputError(source, where, f"expected a table of instances, solvers, seeds, ..., got {_shown(g)}")
    check_fields(g, GROUP_KEYS, source, where)
    for key, what, article, default in (("instances", "instance", "an", None), ("solvers", "solver", "a", ["*"])):
        patterns = g.get(key, default)
        if not isinstance(patterns, list) or not patterns:
            raise InputError(source, f"{where}.{key}", f"expected a non-empty list of {what} patterns, got "
                                                       f"{_shown(patterns)}")
        if len(patterns) > MAX_SUITE_PATTERNS:
            raise InputError(source, f"{where}.{key}", f"{len(patterns):,} patterns, above {MAX_SUITE_PATTERNS:,}")
        for j, x in enumerate(patterns):
            if not isinstance(x, str):
                raise InputError(source, f"{where}.{key}[{j}]", f"expected {article} {what} pattern (text), got "
                                                                f"{_shown(x)}")
    limit = g.get("time_limit", 30.0)
    # at most what a record may hold: 1e300 had been run and recorded, and the bench's own report
    # then refused its runs.jsonl (exit 2 with the folder written)
    if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not 0 < limit <= MAX_RECORD_MAGNITUDE:
        raise InputError(source, f"{where}.time_limit", f"expected a positive number of seconds, at most "
                                                        f"{MAX_RECORD_MAGNITUDE:g}, got {_shown(limit)}")
    seeds = g.get("seeds", [0])
    if not isinstance(seeds, list) or not seeds:
        raise InputError(source, f"{where}.seeds", f"expected a non-empty list of integers, got {_shown(seeds)}")
    if len(seeds) > MAX_SUITE_RUNS:
        raise InputError(source, f"{where}.seeds", f"{len(seeds):,} seeds, above the {MAX_SUITE_RUNS:,} runs a suite "
                                                   "may plan (each seed is a run per instance and solver)")
    seen: set[int] = set()
    repeated: set[int] = set()
    for j, x in enumerate(seeds):
        if isinstance(x, bool) or not isinstance(x, int):
            raise InputError(source, f"{where}.seeds[{j}]", f"expected an integer, got {_shown(x)}")
        if not 0 <= x <= MAX_SEED:
            raise InputError(source, f"{where}.seeds", f"seeds must lie from 0 to {MAX_SEED}, got {_shown(x)}")
        (repeated if x in seen else seen).add(x)
    if repeated:
        raise InputError(source, f"{where}.seeds", f"seed {min(repeated)} is listed twice")
    if not isinstance(g.get("params", {}), dict):
        raise InputError(source, f"{where}.params", "expected a table of solver parameters")


def _select(patterns: list[str], names: list[str]) -> list[str]:
    """The names any shell pattern matches (``fnmatch``'s rules), in the names' order; a pattern
    without a wildcard is a name looked up, each glob is compiled once (fnmatch's own cache holds
    32,768 patterns: past that it had recompiled every pattern for every name)."""
    literal = {p for p in patterns if not any(c in p for c in "*?[")}
    globs = [re.compile(fnmatch.translate(p)) for p in dict.fromkeys(patterns) if p not in literal]
    return [n for n in names if n in literal or any(g.match(n) for g in globs)]


def _check_params_on(params: dict, system: str, instances: list[str], chosen: list[str],
                     load: Callable[[str], object], source: str, field: str) -> None:
    """``params`` against every instance a group selects, for each solver it chooses that checks
    them against a problem, before any run (the instances are loaded only for those)."""
    from pipeplan.core.registry import check_problem_params, has_problem_params_check

    chosen = [s for s in chosen if has_problem_params_check(system, s)]
    for inst in instances if chosen else ():
        problem = load(inst)
        for solver in chosen:
            try:
                check_problem_params(problem, solver, params)
            except InputError as exc:
                raise InputError(source, f"{field}.{exc.field}", f"{solver} on {inst}: {exc.message}") from None


def plan_runs(suite: dict, time_limit: float | None = None, source: str = "suite") -> list[Run]:
    """Every run of the suite in order; ``time_limit`` overrides the groups' limits. A run that
    two groups both select (overlapping patterns) is refused: it would run twice."""
    from pipeplan.core.registry import COMMON, get_solver, solvers

    if time_limit is not None and not time_limit <= MAX_RECORD_MAGNITUDE:     # as a suite's time_limit
        raise InputError("--time-limit", "", f"must be at most {MAX_RECORD_MAGNITUDE:g} s (what a record may hold), "
                                             f"got {time_limit!r}")
    runs: list[Run] = []
    planned: dict[str, str] = {}   # run key -> the group that selected it
    count = 0                      # runs planned by the groups so far
    for system in SYSTEMS:
        if system not in suite:
            continue
        names_of, load = catalogue(system)
        names = names_of()
        available = [s.name for s in solvers(system) if s.available()[0]]
        for i, g in enumerate(suite[system]):
            instances = _select(g["instances"], names)
            if not instances:
                raise InputError(source, f"{system}[{i}].instances", f"no instance matches {_shown(g['instances'])}")
            chosen = _select(g.get("solvers", ["*"]), available)
            if not chosen:
                raise InputError(source, f"{system}[{i}].solvers", f"no available solver matches "
                                 f"{_shown(g.get('solvers'))} (see `pipeplan solvers`)")
            count += len(instances) * len(chosen) * len(g.get("seeds", [0]))
            if count > MAX_SUITE_RUNS:
                raise InputError(source, f"{system}[{i}]", f"the suite plans {count:,} runs up to this group, above "
                                                           f"the {MAX_SUITE_RUNS:,} one suite may plan")
            # the suite sets the common options itself (time_limit, seeds, one thread a run, no
            # warm start): in params they had passed this check and made every run an error record
            common = next((key for key in g.get("params", {}) if key in COMMON), None)
            if common is not None:
                raise InputError(source, f"{system}[{i}].params.{common}",
                                 "set by the suite (time_limit, seeds; one thread a run, no warm start), "
                                 "not a solver parameter")
            for solver in chosen:   # a parameter a chosen solver does not declare is refused here
                get_solver(system, solver).check_params(g.get("params", {}), source=f"{source}: {system}[{i}].params")
            if g.get("params"):     # and a value an instance rules out (approx's degree past its n workers)
                _check_params_on(g["params"], system, instances, chosen, load, source, f"{system}[{i}].params")
            for inst in instances:
                for solver in chosen:
                    for seed in g.get("seeds", [0]):
                        run = Run(system, inst, solver, seed, time_limit or float(g.get("time_limit", 30.0)),
                                  dict(g.get("params", {})))
                        if run.key in planned:
                            raise InputError(source, f"{system}[{i}]", f"{inst} x {solver} x seed {seed} is "
                                             f"already selected by {planned[run.key]} (each run once)")
                        planned[run.key] = f"{system}[{i}]"
                        runs.append(run)
    if not runs:        # `mapping = []` alone: the folder had been written, then runs.jsonl refused as empty
        raise InputError(source, "", f"plans no run (give at least one group of {', '.join(SYSTEMS)})")
    return runs


# ----------------------------------------------------------------------------- one run

def _exact(run: Run) -> bool | None:
    """Whether the run's solver is an exact one (its bounds are certified), None if unknown."""
    from pipeplan.core.registry import get_solver
    try:
        return get_solver(run.system, run.solver).exact
    except InputError:
        return None


def _plain(value):
    """``value`` as plain JSON data (a solver's params may hold numpy numbers)."""
    return json.loads(json.dumps(value, default=lambda v: v.item() if hasattr(v, "item") else str(v)))


def execute(run: Run) -> dict:
    """Solve one run in this process and return its record (never raises). Besides the result's
    figures the record holds ``exact`` (the solver's kind: an exact solver's bound is a
    certified one), ``bound_proven`` (the run proved its bound although its solver is not exact:
    ``step-plan`` with ``prove_s``), ``stopped_by`` ("work", "time" or None: which limit cut the
    run short) and ``params`` (what the solver ran with and reports, e.g. its work limit and the
    work done)."""
    import pipeplan
    from pipeplan.core.result import library_versions

    began = time.perf_counter()
    record = {"system": run.system, "instance": run.instance, "solver": run.solver, "seed": run.seed,
              "time_limit": run.time_limit, "exact": _exact(run)}
    try:
        _, load = catalogue(run.system)
        problem = load(run.instance)
        result = pipeplan.solve(problem, run.solver, time_limit=run.time_limit, seed=run.seed, threads=1,
                                **run.params)
        record.update({"termination": result.termination.value, "quality": result.quality.value,
                       "objectives": result.objectives, "bound": result.bound, "gap": result.gap,
                       "wall_time_s": result.wall_time_s, "message": result.message,
                       "stopped_by": result.stopped_by, "params": _plain(result.params),
                       "bound_proven": bool(result.params.get("bound_proven")),
                       "front": [p.get("objectives", {}) for p in result.front],
                       "versions": result.versions})
    except Exception as exc:  # a crashed run is a record, not the end of the suite
        record.update({"termination": "error", "quality": "none", "objectives": {}, "bound": {}, "gap": None,
                       "wall_time_s": time.perf_counter() - began,
                       "message": crash_message(exc),
                       "stopped_by": None, "params": _plain(run.params), "front": [], "versions": library_versions()})
    return record


def _child(run: Run, conn) -> None:
    # its own process group, so that killing the run kills what it started too (the child
    # process ``core.deadline.run_within`` runs HiGHS in)
    if hasattr(os, "setpgrp"):
        os.setpgrp()
    conn.send(execute(run))
    conn.close()


def _kill(proc) -> None:
    """Kill a run's process and every process it started (its process group, ``_child``)."""
    if hasattr(os, "killpg"):
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.kill()
    proc.join()


def _stopped(run: Run, why: str, elapsed: float) -> dict:
    from pipeplan.core.result import library_versions
    return {"system": run.system, "instance": run.instance, "solver": run.solver, "seed": run.seed,
            "time_limit": run.time_limit, "exact": _exact(run), "termination": why, "quality": "none",
            "objectives": {}, "bound": {}, "gap": None, "wall_time_s": elapsed,
            "message": ("killed: ran past its time limit" if why == "time_limit" else "the run's process died"),
            "stopped_by": "time" if why == "time_limit" else None, "params": _plain(run.params),
            "front": [], "versions": library_versions()}


def run_local(runs: list[Run], jobs: int, on_record: Callable[[dict], None], grace_s: float = GRACE_S) -> None:
    """Each run in its own process (at most ``jobs`` at once), killed past its limit + grace.

    The run processes are not daemonic: a daemonic process may not start one, and the
    step-indexed bound runs HiGHS in a child (``core.deadline.run_within``; in the full suite of
    2026-12-04 every ``step-plan`` run with ``prove_s`` failed so). Each is its own process
    group, killed with what it started; any still running when this returns by an exception
    (Ctrl-C, a failed write) are killed too."""
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    pending = list(runs)
    active: list[tuple[Run, mp.Process, object, float]] = []
    try:
        while pending or active:
            while pending and len(active) < jobs:
                run = pending.pop(0)
                recv, send = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_child, args=(run, send))
                proc.start()
                send.close()
                active.append((run, proc, recv, time.perf_counter()))
            time.sleep(0.02)
            check_stop()              # SIGTERM, should its own exception have been dropped
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
                    _kill(proc)
                    on_record(_stopped(run, "time_limit", elapsed))
                else:
                    still.append((run, proc, recv, started))
            active = still
    finally:
        for _, proc, _, _ in active:
            if proc.is_alive():
                _kill(proc)


def _ray():
    try:
        import ray
    except ImportError:
        raise InputError("--engine", "ray", "Ray is not installed (pip install 'pipeplan[ray]')") from None
    return ray


def _execute_on_ray(run: Run) -> dict:
    """:func:`execute` in a Ray task; the record also names the Ray node that ran it (``ray_node``)."""
    import ray
    return {**execute(run), "ray_node": ray.get_runtime_context().get_node_id()}


def _lost(run: Run, exc: Exception, elapsed: float) -> dict:
    """The record of a run whose Ray task failed (its worker or node died): an error naming the
    failure (the first line of Ray's message)."""
    record = _stopped(run, "error", elapsed)
    first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    record.update(message=f"ray task failed: {type(exc).__name__}: {first}", ray_node=None)
    return record


def run_ray(runs: list[Run], jobs: int, on_record: Callable[[dict], None], grace_s: float = GRACE_S) -> None:
    """The same runs as Ray tasks (local Ray, or the cluster at RAY_ADDRESS, or the Ray this
    process is already connected to); records stream back as tasks finish, each once: a task
    whose worker or node dies is recorded as an error naming the failure (no retry: a run is
    never executed twice); a task past its limit + grace (+ Ray's worker start-up allowance,
    since the clock runs from submission) is cancelled and recorded as time_limit. Tasks still
    in flight when this returns by an exception (Ctrl-C, a failed write) are cancelled."""
    ray = _ray()
    started_here = not ray.is_initialized()
    if started_here:
        address = os.environ.get("RAY_ADDRESS")
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False,
                 **({} if address else {"num_cpus": jobs, "include_dashboard": False}))
    remote = ray.remote(num_cpus=1, max_retries=0)(_execute_on_ray)
    pending = list(runs)
    inflight: dict = {}
    try:
        while pending or inflight:
            while pending and len(inflight) < jobs:
                run = pending.pop(0)
                inflight[remote.remote(run)] = (run, time.perf_counter())
            done, _ = ray.wait(list(inflight), num_returns=1, timeout=0.5)
            check_stop()
            for ref in done:
                run, started = inflight.pop(ref)
                try:
                    record = ray.get(ref)
                except Exception as exc:  # the task itself died (its worker, its node)
                    record = _lost(run, exc, time.perf_counter() - started)
                on_record(record)
            for ref, (run, started) in list(inflight.items()):
                if time.perf_counter() - started > run.time_limit * 1.1 + grace_s + RAY_START_S:
                    ray.cancel(ref, force=True)
                    inflight.pop(ref)
                    on_record({**_stopped(run, "time_limit", time.perf_counter() - started), "ray_node": None})
    finally:
        for ref in inflight:
            with suppress(Exception):
                ray.cancel(ref, force=True)
        if started_here:
            ray.shutdown()


# ----------------------------------------------------------------------------- the records

RECORD_KEYS = ("system", "instance", "solver", "seed", "termination")
# What each field of a run record may hold. The bench writes them, but `pipeplan report` may be
# handed a folder from anyone: a field of another type, a non-finite or overflowing number or a
# name with control characters is refused naming the line, instead of a crash deep in the report
# (or a name like "a\x00b" reaching a plot's file name).
RECORD_NAMES = ("system", "instance", "solver", "termination")
RECORD_NUMBERS = ("time_limit", "wall_time_s", "gap")             # None or a finite number
RECORD_TEXTS = ("quality", "stopped_by", "message")               # None or text
RECORD_FLAGS = ("exact", "bound_proven")                          # None or true/false
RECORD_TABLES = ("objectives", "bound")                           # None or {name: finite number or None}
# Every number in a record lies within this magnitude: the instance files' own limits keep every
# time, energy and rate a run reports far below it, and near float range the report's plots fail
# (a front point at -1e308 beside one at 1e308 had crashed matplotlib's tick locator with a
# traceback, after three overflow warnings)
MAX_RECORD_MAGNITUDE = 1e100
# but objectives, which the report reads as an object, is never null, and a record whose quality
# says it holds a plan (what a bench writes with every solution) holds them
PLAN_QUALITIES = ("feasible", "proven_optimal")
# Objectives the report reads together, per system: where the first is a number the others are
# numbers too (a rollout round's trainer finish and its waiting ratio: the schedule's metrics
# always give both, and the report shows and divides by both)
RECORD_TOGETHER = {"rollout": ("train_end_s", "waiting_ratio")}


@dataclass(frozen=True)
class Damage:
    """The damaged last line of a runs.jsonl (a crash mid-write): its line number, where it
    starts (bytes) and its bytes to the end of the file."""
    line: int
    offset: int
    data: bytes


def scan_records(path: Path) -> tuple[list[dict], Damage | None]:
    """Records of a runs.jsonl and its damaged last line, if any. Only the last non-blank line
    may be damaged (not UTF-8, not JSON: what a write cut short leaves; or an object naming a key
    twice, which Python's reader would take as its last value); any line before it that
    is not a run record, and a last line that is valid JSON but not a record, is an InputError
    naming the line. A last record cut just before its newline is complete and kept."""
    if not path.exists():
        return [], None
    data = read_input(path, what="bench record file")
    # parsed, the records take up to JSON_BYTES_PER_CHAR each byte, as any JSON file does: 53 MB of
    # records had peaked at 472 MB in report under a 128 MB cap
    check_bytes(str(path), "", f"its {len(data):,} bytes of JSON records", len(data) * JSON_BYTES_PER_CHAR)
    lines = data.split(b"\n")
    last = max((n for n, raw in enumerate(lines) if raw.strip()), default=-1)
    out, offset = [], 0
    seen: dict[str, int] = {}       # record key -> its line
    for n, raw in enumerate(lines[:last + 1]):
        where = f"line {n + 1}"
        if raw.strip():
            try:
                record = json_loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError, DuplicateKey) as exc:
                if n == last:
                    return out, Damage(n + 1, offset, b"\n".join(lines[n:]))
                if isinstance(exc, DuplicateKey):   # Python's reader had kept the last value
                    where, why = f"{where}: {exc.key}", "given twice in one object"
                else:
                    why = f"invalid JSON ({exc.msg})" if isinstance(exc, json.JSONDecodeError) else "not UTF-8 text"
                raise InputError(str(path), where, f"{why}; only a damaged last line is a crash to repair") from None
            except RecursionError:
                raise InputError(str(path), where, "nested too deeply") from None
            except ValueError as exc:        # what a torn write cannot make, e.g. an integer too long
                raise InputError(str(path), where, f"invalid JSON ({exc})") from None
            if not isinstance(record, dict):
                raise InputError(str(path), where, "expected a JSON object")
            missing = [k for k in RECORD_KEYS if k not in record]
            if missing:
                raise InputError(str(path), f"{where}: {missing[0]}", "missing field of a run record")
            check_record(record, str(path), where)
            key = record_key(record)
            if key in seen:
                raise InputError(str(path), where, f"run recorded twice (first on line {seen[key]}): "
                                                   f"{record['system']} {record['instance']} {record['solver']} "
                                                   f"seed {record['seed']}")
            seen[key] = n + 1
            out.append(record)
        offset += len(raw) + 1
    return out, None


def check_record(record: dict, source: str, where: str) -> None:
    """Refuse a run record whose fields do not hold what the bench writes (see ``RECORD_NAMES``
    and the rest); ``where`` is ``line N``."""
    def fail(field: str, expected: str, value) -> InputError:
        return InputError(source, f"{where}: {field}", f"expected {expected}, got {_shown(value)}")

    def table(value, field: str) -> None:
        if not isinstance(value, dict):
            raise fail(field, "an object of numbers", value)
        for k, v in value.items():
            if v is not None and not _recorded_number(v):
                raise fail(f"{field}.{k}", f"a finite number within +-{MAX_RECORD_MAGNITUDE:g}", v)

    for k in RECORD_NAMES:
        v = record[k]
        if not isinstance(v, str) or not v or not v.isprintable():
            raise fail(k, "a name (text without control characters)", v)
    seed = record["seed"]
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise fail("seed", "an integer", seed)
    for k in RECORD_NUMBERS:
        v = record.get(k)
        if v is not None and not (_recorded_number(v) and (k == "gap" or v >= 0) and (k != "time_limit" or v > 0)):
            raise fail(k, f"a finite number within +-{MAX_RECORD_MAGNITUDE:g}" if k == "gap" else
                          f"a finite positive number of seconds, at most {MAX_RECORD_MAGNITUDE:g}", v)
    for k in RECORD_TEXTS:
        if record.get(k) is not None and not isinstance(record[k], str):
            raise fail(k, "text", record[k])
    for k in RECORD_FLAGS:
        if record.get(k) is not None and not isinstance(record[k], bool):
            raise fail(k, "true or false", record[k])
    for k in RECORD_TABLES:
        if record.get(k) is not None:
            table(record[k], k)
    if "objectives" in record and record["objectives"] is None:
        raise fail("objectives", "an object of numbers", None)
    if "objectives" not in record and record.get("quality") in PLAN_QUALITIES:
        raise InputError(source, f"{where}: objectives", f"missing: a {record['quality']} record holds the "
                                                          "objectives of its plan")
    first, *others = RECORD_TOGETHER.get(record["system"], ("",))
    objectives = record.get("objectives") or {}
    if objectives.get(first) is not None:
        for k in others:
            if k not in objectives:
                raise InputError(source, f"{where}: objectives.{k}", f"missing beside {first} (the report reads both)")
            if objectives[k] is None:
                raise fail(f"objectives.{k}", f"a finite number beside {first} (the report reads both)", None)
    front = record.get("front")
    if front is not None:
        if not isinstance(front, list):
            raise fail("front", "a list of points", front)
        for i, point in enumerate(front):
            table(point, f"front[{i}]")
    for k in ("params", "versions"):
        if record.get(k) is not None and not isinstance(record[k], dict):
            raise fail(k, "an object", record[k])
    objective = (record.get("params") or {}).get("objective")
    if objective is not None and not isinstance(objective, str):
        raise fail("params.objective", "an objective's name", objective)


def _recorded_number(v) -> bool:
    return finite_number(v) and abs(v) <= MAX_RECORD_MAGNITUDE


def read_records(path: Path) -> list[dict]:
    """Records of a runs.jsonl, for readers (``pipeplan report``): a damaged last line is
    ignored with a one-line warning (the next ``pipeplan bench`` on the folder sets it aside and
    redoes its run); a damaged line before the last is an InputError (see :func:`scan_records`)."""
    records, damage = scan_records(path)
    if damage:
        warn(str(path), f"line {damage.line}", f"damaged last line ignored ({len(damage.data)} bytes, a bench "
                                                "killed mid-write); `pipeplan bench` on this folder repairs it")
    return records


def record_key(r: dict) -> str:
    return f"{r['system']}|{r['instance']}|{r['solver']}|{r['seed']}"


def warn(source: str, field: str, message: str) -> None:
    """One line ``warning: FILE: FIELD: message`` on stderr."""
    print(f"warning: {InputError(source, field, message).one_line()}", file=sys.stderr, flush=True)


def _set_aside(records_path: Path, fd: int, damage: Damage) -> None:
    """Append the damaged bytes to runs.jsonl.damaged-<UTC time> (fsynced), then cut them off
    runs.jsonl: a crash in between leaves them in both, never in neither."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    aside = records_path.with_name(f"{RECORDS}.damaged-{stamp}")
    try:
        afd = os.open(aside, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
        try:
            if not stat.S_ISREG(os.fstat(afd).st_mode):     # a FIFO planted under the name had hung it
                raise OSError(0, "not a regular file")
            if os.write(afd, damage.data) != len(damage.data):
                raise OSError(0, "short write (disk full?)")
            os.fsync(afd)
        finally:
            os.close(afd)
        os.ftruncate(fd, damage.offset)
        os.fsync(fd)
    except OSError as exc:
        raise InputError(str(aside), "", f"cannot set the damaged last line aside ({exc.strerror or exc})") from None
    warn(str(records_path), f"line {damage.line}", f"set aside {len(damage.data)} damaged bytes (a bench killed "
                                                   f"mid-write) in {aside}; their run is redone")


def _append(records_path: Path, fd: int, data: bytes) -> None:
    """One ``os.write`` of whole lines on the O_APPEND descriptor, then fsync: a crash leaves at
    most a torn last line, which the next bench sets aside."""
    try:
        written = os.write(fd, data)
        os.fsync(fd)
    except OSError as exc:
        raise InputError(str(records_path), "", f"cannot append a record ({exc.strerror or exc})") from None
    if written != len(data):
        raise InputError(str(records_path), "", f"short write ({written} of {len(data)} bytes; disk full?): "
                                                "the next bench sets the torn line aside")


@contextmanager
def open_records(out: Path, *, fresh: bool = False):
    """Under the folder's lock: ``(records, fd)`` where records are those of out/runs.jsonl (all
    of them with ``fresh=False``, none with ``fresh=True``) and fd its O_APPEND descriptor; a
    damaged last line is first set aside, and a last record cut just before its newline gets it."""
    records_path = out / RECORDS
    with bench_lock(out):
        check_output(records_path, log=True)   # a link, folder or device there is refused, never followed
        try:
            if fresh:
                records_path.unlink(missing_ok=True)
            records, damage = scan_records(records_path)
            fd = os.open(records_path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            raise InputError(str(records_path), "", f"cannot write ({exc.strerror or exc})") from None
        try:
            if damage:
                _set_aside(records_path, fd, damage)
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                _append(records_path, fd, b"\n")
            yield records, fd
        finally:
            os.close(fd)


# ----------------------------------------------------------------------------- the lock

def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _owner(lock: Path) -> tuple[dict | None, int]:
    """(the lock's owner {pid, host, boot, started} or None when unreadable, its inode). Read
    without following a link and without blocking: a bench folder may come from someone else, and
    a bench.lock linked to a file outside or to a FIFO had been read there, or hung the bench."""
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None, -1
    except OSError as exc:
        why = "is a symbolic link" if os.path.islink(lock) else f"cannot be read ({exc.strerror or exc})"
        raise InputError(str(lock), "", f"{why}, not a bench's lock; remove it if no bench runs") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(str(lock), "", "is not a regular file, not a bench's lock; remove it if no bench runs")
        ino, raw = st.st_ino, os.read(fd, 4096)
    except OSError as exc:
        raise InputError(str(lock), "", f"cannot read the lock ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    try:
        owner = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None, ino
    ok = (isinstance(owner, dict) and isinstance(owner.get("pid"), int) and not isinstance(owner["pid"], bool)
          and owner["pid"] > 0 and isinstance(owner.get("host"), str))
    return (owner if ok else None), ino


def _gone(owner: dict) -> bool:
    """The owner is known dead: on this host, from another boot or its pid not alive."""
    if owner["host"] != socket.gethostname():
        return False
    if owner.get("boot") and owner["boot"] != _boot_id():
        return True
    try:
        os.kill(owner["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:   # alive, someone else's
        return False
    return False


def _drop_stale(lock: Path, ino: int) -> None:
    """Remove the stale lock of inode ``ino`` only: moved aside first, so a lock another bench
    created meanwhile is put back, not deleted."""
    aside = lock.with_name(f"{LOCK}.stale-{os.getpid()}")
    try:
        os.rename(lock, aside)
        if os.stat(aside).st_ino != ino:
            with suppress(FileExistsError):
                os.link(aside, lock)
        os.unlink(aside)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise InputError(str(lock), "", f"cannot take over the stale lock ({exc.strerror or exc})") from None


@contextmanager
def bench_lock(out: Path):
    """Hold out/bench.lock for the block: created with O_CREAT|O_EXCL, holding this process's
    pid, host and boot id; another live bench's lock is an InputError, a dead one's is taken over
    with a warning; removed when the block ends, however it ends (error, Ctrl-C)."""
    lock = out / LOCK
    for attempt in range(2):
        try:
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            break
        except FileExistsError:
            owner, ino = _owner(lock)
        except OSError as exc:
            raise InputError(str(out), "", f"cannot write ({exc.strerror or exc})") from None
        if attempt == 0 and (ino < 0 or (owner is not None and _gone(owner))):
            if ino >= 0:
                warn(str(lock), "", f"stale lock of pid {owner['pid']} (no longer running) taken over")
                _drop_stale(lock, ino)
            continue
        if owner is None:
            raise InputError(str(lock), "", "lock of another bench, unreadable or being written "
                                            "(remove it if no bench runs)")
        raise InputError(str(lock), "", f"another bench (pid {owner['pid']} on {owner['host']}, since "
                                        f"{owner.get('started', '?')}) uses this folder; wait for it or give "
                                        "another --out")
    mine = os.fstat(fd).st_ino
    try:
        try:
            os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "boot": _boot_id(),
                                     "started": datetime.now(timezone.utc).isoformat(timespec="seconds")}).encode())
        finally:
            os.close(fd)
        yield lock
    finally:
        with suppress(OSError):
            if os.stat(lock).st_ino == mine:
                os.unlink(lock)


# ----------------------------------------------------------------------------- the suite

ENGINES = ("local", "ray")


def run_suite(suite_name: str, out: Path, *, time_limit: float | None = None, jobs: int = 1,
              engine: str = "local", progress=None, grace_s: float = GRACE_S, fresh: bool = False) -> dict:
    """Run every run of the suite not yet in ``out/runs.jsonl`` (every run with ``fresh``, which
    forgets the records); returns counts. The suite, the engine (Ray importable) and the output
    folder are checked before anything is created; the runs go on under the folder's lock."""
    path, suite = load_suite(suite_name)
    runs = plan_runs(suite, time_limit, str(path))
    if engine not in ENGINES:
        raise InputError("--engine", "", f"unknown engine {engine!r} ({', '.join(ENGINES)})")
    if engine == "ray":
        _ray()
    cores = os.cpu_count() or 1
    if jobs > cores:
        warn("--jobs", "", f"{jobs} exceeds the {cores} cores of this machine: runs will compete for CPU")
    # new, empty, pipeplan's (marked), or a bench folder from before the marker: one whose
    # runs.jsonl starts with a run record (any file of that name had made a folder ours), or
    # one a bench left at its start (bench.lock, judged by the lock's own checks)
    check_out_folder(out, ours=((RECORDS,) if _starts_with_a_record(out / RECORDS) else ()) + (LOCK,))
    _check_outputs(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(str(out), "", f"cannot create the results folder ({exc.strerror or exc})") from None
    records_path = out / RECORDS
    with open_records(out, fresh=fresh) as (records, fd):
        done = {record_key(r) for r in records}
        todo = [r for r in runs if r.key not in done]
        total, finished = len(runs), len(runs) - len(todo)
        began = time.perf_counter()
        mark_out_folder(out)
        write_json(out / "suite.json", {
            "suite": suite_name, "source": str(path), "planned": [r.key for r in runs], "engine": engine, "jobs": jobs,
            "started": datetime.now(timezone.utc).isoformat(timespec="seconds"), "recorded_before": finished,
            "machine": _machine()})
        _snapshot_optima(out, {r.instance for r in runs if r.system == "mapping"})

        def on_record(record: dict) -> None:
            nonlocal finished
            _append(records_path, fd, (json.dumps(record) + "\n").encode())
            finished += 1
            if progress:
                progress(finished, total, f"{record['system']} {record['instance']} {record['solver']}")

        if progress:
            progress(finished, total, "")
        (run_local if engine == "local" else run_ray)(todo, jobs, on_record, grace_s)
    return {"runs": total, "skipped": total - len(todo), "ran": len(todo),
            "wall_time_s": time.perf_counter() - began}


# the files a bench and its report write into the folder besides runs.jsonl (and the plots, *.png)
WRITTEN = ("suite.json", "summary.csv", "report.md", SNAPSHOT, OUT_MARKER)


def _check_outputs(out: Path) -> None:
    """Every file the bench or its report will replace must be a plain file (or absent), checked
    before the first run: a summary.csv linked elsewhere had been refused only by the report,
    after the runs were appended to runs.jsonl and suite.json rewritten (exit 2, written)."""
    if not out.is_dir():
        return
    check_output(out / RECORDS, log=True)
    for name in WRITTEN:
        check_output(out / name)
    try:
        with os.scandir(out) as entries:
            plots = [e.name for e in entries if e.name.endswith(".png")]
    except OSError as exc:
        raise InputError(str(out), "", f"cannot read the folder ({exc.strerror or exc})") from None
    for name in plots:
        check_output(out / name)


FIRST_LINE_BYTES = 1 << 20      # a record's line is a few hundred bytes


def _starts_with_a_record(path: Path) -> bool:
    """Whether ``path``'s first line is a bench run record (read without following a link,
    at most ``FIRST_LINE_BYTES``)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        head = os.read(fd, FIRST_LINE_BYTES).split(b"\n", 1)[0]
    except OSError:
        return False
    finally:
        os.close(fd)
    try:
        record = json.loads(head.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return False
    try:
        return isinstance(record, dict) and bool(record_key(record))
    except KeyError:
        return False


def _snapshot_optima(out: Path, instances: set[str]) -> None:
    """The stored optima of the suite's mapping instances, copied into the results folder
    (``reference_optima.csv``), so that the report takes its references from the folder alone."""
    rows = [r for r in read_optima() if r["instance"] in instances]
    if rows:
        write_atomic(out / SNAPSHOT, csv_text(rows, OPTIMA_COLUMNS))


def _machine() -> dict:
    import platform
    return {"machine": platform.machine(), "processor": platform.processor(), "cores": os.cpu_count(),
            "python": platform.python_version(), "system": platform.system()}

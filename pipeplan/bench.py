"""``pipeplan bench``: run a suite of instances x solvers and write a CSV and a markdown table.

A suite is a TOML file under instances/suites/. Each run's objectives come from the
formulation's evaluator (solvers return re-scored results); the tables also give each
solver's ratio to the best plan found for the same instance in the same run.
"""
from __future__ import annotations

import csv
import fnmatch
import io
import platform
import tomllib
from datetime import datetime, timezone
from pathlib import Path

import pipeplan
from pipeplan.errors import InputError
from pipeplan.instances.catalog import INSTANCES_DIR, load_mapping, mapping_instance_names
from pipeplan.io import write_atomic
from pipeplan.registry import solvers

SUITES_DIR = INSTANCES_DIR / "suites"
COLUMNS = ("instance", "solver", "termination", "quality", "period_ms", "latency_ms", "energy_mj",
           "gap", "wall_time_s", "period_ratio_to_best", "message")


def load_suite(name: str) -> dict:
    path = Path(name) if name.endswith(".toml") else SUITES_DIR / f"{name}.toml"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in SUITES_DIR.glob("*.toml")))
        raise InputError(name, "--suite", f"unknown suite (known: {known})")
    try:
        suite = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise InputError(str(path), "", f"invalid TOML ({exc})") from None
    groups = suite.get("mapping")
    groups = [groups] if isinstance(groups, dict) else groups
    if not isinstance(groups, list) or not groups:
        raise InputError(str(path), "mapping", "expected a [mapping] table or [[mapping]] groups")
    for i, g in enumerate(groups):
        if not isinstance(g, dict) or not isinstance(g.get("instances"), list):
            raise InputError(str(path), f"mapping[{i}].instances", "expected a list of instance patterns")
        limit = g.get("time_limit", 30.0)
        if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not limit > 0:
            raise InputError(str(path), f"mapping[{i}].time_limit", f"expected a positive number, got {limit!r}")
    suite["mapping"] = groups
    return suite


def _select(patterns: list[str], names: list[str]) -> list[str]:
    return [n for n in names if any(fnmatch.fnmatch(n, p) for p in patterns)]


def _runs(suite: dict, time_limit: float | None) -> list[tuple[str, str, float, str]]:
    """(instance, solver, time limit, objective) for every run of the suite, in order."""
    available = [s.name for s in solvers("mapping") if s.available()[0]]
    names = mapping_instance_names()
    runs = []
    for g in suite["mapping"]:
        for inst in _select(g["instances"], names):
            for solver in _select(g.get("solvers", ["*"]), available):
                runs.append((inst, solver, time_limit or float(g.get("time_limit", 30.0)),
                             g.get("objective", "period")))
    return runs


def run_suite(suite_name: str, out: Path, *, time_limit: float | None = None, progress=None) -> str:
    """``time_limit`` overrides the suite's per-group limits when given."""
    suite = load_suite(suite_name)
    runs = _runs(suite, time_limit)
    names = list(dict.fromkeys(solver for _, solver, _, _ in runs))
    instances = list(dict.fromkeys(inst for inst, _, _, _ in runs))
    total = len(runs)
    rows: list[dict] = []
    for i, (inst, solver, limit, objective) in enumerate(runs):
        problem = load_mapping(inst)  # cached by the catalogue
        if progress:
            progress(i, total, f"{inst} {solver}")
        r = pipeplan.solve(problem, solver, time_limit=limit, seed=0, threads=1, objective=objective)
        o = r.objectives
        rows.append({"instance": inst, "solver": solver, "termination": r.termination.value,
                     "quality": r.quality.value, "period_ms": o.get("period_ms"),
                     "latency_ms": o.get("latency_ms"), "energy_mj": o.get("energy_mj"),
                     "gap": r.gap, "wall_time_s": r.wall_time_s, "message": r.message})
    if progress:
        progress(total, total, "done")
    for inst in instances:
        mine = [r for r in rows if r["instance"] == inst and r["period_ms"]]
        best = min((r["period_ms"] for r in mine), default=None)
        for r in mine:
            r["period_ratio_to_best"] = r["period_ms"] / best
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS)
    writer.writeheader()
    for r in rows:
        writer.writerow({k: _fmt(r.get(k)) for k in COLUMNS})
    md = _markdown(suite_name, rows, names)
    write_atomic(out / "mapping.csv", buf.getvalue())
    write_atomic(out / "report.md", md)
    return md


def _fmt(v):
    return f"{v:.6g}" if isinstance(v, float) else ("" if v is None else v)


def _markdown(suite: str, rows: list[dict], names: list[str]) -> str:
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"# pipeplan bench --suite {suite}", "",
             f"Made by `pipeplan bench --suite {suite}` on {when}, {platform.machine()} "
             f"({platform.python_implementation()} {platform.python_version()}).", "",
             "## Mapping: period (ms) per solver, and ratio to the best period found in this run", "",
             "| instance | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    by = {(r["instance"], r["solver"]): r for r in rows}
    for inst in dict.fromkeys(r["instance"] for r in rows):
        cells = []
        for s in names:
            r = by.get((inst, s))
            if r is None or r["period_ms"] is None:
                cells.append(r["termination"] if r else "-")
            else:
                cells.append(f"{r['period_ms']:.1f} (x{r['period_ratio_to_best']:.2f})")
        lines.append(f"| {inst} | " + " | ".join(cells) + " |")
    lines += ["", "## Mapping: latency (ms) / energy (mJ) per solver", "",
              "| instance | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for inst in dict.fromkeys(r["instance"] for r in rows):
        cells = []
        for s in names:
            r = by.get((inst, s))
            cells.append("-" if r is None or r["latency_ms"] is None else f"{r['latency_ms']:.1f} / {r['energy_mj']:.0f}")
        lines.append(f"| {inst} | " + " | ".join(cells) + " |")
    errors = [r for r in rows if r["termination"] == "error"]
    lines += ["", f"Runs: {len(rows)}; errors: {len(errors)}."]
    lines += [f"- {r['instance']} / {r['solver']}: {r['message']}" for r in errors]
    return "\n".join(lines) + "\n"

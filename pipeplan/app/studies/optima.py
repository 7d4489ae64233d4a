"""Stored optima (``pipeplan optima``): per catalogue instance, granularity and objective, the
proven optimum, or the best certified bound and the best plan known, with the method and time
that got there; and every heuristic's plan as a ratio to it.

``results/mapping/optima.csv`` is what tests, the bench and the report take as the reference of
an instance: a heuristic may never beat a stored optimum (a test checks that), an exact solver
must reproduce the optima it proves in seconds, and a ratio to a stored *bound* (status
``open``) is only ever shown flagged as such.

Rows are merged into an existing file by (instance, objective), so the table can be refreshed
one instance group at a time; the file is rewritten atomically.
"""
from __future__ import annotations

import csv
import io
import time
from pathlib import Path

from pipeplan.app.stored_optima import COLUMNS, read_optima
from pipeplan.core.errors import InputError
from pipeplan.core.io import load_text, staged_folder, write_atomic
from pipeplan.core.tables import cell, csv_text, markdown_table
from pipeplan.core.vocabulary import MAPPING_KEYS as AXES

OPTIMA_COLUMNS = COLUMNS
FILES = ("optima.csv", "optima_heuristics.csv", "optima.md")   # replaced together, per instance
HEURISTICS = ("single", "heft", "pipeline-dp", "nsga2")
HEURISTIC_COLUMNS = ("instance", "solver", "period_ms", "latency_ms", "energy_mj", "energy_ss_mj", "ratio", "ratio_to")
HEURISTIC_PARAMS = {"nsga2": {"max_evaluations": 1500}}


def granularity_of(name: str) -> str:
    if name.startswith("khadas-vim3/"):
        return "blocks"
    return name.partition("@")[2] or "fused"


def solve_optimum(name: str, objective: str, *, time_limit: float, threads: int, seed: int = 0) -> dict:
    """One optima row: the cpsat solver on ``name`` within ``time_limit`` seconds; ``seconds`` is
    the time to the proof (or to the limit) of the objective, warm start and certified bounds
    included, the tie-break objective's solve after it not."""
    from pipeplan.core.api import solve
    from pipeplan.instances.catalog import load_mapping

    key = AXES[objective]
    t0 = time.monotonic()
    result = solve(load_mapping(name), "cpsat", time_limit=time_limit, threads=threads, seed=seed,
                   objective=objective)
    seconds = time.monotonic() - t0
    proven = result.quality.value == "proven_optimal"
    value = result.objectives.get(key)
    bound = result.bound.get(key)
    return {"instance": name, "granularity": granularity_of(name), "objective": key,
            "status": "optimal" if proven else "open", "value": value, "bound": bound,
            "bound_source": result.bound_source.get(key, ""),
            "gap": 0.0 if proven and bound is None else result.gap,
            "method": "cpsat " + (result.params.get("method") or "lexicographic"),
            "seconds": round(result.params.get("search_s", seconds), 2), "threads": threads}


def heuristic_rows(name: str, optimum: dict, *, time_limit: float, seed: int = 0) -> list[dict]:
    """Every heuristic's period, latency and both energies on ``name`` and its period as a ratio to the
    stored optimum (``ratio_to``: "opt") or, flagged, to the certified bound ("lb")."""
    from pipeplan.core.api import solve
    from pipeplan.instances.catalog import load_mapping

    problem = load_mapping(name)
    rows = []
    ref = optimum["value"] if optimum["status"] == "optimal" else optimum["bound"]
    for solver in HEURISTICS:
        r = solve(problem, solver, time_limit=time_limit, seed=seed, **HEURISTIC_PARAMS.get(solver, {}))
        if not r.objectives:
            continue
        period = r.objectives["period_ms"]
        rows.append({"instance": name, "solver": solver, "period_ms": period,
                     "latency_ms": r.objectives["latency_ms"], "energy_mj": r.objectives["energy_mj"],
                     "energy_ss_mj": r.objectives["energy_ss_mj"],
                     "ratio": period / ref if ref else None,
                     "ratio_to": "opt" if optimum["status"] == "optimal" else "lb (no proof)",
                     "beats_optimum": optimum["status"] == "optimal" and period < optimum["value"] * (1 - 1e-9)})
    return rows


def merge(old: list[dict], new: list[dict]) -> list[dict]:
    """Rows keyed by (instance, objective): a new row replaces an old one unless the old one is
    tighter (a smaller certified gap), so a rerun under a shorter limit or a busier machine never
    loses a proof or a better bound."""
    keyed = {(r["instance"], r["objective"]): r for r in old}
    for r in new:
        k = (r["instance"], r["objective"])
        before = keyed.get(k)
        if before is None or (r["gap"] if r["gap"] is not None else 1.0) <= \
                (before["gap"] if before["gap"] is not None else 1.0):
            keyed[k] = r
    return sorted(keyed.values(), key=lambda r: (r["instance"], r["objective"]))


def run_optima(names: list[str], out: Path, *, objective: str = "period", time_limit: float = 60.0,
               threads: int = 2, heuristics: bool = True, progress=None) -> list[dict]:
    """Solve every instance of ``names`` and merge its row into ``out``/optima.csv (and its
    heuristics into optima_heuristics.csv) as soon as it is solved, so an interrupted run keeps
    what it finished; optima.md follows each time. The three files of an instance move in
    together (``staged_folder``): a failure between them had left them out of step."""
    read_optima(out / "optima.csv")                   # the files merged into: checked before any solve
    read_comparison(out / "optima_heuristics.csv")
    rows = []
    for i, name in enumerate(names):
        if progress:
            progress(i, len(names), name)
        row = solve_optimum(name, objective, time_limit=time_limit, threads=threads)
        rows.append(row)
        merged = merge(read_optima(out / "optima.csv"), [row])
        compared = heuristics and objective == "period"
        if compared:       # against the tightest row known, this run's or not
            stored = next(r for r in merged if r["instance"] == name and r["objective"] == row["objective"])
            table = [r for r in read_comparison(out / "optima_heuristics.csv") if r["instance"] != name]
            table += heuristic_rows(name, stored, time_limit=min(time_limit, 20.0))
            table.sort(key=lambda r: (r["instance"], HEURISTICS.index(r["solver"])))
        with staged_folder(out, logs=FILES) as stage:
            write_atomic(stage / "optima.csv", csv_text(merged, OPTIMA_COLUMNS, float_format=".10g"))
            if compared:
                write_atomic(stage / "optima_heuristics.csv", csv_text(table, HEURISTIC_COLUMNS, float_format=".10g"))
            # read back, so the markdown shows what the tables hold
            heuristics_csv = (stage if compared else out) / "optima_heuristics.csv"
            write_atomic(stage / "optima.md", optima_markdown(read_optima(stage / "optima.csv"),
                                                              read_comparison(heuristics_csv)))
    return rows


def read_comparison(path: Path) -> list[dict]:
    """The rows of an optima_heuristics.csv (strings), [] if there is none. The file in --out
    may come from anyone: text that is not UTF-8, a broken quote, a missing column and a solver
    that is not one of HEURISTICS are one-line errors (they had been tracebacks, after the
    solve and after optima.csv was rewritten)."""
    if not path.is_file():
        return []
    source = str(path)
    reader = csv.DictReader(io.StringIO(load_text(path, what="heuristics table"), newline=""))
    try:
        missing = [c for c in ("instance", "solver") if c not in (reader.fieldnames or ())]
        if missing:
            raise InputError(source, missing[0], "missing column of a heuristics table")
        rows = []
        for row in reader:
            if not isinstance(row.get("instance"), str):
                raise InputError(source, f"line {reader.line_num}: instance", "missing cell")
            if row.get("solver") not in HEURISTICS:
                raise InputError(source, f"line {reader.line_num}: solver",
                                 f"expected one of {', '.join(HEURISTICS)}, got {row.get('solver')!r}")
            rows.append(row)
    except csv.Error as exc:
        raise InputError(source, f"line {reader.line_num}", f"unreadable CSV ({exc})") from None
    return rows


def optima_markdown(rows: list[dict], compared: list[dict]) -> str:
    proven = sum(r["status"] == "optimal" for r in rows)
    text = [f"# Stored optima ({proven} of {len(rows)} proven)", "",
            "Written by `pipeplan optima` (results/mapping/optima.csv). `value` is the best plan's objective "
            "(the optimum when `status` is optimal), `bound` the best certified lower bound and the argument "
            "behind it, `gap` = (value - bound) / value, `seconds` the time to the proof (or to the limit), warm "
            "start and certified bounds included, the tie-break solve after it not. `optimal` with a gap of at "
            "most 0.01% is a proof by the configuration search (times rounded down, so certified); a gap of 0 "
            "an optimum in the model's whole microseconds.", ""]
    text += markdown_table(OPTIMA_COLUMNS, [[_cell(r.get(c)) for c in OPTIMA_COLUMNS] for r in rows])
    if compared:
        text += ["", "## Heuristics against the stored optimum (period)", "",
                 "`ratio` = heuristic period / optimum; where no proof exists the ratio is to the certified "
                 "bound and flagged `lb (no proof)`: an upper bound on the true ratio, not the ratio.", ""]
        text += markdown_table(HEURISTIC_COLUMNS, [[_cell(r.get(c)) for c in HEURISTIC_COLUMNS] for r in compared])
    return "\n".join(text) + "\n"


def _cell(value) -> str:
    """Numbers read back from CSV are strings: show them with 4 significant digits."""
    try:
        value = float(value) if isinstance(value, str) and value not in ("", "optimal", "open") else value
    except ValueError:
        pass
    return cell(value, ".4g")

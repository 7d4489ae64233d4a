"""Scoring user-given mappings (``pipeplan evaluate``): mapping strings, plan files, CSV batches."""
from __future__ import annotations

from pathlib import Path

from pipeplan.core.errors import InputError, brief_value
from pipeplan.core.io import load_json, read_csv
from pipeplan.core.sizes import check_memory
from pipeplan.formulations.mapping.evaluator import InfeasiblePlan, evaluate
from pipeplan.formulations.mapping.frequencies import plan_for
from pipeplan.formulations.mapping.plan import Plan, plan_from_dict
from pipeplan.formulations.mapping.problem import MappingProblem

BATCH_COLUMNS = ("mapping", "mode", "freq")


def _score(problem: MappingProblem, plan: Plan, source: str, detail: bool = False) -> dict:
    try:
        ev = evaluate(problem, plan)
    except InfeasiblePlan as exc:
        raise InputError(source, "plan", f"infeasible: {exc}") from None
    out = {"instance": problem.name, "mapping": plan.mapping_string(tuple(u.name for u in problem.units)),
           "mode": plan.mode}
    out.update(ev.to_dict(detail=detail))
    return out


def evaluate_one(problem: MappingProblem, *, mapping: str | None, plan_file: Path | None, mode: str,
                 freq: str, detail: bool = False) -> dict:
    if plan_file is not None:
        plan = plan_from_dict(load_json(plan_file), str(plan_file))
        if plan.instance and plan.instance != problem.name:
            raise InputError(str(plan_file), "instance", f"plan is for {plan.instance!r}, not {problem.name!r}")
        return _score(problem, plan, str(plan_file), detail)
    plan = plan_for(problem, mapping, mode, freq)
    return {**_score(problem, plan, "--mapping", detail), "freq": freq}


# memory per row of `evaluate --batch` while the rows are scored (measured: about 1.2 KB a row
# of a 4-unit instance, results and parsed cells; with margin), per row and per unit
BATCH_BYTES_PER_ROW = 2048
BATCH_BYTES_PER_UNIT = 256


def evaluate_batch(problem: MappingProblem, path: Path) -> list[dict]:
    """Score every row of a CSV (columns mapping, mode, freq); all rows are validated before
    any result is returned, so a bad row yields an error and no partial output."""
    lines = read_csv(path, what="batch CSV")
    if not lines:
        raise InputError(str(path), "", "empty file")
    header = [h.strip() for h in lines[0][1]]
    if "mapping" not in header:
        raise InputError(str(path), "mapping", "missing column (columns: mapping, mode, freq)")
    # a column of another name (a typo, "mdoe") had been ignored: every row then took the default
    unknown = next((h for h in header if h and h not in BATCH_COLUMNS), None)
    if unknown:
        raise InputError(str(path), brief_value(unknown), "unknown column (columns: mapping, mode, freq)")
    repeated = next((h for h in header if h and header.count(h) > 1), None)
    if repeated:
        raise InputError(str(path), repeated, "column named twice in the header")
    if len(lines) < 2:
        raise InputError(str(path), "", "no rows after the header")
    # every row's result is held until all are scored (no partial output): refuse a count that
    # would not fit, before the first row is scored
    check_memory(f"{path}: rows", len(lines) - 1, BATCH_BYTES_PER_ROW + BATCH_BYTES_PER_UNIT * len(problem.units))
    # a cell past the header's columns had been dropped by zip without a word
    extra = next(((n, len(cells)) for n, cells in lines[1:] if len(cells) > len(header)
                  and any(c.strip() for c in cells[len(header):])), None)
    if extra:
        raise InputError(f"{path}:{extra[0]}", "columns", f"{extra[1]} cells, but the header names {len(header)}")
    rows = [(n, dict(zip(header, cells))) for n, cells in lines[1:]]
    out = []
    for n, row in rows:
        where = f"{path}:{n}"
        mode = (row.get("mode") or "pipelined").strip()
        if mode not in ("pipelined", "serial"):
            raise InputError(where, "mode", f"must be pipelined or serial, got {mode!r}")
        mapping = (row.get("mapping") or "").strip()
        freq = (row.get("freq") or "max").strip()
        plan = plan_for(problem, mapping, mode, freq, source=f"{where}: mapping", freq_source=f"{where}: freq")
        out.append({**_score(problem, plan, where), "freq": freq})
    return out

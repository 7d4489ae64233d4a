"""The stored optima of the mapping catalogue (results/mapping/optima.csv, written by
``pipeplan optima``): per instance and objective, the proven optimum or the best certified bound
and the best plan known. The bench copies the rows of its instances into its results folder
(``reference_optima.csv``) so that a report is made from the folder alone, and the report takes
them as each instance's reference (a ratio to a bound only flagged, where no proof exists)."""
from __future__ import annotations

import csv
import io
from pathlib import Path

from pipeplan.core.errors import InputError
from pipeplan.core.io import load_text, parse_number

# a source checkout (the README's install is editable): <repository>/results/mapping/optima.csv
STORED = Path(__file__).resolve().parents[2] / "results" / "mapping" / "optima.csv"
SNAPSHOT = "reference_optima.csv"     # the bench's copy, in its results folder
COLUMNS = ("instance", "granularity", "objective", "status", "value", "bound", "bound_source", "gap",
           "method", "seconds", "threads")


REQUIRED = ("instance", "objective", "status", "value", "bound")   # what the references read
NUMBERS = ("value", "bound", "gap", "seconds")


def read_optima(path: Path = STORED) -> list[dict]:
    """The rows of an optima file (numbers as floats, empty cells as None); [] if there is none.
    A bench folder's copy may come from anyone: text that is not UTF-8, a missing column, and a
    number that is not finite and non-negative are one-line errors naming the line."""
    if not path.is_file():
        return []
    source = str(path)
    reader = csv.DictReader(io.StringIO(load_text(path, what="optima table"), newline=""))
    try:
        missing = [c for c in REQUIRED if c not in (reader.fieldnames or ())]
        if missing:
            raise InputError(source, missing[0], "missing column of an optima table")
        rows = []
        for row in reader:
            where = f"line {reader.line_num}"
            for k in ("instance", "objective", "status"):
                if not isinstance(row.get(k), str):
                    raise InputError(source, f"{where}: {k}", "missing cell")
            for k in NUMBERS:
                cell = row.get(k)
                if cell in (None, ""):
                    row[k] = None
                    continue
                row[k] = parse_number(cell, source, f"{where}: {k}")
                if row[k] < 0:
                    raise InputError(source, f"{where}: {k}", f"negative number {cell!r}")
            rows.append(row)
    except csv.Error as exc:
        raise InputError(source, f"line {reader.line_num}", f"unreadable CSV ({exc})") from None
    return rows


def references(rows: list[dict]) -> dict[tuple[str, str], dict]:
    """(instance, objective key) -> its row."""
    return {(r["instance"], r["objective"]): r for r in rows}

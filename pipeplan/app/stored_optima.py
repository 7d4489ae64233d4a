"""The stored optima of the mapping catalogue (results/mapping/optima.csv, written by
``pipeplan optima``): per instance and objective, the proven optimum or the best certified bound
and the best plan known. The bench copies the rows of its instances into its results folder
(``reference_optima.csv``) so that a report is made from the folder alone, and the report takes
them as each instance's reference (a ratio to a bound only flagged, where no proof exists)."""
from __future__ import annotations

import csv
import io
from pathlib import Path

from pipeplan.core.io import read_input

# a source checkout (the README's install is editable): <repository>/results/mapping/optima.csv
STORED = Path(__file__).resolve().parents[2] / "results" / "mapping" / "optima.csv"
SNAPSHOT = "reference_optima.csv"     # the bench's copy, in its results folder
COLUMNS = ("instance", "granularity", "objective", "status", "value", "bound", "bound_source", "gap",
           "method", "seconds", "threads")


def read_optima(path: Path = STORED) -> list[dict]:
    """The rows of an optima file (numbers as floats, empty cells as None); [] if there is none."""
    if not path.is_file():
        return []
    rows = []
    for row in csv.DictReader(io.StringIO(read_input(path, what="optima table").decode())):
        for k in ("value", "bound", "gap", "seconds"):
            try:
                row[k] = float(row[k]) if row.get(k) not in (None, "") else None
            except ValueError:
                row[k] = None
        rows.append(row)
    return rows


def references(rows: list[dict]) -> dict[tuple[str, str], dict]:
    """(instance, objective key) -> its row."""
    return {(r["instance"], r["objective"]): r for r in rows}

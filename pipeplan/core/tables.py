"""The one writer of CSV and markdown tables.

Every report, study and command that writes a table goes through here, so a number has the
same text in every table (``cell`` for markdown, ``csv_text`` for CSV) and a change of
format is made once. Kernel layer: the standard library only.
"""
from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence

ALIGN = {"l": "---", "r": "---:"}


def cell(value, fmt: str = ".2f", none: str = "-") -> str:
    """One markdown cell: ``none`` for a missing value, ``format(value, fmt)`` for a float,
    ``str(value)`` for anything else (ints and strings are shown exactly as they are)."""
    if value is None:
        return none
    return format(value, fmt) if isinstance(value, float) else str(value)


def markdown_table(header: Sequence[str], rows: Iterable[Sequence], align: str | None = None) -> list[str]:
    """The lines of a markdown table: the header, the separator and one line per row (cells
    through ``str``, so format numbers with ``cell`` first). ``align`` has one character per
    column, ``l`` (``---``) or ``r`` (``---:``); by default every column is ``---``.
    Lines, not text: callers put the table among their other lines and join them once."""
    header = list(header)
    align = align or "l" * len(header)
    if len(align) != len(header) or set(align) - set(ALIGN):
        raise ValueError(f"align {align!r}: need one of {'/'.join(ALIGN)} per column ({len(header)})")
    return (["| " + " | ".join(header) + " |", "|" + "".join(ALIGN[a] + "|" for a in align)]
            + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


def csv_text(rows: Iterable[dict], columns: Sequence[str], *, float_format: str = ".6g",
             formats: dict[str, str] | None = None) -> str:
    """CSV text: a header of ``columns`` and one line per row dict (keys outside ``columns``
    are ignored, missing keys and None are empty), floats through ``formats[column]`` or else
    ``float_format``, other values as they are. One writer, so every CSV file the project
    writes quotes, ends lines and rounds numbers the same way."""
    formats = formats or {}
    columns = list(columns)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow({k: "" if v is None else format(v, formats.get(k, float_format)) if isinstance(v, float) else v
                    for k, v in r.items()})
    return buf.getvalue()

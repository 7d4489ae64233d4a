"""How large a mapping graph pipeplan takes: the sizes its time limits are measured at.

Every solver keeps ``--time-limit`` within limit x 1.1 + 2 s up to 20,000 units (results/limits.md,
`pipeplan limits`); past that, the whole-graph steps that run before or after a search (loading,
the warm-start heuristics, an evaluation, the certified bounds) take seconds each on their own:
at 100,000 units `cpsat` under a 2 s limit took 12.5-13.5 s whole process, `heft` 8.4-9.4 s,
loading the instance 3.8 s, and the input-size cap would let a file ten times larger through.
Real graphs lie far below: the catalogue's largest holds 910 units (inception's raw operators),
at most 1.31 edges per unit; a graph too large at one granularity fits at a coarser one.
"""
from __future__ import annotations

from pipeplan.core.errors import InputError

MAX_UNITS = 20_000
MAX_EDGES = 4 * MAX_UNITS


def check_graph_size(units: int, edges: int, source: str, where: str = "graph") -> None:
    """Refuse a graph of more than MAX_UNITS units or MAX_EDGES edges (``where``: the field that
    holds them, "" at the top of the file)."""
    prefix = f"{where}." if where else ""
    if units > MAX_UNITS:
        raise InputError(source, f"{prefix}units", f"{units:,} units, above the {MAX_UNITS:,} pipeplan takes (its "
                                                   "time limits are measured up to there; a coarser granularity, "
                                                   "@modules or the fused default, holds fewer)")
    if edges > MAX_EDGES:
        raise InputError(source, f"{prefix}edges", f"{edges:,} edges, above the {MAX_EDGES:,} pipeplan takes")

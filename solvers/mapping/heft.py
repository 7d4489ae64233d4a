"""HEFT (Topcuoglu et al., 2002): non-pipelined list scheduling over all PUs in one stage.

Units are ranked by upward rank (mean time over the PUs that can run them plus mean transfer
to the successors); in that order each goes to the PU that finishes it earliest, appended after
the PU's last unit (no insertion, so the evaluator's replay of the per-PU order reproduces it).
"""
from __future__ import annotations

from statistics import mean

from pipeplan.formulations.mapping.plan import Plan, Stage
from pipeplan.registry import register
from pipeplan.solvers.mapping.common import scored_result


@register("mapping", "heft", description="HEFT list scheduling over all PUs, no pipelining")
def solve_heft(problem, *, objective: str = "latency", **_):
    prof = problem.profile
    units = [u.name for u in problem.units]
    idx = problem.index
    pus = list(prof.pus)
    tmax = {p: prof.pus[p].max_level for p in pus}

    def cost(u: str, p: str) -> float | None:
        return prof.time(idx[u], p, tmax[p])

    succs: dict[str, list] = {u: [] for u in units}
    for e in problem.edges:
        succs[e.src].append(e)

    def mean_xfer(e) -> float:
        vals = [prof.transfers.time_ms(e.src, a, b, e.bytes) for a in pus for b in pus if a != b]
        return mean(vals) if vals else 0.0

    rank: dict[str, float] = {}
    for u in reversed(units):
        own = mean(c for p in pus if (c := cost(u, p)) is not None)
        rank[u] = own + max((mean_xfer(e) + rank[e.dst] for e in succs[u]), default=0.0)
    order = sorted(units, key=lambda u: (-rank[u], idx[u]))

    in_time = {p: (prof.input_stage.get(p, {}).get(tmax[p]).time_ms
                   if prof.input_stage.get(p, {}).get(tmax[p]) else 0.0) for p in pus}
    first = units[0]
    free = {p: 0.0 for p in pus}
    finish: dict[str, float] = {}
    where: dict[str, str] = {}
    per_pu: dict[str, list[str]] = {p: [] for p in pus}
    for u in order:
        best = None
        for p in pus:
            c = cost(u, p)
            if c is None:
                continue
            ready = max((finish[e.src] + prof.transfers.time_ms(e.src, where[e.src], p, e.bytes)
                         for e in problem.preds[u]), default=0.0)
            if not problem.preds[u]:
                # the input stage precedes the source units; its time depends on where the first unit runs
                ready = in_time[where.get(first, p)] if u != first else in_time[p]
            eft = max(ready, free[p]) + c
            if best is None or eft < best[0]:
                best = (eft, p)
        eft, p = best
        finish[u], where[u], free[p] = eft, p, eft
        per_pu[p].append(u)
    used = tuple(p for p in pus if per_pu[p])
    plan = Plan((Stage(used, {p: tuple(per_pu[p]) for p in used}),), instance=problem.name)
    return scored_result(problem, "heft", plan, objective=objective)

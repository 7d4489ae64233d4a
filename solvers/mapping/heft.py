"""HEFT (Topcuoglu et al., 2002): non-pipelined list scheduling over all PUs in one stage.

Units are ranked by upward rank (mean time over the PUs that can run them plus mean transfer
to the successors); in that order each goes to the PU that finishes it earliest, appended after
the PU's last unit (no insertion, so the evaluator's replay of the per-PU order reproduces it).
Linear in units x PUs + edges x PUs^2.
"""
from __future__ import annotations

from math import fsum

import numpy as np

from pipeplan.core.deadline import Deadline
from pipeplan.core.registry import register
from pipeplan.core.vocabulary import MappingAxis
from pipeplan.formulations.mapping.plan import Plan, Stage
from pipeplan.formulations.mapping.problem import MappingProblem
from pipeplan.solvers.mapping.common import scored_result, transfer_times


def heft_plan(problem: MappingProblem, deadline: Deadline | None = None) -> Plan:
    """The HEFT plan; raises OutOfTime once ``deadline`` has passed (checked per unit)."""
    deadline = deadline or Deadline(None)
    prof = problem.profile
    n, pus = len(problem.units), list(prof.pus)
    cost = [{k: c for k, p in enumerate(pus) if (c := prof.time(i, p, prof.pus[p].max_level)) is not None}
            for i in range(n)]
    xfer = transfer_times(problem)
    mean_xfer = [fsum(x) / len(x) if len(x) else 0.0
                 for x in xfer[:, ~np.eye(len(pus), dtype=bool)].tolist()]
    xfer = xfer.tolist()
    idx = problem.index
    succs: list[list[int]] = [[] for _ in range(n)]
    preds: list[list[tuple[int, int]]] = [[] for _ in range(n)]   # (edge, source unit)
    for k, e in enumerate(problem.edges):
        succs[idx[e.src]].append(k)
        preds[idx[e.dst]].append((k, idx[e.src]))
    dst = [idx[e.dst] for e in problem.edges]

    rank = [0.0] * n
    for i in reversed(range(n)):
        deadline.check()
        rank[i] = fsum(cost[i].values()) / len(cost[i]) + max((mean_xfer[k] + rank[dst[k]] for k in succs[i]),
                                                             default=0.0)
    order = sorted(range(n), key=lambda i: (-rank[i], i))

    in_phase = [prof.input_stage.get(p, {}).get(prof.pus[p].max_level) for p in pus]
    in_time = [ph.time_ms if ph else 0.0 for ph in in_phase]
    free = [0.0] * len(pus)
    finish = [0.0] * n
    where = [-1] * n
    per_pu: list[list[str]] = [[] for _ in pus]
    for i in order:
        deadline.check()
        best = None
        for p, c in cost[i].items():
            if preds[i]:
                ready = max(finish[j] + xfer[k][where[j]][p] for k, j in preds[i])
            else:
                # the input stage precedes the source units; its time depends on where the first unit runs
                ready = in_time[where[0] if i and where[0] >= 0 else p]
            eft = max(ready, free[p]) + c
            if best is None or eft < best[0]:
                best = (eft, p)
        eft, p = best
        finish[i], where[i], free[p] = eft, p, eft
        per_pu[p].append(problem.units[i].name)
    used = tuple(p for k, p in enumerate(pus) if per_pu[k])
    return Plan((Stage(used, {pus[k]: tuple(v) for k, v in enumerate(per_pu) if v}),), instance=problem.name)


@register("mapping", "heft", description="HEFT list scheduling over all PUs, no pipelining")
def solve_heft(problem, *, objective: MappingAxis = "period"):
    """``objective`` only chooses the value the gap is reported on: HEFT minimises latency."""
    return scored_result(problem, "heft", heft_plan(problem), objective=objective)

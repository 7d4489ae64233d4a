"""Pure pipelining (Pipe-it style): contiguous ranges of units in topological order, one PU
per stage, each PU in at most one stage; dynamic programming minimises the period, then the
latency.

State: (units done j, set of PUs used, PU of the last stage). A stage's time is its input stage
(if first), the largest transfer of a tensor it receives from before its range (sent from the
previous stage's PU), its units run one after another, and the output stage (if last): the
evaluator's rules for a chain, where the DP is exact over its plan space. For a DAG, tensors
that skip stages are approximated as sent by the previous stage; the plan is re-scored by the
evaluator either way. The inner loop over the end of a range is vectorised with numpy, so
operator graphs of ~1000 units take seconds; the DP is quadratic in the units, so a deadline
(the solver's time limit) stops it with the best complete pipeline found so far: the one-PU
pipelines come first, then those of more and more PUs.
"""
from __future__ import annotations

from typing import Literal

import numpy as np

from pipeplan.core.deadline import Deadline, OutOfTime
from pipeplan.core.registry import register
from pipeplan.core.result import Quality, SolveResult, Termination
from pipeplan.formulations.mapping.plan import Plan, plan_from_assignment
from pipeplan.formulations.mapping.problem import MappingProblem
from pipeplan.solvers.mapping.common import scored_result, search_deadline, transfer_times

EPS = 1e-9


def _prefix_times(prof, n: int, pus: list[str]) -> np.ndarray:
    """prefix[k, j] = time of units 0..j-1 on PU k at its top level (inf once one cannot run)."""
    rows = []
    for p in pus:
        level = prof.pus[p].max_level
        t = np.array([np.inf if (x := prof.time(i, p, level)) is None else x for i in range(n)])
        rows.append(np.concatenate([[0.0], np.cumsum(t)]))
    return np.array(rows)


def _incoming(problem, deadline: Deadline) -> list[list[tuple[int, np.ndarray]]]:
    """crossing[i]: edges (src < i <= dst) as (dst, transfer time matrix [from PU, to PU])."""
    index = problem.index
    crossing: list[list] = [[] for _ in range(len(problem.units) + 1)]
    for e, x in zip(problem.edges, transfer_times(problem)):
        deadline.check()
        s, d = index[e.src], index[e.dst]
        for i in range(s + 1, d + 1):
            crossing[i].append((d, x))
    return crossing


def pipeline_plan(problem: MappingProblem, max_stages: int | None = None,
                  deadline: Deadline | None = None) -> tuple[Plan, bool]:
    """The DP's plan and whether the DP finished; past ``deadline`` (checked per expansion) the
    best pipeline found so far. Raises OutOfTime when the deadline passes before any pipeline
    covers every unit, ValueError when none can."""
    deadline = deadline or Deadline(None)
    prof = problem.profile
    units = [u.name for u in problem.units]
    n, pus = len(units), list(prof.pus)
    k = len(pus)
    prefix = _prefix_times(prof, n, pus)

    def phase(table, p):
        ph = table.get(p, {}).get(prof.pus[p].max_level)
        return ph.time_ms if ph else 0.0

    t_in = np.array([phase(prof.input_stage, p) for p in pus])
    t_out = np.array([phase(prof.output_stage, p) for p in pus])

    full = 1 << k
    # best_*[mask, last, j]: best (period, latency) with units 0..j-1 done, PUs `mask` used,
    # the last stage on PU `last`; back_*: where that state came from.
    best_per = np.full((full, k, n + 1), np.inf)
    best_lat = np.full((full, k, n + 1), np.inf)
    back_i = np.full((full, k, n + 1), -1, dtype=np.int64)
    back_last = np.full((full, k, n + 1), -1, dtype=np.int64)
    limit = min(max_stages or k, k)
    ends = np.arange(n + 1)

    def expand(i: int, mask: int, last: int | None, per: float, lat: float) -> None:
        for q in range(k):
            if mask >> q & 1:
                continue
            work = prefix[q, i + 1:] - prefix[q, i]
            st = work.copy()
            if i == 0:
                st += t_in[q]
            st[-1] += t_out[q]
            if last is not None and last != q and crossing[i]:
                inflow = np.zeros(n - i)
                for d, x in crossing[i]:
                    inflow[d - i:] = np.maximum(inflow[d - i:], x[last, q])
                st += inflow
            new_per = np.maximum(per, st)
            new_lat = lat + st
            nm = mask | 1 << q
            cur_per, cur_lat = best_per[nm, q, i + 1:], best_lat[nm, q, i + 1:]
            better = np.isfinite(new_per) & ((new_per < cur_per - EPS) |
                                             ((np.abs(new_per - cur_per) <= EPS) & (new_lat < cur_lat - EPS)))
            if better.any():
                js = ends[i + 1:][better]
                best_per[nm, q, js] = new_per[better]
                best_lat[nm, q, js] = new_lat[better]
                back_i[nm, q, js] = i
                back_last[nm, q, js] = -1 if last is None else last

    masks = sorted(range(1, full), key=lambda m: bin(m).count("1"))
    complete = True
    with np.errstate(invalid="ignore"):  # inf - inf on ranges a PU cannot run; masked by isfinite
        expand(0, 0, None, 0.0, 0.0)      # every one-PU pipeline, before any deadline check
        try:
            crossing = _incoming(problem, deadline)     # only later stages receive tensors
            for mask in masks:
                if bin(mask).count("1") >= limit:
                    continue
                for last in range(k):
                    if not mask >> last & 1:
                        continue
                    for i in np.flatnonzero(np.isfinite(best_per[mask, last, :n])):
                        if i > 0:
                            deadline.check()
                            expand(int(i), mask, last, best_per[mask, last, i], best_lat[mask, last, i])
        except OutOfTime:
            complete = False

    finals = [(best_per[m, q, n], best_lat[m, q, n], m, q) for m in range(1, full) for q in range(k)
              if np.isfinite(best_per[m, q, n])]
    if not finals:
        if not complete:
            raise OutOfTime
        raise ValueError("no pipeline of contiguous stages fits the PUs")
    _, _, mask, q = min(finals)
    ranges, j = [], n
    while j > 0:
        i, prev = int(back_i[mask, q, j]), int(back_last[mask, q, j])
        ranges.append((i, j, q))
        mask, q, j = mask & ~(1 << q), prev, i
    stage_of, pu_of = {}, {}
    for s, (i, j, q) in enumerate(reversed(ranges)):
        for u in units[i:j]:
            stage_of[u], pu_of[u] = s, pus[q]
    return plan_from_assignment(tuple(units), stage_of, pu_of, instance=problem.name), complete


@register("mapping", "pipeline-dp", description="contiguous pipeline stages, one PU each, DP on the period")
def solve_pipeline_dp(problem, *, time_limit: float | None = None, max_stages: int | None = None,
                      objective: Literal["period"] = "period"):
    """The DP minimises the period only; any other ``objective`` is refused."""
    try:
        plan, complete = pipeline_plan(problem, max_stages, search_deadline(time_limit, problem))
    except OutOfTime:
        return SolveResult("mapping", problem.name, "pipeline-dp", Termination.TIME_LIMIT, Quality.NONE,
                           params={"max_stages": max_stages},
                           message="the time limit passed before any pipeline covered every unit")
    if complete:
        return scored_result(problem, "pipeline-dp", plan, objective="period")
    return scored_result(problem, "pipeline-dp", plan, objective="period", termination=Termination.TIME_LIMIT,
                         message="the time limit cut the DP short: the best pipeline found by then")

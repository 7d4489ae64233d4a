"""Pure pipelining (Pipe-it style): contiguous ranges of units in topological order, one PU
per stage, each PU in at most one stage; dynamic programming minimises the period, then the
latency.

State: (units done, set of PUs used, PU of the last stage). A stage's time is its input stage
(if first), the transfer of the tensors it receives from the previous stage's PU, its units
run one after another, and the output stage (if last), the evaluator's rules for a chain. For
a chain this DP is exact over its plan space; for a DAG, tensors crossing several stages are
approximated as coming from the previous stage, and the plan is re-scored by the evaluator.
"""
from __future__ import annotations

from pipeplan.formulations.mapping.plan import plan_from_assignment
from pipeplan.registry import register
from pipeplan.solvers.mapping.common import scored_result


@register("mapping", "pipeline-dp", description="contiguous pipeline stages, one PU each, DP on the period")
def solve_pipeline_dp(problem, *, max_stages: int | None = None, **_):
    prof = problem.profile
    units = [u.name for u in problem.units]
    n = len(units)
    pus = list(prof.pus)
    top = {p: prof.pus[p].max_level for p in pus}
    inf = float("inf")
    # prefix sums of unit times per PU (inf where a unit cannot run)
    prefix = {}
    for p in pus:
        acc, row = 0.0, [0.0]
        for i in range(n):
            t = prof.time(i, p, top[p])
            acc = inf if t is None else acc + t
            row.append(acc)
        prefix[p] = row
    edges_into: dict[int, list] = {}
    index = problem.index
    for e in problem.edges:
        edges_into.setdefault(index[e.dst], []).append(e)

    def phase(table, p):
        ph = table.get(p, {}).get(top[p])
        return ph.time_ms if ph else 0.0

    def stage_time(i: int, j: int, p: str, prev: str | None) -> float:
        work = prefix[p][j] - prefix[p][i] if prefix[p][j] < inf else inf
        if work == inf:
            return inf
        t = work
        if i == 0:
            t += phase(prof.input_stage, p)
        if j == n:
            t += phase(prof.output_stage, p)
        if prev is not None and prev != p:
            t += max((prof.transfers.time_ms(e.src, prev, p, e.bytes)
                      for k in range(i, j) for e in edges_into.get(k, ()) if index[e.src] < i), default=0.0)
        return t

    limit = min(max_stages or len(pus), len(pus))
    # best[(j, mask, last)] = ((period, latency), back-pointer)
    best: dict[tuple, tuple] = {(0, 0, None): ((0.0, 0.0), None)}
    frontier = [(0, 0, None)]
    for _stage in range(limit):
        nxt = []
        for state in frontier:
            i, mask, last = state
            (per, lat), _ = best[state]
            for k, p in enumerate(pus):
                if mask >> k & 1:
                    continue
                for j in range(i + 1, n + 1):
                    st = stage_time(i, j, p, last)
                    if st == inf:
                        break
                    val = (max(per, st), lat + st)
                    key = (j, mask | 1 << k, p)
                    if key not in best or val < best[key][0]:
                        if key not in best:
                            nxt.append(key)
                        best[key] = (val, (state, i, j, p))
        frontier = [s for s in nxt if s[0] < n]
    finals = [(v[0], s) for s, v in best.items() if s[0] == n]
    if not finals:
        raise ValueError("no pipeline of contiguous stages fits the PUs")
    _, state = min(finals)
    stage_of, pu_of, ranges = {}, {}, []
    while best[state][1] is not None:
        prev, i, j, p = best[state][1]
        ranges.append((i, j, p))
        state = prev
    for s, (i, j, p) in enumerate(reversed(ranges)):
        for k in range(i, j):
            stage_of[units[k]], pu_of[units[k]] = s, p
    plan = plan_from_assignment(tuple(units), stage_of, pu_of, instance=problem.name)
    return scored_result(problem, "pipeline-dp", plan, objective="period")

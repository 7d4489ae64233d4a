"""The heterogeneous assignment (``assignment``) as a MILP through PuLP (HiGHS, else CBC), in
seconds, with big-M links instead of CP-SAT's enforced constraints; the worst-case objective is
solved lexicographically (worst case, then expected step time).

``node_limit``: the most branch-and-bound nodes of each solve (HiGHS ``mip_max_nodes``, CBC
``maxNodes``), the MILP's work limit; HiGHS has no deterministic clock and does not count the
root node's work, which only the wall-clock limit bounds (see ``pulp_backend``). The floor's
solve (``assignment.delay_free``, one scenario) may take ``FLOOR_SHARE`` x scenarios x that many."""
from __future__ import annotations

import dataclasses
import math
import time
from typing import Literal

from pipeplan.core.deadline import Deadline, OutOfTime
from pipeplan.core.registry import register
from pipeplan.core.vocabulary import GradcodeAxis
from pipeplan.solvers.gradcode.assignment import AssignmentData, assignment_data, fr_shape
from pipeplan.solvers.gradcode.assignment_result import (
    FLOOR_SHARE,
    STRUCTURES,
    BackendAnswer,
    assignment_result,
    floored,
)
from pipeplan.solvers.gradcode.common import search_deadline

HANDOVER_PER_BUILD = 1.0   # PuLP's hand-over to the solver, in units of the model's build time


def solve_model(data: AssignmentData, *, deadline: Deadline, seed: int, threads: int,
                backend: str = "highs", node_limit: int | None = None) -> BackendAnswer:
    """Raises OutOfTime when the deadline passes before the model is built and handed over."""
    import pulp

    from pipeplan.solvers.pulp_backend import (
        highs_nodes,
        make_solver,
        optimum_lower,
        pick_backend,
        stopped_by,
        tie_break_cap,
    )

    p, n, G, Q = data.problem, data.n, data.groups, data.qmax
    if G == 0:
        return BackendAnswer("infeasible", None, None, None)
    prob = pulp.LpProblem("gradcode_assignment", pulp.LpMinimize)
    x = {}
    for i in range(n):          # group g's members are workers g..n-1 (groups labelled by their first member)
        deadline.check()
        for g in range(min(i + 1, G)):
            x[i, g] = prob.add_variable(f"x_{i}_{g}", cat="Binary")
    used = [prob.add_variable(f"used_{g}", cat="Binary") for g in range(G)]
    q = [prob.add_variable(f"q_{g}", 0, Q, cat="Integer") for g in range(G)]
    for i in range(n):
        prob += pulp.lpSum(x[i, g] for g in range(min(i + 1, G))) <= 1
    for g in range(G):
        deadline.check()
        mem = [x[i, g] for i in range(g, n)]
        prob += pulp.lpSum(mem) >= (p.s + 1) * used[g]
        for v in mem:
            prob += v <= used[g]
        prob += q[g] >= used[g]
        prob += q[g] <= Q * used[g]
        for i in range(g, n):
            if data.cap[i] < Q:
                prob += q[g] <= int(data.cap[i]) + Q * (1 - x[i, g])
        if g:
            for i in range(g, n):
                deadline.check()        # n terms each: a group's rows take a while at large n
                prob += x[i, g] <= pulp.lpSum(x[j, g - 1] for j in range(g - 1, i))
    prob += pulp.lpSum(q) == p.k

    def label(i):
        inside = [x[i, g] for g in range(min(i + 1, G))]
        return pulp.lpSum(g * v for g, v in enumerate(inside)) + G * (1 - pulp.lpSum(inside))
    for a, b in data.ties:
        deadline.check()
        prob += label(a) <= label(b)
    c = data.c
    # a member's computation per step: q_g partitions, or one when pipelined
    work = (lambda i, g: c[i]) if p.pipelined else (lambda i, g: c[i] * q[g])
    # the placement's step with no delays (t0, at least the proven floor, ``delay_free``) lies
    # under every scenario's: a group with no member faster than v works at least v per partition
    # (pipelined: v). Rows per group and speed, not per witness: the witness rows' relaxation
    # spreads w over the members (hetero-n24-s2's floor: 3,103 nodes with them alone)
    t0 = prob.add_variable("t0", data.floor)
    for g in range(G):
        amount, most = (used[g], 1) if p.pipelined else (q[g], Q)
        for v in sorted(set(c[g:].tolist())):
            prob += t0 >= v * amount - v * most * pulp.lpSum(x[i, g] for i in range(g, n) if c[i] < v)
    # expected step time on the scenarios: y_r >= the reply of one witness member per used group,
    # and >= t0
    D = data.scenarios
    R = D.shape[0]
    y = [prob.add_variable(f"y_{r}") for r in range(R)]
    for r in range(R):
        prob += y[r] >= t0
        for g in range(G):
            deadline.check()
            wit = {}
            for i in range(g, n):
                w = wit[i] = prob.add_variable(f"w_{i}_{g}_{r}", cat="Binary")
                prob += w <= x[i, g]
                big = c[i] * (1 if p.pipelined else Q) + D[r, i]
                prob += y[r] >= work(i, g) + D[r, i] - big * (1 - w)
            # one witness per used group; its reply (at least one partition's work) bounds
            # y_r from below: a cut that keeps the LP relaxation from spreading w thin
            prob += pulp.lpSum(wit.values()) == used[g]
            prob += y[r] >= pulp.lpSum(w * (D[r, i] + c[i]) for i, w in wit.items())
    expected = pulp.lpSum(y) * (1.0 / R)
    if data.objective == "worst":   # the s+1 "core" members of each group bound the worst case
        worst = prob.add_variable("worst")
        prob += worst >= t0
        for g in range(G):
            deadline.check()
            core = []
            for i in range(g, n):
                v = prob.add_variable(f"core_{i}_{g}", cat="Binary")
                prob += v <= x[i, g]
                prob += worst >= work(i, g) - c[i] * (1 if p.pipelined else Q) * (1 - v)
                core.append(v)
            prob += pulp.lpSum(core) == (p.s + 1) * used[g]
    hint = fr_shape(data)
    if hint is not None:
        chosen = {(i, g) for g, grp in enumerate(hint[0]) for i in grp}
        for k, v in x.items():
            v.setInitialValue(1 if k in chosen else 0)
        for g in range(G):
            used[g].setInitialValue(1 if g < len(hint[0]) else 0)
            q[g].setInitialValue(hint[1][g] if g < len(hint[0]) else 0)
    backend = pick_backend(backend)
    built = deadline.elapsed()
    spent = {"nodes": 0, "why": None}

    def run(objective):
        # PuLP hands the model over to the solver row by row, which no time limit covers:
        # only start when that fits (it takes about as long as building the model)
        if deadline.limit is not None and deadline.remaining() < HANDOVER_PER_BUILD * built:
            raise OutOfTime
        prob.setObjective(objective)
        warm = any(v.varValue is not None for v in prob.variables())
        left = deadline.remaining(floor=0.05) if deadline.limit is not None else 60.0
        began = time.perf_counter()
        prob.solve(make_solver(backend, time_limit=left, threads=threads, seed=seed, warm=warm,
                               node_limit=node_limit))
        state = {pulp.LpSolutionOptimal: "optimal", pulp.LpSolutionIntegerFeasible: "feasible",
                 pulp.LpSolutionInfeasible: "infeasible"}.get(prob.sol_status, "none")
        spent["nodes"] += highs_nodes(prob, backend) or 0
        spent["why"] = None if state in ("optimal", "infeasible") else stopped_by(
            prob, backend, node_limit=node_limit, time_limit=left, wall_s=time.perf_counter() - began)
        bound = optimum_lower(prob.objective.value(), backend) if state == "optimal" else None
        if backend == "highs" and state == "feasible":
            dual = prob.solverModel.getInfo().mip_dual_bound
            bound = dual if math.isfinite(dual) else None
        return state, bound

    def answer(state, bound, why=None) -> BackendAnswer:
        work = spent["nodes"] if backend == "highs" else None
        if state not in ("optimal", "feasible"):
            return BackendAnswer(state, None, None, None, why, work)
        on = lambda v: (v.varValue or 0) > 0.5
        groups = [[i for i in range(n) if (i, g) in x and on(x[i, g])] for g in range(G) if on(used[g])]
        counts = [int(round(q[g].varValue)) for g in range(G) if on(used[g])]
        return BackendAnswer(state, groups, counts, bound, why, work)

    if data.objective == "worst":
        state, bound = run(worst)
        if state == "optimal":   # keep the worst case, then minimise the expected step time
            prob += worst <= tie_break_cap(worst.varValue)
            first = dataclasses.replace(answer(state, bound), tie_break="none")
            try:
                state2, _ = run(expected)
            except OutOfTime:
                return first
            if state2 not in ("optimal", "feasible"):
                return first
            return dataclasses.replace(answer(state, bound), tie_break=state2)
        return answer(state, bound, spent["why"])
    state, bound = run(expected)
    return answer(state, bound, spent["why"])


@register("gradcode", "milp", exact=True, requires=("pulp",),
          description="MILP (PuLP; HiGHS, else CBC): groups and partition counts, min expected/worst step")
def solve_milp(problem, *, time_limit=None, seed=0, threads=1, objective: GradcodeAxis = "expected",
               scenarios: int = 64, structure: Literal["best", "groups"] = "best",
               backend: Literal["highs", "cbc"] = "highs", node_limit: int | None = None):
    """The time limit covers building the model, handing it to the solver, the search and the
    re-scoring; ``node_limit``: branch-and-bound nodes per solve (None: none)."""
    from pipeplan.solvers.pulp_backend import check_node_limit

    check_node_limit(node_limit)
    clock, search = Deadline(time_limit), search_deadline(time_limit, problem)
    if structure not in STRUCTURES:
        raise ValueError(f"unknown structure {structure!r} ({', '.join(STRUCTURES)})")
    data = assignment_data(problem, objective, scenarios=scenarios, seed=seed)
    import pulp  # noqa: F401  loaded before the floor's share of the time starts
    # the floor's model has one scenario, so its nodes are about 1/scenarios the work of the main
    # model's: it may take FLOOR_SHARE of the main solve's work in them (hetero-n12-s2: 156 nodes)
    floor_nodes = None if node_limit is None else max(node_limit, round(FLOOR_SHARE * scenarios * node_limit))
    data, floor = floored(data, lambda d, dl: solve_model(d, deadline=dl, seed=seed, threads=threads, backend=backend,
                                                          node_limit=floor_nodes), search)
    try:
        answer = solve_model(data, deadline=search, seed=seed, threads=threads, backend=backend,
                             node_limit=node_limit)
    except OutOfTime:
        answer = BackendAnswer("none", None, None, None, "time")
    nodes = [a.work for a in (floor, answer) if a is not None and a.work is not None]
    params = {"objective": objective, "scenarios": scenarios, "structure": structure, "backend": backend,
              "node_limit": node_limit, "nodes": sum(nodes) if nodes else None, "floor_s": data.floor}
    return assignment_result(data, "milp", answer, structure=structure, params=params, clock=clock, search=search)

"""The heterogeneous assignment (``assignment``) as a MILP through PuLP (HiGHS, else CBC), in
seconds, with big-M links instead of CP-SAT's enforced constraints; the worst-case objective is
solved lexicographically (worst case, then expected step time)."""
from __future__ import annotations

import math
import time

from pipeplan.registry import register
from pipeplan.solvers.gradcode.assignment import AssignmentData, assignment_data, fr_shape
from pipeplan.solvers.gradcode.assignment_result import STRUCTURES, BackendAnswer, assignment_result


def solve_model(data: AssignmentData, *, time_limit: float | None, seed: int, threads: int,
                backend: str = "highs") -> BackendAnswer:
    import pulp
    from pipeplan.solvers.pulp_backend import make_solver, pick_backend

    began = time.perf_counter()      # the time limit covers building the model too

    p, n, G, Q = data.problem, data.n, data.groups, data.qmax
    if G == 0:
        return BackendAnswer("infeasible", None, None, None)
    prob = pulp.LpProblem("gradcode_assignment", pulp.LpMinimize)
    keys = [(i, g) for i in range(n) for g in range(min(i + 1, G))]
    x = {k: prob.add_variable(f"x_{k[0]}_{k[1]}", cat="Binary") for k in keys}
    used = [prob.add_variable(f"used_{g}", cat="Binary") for g in range(G)]
    q = [prob.add_variable(f"q_{g}", 0, Q, cat="Integer") for g in range(G)]
    for i in range(n):
        prob += pulp.lpSum(x[i, g] for g in range(G) if (i, g) in x) <= 1
    for g in range(G):
        mem = [x[i, g] for i in range(n) if (i, g) in x]
        prob += pulp.lpSum(mem) >= (p.s + 1) * used[g]
        for v in mem:
            prob += v <= used[g]
        prob += q[g] >= used[g]
        prob += q[g] <= Q * used[g]
        for i in range(n):
            if (i, g) in x and data.cap[i] < Q:
                prob += q[g] <= int(data.cap[i]) + Q * (1 - x[i, g])
        if g:
            for i in range(n):
                if (i, g) in x:
                    prob += x[i, g] <= pulp.lpSum(x[j, g - 1] for j in range(i) if (j, g - 1) in x)
    prob += pulp.lpSum(q) == p.k
    def label(i):
        inside = [x[i, g] for g in range(G) if (i, g) in x]
        return pulp.lpSum(g * x[i, g] for g in range(G) if (i, g) in x) + G * (1 - pulp.lpSum(inside))
    for a, b in data.ties:
        prob += label(a) <= label(b)
    c = data.c
    # a member's computation per step: q_g partitions, or one when pipelined
    work = (lambda i, g: c[i]) if p.pipelined else (lambda i, g: c[i] * q[g])
    # expected step time on the scenarios: y_r >= the reply of one witness member per used group
    D = data.scenarios
    R = D.shape[0]
    y = [prob.add_variable(f"y_{r}", 0) for r in range(R)]
    for r in range(R):
        for g in range(G):
            wit = {}
            for i in range(n):
                if (i, g) in x:
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
        worst = prob.add_variable("worst", 0)
        for g in range(G):
            core = []
            for i in range(n):
                if (i, g) in x:
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
    limit = float(time_limit) if time_limit else 60.0

    def run(objective):
        prob.setObjective(objective)
        warm = any(v.varValue is not None for v in prob.variables())
        left = max(0.05, limit - (time.perf_counter() - began))
        prob.solve(make_solver(backend, time_limit=left, threads=threads, seed=seed, warm=warm))
        state = {pulp.LpSolutionOptimal: "optimal", pulp.LpSolutionIntegerFeasible: "feasible",
                 pulp.LpSolutionInfeasible: "infeasible"}.get(prob.sol_status, "none")
        bound = prob.objective.value() if state == "optimal" else None
        if backend == "highs" and state == "feasible":
            dual = prob.solverModel.getInfo().mip_dual_bound
            bound = dual if math.isfinite(dual) else None
        return state, bound

    def answer(state, bound) -> BackendAnswer:
        if state not in ("optimal", "feasible"):
            return BackendAnswer(state, None, None, None)
        on = lambda v: (v.varValue or 0) > 0.5
        groups = [[i for i in range(n) if (i, g) in x and on(x[i, g])] for g in range(G) if on(used[g])]
        counts = [int(round(q[g].varValue)) for g in range(G) if on(used[g])]
        return BackendAnswer(state, groups, counts, bound)

    if data.objective == "worst":
        state, bound = run(worst)
        if state == "optimal":   # keep the worst case, then minimise the expected step time
            prob += worst <= worst.varValue + 1e-9
            first = answer(state, bound)
            state2, _ = run(expected)
            return answer(state, bound) if state2 in ("optimal", "feasible") else first
        return answer(state, bound)
    return answer(*run(expected))


@register("gradcode", "milp", exact=True, requires=("pulp",),
          description="MILP (PuLP; HiGHS, else CBC): groups and partition counts, min expected/worst step")
def solve_milp(problem, *, time_limit=None, seed=0, threads=1, objective: str = "expected",
               scenarios: int = 64, structure: str = "best", backend: str = "highs", **_):
    if structure not in STRUCTURES:
        raise ValueError(f"unknown structure {structure!r} ({', '.join(STRUCTURES)})")
    data = assignment_data(problem, objective, scenarios=scenarios, seed=seed)
    answer = solve_model(data, time_limit=time_limit, seed=seed, threads=threads, backend=backend)
    params = {"objective": objective, "scenarios": scenarios, "structure": structure, "backend": backend}
    return assignment_result(data, "milp", answer, structure=structure, params=params)

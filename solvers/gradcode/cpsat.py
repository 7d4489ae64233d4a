"""The heterogeneous assignment (``assignment``) on CP-SAT, in whole microseconds; the worst-case
objective is solved lexicographically (worst case, then expected step time)."""
from __future__ import annotations

import time

import numpy as np

from pipeplan.registry import register
from pipeplan.solvers.gradcode.assignment import AssignmentData, assignment_data, fr_shape
from pipeplan.solvers.gradcode.assignment_result import STRUCTURES, BackendAnswer, assignment_result

US = 1_000_000


def solve_model(data: AssignmentData, *, time_limit: float | None, seed: int, threads: int) -> BackendAnswer:
    from ortools.sat.python import cp_model

    began = time.perf_counter()      # the time limit covers building the model too

    p, n, G, Q = data.problem, data.n, data.groups, data.qmax
    if G == 0:
        return BackendAnswer("infeasible", None, None, None)
    m = cp_model.CpModel()
    c = np.round(data.c * US).astype(np.int64)
    x = {(i, g): m.NewBoolVar(f"x{i}_{g}") for i in range(n) for g in range(min(i + 1, G))}
    used = [m.NewBoolVar(f"used{g}") for g in range(G)]
    q = [m.NewIntVar(0, Q, f"q{g}") for g in range(G)]
    members = {g: [x[i, g] for i in range(n) if (i, g) in x] for g in range(G)}
    for i in range(n):
        m.AddAtMostOne(x[i, g] for g in range(G) if (i, g) in x)
    for g in range(G):
        m.Add(sum(members[g]) >= (p.s + 1) * used[g])
        for v in members[g]:
            m.AddImplication(v, used[g])
        m.Add(q[g] >= used[g])
        m.Add(q[g] <= Q * used[g])
        for i in range(n):
            if (i, g) in x and data.cap[i] < Q:
                m.Add(q[g] <= int(data.cap[i])).OnlyEnforceIf(x[i, g])
        if g:   # groups labelled by their first member
            for i in range(n):
                if (i, g) in x:
                    m.Add(x[i, g] <= sum(x[j, g - 1] for j in range(i) if (j, g - 1) in x))
    m.Add(sum(q) == p.k)
    label = [sum(g * x[i, g] for g in range(G) if (i, g) in x)
             + G * (1 - sum(x[i, g] for g in range(G) if (i, g) in x)) for i in range(n)]
    for a, b in data.ties:
        m.Add(label[a] <= label[b])
    # a member's computation per step: q_g partitions, or one when pipelined
    work = (lambda i, g: int(c[i])) if p.pipelined else (lambda i, g: int(c[i]) * q[g])
    # expected step time on the scenarios: y_r >= the reply of one witness member per used group
    D = np.round(data.scenarios * US).astype(np.int64)
    R = D.shape[0]
    top = int((c * Q + D.max(axis=0)).max())
    y = [m.NewIntVar(0, top, f"y{r}") for r in range(R)]
    for r in range(R):
        for g in range(G):
            wit = []
            for i in range(n):
                if (i, g) in x:
                    w = m.NewBoolVar(f"w{i}_{g}_{r}")
                    m.AddImplication(w, x[i, g])
                    m.Add(y[r] >= work(i, g) + int(D[r, i])).OnlyEnforceIf(w)
                    wit.append(w)
            m.Add(sum(wit) >= used[g])
    expected = sum(y)
    if data.objective == "worst":   # the s+1 "core" members of each group bound the worst case
        worst = m.NewIntVar(0, int(c.max() * Q), "worst")
        for g in range(G):
            core = []
            for i in range(n):
                if (i, g) in x:
                    v = m.NewBoolVar(f"core{i}_{g}")
                    m.AddImplication(v, x[i, g])
                    m.Add(worst >= work(i, g)).OnlyEnforceIf(v)
                    core.append(v)
            m.Add(sum(core) == (p.s + 1) * used[g])
    hint = fr_shape(data)
    if hint is not None:
        for g, (grp, cnt) in enumerate(zip(*hint)):
            m.AddHint(used[g], 1)
            m.AddHint(q[g], cnt)
            for i in grp:
                m.AddHint(x[i, g], 1)
    limit = float(time_limit) if time_limit else 60.0

    def run(objective):
        m.Minimize(objective)
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = max(0.05, limit - (time.perf_counter() - began))
        solver.parameters.num_workers = max(1, int(threads))
        solver.parameters.random_seed = int(seed)
        status = solver.Solve(m)
        if status == cp_model.MODEL_INVALID:
            raise RuntimeError(f"CP-SAT model invalid: {m.Validate()}")
        state = {cp_model.OPTIMAL: "optimal", cp_model.FEASIBLE: "feasible",
                 cp_model.INFEASIBLE: "infeasible"}.get(status, "none")
        return solver, state

    if data.objective == "worst":
        solver, state = run(worst)
        if state == "optimal":   # keep the worst case, then minimise the expected step time
            bound = solver.BestObjectiveBound() / US
            m.Add(worst <= int(solver.Value(worst)))
            m.ClearHints()
            for v in [*x.values(), *used, *q]:
                m.AddHint(v, solver.Value(v))
            second, state2 = run(expected)
            if state2 in ("optimal", "feasible"):
                solver = second
            return _answer(solver, state, x, used, q, n, G, bound)
        return _answer(solver, state, x, used, q, n, G, solver.BestObjectiveBound() / US if state == "feasible" else None)
    solver, state = run(expected)
    return _answer(solver, state, x, used, q, n, G, solver.BestObjectiveBound() / (US * R) if state in ("optimal", "feasible") else None)


def _answer(solver, state, x, used, q, n, G, bound) -> BackendAnswer:
    if state not in ("optimal", "feasible"):
        return BackendAnswer(state, None, None, None)
    groups = [[i for i in range(n) if (i, g) in x and solver.Value(x[i, g])] for g in range(G) if solver.Value(used[g])]
    counts = [solver.Value(q[g]) for g in range(G) if solver.Value(used[g])]
    return BackendAnswer(state, groups, counts, bound)


@register("gradcode", "cpsat", exact=True, requires=("ortools",),
          description="CP-SAT: groups and partition counts for heterogeneous workers, min expected/worst step")
def solve_cpsat(problem, *, time_limit=None, seed=0, threads=1, objective: str = "expected",
                scenarios: int = 64, structure: str = "best", **_):
    if structure not in STRUCTURES:
        raise ValueError(f"unknown structure {structure!r} ({', '.join(STRUCTURES)})")
    data = assignment_data(problem, objective, scenarios=scenarios, seed=seed)
    answer = solve_model(data, time_limit=time_limit, seed=seed, threads=threads)
    params = {"objective": objective, "scenarios": scenarios, "structure": structure}
    return assignment_result(data, "cpsat", answer, structure=structure, params=params)

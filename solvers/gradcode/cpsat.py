"""The heterogeneous assignment (``assignment``) on CP-SAT, in whole microseconds; the worst-case
objective is solved lexicographically (worst case, then expected step time).

The model holds a witness per (worker, group, scenario), so it grows as n^2 R / (s+1): the
builder checks the deadline as it goes, and past it (or when CP-SAT finds nothing in time) the
result falls back on the quick placements (see ``assignment_result``).

``work_limit`` (CP-SAT deterministic seconds) bounds the solves together (the tie-break gets
what the worst case left): with one thread a run its work limit stops is the same on any
machine load; the wall clock stays the safety net (``SolveResult.stopped_by`` says which).

Bounds: CP-SAT's bound in whole units, less what the rounding of the times to whole units can
move a step time (half a unit per partition of a member's work, half a unit more for a reply),
so that it holds for the true times; at microseconds that is about 1e-5 s or less."""
from __future__ import annotations

import dataclasses
import math
from typing import Literal

import numpy as np

from pipeplan.core.deadline import Deadline, OutOfTime
from pipeplan.core.registry import register
from pipeplan.core.vocabulary import GradcodeAxis
from pipeplan.solvers.cpsat_backend import (
    MIN_WORK,
    check_work_limit,
    remaining,
    set_limits,
    stopped_by,
    true_bound,
    work_done,
)
from pipeplan.solvers.gradcode.assignment import AssignmentData, assignment_data, fr_shape
from pipeplan.solvers.gradcode.assignment_result import (
    FLOOR_SHARE,
    STRUCTURES,
    BackendAnswer,
    assignment_result,
    floored,
)
from pipeplan.solvers.gradcode.common import search_deadline, units_per_second

# CP-SAT loads and presolves a large model past its own time limit: measured 5.7 s on a model
# built in 13.3 s (n = 200). Its limit is cut by this share of the build time.
LOAD_PER_BUILD = 0.5


def solve_model(data: AssignmentData, *, deadline: Deadline, seed: int, threads: int,
                work_limit: float | None = None) -> BackendAnswer:
    """Raises OutOfTime when the deadline passes before the model is built (or leaves CP-SAT
    no time to load it)."""
    from ortools.sat.python import cp_model

    p, n, G, Q = data.problem, data.n, data.groups, data.qmax
    if G == 0:
        return BackendAnswer("infeasible", None, None, None)
    m = cp_model.CpModel()
    total = cp_model.LinearExpr.sum
    R = data.scenarios.shape[0]
    US = units_per_second((data.c * Q + data.scenarios.max(axis=0, initial=0.0)).max(initial=0.0))
    c = np.round(data.c * US).astype(np.int64)
    x = {}
    for i in range(n):          # group g's members are workers g..n-1 (groups labelled by their first member)
        deadline.check()
        for g in range(min(i + 1, G)):
            x[i, g] = m.new_bool_var(f"x{i}_{g}")
    used = [m.new_bool_var(f"used{g}") for g in range(G)]
    q = [m.new_int_var(0, Q, f"q{g}") for g in range(G)]
    members = {g: [x[i, g] for i in range(g, n)] for g in range(G)}
    for i in range(n):
        m.add_at_most_one([x[i, g] for g in range(min(i + 1, G))])
    for g in range(G):
        deadline.check()
        m.add(total(members[g]) >= (p.s + 1) * used[g])
        for v in members[g]:
            m.add_implication(v, used[g])
        m.add(q[g] >= used[g])
        m.add(q[g] <= Q * used[g])
        for i in range(g, n):
            if data.cap[i] < Q:
                m.add(q[g] <= int(data.cap[i])).only_enforce_if(x[i, g])
        if g:   # groups labelled by their first member
            earlier = members[g - 1]     # x[j, g-1] for j = g-1 .. n-1
            for i in range(g, n):
                m.add(x[i, g] <= total(earlier[:i - g + 1]))
    m.add(total(q) == p.k)
    label = []
    for i in range(n):
        deadline.check()
        mine = [x[i, g] for g in range(min(i + 1, G))]
        label.append(total([g * v for g, v in enumerate(mine)]) + G * (1 - total(mine)))
    for a, b in data.ties:
        m.add(label[a] <= label[b])
    # a member's computation per step: q_g partitions, or one when pipelined
    work = {(i, g): int(c[i]) if p.pipelined else int(c[i]) * q[g] for (i, g) in x}
    # c and D are rounded to whole units: a member's work lies up to half a unit per partition
    # from US x its value, a reply up to half a unit more, so a step time's model value lies up to
    # these from US x its true value; a bound of the model, less them, holds for the true values
    slack_worst = 0.5 * (1 if p.pipelined else Q)
    slack_reply = slack_worst + 0.5
    # expected step time on the scenarios: y_r >= the reply of one witness member per used group,
    # and >= the floor (``delay_free``), less the rounding
    D = np.round(data.scenarios * US).astype(np.int64)
    top = int((c * Q + D.max(axis=0)).max())
    low = min(top, max(0, math.ceil(data.floor * US - slack_reply)))
    y = [m.new_int_var(low, top, f"y{r}") for r in range(R)]
    for r in range(R):
        delay = D[r].tolist()
        for g in range(G):
            deadline.check()
            wit = []
            for i in range(g, n):
                w = m.new_bool_var(f"w{i}_{g}_{r}")
                m.add_implication(w, x[i, g])
                m.add(y[r] >= work[i, g] + delay[i]).only_enforce_if(w)
                wit.append(w)
            m.add(total(wit) >= used[g])
    expected = total(y)
    if data.objective == "worst":   # the s+1 "core" members of each group bound the worst case
        cmax = int(c.max() * Q)
        worst = m.new_int_var(min(cmax, max(0, math.ceil(data.floor * US - slack_worst))), cmax, "worst")
        for g in range(G):
            deadline.check()
            core = []
            for i in range(g, n):
                v = m.new_bool_var(f"core{i}_{g}")
                m.add_implication(v, x[i, g])
                m.add(worst >= work[i, g]).only_enforce_if(v)
                core.append(v)
            m.add(total(core) == (p.s + 1) * used[g])
    hint = fr_shape(data)
    if hint is not None:
        for g, (grp, cnt) in enumerate(zip(*hint)):
            m.add_hint(used[g], 1)
            m.add_hint(q[g], cnt)
            for i in grp:
                m.add_hint(x[i, g], 1)
    deadline.check()
    load = LOAD_PER_BUILD * deadline.elapsed()

    spent = {"work": 0.0}

    def run(objective):
        if deadline.limit is not None and deadline.remaining() - load < 0.05:
            raise OutOfTime
        left = remaining(work_limit, spent["work"])
        m.Minimize(objective)
        solver = cp_model.CpSolver()
        set_limits(solver, time_limit=deadline.remaining() - load if deadline.limit is not None else 60.0,
                   work_limit=left)
        solver.parameters.num_workers = max(1, int(threads))
        solver.parameters.random_seed = int(seed)
        status = solver.Solve(m)
        if status == cp_model.MODEL_INVALID:
            raise RuntimeError(f"CP-SAT model invalid: {m.Validate()}")
        state = {cp_model.OPTIMAL: "optimal", cp_model.FEASIBLE: "feasible",
                 cp_model.INFEASIBLE: "infeasible"}.get(status, "none")
        work = work_done(solver)
        spent["work"] += work
        return solver, state, stopped_by(state, work, left)

    if data.objective == "worst":
        solver, state, why = run(worst)
        if state == "optimal":   # keep the worst case, then minimise the expected step time
            bound = true_bound(solver.BestObjectiveBound(), slack_worst, US)
            m.Add(worst <= int(solver.Value(worst)))
            m.ClearHints()
            for v in [*x.values(), *used, *q]:
                m.AddHint(v, solver.Value(v))
            state2 = "none"
            if work_limit is None or remaining(work_limit, spent["work"]) >= MIN_WORK:
                try:
                    second, state2, _ = run(expected)
                except OutOfTime:
                    state2 = "none"
            if state2 in ("optimal", "feasible"):
                solver = second
            return dataclasses.replace(_answer(solver, state, x, used, q, n, G, bound, None, spent["work"]),
                                       tie_break=state2 if state2 in ("optimal", "feasible") else "none")
        return _answer(solver, state, x, used, q, n, G,
                       true_bound(solver.BestObjectiveBound(), slack_worst, US) if state == "feasible" else None, why,
                       spent["work"])
    solver, state, why = run(expected)
    return _answer(solver, state, x, used, q, n, G,
                   true_bound(solver.BestObjectiveBound(), R * slack_reply, US * R) if state in ("optimal", "feasible")
                   else None, why, spent["work"])


def _answer(solver, state, x, used, q, n, G, bound, why, work) -> BackendAnswer:
    if state not in ("optimal", "feasible"):
        return BackendAnswer(state, None, None, None, why, work)
    groups = [[i for i in range(g, n) if solver.Value(x[i, g])] for g in range(G) if solver.Value(used[g])]
    counts = [solver.Value(q[g]) for g in range(G) if solver.Value(used[g])]
    return BackendAnswer(state, groups, counts, bound, why, work)


@register("gradcode", "cpsat", exact=True, requires=("ortools",),
          description="CP-SAT: groups and partition counts for heterogeneous workers, min expected/worst step")
def solve_cpsat(problem, *, time_limit=None, seed=0, threads=1, objective: GradcodeAxis = "expected",
                scenarios: int = 64, structure: Literal["best", "groups"] = "best", work_limit: float | None = None):
    """The time limit covers building the model, the search and the re-scoring; ``work_limit``:
    CP-SAT deterministic seconds for the search (None: none)."""
    check_work_limit(work_limit)
    clock, search = Deadline(time_limit), search_deadline(time_limit, problem)
    if structure not in STRUCTURES:
        raise ValueError(f"unknown structure {structure!r} ({', '.join(STRUCTURES)})")
    data = assignment_data(problem, objective, scenarios=scenarios, seed=seed)
    from ortools.sat.python import cp_model  # noqa: F401  loaded before the floor's share of the time starts
    share = None if work_limit is None else FLOOR_SHARE * work_limit
    data, floor = floored(data, lambda d, dl: solve_model(d, deadline=dl, seed=seed, threads=threads, work_limit=share),
                          search)
    floor_work = (floor.work or 0.0) if floor is not None else 0.0
    try:
        answer = solve_model(data, deadline=search, seed=seed, threads=threads,
                             work_limit=remaining(work_limit, floor_work))
    except OutOfTime:
        answer = BackendAnswer("none", None, None, None, "time")
    params = {"objective": objective, "scenarios": scenarios, "structure": structure, "work_limit": work_limit,
              "work": (answer.work or 0.0) + floor_work, "floor_s": data.floor}
    return assignment_result(data, "cpsat", answer, structure=structure, params=params, clock=clock, search=search)

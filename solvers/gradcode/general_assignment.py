"""The assignment over the general class of exact gradient codes (supports not restricted to
FR-like groups), with a proven lower bound for every code of the problem's execution: on a
problem that is not pipelined, every code whose replies are all of the current step (staleness
0); the pipelined codes (pgc-*, staleness 1) run another schedule and may beat it there (a bounds
audit: pgc-fr at 0.450 s in sample against a bound of 0.722 s), as they are meant to.

Bound (``coverage_bound``, formulation): over the R sampled delay scenarios, no exact code with
the problem's capacities has a smaller mean step time than

    min over integer loads l (l_i <= min(cap_i, k), sum l_i >= (s+1) k)
        of mean_r  min { t : sum of l_i over the workers with reply time <= t  >= k }.

That minimum is a MILP solved here with HiGHS (through PuLP), whose own dual bound
(``mip_dual_bound``) is reported, never a made-up one. Model, per scenario r: the events (i, v),
"worker i with load v replies", at t_riv = v c_i + D_ri (pipelined: c_i + D_ri, one event per
worker that brings its l_i), sorted by time; binary z_iv picks worker i's load; cov_rm, the
partitions held by the replies up to event m, is a running sum of v z_iv; binary e_rm = 1 while
they are short of k (cov_rm + k e_rm >= k), and the step lasts t_r1 + sum_m (t_r,m+1 - t_rm) e_rm.
The LP relaxation is the fractional coverage e_rm >= 1 - cov_rm / k, which keeps HiGHS's bound
close.

Primal codes (each re-scored in sample on the same scenarios, the best kept, then scored by the
evaluator and the verifier):

* ``groups``: the optimal FR-like group placement (the CP-SAT model of ``cpsat``, unequal
  groups and counts), on part of the time;
* ``teams``: a team code (``team_codes``: blocks of partitions, each with s+1 or more disjoint
  teams of workers that split the block in chunks of any sizes; 0/1 B and the online stopping
  rule), CP-SAT started from the group placement, on the rest of the time;
* ``hetero-aware``: Wang-Liu-Shroff's code (``heterogeneous``) on speed-proportional loads;
* ``hetero-tuned``: the same construction (cyclic filling, any n-s decode) on loads tuned by a
  local search on the in-sample step time of the count rule (the (n-s)-th reply), started from
  the speed-proportional loads and from the bound's optimal loads.

Choice: the candidates (every improving team code CP-SAT found among them) are compared on
``VALIDATION`` further stratified scenarios (seed + 1), not on the R the searches fitted: on
hetero-n12-s1 the team code best on the R = 64 scenarios was 1.021 s there but 1.095 s out of
sample, overfitted. The bound is on the in-sample objective (``saa_step_s``), so the gap compares
like with like; the evaluator's expected step time is out of sample.

Measured (results/gradcode/general.md, 60 s, 2 threads, the team search on its time share):
on hetero-n12-s2 the team code takes 1.27 s against 1.508 s for the optimal group placement
(-15.8%), on hetero-n24-s2 1.24 s against 1.521 s (-18.5%), on hetero-n12-s1 1.058 s against
1.135 s (-6.7%; bound 0.841 s in sample); on hetero-n12-s3 the group placement meets the bound:
no code does better on those scenarios. Two threads make the search vary from run to run (an
earlier run of the same day: -25.4% and -11.7%). It needs CP-SAT's parallel portfolio: on
one thread, or with ``team_work`` at 6 deterministic s on two, it found nothing better than
the group placement on hetero-n12-s2 (1.504-1.508 s).
"""
from __future__ import annotations

import math

import numpy as np

from pipeplan.core.deadline import Deadline, OutOfTime
from pipeplan.core.errors import InputError
from pipeplan.core.registry import register
from pipeplan.core.result import Quality, SolveResult, Termination, stop_note
from pipeplan.formulations.gradcode.coverage_bound import coverage_step_times, load_limits, relaxed_bound, reply_times
from pipeplan.formulations.gradcode.evaluator import scenario_objective
from pipeplan.formulations.gradcode.gradient_code import MAX_LSTSQ_N
from pipeplan.formulations.gradcode.problem import GradCodeProblem
from pipeplan.solvers.gradcode import cpsat
from pipeplan.solvers.gradcode.assignment import (
    assignment_data,
    code_from_assignment,
    draw_scenarios,
    fr_shape,
    greedy_shape,
)
from pipeplan.solvers.gradcode.common import scored_result, search_deadline
from pipeplan.solvers.gradcode.heterogeneous import hetero_aware_code, speed_loads
from pipeplan.solvers.gradcode.team_codes import MAX_TEAM_LITERALS, groups_as_teams, solve_teams, team_code

# shares of the search time left when each phase starts: the bound model, then the group
# placement, then the team code (what is left, less a reserve for the load tuning)
BOUND_SHARE, GROUPS_SHARE, TEAMS_SHARE = 0.3, 0.35, 0.9
# The team search's budget in CP-SAT deterministic seconds: it seldom proves optimality, so it is
# run as a heuristic with a fixed amount of work (the same result on any machine load with one
# thread); reaching it ends the search normally, while the wall clock stays the safety net. At
# this budget, or on one thread, the team codes seldom beat the group placement (hetero-n12-s2):
# for them give ``team_work=None`` (no budget: the time share decides) and two threads or more,
# as the study does (results/gradcode/general.md)
TEAM_WORK = 2.0
# Above LARGE_N workers the team model takes the first LARGE_SCENARIOS scenarios and one extra
# team per block (the choice is still scored on all of them): measured on hetero-n24-s2, 40 s of
# search found 1.518 s (out of sample) that way, 1.724 s with 32 scenarios and two extra teams.
LARGE_N, LARGE_SCENARIOS = 16, 16
# Past its clock general builds a random code only up to this many workers, where one code and
# its verified straggler set take well under a second (2.5-4 s at n = 2,001), or where it
# holds no other code
CHEAP_RANDOM_N = 500
VALIDATION = 1024


def bound_model(problem: GradCodeProblem, scenarios: np.ndarray, *, deadline: Deadline, seed: int = 0,
                threads: int = 1) -> tuple[np.ndarray | None, float | None, str]:
    """The coverage-bound MILP on ``scenarios`` (R, n), worker order: (optimal or best loads
    found, HiGHS's proven bound on the mean, state). Raises OutOfTime when the model cannot be
    built and handed over before the deadline."""
    import pulp

    from pipeplan.solvers.pulp_backend import make_solver, pick_backend

    n, k, s = problem.n, problem.k, problem.s
    L = load_limits(problem)
    if L.sum() < (s + 1) * k:
        return None, None, "infeasible"
    c = problem.partition_time_s / np.asarray(problem.speeds, dtype=np.float64)
    prob = pulp.LpProblem("gradcode_coverage_bound", pulp.LpMinimize)
    z = {(i, v): prob.add_variable(f"z_{i}_{v}", cat="Binary") for i in range(n) for v in range(int(L[i]) + 1)}
    load = {i: pulp.lpSum(v * z[i, v] for v in range(1, int(L[i]) + 1)) for i in range(n)}
    for i in range(n):
        prob += pulp.lpSum(z[i, v] for v in range(int(L[i]) + 1)) == 1
    prob += pulp.lpSum(load.values()) >= (s + 1) * k
    objective = []
    R = scenarios.shape[0]
    for r in range(R):
        deadline.check()
        if problem.pipelined:      # (time, contribution) per worker
            events = [(c[i] + scenarios[r, i], load[i], L[i]) for i in range(n)]
        else:
            events = [(v * c[i] + scenarios[r, i], v * z[i, v], v) for i in range(n) for v in range(1, int(L[i]) + 1)]
        events.sort(key=lambda e: e[0])
        times = [e[0] for e in events]
        objective.append(times[0])
        cov, most = None, 0
        for m in range(len(events) - 1):
            cov = events[m][1] if cov is None else cov + events[m][1]
            most += events[m][2]
            step = times[m + 1] - times[m]
            if step <= 0:
                continue
            if most < k:           # the replies so far cannot hold k partitions whatever the loads
                objective.append(step)
                continue
            running = prob.add_variable(f"cov_{r}_{m}", 0)
            prob += running == cov
            cov = running
            e = prob.add_variable(f"e_{r}_{m}", cat="Binary")
            prob += running + k * e >= k
            objective.append(step * e)
    prob.setObjective(pulp.lpSum(objective) * (1.0 / R))
    speed = speed_loads(problem)          # a feasible start: the heterogeneity-aware loads
    for (i, v), var in z.items():
        var.setInitialValue(1 if speed[i] == v else 0)
    deadline.check()
    backend = pick_backend("highs")
    left = deadline.remaining(floor=0.05) if deadline.limit is not None else None
    prob.solve(make_solver(backend, time_limit=left, threads=threads, seed=seed, warm=True))
    state = {pulp.LpSolutionOptimal: "optimal", pulp.LpSolutionIntegerFeasible: "feasible"}.get(prob.sol_status, "none")
    if state == "none":
        return None, None, state
    loads = np.array([int(round(pulp.value(load[i]) or 0)) for i in range(n)], dtype=np.int64)
    if backend == "highs":
        # PuLP hands HiGHS the objective without its constant term (the steps no load choice
        # can shorten): HiGHS's bound is on the rest
        bound = prob.solverModel.getInfo().mip_dual_bound
        bound = bound + prob.objective.constant if math.isfinite(bound) else None
    else:
        bound = prob.objective.value() if state == "optimal" else None
    return loads, bound, state


def count_rule_times(problem: GradCodeProblem, loads, scenarios: np.ndarray) -> np.ndarray:
    """Per scenario, the (n-s)-th reply of workers with ``loads``: the step of the count rule."""
    T = reply_times(problem, loads, scenarios)
    return np.partition(T, problem.n - problem.s - 1, axis=1)[:, problem.n - problem.s - 1]


def tune_loads(problem: GradCodeProblem, start: np.ndarray, scenarios: np.ndarray, deadline: Deadline) -> np.ndarray:
    """Local search on the count rule's in-sample mean step: move one partition copy from a
    worker to another, or drop a surplus copy, while that lowers it (first improvement)."""
    L = load_limits(problem)
    need = (problem.s + 1) * problem.k
    loads = np.minimum(start, L).astype(np.int64)
    while loads.sum() < need:               # top up the cheapest worker (only for a short start)
        room = np.flatnonzero(loads < L)
        loads[room[np.argmin((loads[room] + 1) / np.asarray(problem.speeds)[room])]] += 1
    best = count_rule_times(problem, loads, scenarios).mean()
    improved = True
    while improved and not deadline.expired():
        improved = False
        for i in range(problem.n):
            if loads[i] == 0:
                continue
            for j in [-1, *range(problem.n)]:
                if j == i or (j >= 0 and loads[j] >= L[j]) or (j < 0 and loads.sum() <= need):
                    continue
                trial = loads.copy()
                trial[i] -= 1
                if j >= 0:
                    trial[j] += 1
                value = count_rule_times(problem, trial, scenarios).mean()
                if value < best - 1e-12:
                    loads, best, improved = trial, value, True
                    break
            if improved:
                break
    return loads


@register("gradcode", "general", requires=("pulp", "ortools"),
          description="general codes: coverage lower bound (MILP, every exact code of the problem's execution) "
                      "+ best of group, team and heterogeneity-aware codes")
def solve_general(problem, *, time_limit=None, seed=0, threads=1, scenarios: int = 64, tries: int = 8,
                  team_work: float | None = TEAM_WORK):
    """The time limit covers the bound model, the group and team searches, the load tuning and
    the re-scoring (shares: ``BOUND_SHARE``...); ``team_work``: the team search's budget in
    CP-SAT deterministic seconds (None: no budget, its share of the time limit ends it; it then
    needs a time limit, since the search seldom ends by a proof). A run ends ``time_limit``
    (stopped by the wall clock) when the clock cut the bound, the exact group search or the team
    search short."""
    if team_work is not None and (isinstance(team_work, bool) or not isinstance(team_work, (int, float))
                                  or not team_work > 0):
        raise InputError("solver general", "team_work", f"must be a positive number of deterministic seconds, got {team_work!r}")
    if team_work is None and time_limit is None:
        raise InputError("solver general", "team_work", "none (no work budget) needs a time limit")
    clock, search = Deadline(time_limit), search_deadline(time_limit, problem)
    data = assignment_data(problem, "expected", scenarios=scenarios, seed=seed)
    scen = data.scenarios[:, data.order.argsort()]          # worker order
    notes, why = [], None

    def share(fraction):
        if search.limit is None:
            return Deadline(None)
        return Deadline(max(0.0, search.remaining() * fraction))

    try:
        bound_loads, bound, bound_state = bound_model(problem, scen, deadline=share(BOUND_SHARE), seed=seed,
                                                      threads=threads)
    except OutOfTime:
        bound_loads, bound, bound_state = None, None, "none"
    if bound_state == "infeasible":
        return _infeasible(problem, scenarios, tries)
    if bound_state != "optimal":
        why = "time"
    relaxed = relaxed_bound(problem, scen)
    if bound is None or bound < relaxed:
        notes.append(f"coverage bound from per-scenario loads {relaxed:.4g} s (the MILP's: "
                     f"{'none' if bound is None else f'{bound:.4g} s'}, {bound_state})")
        bound, source = relaxed, f"coverage bound with per-scenario loads on {scenarios} scenarios"
    else:
        scope = "every exact code" if problem.pipelined else "every exact code without stale replies"
        source = f"coverage bound ({scope}), HiGHS MILP on {scenarios} scenarios"
        notes.append(f"coverage bound {bound:.4g} s ({bound_state})")
    if bound_loads is not None:
        notes.append(f"the MILP's loads {bound_loads.tolist()} reach {coverage_step_times(problem, bound_loads, scen).mean():.4g} s")
    candidates = []
    check = draw_scenarios(problem, VALIDATION, seed + 1)

    def consider(name, code):
        candidates.append((scenario_objective(problem, code, check), name, code))

    try:
        answer = cpsat.solve_model(data, deadline=share(GROUPS_SHARE), seed=seed, threads=threads)
    except OutOfTime:
        answer = None
    hint = None
    if answer is not None and answer.groups is not None:
        consider("groups", code_from_assignment(data, answer.groups, answer.counts, "general"))
        hint = ([[int(data.order[i]) for i in g] for g in answer.groups], answer.counts)
    if answer is None or answer.state != "optimal":
        why = "time"
    try:
        large = problem.n > LARGE_N
        blocks, team_state, team_why = solve_teams(problem, scen[:LARGE_SCENARIOS] if large else scen,
                                                   deadline=share(TEAMS_SHARE), seed=seed, threads=threads,
                                                   extra=1 if large else 2,
                                                   hint=None if hint is None else groups_as_teams(
                                                       *hint, problem.s, extra=1 if large else 2),
                                                   work_limit=team_work)
    except OutOfTime:
        blocks, team_state, team_why = [], "none", "time"
    if team_state == "too large":
        notes.append("team search skipped: its model would exceed "
                     f"{MAX_TEAM_LITERALS:,} worker-slot literals")
    for found in blocks:
        consider("teams", team_code(problem, found, "general"))
    if team_why == "time":
        why = "time"
    if answer is None or answer.state != "optimal":
        # the group search was cut: the quick placements compete, as in the exact solvers' results
        for name, shape in (("greedy", greedy_shape(data)), ("fr", fr_shape(data))):
            if shape is not None:
                consider(name, code_from_assignment(data, *shape, "general"))
    # the random codes: building and verifying one takes seconds at n = 2,000 (a QR and a
    # straggler-set solve of a dense 2,000-worker matrix), so past the clock one is built only
    # where no code is at hand or it is cheap (at most CHEAP_RANDOM_N workers)
    speed, first = speed_loads(problem), {}
    random_ok = problem.n <= MAX_LSTSQ_N      # they decode by least squares, cubic in n
    if not random_ok:
        notes.append(f"random codes skipped: least squares above {MAX_LSTSQ_N:,} workers")
    if random_ok and (not search.expired() or not candidates or problem.n <= CHEAP_RANDOM_N):
        first["hetero-aware"] = hetero_aware_code(problem, speed, seed=seed, tries=1, scheme="general",
                                                  deadline=search)
    if random_ok and not search.expired():
        starts = [speed] + ([bound_loads] if bound_loads is not None else [])
        tuned = min((tune_loads(problem, start, scen, search) for start in starts),
                    key=lambda loads: count_rule_times(problem, loads, scen).mean())
        first["hetero-tuned"] = hetero_aware_code(problem, tuned, seed=seed, tries=1, scheme="general",
                                                  deadline=search)
    for name, (code, _) in first.items():
        consider(name, code)
    if search.expired():
        why = why or "time"
    _, name, code = min(candidates, key=lambda c: c[0])
    verification = None
    if name.startswith("hetero"):      # the chosen random code: its best conditioned seed
        code, verification = (first[name] if search.expired() else      # its first seed, built already
                              hetero_aware_code(problem, code.meta["loads"], seed=seed, tries=tries,
                                                scheme="general", deadline=search))
    value = scenario_objective(problem, code, scen)
    best = {}
    for v, n, _ in candidates:
        best[n] = min(best.get(n, np.inf), v)
    notes.append(f"on {VALIDATION} validation scenarios: " + ", ".join(
        f"{n} {v:.4g} s" for n, v in sorted(best.items(), key=lambda item: item[1]))
        + (f" ({len(blocks)} team codes found)" if blocks else ""))
    notes.append(f"chosen: {name}" + (f" (team search {team_state})" if name == "teams" else ""))
    if why:
        notes.append(stop_note(why))
    params = {"scenarios": scenarios, "tries": tries, "team_work": team_work}
    proven = value <= bound * (1 + 1e-7)
    result = scored_result(problem, "general", code,
                           termination=Termination.OPTIMAL if proven else (Termination.TIME_LIMIT if why else Termination.COMPLETED),
                           quality=Quality.PROVEN_OPTIMAL if proven else Quality.FEASIBLE,
                           objectives={"saa_step_s": value}, bound={"saa_step_s": bound},
                           params=params, message="; ".join(notes), deadline=clock, verification=verification,
                           stopped_by=why)
    result.bound_source = {"saa_step_s": source}
    return result


def _infeasible(problem, scenarios, tries):
    return SolveResult("gradcode", problem.name, "general", Termination.INFEASIBLE, Quality.NONE,
                       params={"scenarios": scenarios, "tries": tries},
                       message="the capacities hold fewer than (s+1) k partition copies: no exact code exists")

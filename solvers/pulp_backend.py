"""PuLP solver set-up shared by the MILP models: HiGHS (in-process, with MIP starts and its
start-up banner silenced) or CBC, whichever is available.

Work limit: HiGHS has no deterministic clock, but it counts branch-and-bound nodes
(``mip_max_nodes``; CBC: ``maxNodes``): ``node_limit`` stops a solve after that many nodes,
the same on any machine load with one thread. It does not count the root node's work
(presolve, the root LP, cuts and heuristics), which only the wall-clock limit bounds: on a
model whose root alone outlasts the time limit the node limit never acts. ``stopped_by`` says
which limit stopped a solve."""
from __future__ import annotations

import ctypes
import os
import sys
import threading
from functools import lru_cache

import pulp

from pipeplan.core.deadline import stoppable_highs

GAP_REL = 1e-7          # HiGHS stops at 1e-4 by default; the optimum must hold to 1e-6
# HiGHS also stops where the absolute gap is at most this (its mip_abs_gap, given explicitly at
# its default), CBC at 1e-10 (its allowableGap default): below a value of 10 the absolute gap
# is the larger, so a proven optimum's bound is the optimum less the larger of the two
GAP_ABS = {"highs": 1e-6, "cbc": 1e-10}
FEASIBILITY_TOL = 1e-6   # HiGHS's primal feasibility tolerance (its default)
_scheduler_threads: list[int | None] = [None]    # the thread count of this process's last HiGHS solve
_SCHEDULER_LOCK = threading.Lock()


def highs_threads(h, threads) -> None:
    """Give the ``highspy.Highs`` object ``h`` ``threads`` threads, and the process's HiGHS
    scheduler as many. HiGHS makes one scheduler per process, at its first solve, with that
    solve's ``threads``; a later solve asking another count does not run at all (model status
    kNotset, its message silenced with the output). After one energy-ceiling LP (HiGHS's default
    count) every PuLP MILP of the same process (one thread) had come back unsolved: the chain
    MILP on khadas-vim3/MobileV1 as stopped by its time limit after 0.1 s. So every solve
    pipeplan runs in-process goes through here, and the scheduler is made anew when the count
    changes (cheap; solves in one process run one at a time)."""
    import highspy
    threads = max(1, int(threads or 1))
    h.setOptionValue("threads", threads)
    with _SCHEDULER_LOCK:
        if _scheduler_threads[0] != threads:
            highspy.Highs.resetGlobalScheduler(True)
            _scheduler_threads[0] = threads


class _HiGHS(pulp.HiGHS):
    """``pulp.HiGHS`` that hands the variables' current values to HiGHS as a MIP start (pulp's
    in-process HiGHS interface ignores them)."""

    def callSolver(self, lp):
        known = [(v.index, v.varValue) for v in lp.variables() if v.varValue is not None]
        if known:
            cols, vals = zip(*known)
            lp.solverModel.setSolution(len(cols), list(cols), list(vals))
        highs_threads(lp.solverModel, self.threads)
        stoppable_highs(lp.solverModel)
        super().callSolver(lp)

    def findSolutionValues(self, lp):
        """pulp's, plus the status HiGHS gives a solve its node limit stopped (kSolutionLimit),
        which pulp 3.3 does not know: a solution when HiGHS holds one, else none."""
        import highspy
        try:
            return super().findSolutionValues(lp)
        except KeyError:
            if lp.solverModel.getModelStatus() != highspy.HighsModelStatus.kSolutionLimit:
                raise
        if lp.solverModel.getInfo().primal_solution_status == 2:     # kSolutionStatusFeasible
            return pulp.LpStatusOptimal, pulp.LpSolutionIntegerFeasible
        return pulp.LpStatusNotSolved, pulp.LpSolutionNoSolutionFound


def highs_model(cost, col_lower, col_upper, row_lower, row_upper, matrix, integer=None):
    """A ``highspy.HighsLp`` from arrays and a scipy sparse matrix (rows x columns); ``integer``:
    a boolean per column (None: an LP). Clears HiGHS's banner first (``highs_banner_off``)."""
    import highspy
    from scipy import sparse

    matrix = sparse.csc_matrix(matrix)
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = matrix.shape[1], matrix.shape[0]
    lp.col_cost_, lp.col_lower_, lp.col_upper_ = cost, col_lower, col_upper
    lp.row_lower_, lp.row_upper_ = row_lower, row_upper
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = matrix.indptr, matrix.indices, matrix.data
    if integer is not None:
        lp.integrality_ = [highspy.HighsVarType.kInteger if t else highspy.HighsVarType.kContinuous for t in integer]
    highs_banner_off()
    return lp


@lru_cache(maxsize=None)
def highs_banner_off() -> None:
    """HiGHS prints a banner on C stdout when the process makes its first Highs object, before
    ``output_flag`` can be cleared: make that first one with stdout pointing at /dev/null, so
    that stdout carries only results (the CLI prints its JSON there) and a bench of hundreds of
    runs does not print it hundreds of times. The HiGHS version is in every SolveResult."""
    import highspy
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    try:
        highspy.Highs()
        ctypes.CDLL(None).fflush(None)
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


def make_solver(backend: str, *, time_limit, threads, seed, warm: bool, node_limit: int | None = None):
    """``node_limit``: the most branch-and-bound nodes of the solve (None: no such limit)."""
    if backend == "highs":
        highs_banner_off()
        nodes = {} if node_limit is None else {"mip_max_nodes": int(node_limit)}
        return _HiGHS(msg=False, timeLimit=time_limit, threads=threads, gapRel=GAP_REL, gapAbs=GAP_ABS["highs"],
                      random_seed=seed, **nodes)
    # CBC is deterministic by default and its randomCbcSeed 0 means "seed from the clock"
    options = [f"randomCbcSeed {seed}"] if seed else []
    return pulp.PULP_CBC_CMD(msg=False, timeLimit=time_limit, threads=threads, gapRel=GAP_REL,
                             warmStart=warm, options=options, maxNodes=node_limit)


def check_node_limit(node_limit) -> None:
    if node_limit is not None and (isinstance(node_limit, bool) or not isinstance(node_limit, int) or node_limit < 1):
        raise ValueError(f"node_limit must be an integer >= 1, got {node_limit!r}")


def stopped_by(prob, backend: str, *, node_limit: int | None, time_limit: float | None, wall_s: float) -> str | None:
    """Which limit stopped a solve that ended without a proof: HiGHS says it (its model status:
    kSolutionLimit or kIterationLimit for the node limit, kTimeLimit for the clock); CBC's
    status does not, so a CBC solve that stopped well before its time limit is taken as
    stopped by its node limit."""
    if backend == "highs":
        import highspy
        status = prob.solverModel.getModelStatus()
        if status in (highspy.HighsModelStatus.kSolutionLimit, highspy.HighsModelStatus.kIterationLimit):
            return "work"
        return "time" if status == highspy.HighsModelStatus.kTimeLimit else None
    if node_limit is not None and (time_limit is None or wall_s < 0.95 * time_limit):
        return "work"
    return "time"


def solve_once(prob, backend: str, *, time_limit, threads, seed, warm: bool, node_limit: int | None = None,
               presolve: bool = True) -> tuple[str, float | None, str | None]:
    """Solve ``prob`` (minimising); returns (state: optimal, feasible, infeasible or unknown; a
    lower bound of the objective: the optimum less HiGHS's gap, or its dual bound when a limit
    stopped it, None when unknown; which limit stopped it, see :func:`stopped_by`)."""
    import math
    import time

    solver = make_solver(backend, time_limit=time_limit, threads=threads, seed=seed, warm=warm, node_limit=node_limit)
    if backend == "highs" and not presolve:
        solver.optionsDict["presolve"] = "off"
    began = time.perf_counter()
    prob.solve(solver)
    wall = time.perf_counter() - began
    state = {pulp.LpSolutionOptimal: "optimal", pulp.LpSolutionIntegerFeasible: "feasible",
             pulp.LpSolutionInfeasible: "infeasible"}.get(prob.sol_status, "unknown")
    lower = None
    if state == "optimal":
        lower = optimum_lower(prob.objective.value(), backend)
    elif state in ("feasible", "unknown") and backend == "highs":
        dual = prob.solverModel.getInfo().mip_dual_bound
        lower = dual + (prob.objective.constant or 0.0) if math.isfinite(dual) else None
    why = None if state in ("optimal", "infeasible") else stopped_by(
        prob, backend, node_limit=node_limit, time_limit=time_limit, wall_s=wall)
    return state, lower, why


def optimum_lower(value: float, backend: str) -> float:
    """A lower bound of the objective where the solver stopped at ``value`` as optimal: it stops
    once its relative gap is at most GAP_REL or its absolute gap at most GAP_ABS, so the optimum
    lies at most the larger of the two below (and 1e-9 for the float sums)."""
    return value - max(GAP_REL * abs(value), GAP_ABS[backend]) - 1e-9


def tie_break_cap(value: float) -> float:
    """The cap that holds a lexicographic solve's primary objective at ``value``, the optimum the
    solver reported: HiGHS reports a solution's values up to its feasibility tolerance (1e-6)
    below the true ones (gradcode/hetero-n12-s2's worst case 1.999999 s for 2 s; a311d/squeezenet's
    latency 1e-6 ms low), and a cap at that value cuts off nearly every optimum (the gradcode
    MILP had "proven" a tie-break of 1.5321 s where CP-SAT's is 1.5015 s). The cap allows that
    much, relative and absolute; the evaluator re-scores whatever comes back."""
    return value * (1 + FEASIBILITY_TOL) + FEASIBILITY_TOL


def highs_nodes(prob, backend: str) -> int | None:
    """The branch-and-bound nodes of HiGHS's last solve (None for CBC)."""
    if backend != "highs":
        return None
    return int(prob.solverModel.getInfo().mip_node_count)


def pick_backend(backend: str) -> str:
    """``backend`` when its solver is available, else the other one."""
    checks = {"highs": lambda: pulp.HiGHS().available(), "cbc": lambda: pulp.PULP_CBC_CMD(msg=False).available()}
    if backend not in checks:
        raise ValueError(f"unknown backend {backend!r} (use highs or cbc)")
    for name in (backend, *(b for b in checks if b != backend)):
        if checks[name]():
            return name
    raise RuntimeError("neither HiGHS (highspy) nor CBC is available to PuLP")

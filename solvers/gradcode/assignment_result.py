"""From a backend's answer to a SolveResult: build the code, re-score the in-sample objective
with the formulation, optionally compare with the cyclic (cover) structure, and let the
evaluator and the verifier score the winner. When the search was cut short (time limit), the
quick placements (``greedy_shape``, FR's ``fr_shape``) compete with whatever the backend found,
and the bound is the better of the backend's and ``lower_bound``."""
from __future__ import annotations

from dataclasses import dataclass

from pipeplan.core.deadline import Deadline, OutOfTime
from pipeplan.core.result import Quality, SolveResult, Termination, stop_note
from pipeplan.core.vocabulary import GRADCODE_OBJECTIVES
from pipeplan.formulations.gradcode.evaluator import scenario_objective
from pipeplan.formulations.gradcode.gradient_code import GradientCode
from pipeplan.formulations.gradcode.placement import cyclic_support, pipelined
from pipeplan.solvers.gradcode.assignment import (
    AssignmentData,
    check_solution,
    code_from_assignment,
    delay_free,
    fr_shape,
    greedy_shape,
    lower_bound,
    with_floor,
)
from pipeplan.solvers.gradcode.common import scored_result
from pipeplan.solvers.gradcode.cyclic import best_cyclic

STRUCTURES = ("best", "groups")
# the share of the search's time left (and of a CP-SAT work limit) that the floor's solve may take,
# and at least FLOOR_MIN_S of it (at most half): on the catalogue it takes 0.01 s (n = 12) to 0.4 s
# (n = 24); the backends load their libraries before it starts (with 10% of a 3 s limit and CP-SAT
# loaded inside that share, gradcode/hetero-n12-s2 had no floor in a fresh process)
FLOOR_SHARE = 0.1
FLOOR_MIN_S = 0.5


# the worst case is what is proven; among its optima the expected step time is a second solve
_TIE_BREAK = {"optimal": " (proven)", "feasible": " (best found, not proven)", "none": " (not run: no time left)"}


@dataclass
class BackendAnswer:
    state: str                          # optimal, feasible, infeasible, none
    groups: list[list[int]] | None      # canonical positions, in label order
    counts: list[int] | None
    bound: float | None                 # of the model objective, seconds (mean over scenarios or worst case)
    stopped_by: str | None = None       # "work" or "time" when a limit stopped the search without a proof
    work: float | None = None           # the search's work: CP-SAT deterministic s, HiGHS nodes
    tie_break: str | None = None        # worst-case objective: how the second solve (least expected step
                                        # among the worst-case optima) ended: optimal, feasible or none


def floored(data: AssignmentData, solve, search: Deadline) -> tuple[AssignmentData, BackendAnswer | None]:
    """``data`` with the floor (``assignment.delay_free``) that ``solve(problem_data,
    deadline)``, a backend, proves within FLOOR_SHARE of the search's time left (at least
    FLOOR_MIN_S, at most half of it), and the floor's answer (None: out of time, no floor)."""
    left = search.remaining(floor=0.0)
    share = Deadline(None if left is None else min(left / 2, max(FLOOR_SHARE * left, FLOOR_MIN_S)))
    try:
        answer = solve(delay_free(data), share)
    except OutOfTime:
        return data, None
    return with_floor(data, answer.bound), answer


def cover_shape(data: AssignmentData) -> GradientCode | None:
    """CR's cyclic placement (pipelined: PGC-CR) with the count rule, when every worker can
    store s+1 partitions and k = n; its step ends at the (n-s)-th reply whatever B is, so B is
    left at the support's ones here (``cover_code`` draws the real one)."""
    p = data.problem
    if p.k != p.n or (data.cap < p.s + 1).any():
        return None
    support = cyclic_support(p.n, p.s)
    code = GradientCode(scheme="cr", s=p.s, support=support, B=support.astype(float), decoder="lstsq", wait=p.n - p.s)
    return pipelined(code, "pgc-cr") if p.pipelined else code


def cover_code(data: AssignmentData, deadline: Deadline | None):
    """CR's code on the cyclic placement (pipelined: PGC-CR) and its verification."""
    code, v = best_cyclic(data.problem.n, data.problem.s, deadline=deadline)
    return (pipelined(code, "pgc-cr") if data.problem.pipelined else code), v


def assignment_result(data: AssignmentData, solver: str, answer: BackendAnswer, *, structure: str,
                      params: dict, clock: Deadline | None = None, search: Deadline | None = None) -> SolveResult:
    """``clock``: the solver's time limit (the verifier stops early past it); ``search``: the
    part of it for searching (the cover's seeds)."""
    p = data.problem
    key = GRADCODE_OBJECTIVES[data.objective].key
    if answer.state == "infeasible":
        return SolveResult("gradcode", p.name, solver, Termination.INFEASIBLE, Quality.NONE, params=params,
                           message="no group placement tolerates s stragglers within the capacities")
    problem_scenarios = data.scenarios[:, data.order.argsort()]    # back to worker order

    def score(c):   # (objective, in-sample expected step time), compared lexicographically
        return (scenario_objective(p, c, problem_scenarios, data.objective),
                scenario_objective(p, c, problem_scenarios, "expected"))

    proven = answer.state == "optimal"
    shapes = [] if answer.groups is None else [(answer.groups, answer.counts, None)]
    if not proven:    # cut short: the quick placements compete with what the search found
        shapes += [(*shape, name) for name, shape in (("greedy", greedy_shape(data)), ("fr", fr_shape(data)))
                   if shape is not None]
    why = None if proven else (answer.stopped_by or "time")
    limit = "work limit" if why == "work" else "time limit"
    if not shapes:
        return SolveResult("gradcode", p.name, solver, Termination.TIME_LIMIT, Quality.NONE, params=params,
                           message=f"no placement found within the {limit}", stopped_by=why)
    candidates = []
    for groups, counts, name in shapes:
        check_solution(data, groups, counts)
        code = code_from_assignment(data, groups, counts, solver)
        candidates.append((score(code), code, groups, counts, name))
    value, code, groups, counts, name = min(candidates, key=lambda c: c[0])
    notes = [f"groups: {[len(g) for g in groups]} workers, {counts} partitions"]
    if name is not None:
        notes.append(f"the search found {'nothing better than' if answer.groups else 'no placement before'} "
                     f"the {name} placement within the {limit}")
    verification = None
    if structure == "best":
        shape = cover_shape(data)
        if shape is not None:
            cover_value = score(shape)
            notes.append(f"cyclic cover {cover_value[0]:.4g} s vs groups {value[0]:.4g} s")
            if cover_value < value:
                code, verification = cover_code(data, search)
                value = cover_value
                notes.append("cyclic cover chosen")
    objectives = {"saa_step_s": value[1]}
    groups_bound = answer.bound if proven else max(b for b in (answer.bound, lower_bound(data)) if b is not None)
    bound = {key: min(groups_bound, value[0])} if groups_bound is not None else {}
    scope = "over group placements" + (" and the cyclic cover" if structure == "best" else "")
    scope += (f", on {data.scenarios.shape[0]} sampled delay scenarios" if data.objective == "expected"
              else f"; ties broken by the expected step time on {data.scenarios.shape[0]} delay scenarios"
              + _TIE_BREAK.get(answer.tie_break, ""))
    notes.append(("optimal " if proven else "best found ") + scope)
    if why:
        notes.append(stop_note(why))
    return scored_result(p, solver, code, termination=Termination.OPTIMAL if proven else Termination.TIME_LIMIT,
                         quality=Quality.PROVEN_OPTIMAL if proven else Quality.FEASIBLE, objectives=objectives,
                         bound=bound, params=params, message="; ".join(notes), deadline=clock,
                         verification=verification, stopped_by=why)

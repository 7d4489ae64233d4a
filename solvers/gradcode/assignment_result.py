"""From a backend's answer to a SolveResult: build the code, re-score the in-sample objective
with the formulation, optionally compare with the cyclic (cover) structure, and let the
evaluator and the verifier score the winner."""
from __future__ import annotations

from dataclasses import dataclass

from pipeplan.formulations.gradcode.evaluator import scenario_objective
from pipeplan.formulations.gradcode.placement import pipelined
from pipeplan.result import Quality, SolveResult, Termination
from pipeplan.solvers.gradcode.assignment import AssignmentData, check_solution, code_from_assignment
from pipeplan.solvers.gradcode.common import scored_result
from pipeplan.solvers.gradcode.cyclic import cyclic_repetition

STRUCTURES = ("best", "groups")


@dataclass
class BackendAnswer:
    state: str                          # optimal, feasible, infeasible, none
    groups: list[list[int]] | None      # canonical positions, in label order
    counts: list[int] | None
    bound: float | None                 # of the model objective, seconds (mean over scenarios or worst case)


def cover_code(data: AssignmentData):
    """CR's cyclic placement (pipelined: PGC-CR), when every worker can store s+1 partitions
    and k = n; its step ends at the (n-s)-th reply."""
    p = data.problem
    if p.k != p.n or (data.cap < p.s + 1).any():
        return None
    code = cyclic_repetition(p.n, p.s)
    return pipelined(code, "pgc-cr") if p.pipelined else code


def assignment_result(data: AssignmentData, solver: str, answer: BackendAnswer, *, structure: str,
                      params: dict) -> SolveResult:
    p = data.problem
    key = "saa_step_s" if data.objective == "expected" else "worst_step_s"
    if answer.groups is None:
        termination = Termination.INFEASIBLE if answer.state == "infeasible" else Termination.TIME_LIMIT
        why = ("no group placement tolerates s stragglers within the capacities"
               if answer.state == "infeasible" else "no placement found within the time limit")
        return SolveResult("gradcode", p.name, solver, termination, Quality.NONE, params=params, message=why)
    check_solution(data, answer.groups, answer.counts)
    code = code_from_assignment(data, answer.groups, answer.counts, solver)
    problem_scenarios = data.scenarios[:, data.order.argsort()]    # back to worker order

    def score(c):   # (objective, in-sample expected step time), compared lexicographically
        return (scenario_objective(p, c, problem_scenarios, data.objective),
                scenario_objective(p, c, problem_scenarios, "expected"))

    value = score(code)
    notes = [f"groups: {[len(g) for g in answer.groups]} workers, {answer.counts} partitions"]
    proven = answer.state == "optimal"
    if structure == "best":
        cover = cover_code(data)
        if cover is not None:
            cover_value = score(cover)
            notes.append(f"cyclic cover {cover_value[0]:.4g} s vs groups {value[0]:.4g} s")
            if cover_value < value:
                code, value = cover, cover_value
                notes.append("cyclic cover chosen")
    objectives = {"saa_step_s": value[1]}
    bound = {key: min(answer.bound, value[0])} if answer.bound is not None else {}
    scope = "over group placements" + (" and the cyclic cover" if structure == "best" else "")
    scope += (f", on {data.scenarios.shape[0]} sampled delay scenarios" if data.objective == "expected"
              else f"; ties broken by the expected step time on {data.scenarios.shape[0]} delay scenarios")
    notes.append(("optimal " if proven else "best found ") + scope)
    return scored_result(p, solver, code, termination=Termination.OPTIMAL if proven else Termination.TIME_LIMIT,
                         quality=Quality.PROVEN_OPTIMAL if proven else Quality.FEASIBLE, objectives=objectives,
                         bound=bound, params=params, message="; ".join(notes))

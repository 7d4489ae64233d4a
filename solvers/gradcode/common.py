"""Shared by the gradient-code solvers: re-score a code with the evaluator and the verifier and
wrap it in a SolveResult (a solver never reports its own step times)."""
from __future__ import annotations

from pipeplan.core.deadline import Deadline
from pipeplan.core.result import Quality, SolveResult, Termination
from pipeplan.formulations.gradcode.evaluator import evaluate
from pipeplan.formulations.gradcode.gradient_code import GradientCode
from pipeplan.formulations.gradcode.problem import GradCodeProblem
from pipeplan.formulations.gradcode.verifier import Verification, verify
from pipeplan.solvers.cpsat_backend import fitting_scale

# The re-scoring (the evaluator's simulation and a verification cut short by the deadline) takes
# about RESCORE_S + RESCORE_S_PER_WORKER * n seconds, measured on one core: 2.3 s at n = 2,000. A
# solver stops searching this long before its time limit, so that the scored result, verified
# on more than a token set of stragglers, still comes back in time.
RESCORE_S = 0.1
RESCORE_S_PER_WORKER = 1.2e-3
# The CP-SAT models (``cpsat``, ``general``'s team model) count time in whole microseconds. Within
# the input limits a step reaches 1e16 s (10,000 partitions of 1e6 s on a worker of speed 1e-6)
# and a pareto delay about 1e44 s: in microseconds that had been "model invalid" (past 64-bit
# integers) and, at 1e12 s steps on gradcode/hetero-n6-s1's shape, a wrong INFEASIBLE from CP-SAT
# (a feasible model whose step times reach about 1e11 units). Where a step could exceed
# MAX_STEP_UNITS (the shipped instances' reach 4.3e7) the unit is made coarser
# (``units_per_second``); the code is re-scored in seconds as always.
US = 1_000_000
MAX_STEP_UNITS = 10 ** 8


def units_per_second(step_s: float) -> float:
    """Model time units per second: microseconds, or fewer where a step time of up to ``step_s``
    seconds would pass ``MAX_STEP_UNITS``."""
    return fitting_scale(float(US), float(step_s), MAX_STEP_UNITS)


def search_deadline(time_limit: float | None, problem: GradCodeProblem) -> Deadline:
    """The time limit less the re-scoring's share, from now (a solver makes it on entry, with
    its ``Deadline(time_limit)``)."""
    if time_limit is None:
        return Deadline(None)
    return Deadline(max(0.0, time_limit - RESCORE_S - RESCORE_S_PER_WORKER * problem.n))


def scored_result(problem: GradCodeProblem, solver: str, code: GradientCode, *,
                  termination: Termination = Termination.COMPLETED, quality: Quality = Quality.FEASIBLE,
                  objectives: dict[str, float] | None = None, bound: dict[str, float] | None = None,
                  params: dict | None = None, message: str = "", deadline: Deadline | None = None,
                  verification: Verification | None = None, stopped_by: str | None = None) -> SolveResult:
    """``objectives`` adds figures the formulation computed for the solver (e.g. the in-sample
    objective); the gap is taken on the one key that ``bound`` holds. ``verification``: the
    verifier's own check of this very code (CR's seed search), not repeated; else the verifier
    runs here, stopping early past ``deadline`` (the solver's time limit). A bound above the
    code's value of its objective is clamped to it; ``stopped_by``: "work" or "time" when a
    limit cut the run short."""
    ev = evaluate(problem, code)
    v = verification or verify(code, deadline=deadline)
    notes = [message] if message else []
    if ev.violations:
        quality = Quality.NONE
        notes.append("violates: " + "; ".join(ev.violations[:3]))
    elif not v.decodable:
        if code.decoder == "linear" or v.approximate:
            notes.append(f"approximate decoder: worst error {v.worst_error:.3g}, mean {v.mean_error:.3g} "
                         f"(||a^T B_F - 1||^2 / k)")
        else:
            quality = Quality.NONE
            notes.append(f"not decodable: straggler set {list(v.worst_set)} leaves residual {v.worst_residual:.3g}")
    objs = {**ev.objectives(), **(objectives or {})}
    # a lower bound above the code's own value of the same objective cannot hold: clamp it
    bound = {k: min(v, objs[k]) if k in objs else v for k, v in (bound or {}).items()}
    gap = None
    for key, value in (bound or {}).items():
        if key in objs and objs[key] > 0:
            gap = max(0.0, (objs[key] - value) / objs[key])
    plan = code.to_dict()
    plan["instance"] = problem.name
    plan["verification"] = v.to_dict()
    plan["max_staleness"] = ev.max_staleness
    return SolveResult("gradcode", problem.name, solver, termination, quality, objectives=objs,
                       bound=bound or {}, gap=gap, params=params or {}, plan=plan, message=" | ".join(notes),
                       stopped_by=stopped_by)

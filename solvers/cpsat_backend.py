"""CP-SAT limits shared by the CP-SAT models of every system: a wall-clock limit (the safety net)
and a work limit in CP-SAT's deterministic time (``max_deterministic_time``, "deterministic
seconds"). With one worker and a fixed seed CP-SAT is deterministic under a deterministic-time
limit: a solve that its work limit stops returns the same solution and bound on any machine
load. ortools is imported by the callers, inside their solves."""
from __future__ import annotations

import math

from pipeplan.core.deadline import stoppable

MIN_WORK = 1e-3   # deterministic seconds: a later solve with less left is not started


def fitting_scale(scale: float, reach: float, most: float) -> float:
    """``scale`` (model units per unit of a quantity), or the coarser scale at which the
    quantity's largest value ``reach`` is ``most`` units: the exact models' integers stay within
    64 bits (and their weighted objectives exact) at the input limits, while every instance
    whose values fit keeps the usual unit."""
    return scale if reach * scale <= most else most / reach


def true_bound(bound: float, slack: float, scale: float) -> float:
    """CP-SAT's best bound of an integer objective (model units) as a lower bound of the true
    value (model units per true unit: ``scale``), never rounded up: whole units up, less
    ``slack`` units (what the model's rounding can move the objective), the quotient rounded
    down to the float below when the division rounded it up."""
    units = max(0.0, math.ceil(bound - 1e-6) - slack)
    value = units / scale
    return math.nextafter(value, -math.inf) if value * scale > units else value


def check_work_limit(work_limit) -> None:
    """ValueError unless ``work_limit`` is None or a positive number of deterministic seconds."""
    if work_limit is not None and (isinstance(work_limit, bool) or not isinstance(work_limit, (int, float))
                                   or not math.isfinite(work_limit) or not work_limit > 0):
        raise ValueError(f"work_limit must be a positive number of CP-SAT deterministic seconds, got {work_limit!r}")


def set_limits(solver, *, time_limit: float | None, work_limit: float | None) -> None:
    """Set a CpSolver's wall-clock limit (s) and work limit (deterministic s); None: none. It
    is made stoppable too (``core.deadline.stoppable``: a SIGTERM or Ctrl-C ends its search)."""
    stoppable(solver)
    if time_limit is not None:
        solver.parameters.max_time_in_seconds = max(0.05, float(time_limit))
    if work_limit is not None:
        solver.parameters.max_deterministic_time = max(0.0, float(work_limit))


def work_done(solver) -> float:
    """The deterministic time of a CpSolver's last solve."""
    return float(solver.ResponseProto().deterministic_time)


def stopped_by(status: str, work: float, work_limit: float | None) -> str | None:
    """What stopped a solve that ended without a proof (status feasible or unknown): the work
    limit when the solve used all of it (CP-SAT stops at its first check past the limit), else
    the wall clock; None for a solve that ended on its own (optimal, infeasible, invalid)."""
    if status in ("optimal", "infeasible", "invalid"):
        return None
    return "work" if work_limit is not None and work >= work_limit * (1 - 1e-9) else "time"


def remaining(work_limit: float | None, used: float) -> float | None:
    """Deterministic seconds a later solve may use (None: no work limit)."""
    return None if work_limit is None else max(0.0, work_limit - used)

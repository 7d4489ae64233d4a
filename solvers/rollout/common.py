"""Shared by the rollout solvers: check a simulated schedule and wrap it in a SolveResult whose
figures are the simulator's (never a solver's own), with the gap to the lower bound."""
from __future__ import annotations

from pipeplan.core.deadline import Deadline
from pipeplan.core.result import Quality, SolveResult, Termination
from pipeplan.formulations.rollout.any_engine_bound import any_engine_lower_bound
from pipeplan.formulations.rollout.bounds import train_end_lower_bound
from pipeplan.formulations.rollout.checker import check
from pipeplan.formulations.rollout.problem import RolloutProblem
from pipeplan.formulations.rollout.schedule import Schedule

# Replaying a plan and scoring it (the simulator, the checker, the bound) take about RESCORE_S +
# RESCORE_S_PER_REQUEST x requests seconds, measured on one core: 1.1-1.8 s at R = 2,000 (16,000
# requests). A search stops this long before the time limit.
RESCORE_S = 0.2
RESCORE_S_PER_REQUEST = 1e-4


def rescore_s(problem: RolloutProblem) -> float:
    """The re-scoring's share of a time limit: seconds to replay and score a plan of ``problem``."""
    return RESCORE_S + RESCORE_S_PER_REQUEST * problem.n_requests


def search_deadline(clock: Deadline, problem: RolloutProblem) -> Deadline:
    """What is left of ``clock`` less the re-scoring's share, from now."""
    left = clock.remaining()
    return Deadline(None if left is None else max(0.0, left - rescore_s(problem)))


class InvalidSchedule(RuntimeError):
    """The checker found a violated rule in a schedule (a bug, never bad input)."""


def scored_result(problem: RolloutProblem, solver: str, schedule: Schedule, *,
                  termination: Termination = Termination.COMPLETED, quality: Quality = Quality.FEASIBLE,
                  bound: float | None = None, params: dict | None = None, message: str = "",
                  stopped_by: str | None = None) -> SolveResult:
    """``bound`` defaults to the analytic lower bound of the train end (for one round on one
    engine without shared prefixes; otherwise the bound that holds for any engine); a larger valid bound
    (a proven CP-SAT bound) may be passed. A bound above the schedule's own train end cannot
    hold: it is clamped to it. ``stopped_by``: "work" or "time" when a limit cut the run short."""
    violations = check(problem, schedule, staleness=(params or {}).get("staleness", 0))
    if violations:
        raise InvalidSchedule(f"{len(violations)} violations, first: {violations[0]}")
    objectives = schedule.metrics()
    end = objectives["train_end_s"]
    analytic = (train_end_lower_bound(problem) if problem.engine.single and problem.rounds == 1
                else any_engine_lower_bound(problem))
    lb = min(max(analytic, bound or 0.0), end)
    return SolveResult("rollout", problem.name, solver, termination, quality, objectives=objectives,
                       bound={"train_end_s": lb}, gap=max(0.0, (end - lb) / end) if end > 0 else 0.0,
                       params=params or {}, plan=schedule.plan(), message=message, stopped_by=stopped_by)

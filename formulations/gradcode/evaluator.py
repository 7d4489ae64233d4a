"""The gradient-coding evaluator: the one source of truth for a code's step-time figures.

Expected and tail step times come from the simulator on a fixed, independent sample (seed
``EVAL_SEED``, ``EVAL_STEPS`` steps), so every solver is scored on the same delays; the worst
case is exact (``simulator.worst_case_step_time``). ``scenario_objective`` is the in-sample
objective the assignment solvers optimise (sample average over given delay scenarios, or the
worst case); they are re-scored by it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pipeplan.formulations.gradcode.checker import max_staleness, violations
from pipeplan.formulations.gradcode.gradient_code import GradientCode
from pipeplan.formulations.gradcode.problem import GradCodeProblem
from pipeplan.formulations.gradcode.simulator import StepRule, compute_times, simulate_step_times, worst_case_step_time

EVAL_SEED = 20_260_731
EVAL_STEPS = 20_000


@dataclass(frozen=True)
class Evaluation:
    expected_step_s: float
    p50_step_s: float
    p95_step_s: float
    worst_step_s: float
    max_staleness: int | None
    violations: tuple[str, ...] = field(default=())

    def objectives(self) -> dict[str, float]:
        out = {"expected_step_s": self.expected_step_s, "p50_step_s": self.p50_step_s,
               "p95_step_s": self.p95_step_s}
        if np.isfinite(self.worst_step_s):
            out["worst_step_s"] = self.worst_step_s
        return out


def evaluate(problem: GradCodeProblem, code: GradientCode, *, steps: int = EVAL_STEPS,
             seed: int = EVAL_SEED) -> Evaluation:
    times = simulate_step_times(problem, code, steps, seed=seed)
    return Evaluation(expected_step_s=float(times.mean()), p50_step_s=float(np.percentile(times, 50)),
                      p95_step_s=float(np.percentile(times, 95)),
                      worst_step_s=worst_case_step_time(problem, code), max_staleness=max_staleness(code),
                      violations=tuple(violations(code, problem)))


def scenario_objective(problem: GradCodeProblem, code: GradientCode, scenarios: np.ndarray,
                       objective: str = "expected") -> float:
    """Mean step time over the delay ``scenarios`` (R, n), or the worst-case step time."""
    if objective == "worst":
        return worst_case_step_time(problem, code)
    if objective != "expected":
        raise ValueError(f"unknown objective {objective!r} (expected or worst)")
    return float(StepRule(code)(scenarios + compute_times(problem, code), scratch=True).mean())

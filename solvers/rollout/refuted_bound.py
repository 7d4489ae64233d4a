"""A bound that sees whole requests: CP-SAT refutes train-end targets on the exact model of a
linear engine's round.

Why. The step-indexed bound, and every bound of the fluid family (``energy_ceiling``), lets a
request spend its KV at any time before it is forced; in fact a request runs without a break,
holding its footprint for its n steps. CP-SAT's cumulative propagation reasons about whole
intervals: on sci-xw R = 32 (linear engine) it proves within a second that the rollout alone
needs more than 14,300 steps, where the energy bound says 13,348. Its own objective bound stays
far below the schedules though (370 s after 60 s against 436 s): the trainer's assignment
literals tell the propagation nothing about when groups must complete. So this bound asks it
decision questions ("does a schedule end by T?") with cuts that turn a target into deadlines.
For every threshold step t, if some group completes after step t, then

    train end >= c0 t + sum over the groups completing after t of (s_per_token x tokens_g +
                 (optimizer_step_s + s_per_microbatch) / U)

(each such group is trained after its completion; the updates that hold them run one after
another, at least ceil(n / U) of them, each with at least one micro-batch and the optimizer
step). With the train end at most T, a threshold near T leaves room for few late groups, whose
requests must then end earlier, and the cumulative propagation refutes that. A target CP-SAT
proves infeasible, less the model's rounding slack (``RolloutCpModel.slack_s``), is a lower
bound. The targets are bisected between a known bound and a schedule's train end, each probe a
short run; an undecided probe proves nothing and only moves the search lower. In the gap study
(results/rollout/r32-linear-refuted, 60 s, two threads) sci-xw R = 32 (linear) gets 415.2 s
against the step-indexed bound's 406.4 s (a 414 s target is refuted in about a second); at
lsat-ar, olyphys and lsat-ar at rho 0.25 / 0.5 no target above the other bounds was refuted.
(At lsat-ar the rollout alone needs 8,906 steps or more against the energy bound's 8,841: whole
requests cost little more there than the fluid model's.)
"""
from __future__ import annotations

import math
import time

from pipeplan.core.deadline import stoppable
from pipeplan.formulations.rollout.fixed_model import fixed_model
from pipeplan.formulations.rollout.problem import RolloutProblem
from pipeplan.solvers.rollout.cpsat import GRID, RolloutCpModel

THRESHOLDS = 150   # threshold steps, evenly spaced up to the target (sci-xw R = 32: every ~100 steps)
PROBE_S = 10.0     # s per probe: the refutations that succeed take about a second
BISECT_TOL = 0.001  # relative width at which the bisection stops


def cut_model(problem: RolloutProblem, target_s: float | None = None, thresholds: int = THRESHOLDS) -> RolloutCpModel:
    """The exact model (``cpsat.RolloutCpModel``, linear engine) with the threshold cuts over
    steps up to ``target_s`` (or the rollout's steps run one request at a time) and, given
    ``target_s``, the train end at most it."""
    from ortools.sat.python import cp_model

    m = fixed_model(problem)
    if not m.exact:
        raise ValueError("the refuted bound needs a linear engine (EngineModel.linear): its model must be exact")
    unit = m.tau / GRID
    model = RolloutCpModel(problem, m, unit, GRID)
    md, tr = model.md, problem.trainer
    per_group = (tr.optimizer_step_s + tr.s_per_microbatch) / problem.U
    weight = [math.floor((tr.s_per_token * problem.group_tokens[g] + per_group) / unit) for g in range(problem.R)]
    last = int(target_s / m.tau) if target_s is not None else sum(problem.lengths)    # or the serial rollout
    for t in sorted({round(last * k / thresholds) for k in range(1, thresholds)} - {0}):
        late = [md.NewBoolVar(f"late{g}_{t}") for g in range(problem.R)]
        for g, b in enumerate(late):
            md.Add(model.done[g] >= GRID * t + 1).OnlyEnforceIf(b)
            md.Add(model.done[g] <= GRID * t).OnlyEnforceIf(b.Not())
        some = md.NewBoolVar(f"some_late_{t}")
        md.AddMaxEquality(some, late)
        md.Add(model.obj >= GRID * t + cp_model.LinearExpr.weighted_sum(late, weight)).OnlyEnforceIf(some)
    if target_s is not None:
        md.Add(model.obj <= math.floor(target_s / unit))
    return model


def refuted(problem: RolloutProblem, target_s: float, time_limit: float, threads: int = 1) -> float | None:
    """The bound that refuting ``target_s`` proves (the target less the model's slack), if CP-SAT
    proves within ``time_limit`` that no schedule ends by it; else None."""
    from ortools.sat.python import cp_model

    model = cut_model(problem, target_s)
    model.md.ClearObjective()
    solver = stoppable(cp_model.CpSolver())      # a SIGTERM or Ctrl-C ends its search
    solver.parameters.max_time_in_seconds = max(0.01, float(time_limit))
    solver.parameters.num_workers = max(1, int(threads))
    return target_s - model.slack_s if solver.Solve(model.md) == cp_model.INFEASIBLE else None


def refuted_bound(problem: RolloutProblem, lower: float, upper: float, *, time_limit: float = 60.0,
                  probe_s: float = PROBE_S, threads: int = 1) -> float:
    """The largest bound a refuted target in (``lower``, ``upper``) proves, or ``lower`` (a bound
    known already) if no probe refutes one: bisection for ``time_limit`` s in all."""
    began = time.perf_counter()
    proven, lo, hi = lower, lower, upper
    while hi - lo > BISECT_TOL * upper:
        left = time_limit - (time.perf_counter() - began)
        if left <= 0:
            break
        target = (lo + hi) / 2
        bound = refuted(problem, target, min(probe_s, left), threads)
        if bound is None:
            hi = target
        else:
            lo, proven = target, max(proven, bound)
    return proven

"""The exact method for operator graphs: decomposition over PU-stage configurations.

With disjoint PU sets a plan fixes a *configuration*: the stage each PU serves (unused PUs in
stage 0, used stages a prefix). A311D and BST have 4 PUs, hence 75 configurations, and every plan
belongs to exactly one of them, so::

    optimum = min over configurations c of optimum(c)

Why decompose: inside one configuration the stage of every unit follows from its PU, so every
"same stage?" literal of the monolithic model is a constant: transfers are plain precedence
delays, edges between PUs whose stages go backwards vanish, and CP-SAT propagates and branches
on the placement alone. On a311d/inception_v1 (fused, 85 units) a monolithic probe "is there a
plan with period <= 12.5 ms?" finds neither a plan nor a refutation in 40 s, while 68 of the 75
configurations are refuted in 0.01-4 s each and two of them yield plans within a second.

The search (a best-first branch over configurations, each solved by CP-SAT):

* every configuration starts with the certified bound of the whole instance
  (formulations/mapping/bounds.py) and the incumbent (the warm start) as the upper bound;
* the open configuration with the lowest bound gets a solve of its model (the PU-stage model of
  ``cpsat_pu_stages.py`` with the configuration fixed), minimising the objective, with the
  objective capped just below the incumbent: only improvements are sought;
* a solve that proves its configuration cannot beat the incumbent closes it (its bound becomes the
  cap); one that proves its optimum closes it too (bound = that optimum); one that stops with a
  plan raises the configuration's bound to CP-SAT's bound and doubles its next time slice; one
  that stops with nothing makes the next solve of that configuration a probe at the middle of its
  open interval (destructive bounding, as in Klein and Scholl, EJOR 1999: a refuted cap is a
  bound, and refuting is far easier than optimising when the cap is well below the incumbent);
* the bound of the instance is the least bound over the open configurations (and the incumbent
  when none is left): certified, because the configurations cover every plan.

For the period and the latency the model is the capped one (``period_cap``; a plan whose
latency is at most L has a period at most L too): every time rounded down, so a refutation or
an objective bound holds for the evaluator's values with no rounding slack. For energy the
uncapped model is used and its bound is reduced by its rounding slack (``bound_from_model``). Epsilon constraints (``bounds``) apply to every configuration, so
exact fronts use the same method.

A configuration whose own time slices all end unproven keeps the instance open: the result then
says ``time_limit`` with the certified gap, and ``params["configurations"]`` counts how many were
closed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from pipeplan.core.deadline import Deadline, OutOfTime
from pipeplan.core.vocabulary import MAPPING_KEYS as AXES
from pipeplan.formulations.mapping.bounds import (
    TEST_BUDGET,
    VISITS_PER_WORK,
    Bound,
    ProblemArrays,
    configuration_bound,
    period_windows,
    stage_configurations,
)
from pipeplan.formulations.mapping.evaluator import evaluate
from pipeplan.formulations.mapping.plan import Plan
from pipeplan.formulations.mapping.problem import MappingProblem
from pipeplan.solvers.cpsat_backend import true_bound
from pipeplan.solvers.mapping.cpsat_model import bound_from_model, floor_units, from_model, to_model
from pipeplan.solvers.mapping.cpsat_pu_stages import CAP_TICK, PuStageCpModel

MODEL_MISMATCH = 0.01    # relative, beyond the model's own rounding (slack) of the plan's value
PROOF_GAP = 1e-4         # a configuration may not beat the incumbent by less than this (relative)
FIRST_SLICE_S = 0.25     # each configuration's first solve (s, or deterministic s under a work limit),
                         # then doubled per unproven attempt
REBUILD_GAIN = 0.02      # rebuild the capped model when the incumbent improves by this much
BOUND_SHARE = 0.25       # of the work limit (or else the seconds left) as the per-configuration tests'
                         # budget, in units of bounds.VISITS_PER_WORK (about a second of Python each)


@dataclass
class Config:
    stages: tuple[int, ...]          # stage of each PU (profile order)
    lower: float                     # certified bound of the objective inside this configuration
    slice_s: float = FIRST_SLICE_S
    closed: bool = False
    solves: int = 0
    ceiling: float = math.inf        # a solve capped here ended with neither a plan nor a proof


@dataclass
class ConfigSearch:
    plan: Plan
    upper: float                     # the evaluator's value of ``plan``
    lower: Bound
    proven: bool
    configs: list[Config] = field(default_factory=list)
    work: float = 0.0
    stopped_by: str | None = None
    eps: dict[str, float] = field(default_factory=dict)   # objective key -> upper bound every plan meets
    # a configuration's model optimum whose plan the evaluator put far above it: its closure
    # proves nothing (a unit of zero time inside another's interval on its PU, which CP-SAT's
    # no-overlap allows and the evaluator's per-PU order cannot run: a 10.581 ms incumbent had
    # been called proven with the optimum at 7.099 ms)
    inexact: bool = False

    @property
    def summary(self) -> dict:
        return {"configurations": len(self.configs), "closed": sum(c.closed for c in self.configs),
                "solves": sum(c.solves for c in self.configs)}


def search_configurations(problem: MappingProblem, objective: str, incumbent: Plan, lower: Bound, *,
                          deadline: Deadline, seed: int = 0, threads: int = 1, work_limit: float | None = None,
                          max_stages: int | None = None, eps: dict[str, float] | None = None,
                          progress=None) -> ConfigSearch:
    """Minimise ``objective`` with disjoint PU sets (see the module docstring); ``incumbent`` must
    meet the epsilon bounds ``eps`` (objective key -> upper bound) when they are given."""
    key = AXES[objective]
    upper = evaluate(problem, incumbent).objectives()[key]
    out = ConfigSearch(incumbent, upper, lower, False, eps=dict(eps or {}))
    # period and latency: the capped model (a plan with latency <= L also has period <= L)
    capped = objective in ("period", "latency") and "energy_mj" not in (eps or {})
    try:
        arrays = ProblemArrays(problem, deadline=deadline)
        model = _build(problem, objective, out.upper if capped else None, deadline, max_stages, eps,
                       arrays.with_budget(TEST_BUDGET))
    except OutOfTime:
        out.stopped_by = "time"
        return out
    if model is None:                     # the incumbent's own period refuted: it is optimal
        out.lower, out.proven = Bound(out.upper, "forced-placement"), True
        return out
    built_at = out.upper
    budget = VISITS_PER_WORK * max(2.0, BOUND_SHARE * (work_limit or deadline.remaining() or 16.0))
    data, solve_data = arrays.with_budget(budget), arrays.with_budget(TEST_BUDGET)
    out.configs = [Config(stages, lower.value) for stages in stage_configurations(problem, max_stages)]
    try:
        if capped:     # the forced-placement test with the configuration known: first at the cap,
            target = out.upper * (1 - PROOF_GAP)             # then bisection for the survivors
            latency = objective == "latency"
            for config in out.configs:
                deadline.check()
                if period_windows(problem, _window_cap(target, out), config.stages, data) is None or (
                        latency and period_windows(problem, target, config.stages, data, latency=True) is None):
                    config.lower, config.closed = target, True
            for config in out.configs:
                if not config.closed:
                    deadline.check()
                    config.lower = configuration_bound(problem, config.stages, config.lower, target, data, latency)
        while True:
            if capped and out.upper < built_at * (1 - REBUILD_GAIN):
                rebuilt = _build(problem, objective, out.upper, deadline, max_stages, eps,
                                 arrays.with_budget(TEST_BUDGET))
                if rebuilt is None:
                    for c in out.configs:
                        c.lower, c.closed = max(c.lower, out.upper), True
                else:
                    model, built_at = rebuilt, out.upper
            open_ = [c for c in out.configs if not c.closed and c.lower < out.upper * (1 - PROOF_GAP)]
            for c in out.configs:
                if not c.closed and c not in open_:
                    c.closed = True
            _update_lower(out)
            if not open_:
                out.proven = not out.inexact
                return out
            left_work = None if work_limit is None else work_limit - out.work
            if left_work is not None and left_work <= 0:
                out.stopped_by = "work"
                return out
            left = deadline.remaining()
            if left is not None and left <= 0.05:
                out.stopped_by = "time"
                return out
            config = min(open_, key=lambda c: (c.lower, c.solves))
            if left_work is None:         # slices of wall-clock time
                limits = {"time_limit": config.slice_s if left is None else min(left, config.slice_s),
                          "work_limit": None}
            else:                         # slices of work: the same search on any machine load
                limits = {"time_limit": left, "work_limit": min(left_work, config.slice_s)}
            _solve_config(problem, model, config, out, objective, solve_data, seed=seed, threads=threads, **limits)
            if progress:
                done = sum(c.closed for c in out.configs)
                progress(done, len(out.configs), f"{key} in [{out.lower.value:.4f}, {out.upper:.4f}]")
    except OutOfTime:
        out.stopped_by = "time"
        _update_lower(out)
        return out


def _build(problem, objective, cap, deadline, max_stages, eps, data):
    """The model every configuration is cut from: capped at the incumbent for the period."""
    model = PuStageCpModel(problem, max_stages=max_stages, deadline=deadline, period_cap=cap, data=data)
    if model.infeasible_cap:
        return None
    for k, value in (eps or {}).items():   # relaxed by the rounding: plans found are checked exactly
        axis = k.split("_")[0]
        if cap is None:
            model.add_cap(axis, value, +1)
        elif axis in ("period", "latency"):   # rounded down, as every time of the capped model, past
            model.add_upper_bound(axis, floor_units(value * CAP_TICK + 1e-6))   # float error (9.764 x 1e5)
        else:
            raise ValueError("an energy bound with the period objective needs the uncapped model")
    return model


def _solve_config(problem, model, config: Config, out: ConfigSearch, objective: str, data, *, seed, threads,
                  time_limit, work_limit) -> None:
    """One solve of ``config``, capped just below the incumbent or, after a solve that ended with
    nothing, at the middle of the configuration's open interval (destructive bounding: a
    refuted cap is a bound, a plan an incumbent)."""
    m = model.m.Clone()
    for p, s in zip(model.pus, config.stages):
        m.Add(m.GetBoolVarFromProtoIndex(model.g[(p, s)].Index()) == 1)
    var = m.GetIntVarFromProtoIndex(model.vars[objective].Index())
    target = out.upper * (1 - PROOF_GAP)                 # only improvements are sought
    cap = target if config.ceiling >= target else (config.lower + config.ceiling) / 2
    if model.capped:
        data.visits = 0                                   # a fresh budget for each solve's windows
        period_cap = _window_cap(cap, out)
        windows = period_windows(problem, period_cap, config.stages, data)
        if windows is None:                               # refuted without a solve
            config.lower = max(config.lower, cap)
            config.closed = cap >= target
            return
        _add_windows(m, model, windows, period_cap)
        m.Add(var <= math.floor(cap * model.tick))
    else:
        m.Add(var <= to_model(objective, cap, model.escale) + math.floor(model.slack[objective]))
    res = model.solve(objective, time_limit=time_limit, seed=seed, threads=threads, work_limit=work_limit, model=m)
    out.work += res.work
    config.solves += 1
    key = AXES[objective]
    if res.plan is not None:
        values = evaluate(problem, res.plan).objectives()
        meets = all(values[k] <= v * (1 + 1e-12) for k, v in out.eps.items())
        if meets and values[key] < out.upper:
            out.plan, out.upper = res.plan, values[key]
    if res.status == "infeasible":
        config.lower = max(config.lower, cap)
        config.closed = cap >= target
        return
    if res.bound is not None:
        if model.capped:
            value = true_bound(res.bound, 0.0, model.tick)
        else:
            value = bound_from_model(objective, res.bound, model.slack[objective], model.escale)
        config.lower = max(config.lower, value)
    if res.status == "optimal":
        config.closed = True
        # the model's own value of its plan against the evaluator's, for a time (the schedule
        # matters there; an energy differs by the model's rounding only, a large share of a few uJ)
        if res.plan is not None and objective in ("period", "latency"):
            if model.capped:            # times rounded down: no rounding to add
                own_ms = res.values[objective] / model.tick
            else:
                own_ms = from_model(objective, res.values[objective] + model.slack[objective], model.escale)
            if values[key] > own_ms * (1 + MODEL_MISMATCH) + 1e-9:
                out.inexact = True
    else:
        config.slice_s *= 2
        if res.plan is None:
            config.ceiling = min(config.ceiling, cap)
            if config.ceiling - config.lower <= PROOF_GAP * config.ceiling:
                config.ceiling = math.inf     # nothing left to probe below: solve at the incumbent


def _window_cap(cap: float, out: ConfigSearch) -> float:
    """The period every plan sought has at most: the cap (a latency cap bounds the period too),
    or the epsilon bound on the period when that is lower."""
    return min(cap, out.eps.get("period_ms", math.inf))


def _add_windows(m, model: PuStageCpModel, windows, cap: float) -> None:
    """The configuration's heads and tails at ``cap`` as release times and deadlines (rounded
    down, as every time of the capped model), and the placements they exclude."""
    idx = model.problem.index
    pk = {p: i for i, p in enumerate(model.pus)}
    for (u, p), lit in model.on.items():
        i, j = idx[u], pk[p]
        var = m.GetBoolVarFromProtoIndex(lit.Index())
        if not windows.allowed[i, j]:
            m.Add(var == 0)
            continue
        start = m.GetIntVarFromProtoIndex(model.start[u].Index())
        head = math.floor(windows.head[i, j] * model.tick)
        latest = math.floor((cap - windows.tail[i, j]) * model.tick) - model.dur[(u, p)]
        if head > 0:
            m.Add(start >= head).OnlyEnforceIf(var)
        m.Add(start <= latest).OnlyEnforceIf(var)


def _update_lower(out: ConfigSearch) -> None:
    open_bounds = [c.lower for c in out.configs if not c.closed]
    closed_bounds = [c.lower for c in out.configs if c.closed]
    value = min(open_bounds + [out.upper * (1 - PROOF_GAP)] + closed_bounds, default=out.upper)
    value = min(value, out.upper)
    if value > out.lower.value:
        out.lower = Bound(value, "stage configurations (CP-SAT)")

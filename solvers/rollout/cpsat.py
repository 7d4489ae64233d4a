"""Offline optimum with known response lengths, on CP-SAT.

The model (``fixed_model``): an interval per request (fixed length) under two cumulative
constraints (running sequences, KV tokens); each group's completion is the max of its
requests' ends; the trainer's updates run one after another, each holding U groups (a free
assignment) and starting after all of them complete, each lasting the trainer model's time
for the tokens it holds (micro-batches counted exactly); the objective is the end of the last
update. The analytic lower bound of the same model is added as a cut, and the search is
hinted with the best engine-like list schedule of a few priority orders.

Every plan is re-scored by replaying it in the simulator. With a linear engine the model is
the simulator, so a proven model optimum is the optimum; otherwise the model uses the mean
per-token time of a simulated ``cgp`` run and the replayed figure stands, with the analytic
simulator bound as its bound (the result then says ``feasible``, never ``proven_optimal``).
"""
from __future__ import annotations

import math
import time

from pipeplan.formulations.rollout.bounds import train_end_lower_bound
from pipeplan.formulations.rollout.fixed_model import completions, fixed_model, list_schedule
from pipeplan.formulations.rollout.problem import EngineModel, RolloutProblem
from pipeplan.formulations.rollout.replay import replay
from pipeplan.formulations.rollout.schedule import PLAN_SCHEMA
from pipeplan.formulations.rollout.simulator import simulate
from pipeplan.formulations.rollout.trainer import chunks, run_updates, stream_order
from pipeplan.registry import register
from pipeplan.result import Quality, Termination
from pipeplan.solvers.rollout.common import scored_result
from pipeplan.solvers.rollout.policies import CgpPolicy

SCALE = 10**6  # trainer coefficients are kept in millionths of the time unit
GRID = 1000    # with a linear engine, time units per decode step
OPTIMALITY_TOL = 1e-5  # relative; what is left when update times were rounded to the time unit


def measured_tau(problem: RolloutProblem) -> float:
    """Mean seconds per token a request spends in the engine (admit to finish) under ``cgp``."""
    s = simulate(problem, CgpPolicy())
    return sum(f - a for a, f in zip(s.admit_s, s.finish_s)) / max(1, sum(problem.lengths))


def _hint_orders(problem: RolloutProblem) -> dict[str, list[int]]:
    L = problem.lengths
    group_major_lpt = sorted(range(problem.n_requests), key=lambda i: (i // problem.K, -L[i]))
    by_group_max = sorted(range(problem.R), key=lambda g: max(L[i] for i in problem.group_requests(g)))
    easy_first = [i for g in by_group_max for i in sorted(problem.group_requests(g), key=lambda i: -L[i])]
    return {"group-major": list(range(problem.n_requests)), "group-major-lpt": group_major_lpt,
            "easy-groups-first": easy_first, "lpt": sorted(range(problem.n_requests), key=lambda i: -L[i]),
            "native": list(problem.native_order)}


class RolloutCpModel:
    """Times are integers in ``unit_s``; request starts are multiples of ``grid`` units."""

    def __init__(self, problem: RolloutProblem, m, unit_s: float, grid: int = 1):
        from ortools.sat.python import cp_model
        self.problem, self.m, self.unit, self.grid = problem, m, unit_s, grid
        p, tr = problem, problem.trainer
        self.dur = [math.ceil(d / unit_s - 1e-9) for d in m.durations]
        coef = [tr.optimizer_step_s, tr.s_per_microbatch, tr.s_per_token]
        self.coef = [round(c / unit_s * SCALE) for c in coef]
        self.exact = m.exact and all(abs(d - x / unit_s) < 1e-6 for d, x in zip(self.dur, m.durations))
        # update times are rounded up to whole units and the coefficients to 1/SCALE unless
        # they are whole: the model's bound then holds for the true times less this slack
        whole = all(abs(x / unit_s - round(x / unit_s)) < 1e-9 for x in coef)
        n_b = len(p.update_sizes())
        most_micro = -(-sum(p.group_tokens) // tr.token_budget)
        self.slack_s = 0.0 if whole else unit_s * (n_b + 0.5 * (n_b * (1 + most_micro) + sum(p.group_tokens)) / SCALE)
        sizes = p.update_sizes()
        self.sizes = sizes
        upd_max = [self._update_time(sum(sorted(p.group_tokens)[len(p.group_tokens) - n:])) for n in sizes]
        horizon = sum(self.dur) + sum(upd_max) + 1
        md = self.md = cp_model.CpModel()
        self.step = [md.NewIntVar(0, horizon // grid, f"k{i}") for i in range(p.n_requests)]
        self.start = [grid * k for k in self.step]
        ivs = [md.NewFixedSizeIntervalVar(self.start[i], self.dur[i], f"iv{i}") for i in range(p.n_requests)]
        md.AddCumulative(ivs, [1] * p.n_requests, m.seqs)
        md.AddCumulative(ivs, list(m.demands), m.capacity)
        self.done = []
        for g in range(p.R):
            c = md.NewIntVar(0, horizon, f"c{g}")
            md.AddMaxEquality(c, [self.start[i] + self.dur[i] for i in p.group_requests(g)])
            self.done.append(c)
        nb = len(sizes)
        self.x = [[md.NewBoolVar(f"x{g}_{j}") for j in range(nb)] for g in range(p.R)]
        self.ustart, self.udur = [], []
        for j in range(nb):
            md.Add(sum(self.x[g][j] for g in range(p.R)) == sizes[j])
            tokens = sum(p.group_tokens[g] * self.x[g][j] for g in range(p.R))
            micro = md.NewIntVar(1, max(1, -(-sum(p.group_tokens) // tr.token_budget)), f"mb{j}")
            md.Add(micro * tr.token_budget >= tokens)
            d = md.NewIntVar(0, horizon, f"d{j}")
            md.Add(SCALE * d >= self.coef[0] + self.coef[1] * micro + self.coef[2] * tokens)
            s = md.NewIntVar(0, horizon, f"u{j}")
            for g in range(p.R):
                md.Add(s >= self.done[g]).OnlyEnforceIf(self.x[g][j])
            if j:
                md.Add(s >= self.ustart[-1] + self.udur[-1])
            self.ustart.append(s)
            self.udur.append(d)
        for g in range(p.R):
            md.AddExactlyOne(self.x[g])
        self.obj = md.NewIntVar(0, 2 * horizon, "train_end")
        md.Add(self.obj == self.ustart[-1] + self.udur[-1])
        # the analytic bound of this very model (a linear engine holding the model's demands)
        cut = train_end_lower_bound(problem, EngineModel(m.seqs, m.capacity, m.tau), m.demands)
        md.Add(self.obj >= math.floor(cut / unit_s * (1 - 1e-9)))
        md.Minimize(self.obj)

    def _update_time(self, tokens: int) -> int:
        micro = self.problem.trainer.microbatches(tokens)
        return -(-(self.coef[0] + self.coef[1] * micro + self.coef[2] * tokens) // SCALE)

    def hint(self, starts: list[int], batches: list[list[int]]) -> None:
        md, p = self.md, self.problem
        md.ClearHints()
        for v, s in zip(self.step, starts):
            md.AddHint(v, s // self.grid)
        done = [max(starts[i] + self.dur[i] for i in p.group_requests(g)) for g in range(p.R)]
        for g, c in enumerate(done):
            md.AddHint(self.done[g], c)
        free = 0
        for j, groups in enumerate(batches):
            for g in range(p.R):
                md.AddHint(self.x[g][j], g in groups)
            d = self._update_time(sum(p.group_tokens[g] for g in groups))
            s = max([free] + [done[g] for g in groups])
            md.AddHint(self.ustart[j], s)
            md.AddHint(self.udur[j], d)
            free = s + d
        md.AddHint(self.obj, free)

    def solve(self, time_limit, seed, threads):
        from ortools.sat.python import cp_model
        solver = cp_model.CpSolver()
        if time_limit is not None:
            solver.parameters.max_time_in_seconds = float(time_limit)
        solver.parameters.num_workers = max(1, int(threads))
        solver.parameters.random_seed = int(seed)
        status = solver.Solve(self.md)
        if status == cp_model.MODEL_INVALID:
            raise RuntimeError(f"CP-SAT model invalid: {self.md.Validate()}")
        names = {cp_model.OPTIMAL: "optimal", cp_model.FEASIBLE: "feasible", cp_model.INFEASIBLE: "infeasible"}
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return names.get(status, "unknown"), None, None, None, None
        starts = [self.grid * solver.Value(v) for v in self.step]
        batches = [[g for g in range(self.problem.R) if solver.Value(self.x[g][j])] for j in range(len(self.ustart))]
        return names[status], starts, batches, solver.BestObjectiveBound(), solver.ObjectiveValue()


@register("rollout", "cpsat", exact=True, requires=("ortools",),
          description="offline optimum with known lengths (CP-SAT), re-scored by replay in the simulator")
def solve_cpsat(problem, *, time_limit=None, seed=0, threads=1, tau: float | None = None,
                time_unit_s: float = 1e-3, **_):
    """With a linear engine every planned start lies on the engine's step grid (c0), so the
    replay is exact. The time limit covers building the model and the hint too."""
    began = time.perf_counter()
    if tau is None and not problem.engine.linear:
        tau = measured_tau(problem)
    m = fixed_model(problem, tau)
    unit, grid = (m.tau / GRID, GRID) if m.exact else (time_unit_s, 1)
    model = RolloutCpModel(problem, m, unit, grid)
    best = None       # hint: the best engine-like list schedule of a few orders, trainer in completion order
    for order in _hint_orders(problem).values():
        starts = list_schedule(m, order)
        done = completions(problem, m, starts)
        batches = chunks(stream_order(done), problem.update_sizes())
        value = run_updates(problem, done, batches)[-1].end_s
        if best is None or value < best[0]:
            best = (value, starts, batches)
    model.hint([grid * math.ceil(s / unit / grid - 1e-9) for s in best[1]], best[2])
    left = None if time_limit is None else max(0.05, time_limit - (time.perf_counter() - began))
    status, starts_u, batches, bound_u, value_u = model.solve(left, seed, threads)
    if starts_u is None:
        raise RuntimeError(f"CP-SAT found no schedule ({status}) within the time limit")
    order = sorted(range(problem.n_requests), key=lambda i: (starts_u[i], i))
    candidates = []
    for timed in (True, False):           # at the planned times, or in the planned order as early as possible
        admissions = [[i, starts_u[i] * unit if timed else 0.0] for i in order]
        plan = {"schema": PLAN_SCHEMA, "policy": "cpsat", "admissions": admissions, "updates": batches,
                "trainer": "planned"}
        for trainer in ("planned", "stream"):
            candidates.append((replay(problem, plan, trainer=trainer), f"{'timed' if timed else 'order'}/{trainer}"))
    schedule, how = min(candidates, key=lambda c: c[0].metrics()["train_end_s"])
    schedule.policy = "cpsat"
    model_value, model_bound = value_u * unit, bound_u * unit
    replayed = schedule.metrics()["train_end_s"]
    if model.exact and replayed > model_value + 1e-6 * max(1.0, model_value):
        raise RuntimeError(f"the replay ({replayed:.6f} s) is worse than the exact model ({model_value:.6f} s)")
    valid_bound = model_bound - model.slack_s if model.exact else None
    proven = model.exact and replayed - valid_bound <= OPTIMALITY_TOL * replayed
    model_gap = (model_value - model_bound) / model_value if model_value > 0 else 0.0
    params = {"tau_s": m.tau, "time_unit_s": unit, "model_exact": model.exact, "model_status": status,
              "model_train_end_s": model_value, "model_bound_s": model_bound, "model_gap": model_gap, "replay": how}
    termination = (Termination.OPTIMAL if proven else
                   Termination.TIME_LIMIT if status == "feasible" else Termination.COMPLETED)
    message = (f"CP-SAT {status} on the {'exact' if model.exact else 'approximate'} fixed-duration model "
               f"(tau {m.tau * 1e3:.3f} ms/token): {model_value:.3f} s, bound {model_bound:.3f} s, "
               f"model gap {model_gap:.2%}; replayed ({how}) {replayed:.3f} s")
    return scored_result(problem, "cpsat", schedule, termination=termination,
                         quality=Quality.PROVEN_OPTIMAL if proven else Quality.FEASIBLE,
                         bound=valid_bound, params=params, message=message)

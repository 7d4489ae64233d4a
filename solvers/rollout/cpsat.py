"""Offline optimum with known response lengths, on CP-SAT.

The model (``fixed_model``): an interval per request (fixed length) under two cumulative
constraints (running sequences, KV tokens); each group's completion is the max of its
requests' ends; the trainer's updates run one after another, each holding U groups (a free
assignment) and starting after all of them complete, each lasting the trainer model's time
for the tokens it holds (micro-batches counted exactly); the objective is the end of the last
update. The analytic lower bound of the same model is added as a cut, and the search is
hinted with the best engine-like list schedule of a few priority orders (one of them the
groups in Johnson's flow-shop order, ``flowshop_bound.johnson_order``).

Every plan is re-scored by replaying it in the simulator. With a linear engine the model is
the simulator, so a proven model optimum is the optimum; otherwise the model uses the mean
per-token time of a simulated ``cgp`` run and the replayed figure stands, with the analytic
simulator bound as its bound (the result then says ``feasible``, never ``proven_optimal``).

The time limit covers everything: the hint is built first; the model (R x R/U assignment
literals, so it grows quadratically) is built while time is left, less the replay's share; when
the model is not built in time or CP-SAT finds no schedule, the hint schedule is replayed and
returned with termination ``time_limit`` and its gap to the analytic bound.

``work_limit`` (CP-SAT deterministic seconds) is the search's work limit: with one thread a run
it stops is the same on any machine load, the wall clock being the safety net;
``SolveResult.stopped_by`` says which limit stopped a run.
"""
from __future__ import annotations

import math
import time

from pipeplan.core.deadline import Deadline, OutOfTime
from pipeplan.core.errors import InputError
from pipeplan.core.param_values import VALUES
from pipeplan.core.registry import register
from pipeplan.core.result import Quality, Termination, stop_note
from pipeplan.formulations.rollout.bounds import train_end_lower_bound
from pipeplan.formulations.rollout.fixed_model import completions, fixed_model, list_schedule
from pipeplan.formulations.rollout.flowshop_bound import johnson_order
from pipeplan.formulations.rollout.problem import EngineModel, RolloutProblem
from pipeplan.formulations.rollout.replay import replay
from pipeplan.formulations.rollout.schedule import PLAN_SCHEMA
from pipeplan.formulations.rollout.simulator import simulate
from pipeplan.formulations.rollout.trainer import chunks, run_updates, stream_order
from pipeplan.solvers.cpsat_backend import check_work_limit, set_limits, stopped_by, work_done
from pipeplan.solvers.rollout.common import scored_result, search_deadline
from pipeplan.solvers.rollout.policies import CgpPolicy

SCALE = 10**6  # trainer coefficients are kept in millionths of the time unit
GRID = 1000    # with a linear engine, time units per decode step
OPTIMALITY_TOL = 1e-5  # relative; what is left when update times were rounded to the time unit
# CP-SAT loads (and presolves) a model in about 0.2 x the time Python took to build it, before it
# looks at its time limit (lsat-ar R = 512: 0.33 s after a 1.86 s build; R = 2,000: 5.6 s after
# 29.9 s, with a 0.1 s limit): with less time left than this share, the model is not solved
LOAD_PER_BUILD = 0.25
# CP-SAT's integers are 64-bit and it refuses a constraint whose terms could overflow them: the
# update rows scale times by SCALE, so a round may span at most this many time units
MAX_HORIZON_UNITS = 2**61 // (2 * SCALE)


def measured_tau(problem: RolloutProblem) -> float:
    """Mean seconds per token a request spends in the engine (admit to finish) under ``cgp``."""
    s = simulate(problem, CgpPolicy())
    return sum(f - a for a, f in zip(s.admit_s, s.finish_s)) / max(1, sum(problem.lengths))


def _hint_orders(problem: RolloutProblem) -> dict[str, list[int]]:
    L = problem.lengths
    group_major_lpt = sorted(range(problem.n_requests), key=lambda i: (i // problem.K, -L[i]))
    by_group_max = sorted(range(problem.R), key=lambda g: max(L[i] for i in problem.group_requests(g)))
    easy_first = [i for g in by_group_max for i in sorted(problem.group_requests(g), key=lambda i: -L[i])]
    johnson = [i for g in johnson_order(problem) for i in sorted(problem.group_requests(g), key=lambda i: -L[i])]
    return {"group-major": list(range(problem.n_requests)), "group-major-lpt": group_major_lpt, "johnson": johnson,
            "easy-groups-first": easy_first, "lpt": sorted(range(problem.n_requests), key=lambda i: -L[i]),
            "native": list(problem.native_order)}


class RolloutCpModel:
    """Times are integers in ``unit_s``; request starts are multiples of ``grid`` units."""

    def __init__(self, problem: RolloutProblem, m, unit_s: float, grid: int = 1, deadline: Deadline | None = None,
                 coarser_unit: bool = True):
        """Raises OutOfTime when ``deadline`` passes before the model is built, InputError when the
        round's times in units of ``unit_s`` overflow CP-SAT's integers (naming a ``time_unit_s``
        that fits, where the solver takes one: ``coarser_unit``)."""
        from ortools.sat.python import cp_model
        deadline = deadline or Deadline(None)
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
        if horizon > MAX_HORIZON_UNITS or self.coef[2] * sum(p.group_tokens) > SCALE * MAX_HORIZON_UNITS:
            fits = unit_s * max(horizon, self.coef[2] * sum(p.group_tokens) / SCALE) / MAX_HORIZON_UNITS
            coarsest = VALUES["time_unit_s"].hi
            raise InputError(p.source or p.name, "time_unit_s" if not m.exact else "response_tokens",
                             f"the round spans about {horizon * unit_s:.3g} s, {horizon:.3g} units of {unit_s:g} s: "
                             f"more than CP-SAT's 64-bit integer time holds ({MAX_HORIZON_UNITS:.3g} units)"
                             + (f"; time_unit_s={fits * 1.01:.3g} fits it" if coarser_unit and not m.exact and fits * 1.01 <= coarsest
                                else ""))
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
        self.x = []
        for g in range(p.R):
            deadline.check()
            self.x.append([md.new_bool_var(f"x{g}_{j}") for j in range(nb)])
        self.ustart, self.udur = [], []
        total = cp_model.LinearExpr
        for j in range(nb):
            deadline.check()
            column = [self.x[g][j] for g in range(p.R)]
            md.add(total.sum(column) == sizes[j])
            tokens = total.weighted_sum(column, p.group_tokens)
            micro = md.NewIntVar(1, max(1, -(-sum(p.group_tokens) // tr.token_budget)), f"mb{j}")
            md.Add(micro * tr.token_budget >= tokens)
            d = md.NewIntVar(0, horizon, f"d{j}")
            md.Add(SCALE * d >= self.coef[0] + self.coef[1] * micro + self.coef[2] * tokens)
            s = md.NewIntVar(0, horizon, f"u{j}")
            for g in range(p.R):
                md.add(s >= self.done[g]).only_enforce_if(self.x[g][j])
            if j:
                md.Add(s >= self.ustart[-1] + self.udur[-1])
            self.ustart.append(s)
            self.udur.append(d)
        for g in range(p.R):
            md.AddExactlyOne(self.x[g])
        self.obj = md.NewIntVar(0, 2 * horizon, "train_end")
        md.Add(self.obj == self.ustart[-1] + self.udur[-1])
        # the analytic bound of this very model (a linear engine holding the model's demands).
        # The flow-shop cuts (flowshop_bound.add_chain_cuts) are implied too but are left out:
        # measured on lsat-ar R = 32 (linear, rho 0.5, 45 s, 2 threads) they slowed the search
        # (284.0 s vs 272.6 s found, bound 222.6 s vs 229.6 s); the relaxation is solved on its
        # own instead (bounds.strong_train_end_lower_bound)
        cut = train_end_lower_bound(problem, EngineModel(m.seqs, m.capacity, m.tau), m.demands)
        md.Add(self.obj >= math.floor(cut / unit_s * (1 - 1e-9)))
        md.Minimize(self.obj)

    def _update_time(self, tokens: int) -> int:
        micro = self.problem.trainer.microbatches(tokens)
        return -(-(self.coef[0] + self.coef[1] * micro + self.coef[2] * tokens) // SCALE)

    def hint(self, starts: list[int], batches: list[list[int]], deadline: Deadline | None = None) -> None:
        """Raises OutOfTime when ``deadline`` passes first."""
        md, p = self.md, self.problem
        deadline = deadline or Deadline(None)
        md.ClearHints()
        for v, s in zip(self.step, starts):
            md.AddHint(v, s // self.grid)
        done = [max(starts[i] + self.dur[i] for i in p.group_requests(g)) for g in range(p.R)]
        for g, c in enumerate(done):
            md.AddHint(self.done[g], c)
        free = 0
        for j, groups in enumerate(batches):
            deadline.check()
            for g in range(p.R):
                md.add_hint(self.x[g][j], g in groups)
            d = self._update_time(sum(p.group_tokens[g] for g in groups))
            s = max([free] + [done[g] for g in groups])
            md.AddHint(self.ustart[j], s)
            md.AddHint(self.udur[j], d)
            free = s + d
        md.AddHint(self.obj, free)

    def solve(self, time_limit, seed, threads, work_limit: float | None = None):
        """(status, starts, batches, bound, value); ``self.work`` and ``self.stopped_by`` then
        hold the deterministic time used and the limit that stopped the solve, if one did."""
        from ortools.sat.python import cp_model
        solver = cp_model.CpSolver()
        if time_limit is not None:
            solver.parameters.max_time_in_seconds = float(time_limit)
        set_limits(solver, time_limit=None, work_limit=work_limit)
        solver.parameters.num_workers = max(1, int(threads))
        solver.parameters.random_seed = int(seed)
        status = solver.Solve(self.md)
        if status == cp_model.MODEL_INVALID:
            raise RuntimeError(f"CP-SAT model invalid: {self.md.Validate()}")
        names = {cp_model.OPTIMAL: "optimal", cp_model.FEASIBLE: "feasible", cp_model.INFEASIBLE: "infeasible"}
        self.work = work_done(solver)
        self.stopped_by = stopped_by(names.get(status, "unknown"), self.work, work_limit)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return names.get(status, "unknown"), None, None, None, None
        starts = [self.grid * solver.Value(v) for v in self.step]
        batches = [[g for g in range(self.problem.R) if solver.Value(self.x[g][j])] for j in range(len(self.ustart))]
        return names[status], starts, batches, solver.BestObjectiveBound(), solver.ObjectiveValue()


def model_units(m, time_unit_s: float = 1e-3) -> tuple[float, int]:
    """(time unit in seconds, grid in units) of the model: with a linear engine a thousandth of a
    decode step and starts on whole steps (the replay is then exact), else ``time_unit_s``."""
    return (m.tau / GRID, GRID) if m.exact else (time_unit_s, 1)


def on_grid(starts_s, unit: float, grid: int) -> list[int]:
    """Starts in seconds as model units on the grid, rounded up (never earlier than planned)."""
    return [grid * math.ceil(s / unit / grid - 1e-9) for s in starts_s]


def best_hint(problem: RolloutProblem, m, deadline: Deadline) -> tuple[float, list[float], list[list[int]], str]:
    """The best engine-like list schedule of a few priority orders on the fixed model, the
    trainer in completion order: (model train end, starts in seconds, updates, order name).
    Past the deadline no further order is tried (the first always is)."""
    best = None
    for name, order in _hint_orders(problem).items():
        if best is not None and deadline.expired():
            break
        starts = list_schedule(m, order)
        done = completions(problem, m, starts)
        batches = chunks(stream_order(done), problem.update_sizes())
        value = run_updates(problem, done, batches)[-1].end_s
        if best is None or value < best[0]:
            best = (value, starts, batches, name)
    return best


def best_replay(problem: RolloutProblem, plans: list[tuple[str, list[float], list[list[int]]]],
                deadline: Deadline):
    """The best replay of some plans (name, starts in seconds, updates): each at the planned
    times or in the planned order as early as possible, with the planned or the streaming
    trainer. No further replay starts when the last one would not fit in the time left (the
    first of each plan always does). Returns (schedule, plan name, how)."""
    best, tried, took = None, set(), 0.0
    for timed in (True, False):
        for trainer in ("planned", "stream"):
            for name, starts_s, batches in plans:
                if name in tried and deadline.limit is not None and deadline.remaining() < took:
                    continue
                tried.add(name)
                began = time.perf_counter()
                order = sorted(range(problem.n_requests), key=lambda i: (starts_s[i], i))
                admissions = [[i, starts_s[i] if timed else 0.0] for i in order]
                plan = {"schema": PLAN_SCHEMA, "policy": "cpsat", "admissions": admissions, "updates": batches,
                        "trainer": "planned"}
                schedule = replay(problem, plan, trainer=trainer)
                took = time.perf_counter() - began
                if best is None or schedule.metrics()["train_end_s"] < best[0].metrics()["train_end_s"]:
                    best = (schedule, name, f"{'timed' if timed else 'order'}/{trainer}")
    return best


@register("rollout", "cpsat", exact=True, requires=("ortools",),
          description="offline optimum with known lengths (CP-SAT), re-scored by replay in the simulator")
def solve_cpsat(problem, *, time_limit=None, seed=0, threads=1, tau: float | None = None,
                time_unit_s: float = 1e-3, work_limit: float | None = None):
    """With a linear engine every planned start lies on the engine's step grid (c0), so the
    replay is exact. The time limit covers building the model and the hint too; past it the
    hint schedule comes back (termination time_limit). ``work_limit``: CP-SAT deterministic
    seconds for the search (None: none). One round only: several rounds (``problem.rounds``)
    raise InputError. On several replicas or with shared prefixes the fixed-duration model is
    a heuristic (its plan replayed in the simulator), never a proof."""
    check_work_limit(work_limit)
    if problem.rounds > 1:
        raise InputError(problem.source or problem.name, "rounds",
                         f"the offline optimum plans one round; this problem has {problem.rounds} "
                         "(simulate the online policies instead)")
    clock = Deadline(time_limit)
    search = search_deadline(clock, problem)
    if tau is None and not problem.engine.linear:
        tau = measured_tau(problem)
    m = fixed_model(problem, tau)
    unit, grid = model_units(m, time_unit_s)
    hint = best_hint(problem, m, search)
    status, why, work = "not built", "time", 0.0
    try:
        search.check()
        began = time.perf_counter()
        model = RolloutCpModel(problem, m, unit, grid, deadline=search)
        model.hint(on_grid(hint[1], unit, grid), hint[2], deadline=search)
        search.check()
        left = search.remaining()
        if left is not None and left < LOAD_PER_BUILD * (time.perf_counter() - began):
            status = "left unsolved"       # CP-SAT would spend more than the time left loading it
            raise OutOfTime
        status, starts_u, batches, bound_u, value_u = model.solve(search.remaining(floor=0.05), seed, threads,
                                                                  work_limit)
        why, work = model.stopped_by, model.work
    except OutOfTime:
        starts_u = None
    if status == "infeasible":
        raise RuntimeError("CP-SAT found the fixed-duration model infeasible")
    plans = [] if starts_u is None else [("cpsat", [s * unit for s in starts_u], batches)]
    if status != "optimal":      # cut short by the time limit: the hint competes
        plans.append(("hint", hint[1], hint[2]))
    schedule, source, how = best_replay(problem, plans, clock)
    schedule.policy = "cpsat"
    if source == "hint":
        limit = "work limit" if why == "work" else "time limit"
        if starts_u is None:
            why_text = {"not built": f"CP-SAT model not built within the {limit}",
                        "left unsolved": f"CP-SAT model built with too little of the {limit} left to load it"
                        }.get(status, f"CP-SAT {status} within the {limit}")
            valid_bound = None
        else:
            why_text = (f"CP-SAT's best within the {limit} ({value_u * unit:.3f} s on the model) replays worse "
                        "than the hint")
            valid_bound = (bound_u * unit - model.slack_s) if model.exact else None
        return _hint_result(problem, m, unit, hint, status, schedule, how, why_text, valid_bound, why or "time",
                            work, work_limit)
    model_value, model_bound = value_u * unit, bound_u * unit
    replayed = schedule.metrics()["train_end_s"]
    if model.exact and replayed > model_value + 1e-6 * max(1.0, model_value):
        raise RuntimeError(f"the replay ({replayed:.6f} s) is worse than the exact model ({model_value:.6f} s)")
    valid_bound = model_bound - model.slack_s if model.exact else None
    proven = model.exact and replayed - valid_bound <= OPTIMALITY_TOL * replayed
    model_gap = (model_value - model_bound) / model_value if model_value > 0 else 0.0
    params = {"tau_s": m.tau, "time_unit_s": unit, "model_exact": model.exact, "model_status": status,
              "model_train_end_s": model_value, "model_bound_s": model_bound, "model_gap": model_gap, "replay": how,
              "work_limit": work_limit, "work": work}
    termination = (Termination.OPTIMAL if proven else
                   Termination.TIME_LIMIT if status == "feasible" else Termination.COMPLETED)
    stopped = why if termination == Termination.TIME_LIMIT else None
    message = (f"CP-SAT {status} on the {'exact' if model.exact else 'approximate'} fixed-duration model "
               f"(tau {m.tau * 1e3:.3f} ms/token): {model_value:.3f} s, bound {model_bound:.3f} s, "
               f"model gap {model_gap:.2%}; replayed ({how}) {replayed:.3f} s")
    if stopped:
        message += "; " + stop_note(stopped, f"{work:.3f} deterministic s")
    return scored_result(problem, "cpsat", schedule, termination=termination,
                         quality=Quality.PROVEN_OPTIMAL if proven else Quality.FEASIBLE,
                         bound=valid_bound, params=params, message=message, stopped_by=stopped)


def _hint_result(problem, m, unit, hint, status, schedule, how, why, bound, stopped, work, work_limit):
    """The replayed hint schedule: what comes back when CP-SAT has nothing better in time.
    ``bound``: CP-SAT's valid bound, if any (else the analytic one stands); ``stopped``: the
    limit that stopped CP-SAT ("work" or "time")."""
    value, _, _, name = hint
    params = {"tau_s": m.tau, "time_unit_s": unit, "model_exact": m.exact, "model_status": status,
              "hint": name, "hint_model_train_end_s": value, "replay": how, "work_limit": work_limit, "work": work}
    message = (f"{why}: the hint ({name} list schedule, {value:.3f} s on the fixed-duration model) replayed "
               f"({how}) {schedule.metrics()['train_end_s']:.3f} s; bound: "
               + ("the larger of CP-SAT's and the analytic lower bound" if bound is not None
                  else "the analytic lower bound") + "; " + stop_note(stopped, f"{work:.3f} deterministic s"))
    return scored_result(problem, "cpsat", schedule, termination=Termination.TIME_LIMIT, quality=Quality.FEASIBLE,
                         bound=bound, params=params, message=message, stopped_by=stopped)

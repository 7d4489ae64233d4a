"""The CP-SAT models of hierarchical operator parallelism (Para-Pipe): what they share
(:class:`CpModelBase`: durations, rounding slack, bounds, solving) and the unit-by-stage model
(:class:`MappingCpModel`), which the ``cpsat`` solver uses when PUs may serve several stages
(``shared_pus``). With disjoint PU sets (the default) the ``cpsat`` solver and the exact Pareto
sweeps use the tighter PU-stage model of ``cpsat_pu_stages.py``.

The unit-by-stage model:

Decisions: the stage and PU of every unit (``x[u, s, p]``), the PU set of every stage
(``y[s, p]``; disjoint unless ``shared_pus``), and the start of every unit inside its stage
(optional intervals, no overlap per PU, precedence with transfer delays). The constraints
restate the evaluator's rules (formulations/mapping/evaluator.py) in integers:

* times in microseconds, energy in nanojoules (ms x mW x 1000), every PU at its top DVFS level;
* a tensor from an earlier stage is ready at stage start + transfer; from the same stage at the
  producer's end + transfer (0 on the same PU);
* every unit of the first stage starts after the input stage (time by the first unit's PU);
  the stage of the last unit ends after its output stage;
* period >= every stage time and every PU's busy time; latency = sum of stage times;
* energy = active energy + input/output phases + one transfer per (unit, destination PU)
  (+ idle power over the rest of the period for ``per_pu`` profiles).

The unit that reads the input is placed in stage 0 (as in the brute-force plan space).

Building is linear in units x stages x PUs + edges x PU pairs and checks its ``deadline`` per
unit and per edge: past it the builder (and :meth:`MappingCpModel.hint`) raises OutOfTime.

Limits: a solve takes a wall-clock limit and a work limit (``work_limit``: CP-SAT's
deterministic time, ``max_deterministic_time``); with one worker and a fixed seed a solve that
the work limit stops is the same on any machine load. :class:`CpOutcome` says which stopped it.

Bounds: times are rounded to whole microseconds (energies to nanojoules), so a plan's model
value and its evaluator value differ by at most ``MappingCpModel.slack[axis]`` model units.
:func:`bound_from_model` turns CP-SAT's best bound into one that holds for the evaluator's
values: whole model units up (the objective is an integer), less that slack, rounded down.
With ``round_down`` every time is rounded down instead, so the model is a relaxation of the
period and the latency: a plan's schedule with every start rounded down to whole microseconds
meets every constraint (the floor of a sum is at least the sum of the floors), so the model's
optimum or bound holds for the evaluator's values with no slack. ``cpsat`` uses it to certify an
optimum that the rounding slack leaves uncertified.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipeplan.core.deadline import Deadline
from pipeplan.formulations.mapping.plan import Plan, Stage
from pipeplan.formulations.mapping.problem import MappingProblem
from pipeplan.solvers.cpsat_backend import fitting_scale, set_limits, stopped_by, true_bound, work_done
from pipeplan.solvers.mapping.common import paced, transfer_times

if TYPE_CHECKING:
    from ortools.sat.python import cp_model

US = 1000.0      # model time unit: 1 us = 1e-3 ms
NJ = 1000.0      # model energy unit: 1 nJ; ms x mW = uJ, so x 1000
# The most a plan's energy may reach in model units (the energy variable's domain). A profile at
# its limits (1e7 ms at 1e9 mW: 1e19 nJ a unit) passes it, and 64-bit integers: OR-Tools had
# refused the model with a TypeError. Where the largest energy could pass this, the model counts
# energy in coarser units (``CpModelBase.escale`` units per uJ, below NJ; the plans are re-scored
# by the evaluator, and ``slack`` covers the coarser rounding).
MAX_ENERGY_UNITS = 10**15


# Model units past every variable's domain, and inside 64 bits: a cap given as 1e15 ms or 1e308
# mJ (valid, and binding no plan) had reached CP-SAT as an integer past int64 (TypeError) or
# infinity (OverflowError); ``floor_units`` stops there and ``add_upper_bound`` drops such caps.
UNITS_CEILING = 2 ** 62

# OR-Tools 9.15's CP-SAT presolve misjudges these models once a duration passes 2^30 units: on a
# four-unit diamond with shared PUs and every time at 1.1e6-1e7 ms (1.1e9-1e10 us) it proved a
# period of 5 units optimal where 3 is feasible, and the search without presolve proves 3 (found by
# a test audit; times up to 1e6 ms were right). A real unit takes far less (1e6 ms is 17 minutes),
# so only such models are solved without presolve.
PRESOLVE_SAFE_UNITS = 2 ** 30


def floor_units(x: float) -> int:
    """``floor(x)`` for x >= 0, at most ``UNITS_CEILING`` (x may be inf)."""
    return math.floor(x) if x < UNITS_CEILING else UNITS_CEILING


def to_model(axis: str, value: float, escale: float = NJ) -> int:
    """A value in ms (or mJ) in the model's integer units, rounded down (for <= bounds);
    ``escale``: the model's energy units per uJ (``CpModelBase.escale``)."""
    scale = US if axis != "energy" else escale * 1000.0
    return floor_units(value * scale + 1e-6)


def from_model(axis: str, value: float, escale: float = NJ) -> float:
    scale = US if axis != "energy" else escale * 1000.0
    return value / scale


def bound_from_model(axis: str, bound: float, slack: float = 0.0, escale: float = NJ) -> float:
    """CP-SAT's best bound of ``axis`` (model units) as a lower bound in ms (or mJ), never
    rounded up: whole model units up (every model value is an integer), less ``slack`` model
    units (the rounding of the model's times, ``MappingCpModel.slack``), the quotient rounded
    down to the float below when the division rounded it up."""
    return true_bound(bound, slack, US if axis != "energy" else escale * 1000.0)


@dataclass
class CpOutcome:
    status: str                      # optimal | feasible | infeasible | unknown | invalid
    plan: Plan | None
    values: dict[str, int]           # model values of the three objectives (integer units)
    bound: float | None              # best bound of the last objective, model units
    wall_time_s: float
    work: float = 0.0                # CP-SAT's deterministic time of this solve
    stopped_by: str | None = None    # "work" or "time" when a limit stopped the solve, else None


class CpModelBase:
    """What both CP-SAT mapping models share. A subclass builds ``self.m`` and sets ``vars``
    (period, latency, energy), ``start``, ``slack`` and ``S``, and implements ``hint`` and
    ``extract``."""

    def __init__(self, problem: MappingProblem, deadline: Deadline | None):
        self.deadline = deadline or Deadline(None)
        self.problem = problem
        self.tick = US                  # model time units per ms
        self.escale = NJ                # model energy units per uJ (``energy_terms`` may lower it)
        prof = problem.profile
        self.pus = list(prof.pus)
        self.units = [u.name for u in problem.units]
        self.dur = {key: round(t * US) for key, t in self.times_ms().items()}

    def times_ms(self) -> dict[tuple[str, str], float]:
        """(unit, PU) -> the unit's time on the PU at its top level, ms (where it runs)."""
        prof, idx = self.problem.profile, self.problem.index
        top = {p: prof.pus[p].max_level for p in self.pus}
        return {(u, p): t for u in self.units for p in self.pus if (t := prof.time(idx[u], p, top[p])) is not None}

    def phase(self, table, p: str, rounding=round) -> tuple[int, float]:
        """(model time, uJ) of an input or output phase on PU p at its top level; (0, 0) if none."""
        ph = table.get(p, {}).get(self.problem.profile.pus[p].max_level)
        return (rounding(ph.time_ms * self.tick), ph.time_ms * ph.power_mw) if ph else (0, 0.0)

    def rounding_slack(self, runnable, xfer, t_in, t_out, top) -> dict[str, float]:
        """Per axis, the most (model units) by which a plan's model value can differ from its
        evaluator value: a stage time or PU load sums at most one rounded duration per unit, one
        rounded transfer per edge and the input and output phases, and the stages' times sum
        disjoint units (so one sum bounds period and latency); energy sums its rounded terms,
        and with ``per_pu`` the idle power (rounded to mW) over the rounded period and loads.
        ``xfer``: per edge, (PU a, PU b) -> transfer ms."""
        prof, idx = self.problem.profile, self.problem.index

        def err(model: float, true: float) -> float:
            return abs(model - true)
        time_err = sum(max(err(self.dur[(u, p)], prof.time(idx[u], p, top[p]) * US) for p in runnable[u])
                       for u in self.units)
        time_err += sum(max((err(round(t * US), t * US) for t in x.values()), default=0.0) for x in xfer)
        for table in (prof.input_stage, prof.output_stage):
            time_err += max((err(round(ph.time_ms * US), ph.time_ms * US)
                             for p in self.pus if (ph := table.get(p, {}).get(top[p]))), default=0.0)
        e = self.escale
        energy_err = sum(err(round(prof.time(idx[u], p, top[p]) * prof.power(idx[u], p, top[p]) * e),
                             prof.time(idx[u], p, top[p]) * prof.power(idx[u], p, top[p]) * e)
                         for u in self.units for p in runnable[u])
        energy_err += 1.0 + 0.5 * sum(len(x) for x in xfer)   # the input and output phases, the handoffs
        if prof.power_model == "per_pu":
            for p in self.pus:
                idle = prof.pus[p].idle_power_mw * e / NJ
                if idle:
                    energy_err += err(round(idle), idle) * self.horizon + 2 * round(idle) * time_err
        return {"period": time_err, "latency": time_err, "energy": energy_err}

    def energy_terms(self, runnable, t_in, t_out, handoff, handoff_ms, busy) -> list:
        """The energy of a plan in nJ as the evaluator counts it: every unit on its PU, the input
        and output phases, one handoff per (unit, source PU, destination PU) (``handoff``: its
        literal, ``handoff_ms``: its longest transfer), and for ``per_pu`` profiles each PU's
        idle power over ``period - busy`` (mW x us = nJ)."""
        prof, idx = self.problem.profile, self.problem.index
        first, last = self.units[0], self.units[-1]
        top = {p: prof.pus[p].max_level for p in self.pus}
        unit_uj = {(u, p): prof.time(idx[u], p, top[p]) * prof.power(idx[u], p, top[p])
                   for u in paced(self.units, self.deadline) for p in runnable[u]}
        # the most any plan's energy reaches, in nJ: every unit at its dearest PU, every handoff
        most = NJ * (sum(max(unit_uj[(u, p)] for p in runnable[u]) for u in self.units)
                     + max((t_in[p][1] for p in runnable[first]), default=0.0)
                     + max((t_out[p][1] for p in runnable[last]), default=0.0)
                     + sum(t * prof.transfers.power_mw for t in handoff_ms.values()))
        if prof.power_model == "per_pu":
            most += sum(prof.pus[p].idle_power_mw for p in self.pus) * self.horizon
        self.escale = e = fitting_scale(NJ, most / NJ, MAX_ENERGY_UNITS)
        terms = [round(uj * e) * self.on[key] for key, uj in unit_uj.items()]
        terms += [round(t_in[p][1] * e) * self.on[(first, p)] for p in runnable[first]]
        terms += [round(t_out[p][1] * e) * self.on[(last, p)] for p in runnable[last]]
        terms += [round(handoff_ms[key] * prof.transfers.power_mw * e) * h for key, h in handoff.items()]
        if prof.power_model == "per_pu":
            terms += [round(prof.pus[p].idle_power_mw * e / NJ) * (self.period - busy[p])
                      for p in self.pus if round(prof.pus[p].idle_power_mw * e / NJ)]
        return terms

    # ------------------------------------------------------------------ solving

    def add_upper_bound(self, axis: str, value_model_units: int) -> None:
        """``axis`` at most ``value_model_units``; a cap at or past the variable's domain binds
        nothing and is left out."""
        if value_model_units < self.tops[axis]:
            self.m.Add(self.vars[axis] <= value_model_units)

    def add_cap(self, axis: str, value: float, rounding: int) -> None:
        """``axis`` at most ``value`` (ms or mJ) in whole model units, moved by the rounding slack
        ``rounding`` times: +1 keeps every plan whose evaluator value meets the cap (a proof then
        holds; plans found are checked exactly), -1 keeps only plans that meet it, 0 cuts it to
        whole units."""
        self.add_upper_bound(axis, to_model(axis, value, self.escale) + rounding * math.ceil(self.slack[axis]))

    def add_lower_bound(self, axis: str, value: float) -> None:
        """A certified lower bound ``value`` (ms or mJ, for the evaluator's values) as a cut:
        the model value may lie ``slack`` below the evaluator's, so the cut is that much lower."""
        units = int(math.floor(value * (US if axis != "energy" else self.escale * 1000.0) - self.slack[axis] - 1))
        if units > 0:
            self.m.Add(self.vars[axis] >= units)

    def solve(self, objective: str | None, *, time_limit: float | None, seed: int, threads: int,
              work_limit: float | None = None, model=None) -> CpOutcome:
        """Minimise ``objective`` (None: any feasible plan) within ``time_limit`` seconds and
        ``work_limit`` deterministic seconds (either None: no such limit). ``model``: a clone of
        ``self.m`` with extra constraints (same variable indices) to solve instead."""
        from ortools.sat.python import cp_model
        m = model or self.m
        if objective is not None:
            m.Minimize(self.vars[objective])
        else:
            m.ClearObjective()
        solver = cp_model.CpSolver()
        set_limits(solver, time_limit=time_limit, work_limit=work_limit)
        solver.parameters.num_workers = max(1, int(threads))
        solver.parameters.random_seed = int(seed)
        # the LP relaxation with all linear constraints proves block-chain optima faster
        # (YOLOv3, 75 blocks, 2 workers: 8.6 s instead of 11.3 s at the default level)
        solver.parameters.linearization_level = 2
        if max(self.dur.values(), default=0) > PRESOLVE_SAFE_UNITS:
            solver.parameters.cp_model_presolve = False
        code = solver.Solve(m)
        status = {cp_model.OPTIMAL: "optimal", cp_model.FEASIBLE: "feasible", cp_model.INFEASIBLE: "infeasible",
                  cp_model.MODEL_INVALID: "invalid"}.get(code, "unknown")
        if objective is None and status == "optimal":
            status = "feasible"            # a plan exists; nothing was minimised
        plan, values = None, {}
        if status in ("optimal", "feasible"):
            plan = self.extract(solver)
            values = {k: solver.Value(v) for k, v in self.vars.items()}
        # CP-SAT keeps a proven objective bound even when it found no solution (status unknown)
        bound = solver.BestObjectiveBound() if status in ("optimal", "feasible", "unknown") and objective else None
        if status == "invalid":
            raise RuntimeError(f"CP-SAT model invalid: {m.Validate()}")
        work = work_done(solver)
        return CpOutcome(status, plan, values, bound, solver.WallTime(), work, stopped_by(status, work, work_limit))


class MappingCpModel(CpModelBase):
    def __init__(self, problem: MappingProblem, *, shared_pus: bool = False, max_stages: int | None = None,
                 deadline: Deadline | None = None, round_down: bool = False):
        super().__init__(problem, deadline)
        deadline = self.deadline
        rounding = math.floor if round_down else round
        if round_down:
            self.dur = {key: math.floor(t * US) for key, t in self.times_ms().items()}
        self.shared_pus = shared_pus
        prof = problem.profile
        units = self.units
        k = len(self.pus)
        self.S = S = max(1, min(max_stages or (k + 1 if shared_pus else k), len(units)))
        from ortools.sat.python import cp_model  # here, so that the registry loads without it
        m = self.m = cp_model.CpModel()

        top = {p: prof.pus[p].max_level for p in self.pus}
        runnable = {u: [p for p in self.pus if (u, p) in self.dur] for u in units}

        t_in = {p: self.phase(prof.input_stage, p, rounding) for p in self.pus}
        t_out = {p: self.phase(prof.output_stage, p, rounding) for p in self.pus}
        # xfer[k]: (a, b) -> ms of edge k's tensor from PU a to PU b, where both ends run and it costs time
        pk = {p: i for i, p in enumerate(self.pus)}
        xfer = [{(a, b): t for a in runnable[e.src] for b in runnable[e.dst] if a != b and (t := times[pk[a]][pk[b]]) > 0}
                for e, times in paced(zip(problem.edges, transfer_times(problem).tolist()), deadline)]
        horizon = (sum(max(self.dur[(u, p)] for p in runnable[u]) for u in units)
                   + sum(round(max(x.values(), default=0) * US) for x in xfer)
                   + max(v[0] for v in t_in.values()) + max(v[0] for v in t_out.values()) + 1)
        self.horizon = horizon

        # --- assignment
        self.x = {(u, s, p): m.NewBoolVar(f"x[{u},{s},{p}]") for u in paced(units, deadline) for s in range(S)
                  for p in runnable[u]}
        self.on = {(u, p): m.NewBoolVar(f"on[{u},{p}]") for u in paced(units, deadline) for p in runnable[u]}
        y = {(s, p): m.NewBoolVar(f"y[{s},{p}]") for s in range(S) for p in self.pus}
        used = [m.NewBoolVar(f"used[{s}]") for s in range(S)]
        for u in paced(units, deadline):
            m.AddExactlyOne(self.x[(u, s, p)] for s in range(S) for p in runnable[u])
            for p in runnable[u]:
                m.Add(self.on[(u, p)] == sum(self.x[(u, s, p)] for s in range(S)))
                for s in range(S):
                    m.AddImplication(self.x[(u, s, p)], y[(s, p)])
        for s in range(S):
            for p in self.pus:
                m.AddImplication(y[(s, p)], used[s])
            m.Add(used[s] <= sum(self.x[(u, s, p)] for u in paced(units, deadline) for p in runnable[u]))
            if s + 1 < S:
                m.AddImplication(used[s + 1], used[s])
        if not shared_pus:
            for p in self.pus:
                m.AddAtMostOne(y[(s, p)] for s in range(S))
        ins = {(u, s): sum(self.x[(u, s, p)] for p in runnable[u]) for u in paced(units, deadline) for s in range(S)}
        st = {u: sum(s * ins[(u, s)] for s in range(1, S)) for u in paced(units, deadline)}
        first, last = units[0], units[-1]
        m.Add(ins[(first, 0)] == 1)

        # --- schedule inside stages
        self.start = {u: m.NewIntVar(0, horizon, f"start[{u}]") for u in paced(units, deadline)}
        end = {u: m.NewIntVar(0, horizon, f"end[{u}]") for u in paced(units, deadline)}
        for u in paced(units, deadline):
            m.Add(end[u] == self.start[u] + sum(self.on[(u, p)] * self.dur[(u, p)] for p in runnable[u]))
        if shared_pus:
            for s in range(S):
                for p in self.pus:
                    ivs = [m.NewOptionalFixedSizeIntervalVar(self.start[u], self.dur[(u, p)], self.x[(u, s, p)], f"iv[{u},{s},{p}]")
                           for u in paced(units, deadline) if (u, p) in self.dur]
                    if len(ivs) > 1:
                        m.AddNoOverlap(ivs)
        else:
            for p in self.pus:
                ivs = [m.NewOptionalFixedSizeIntervalVar(self.start[u], self.dur[(u, p)], self.on[(u, p)], f"iv[{u},{p}]")
                       for u in paced(units, deadline) if (u, p) in self.dur]
                if len(ivs) > 1:
                    m.AddNoOverlap(ivs)

        z = {}
        handoff: dict[tuple, cp_model.IntVar] = {}
        handoff_ms: dict[tuple, float] = {}      # (unit, a, b) -> its longest out-edge transfer a -> b
        # ge[u, s] <=> unit u sits in stage s or later: monotone stages as clauses (strong propagation)
        ge = {}
        for u in paced(units, deadline):
            for s in range(1, S):
                ge[(u, s)] = m.NewBoolVar(f"ge[{u},{s}]")
                m.Add(ge[(u, s)] == sum(ins[(u, s2)] for s2 in range(s, S)))
        for e, x in paced(zip(problem.edges, xfer), deadline):
            m.Add(st[e.src] <= st[e.dst])
            for s in range(1, S):
                m.AddImplication(ge[(e.src, s)], ge[(e.dst, s)])
            same = m.NewBoolVar(f"same[{e.src},{e.dst}]")
            m.Add(st[e.src] == st[e.dst]).OnlyEnforceIf(same)
            m.Add(st[e.src] < st[e.dst]).OnlyEnforceIf(same.Not())
            terms = []
            for (a, b), t in x.items():
                zv = m.NewBoolVar(f"z[{e.src},{e.dst},{a},{b}]")
                m.AddBoolOr([self.on[(e.src, a)].Not(), self.on[(e.dst, b)].Not(), zv])
                z[(e, a, b)] = zv
                terms.append(rounding(t * US) * zv)
                h = handoff.setdefault((e.src, a, b), m.NewBoolVar(f"h[{e.src},{a},{b}]"))
                handoff_ms[(e.src, a, b)] = max(handoff_ms.get((e.src, a, b), t), t)
                m.AddImplication(zv, h)
            delay = sum(terms)
            m.Add(self.start[e.dst] >= delay)
            m.Add(self.start[e.dst] >= end[e.src] + delay).OnlyEnforceIf(same)

        in_time = sum(self.on[(first, p)] * t_in[p][0] for p in runnable[first])
        out_time = sum(self.on[(last, p)] * t_out[p][0] for p in runnable[last])
        for u in paced(units, deadline):
            m.Add(self.start[u] >= in_time - horizon * (1 - ins[(u, 0)]))

        T = [m.NewIntVar(0, horizon, f"T[{s}]") for s in range(S)]
        for s in range(S):
            for u in paced(units, deadline):
                m.Add(T[s] >= end[u] - horizon * (1 - ins[(u, s)]))
            m.Add(T[s] >= end[last] + out_time - horizon * (1 - ins[(last, s)]))
        if problem.is_chain:
            # redundant but strong: on a chain the units of a stage run one after another
            for s in range(S):
                load = sum(self.x[(u, s, p)] * self.dur[(u, p)] for u in paced(units, deadline) for p in runnable[u])
                m.Add(T[s] >= load + (in_time if s == 0 else 0))
        self.period = m.NewIntVar(0, horizon, "period")
        busy = {p: sum(self.on[(u, p)] * self.dur[(u, p)] for u in paced(units, deadline) if (u, p) in self.dur)
                for p in self.pus}
        for s in range(S):
            m.Add(self.period >= T[s])
        for p in self.pus:
            m.Add(self.period >= busy[p])
        self.latency = m.NewIntVar(0, horizon * S, "latency")
        m.Add(self.latency == sum(T))

        # --- energy (nJ)
        energy_terms = self.energy_terms(runnable, t_in, t_out, handoff, handoff_ms, busy)
        self.energy = m.NewIntVar(0, MAX_ENERGY_UNITS, "energy")  # every plan's energy (``energy_terms``)
        m.Add(self.energy == sum(energy_terms))
        self.vars = {"period": self.period, "latency": self.latency, "energy": self.energy}
        self.tops = {"period": horizon, "latency": horizon * S, "energy": MAX_ENERGY_UNITS}
        self.slack = self.rounding_slack(runnable, xfer, t_in, t_out, top)

    def hint(self, plan: Plan) -> None:
        """Hint ``plan``'s placement; raises OutOfTime once the deadline has passed."""
        place = plan.placement()
        self.m.ClearHints()
        for (u, s, p), var in paced(self.x.items(), self.deadline):
            self.m.AddHint(var, 1 if place.get(u) == (s, p) else 0)

    def extract(self, solver: cp_model.CpSolver) -> Plan:
        where = {}
        for (u, s, p), var in self.x.items():
            if solver.Value(var):
                where[u] = (s, p)
        stages = sorted({s for s, _ in where.values()})
        renumber = {s: i for i, s in enumerate(stages)}
        index = self.problem.index
        orders: list[dict[str, list[str]]] = [dict() for _ in stages]
        for u in sorted(self.units, key=lambda u: (solver.Value(self.start[u]), index[u])):
            s, p = where[u]
            orders[renumber[s]].setdefault(p, []).append(u)
        return Plan(tuple(Stage(tuple(p for p in self.pus if p in o), {p: tuple(v) for p, v in o.items()})
                          for o in orders),
                    shared_pus=self.shared_pus, instance=self.problem.name)

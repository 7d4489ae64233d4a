"""The CP-SAT model of one variant of a chain (``chain_options.py``): PU, DVFS level and stage of
every unit, exact under the evaluator's rules for chains (re-entry, whole graph, level-scaled
transfers, input/output phases by the first/last unit's level).

* ``a[i, k]``: unit i takes option k (PU, level, cold/warm); exactly one per unit;
  ``on[i, p]``: unit i runs on PU p (the sum of its options there);
* ``y[i, q, k]``: the previous unit runs on q and unit i takes option k, linked both ways
  (transportation form: ``sum_q y = a[i, k]``, ``sum_k y = on[i-1, q]``); the transfer into i
  costs ``sum y x transfer(q, k)``;
* ``b[i]``: a new stage starts at unit i. Disjoint PU sets: no stage boundary may separate two
  units of one PU (``pre[i, p]``: p runs a unit before i, ``suf[i, p]``: p runs unit i or a later
  one; ``not (b[i] and pre[i, p] and suf[i, p])``). Used stages are a prefix by construction;
* unit cost ``c[i]`` = its option's time (with the input/output phase it carries) + the transfer
  into it; ``R[i]``: the time of unit i's stage up to and including i (``R[i] >= R[i-1] + c[i]``
  unless a stage starts at i); period ``P >= R[i]``; latency ``L = sum c``; energy ``E = sum``
  of the options' and transfers' energies; cut: ``stages x P >= L``;
* variant rules: at most one segment (``s[i] >= on[i, p] - on[i-1, p]``, ``sum s <= 1``), two or
  more segments (``cold[i] = on[i, p] and not on[i-1, p]``, ``sum cold >= 2``), one stage, and
  "not every unit on p".

Integers: times in ``TICK`` units (10 ns), energies in ``ETICK`` units (10 nJ), both coarser
where a plan's values could pass ``MAX_TIME_UNITS`` / ``MAX_ENERGY_UNITS`` (``scale``); each entry is
rounded to the nearest unit, and ``slack`` bounds by how much a plan's model value can differ
from the evaluator's (one rounding per unit and per transfer). Every constraint a caller adds is
relaxed by that slack, so the model holds every plan that meets it; every lower bound it reports
is the model's less the slack (``lower`` of :class:`ChainOutcome`), so it holds for the
evaluator's values. A weighted objective (the steady-state energy search) has its weights scaled
to integers and rounded down, which only lowers the bound.

Cuts the solver cannot see by itself: a PU's units and the transfers into them lie in one stage
(``P >= `` that load per PU), and a plan has at most ``stages`` stages (``stages x P >= L``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from pipeplan.core.deadline import Deadline
from pipeplan.formulations.mapping.plan import Plan
from pipeplan.formulations.mapping.problem import MappingProblem
from pipeplan.solvers.cpsat_backend import fitting_scale, set_limits, stopped_by, true_bound, work_done
from pipeplan.solvers.mapping.chain_options import Variant, chain_plan
from pipeplan.solvers.mapping.common import paced

TICK = 1e5              # model time units per ms (10 ns)
ETICK = 100.0           # model energy units per uJ (10 nJ): finer would only narrow a weighted objective's scaling
MAX_ACTIVITY = 2 ** 53  # the most a scaled weighted objective may reach: exact in a double, and CP-SAT's
                        # presolve, which expands it over the options, stays within int64
# the most a plan's energy and time (the horizon: every unit's slowest option and transfer) may
# reach in model units. A profile at its limits (1e7 ms at 1e9 mW) had passed int64: 1e18 units of
# 10 nJ a block ("model invalid"), and 1e13 units of 10 ns for four blocks, which the steady-state
# window rows weigh by 1e6 ("Possible integer overflow in constraint"). And a weighted objective
# (energy_ss) fits its coefficients into MAX_ACTIVITY over these ranges: at 1e15 energy units its
# energy coefficient rounded 3.2 down to 3, a bound 6% low that never closed the search. Such a
# chain counts energy and time in coarser units (``CpChainModel.scale``, below ETICK and TICK);
# every shipped chain keeps 10 nJ and 10 ns (at most 6.6e9 energy and 1.4e9 time units).
MAX_ENERGY_UNITS = 10 ** 11
MAX_TIME_UNITS = 10 ** 10


def horizon_ms(variant: Variant) -> float:
    """The most a plan of ``variant`` may take (ms): every unit's slowest option and transfer."""
    return sum(max(o.time for o in opts) + max((t for (t, _) in arcs.values()), default=0.0)
               for opts, arcs in zip(variant.options, variant.arcs))


def chain_tick(variant: Variant, most: float = MAX_TIME_UNITS) -> float:
    """The chain model's time units per ms: TICK (10 ns), or coarser where the horizon would
    pass ``most`` units (only at the profile's limits: every shipped chain keeps TICK)."""
    h = horizon_ms(variant)
    return fitting_scale(TICK, h, most)


@dataclass
class ChainOutcome:
    status: str                  # optimal | feasible | infeasible | unknown
    plan: Plan | None
    lower: float | None          # certified lower bound of the weighted objective (ms / uJ), None if unknown
    work: float = 0.0            # deterministic seconds (CP-SAT), 0 for the MILP
    stopped_by: str | None = None
    nodes: int = 0               # branch-and-bound nodes (HiGHS), 0 for CP-SAT


class CpChainModel:
    """One variant's model; :meth:`solve` minimises a weighted sum of period (ms), latency (ms)
    and energy (uJ) under caps and an average-power window, on a clone of the base model."""

    def __init__(self, problem: MappingProblem, variant: Variant, *, dvfs: bool, max_stages: int | None = None,
                 deadline: Deadline | None = None, model=None, tick: float | None = None):
        """``model``: build into this CpModel (several networks' chains in one joint model,
        solvers/mapping/multi) instead of a new one; ``tick``: its time units per ms (one for
        every chain of a joint model), by default TICK or, past ``MAX_TIME_UNITS``, coarser
        (:func:`chain_tick`)."""
        from ortools.sat.python import cp_model  # here, so that the registry loads without it

        self.problem, self.variant, self.dvfs = problem, variant, dvfs
        deadline = deadline or Deadline(None)
        v = variant
        n = len(v.options)
        m = self.m = model if model is not None else cp_model.CpModel()
        most_uj = sum(max(o.energy for o in opts) + max((e for (_, e) in arcs.values()), default=0.0)
                      for opts, arcs in zip(v.options, v.arcs))
        etick = fitting_scale(ETICK, most_uj, MAX_ENERGY_UNITS)
        tick = self.tick = chain_tick(variant) if tick is None else tick
        self.scale = {"period": tick, "latency": tick, "energy": etick}
        t_m = [[round(o.time * tick) for o in opts] for opts in v.options]
        e_m = [[round(o.energy * etick) for o in opts] for opts in v.options]
        x_m = [{key: (round(t * tick), round(e * etick)) for key, (t, e) in arcs.items()} for arcs in v.arcs]
        slack_t = sum(max(abs(tm - o.time * tick) for tm, o in zip(t_m[i], v.options[i])) for i in range(n))
        slack_e = sum(max(abs(em - o.energy * etick) for em, o in zip(e_m[i], v.options[i])) for i in range(n))
        slack_t += sum(max((abs(x_m[i][key][0] - t * tick) for key, (t, _) in v.arcs[i].items()), default=0.0)
                       for i in range(n))
        slack_e += sum(max((abs(x_m[i][key][1] - e * etick) for key, (_, e) in v.arcs[i].items()), default=0.0)
                       for i in range(n))
        self.slack = {"period": slack_t, "latency": slack_t, "energy": slack_e}

        self.a = [[m.NewBoolVar(f"a[{i},{k}]") for k in range(len(v.options[i]))] for i in paced(range(n), deadline)]
        for row in self.a:
            m.AddExactlyOne(row)
        on = [{p: self._sum_literal(m, [row[k] for k, o in enumerate(opts) if o.pu == p], f"on[{i},{p}]")
               for p in v.pus[i]} for i, (row, opts) in enumerate(zip(self.a, v.options))]
        self.on = on
        cost_t, cost_e = [], []
        cost_on: dict[str, list] = {}      # PU -> its units' times and the transfers into them
        self.inflow: dict[str, list] = {}  # PU -> the transfers into it (model units x literals)
        for i in paced(range(n), deadline):
            terms_t = [t * lit for t, lit in zip(t_m[i], self.a[i])]
            terms_e = [e * lit for e, lit in zip(e_m[i], self.a[i])]
            if i and x_m[i]:
                sources = v.pus[i - 1]
                y = {}
                for k in range(len(v.options[i])):
                    for q in sources:
                        y[(q, k)] = (self.a[i][k] if len(sources) == 1 else m.NewBoolVar(f"y[{i},{q},{k}]"))
                if len(sources) > 1:
                    for k in range(len(v.options[i])):
                        m.Add(sum(y[(q, k)] for q in sources) == self.a[i][k])
                    for q in sources:
                        m.Add(sum(y[(q, k)] for k in range(len(v.options[i]))) == on[i - 1][q])
                terms_t += [xt * y[key] for key, (xt, _) in x_m[i].items()]
                terms_e += [xe * y[key] for key, (_, xe) in x_m[i].items()]
            cost_t.append(sum(terms_t))
            for k, o in enumerate(v.options[i]):
                cost_on.setdefault(o.pu, []).append(t_m[i][k] * self.a[i][k])
            for (q, k), (xt, _) in x_m[i].items():
                cost_on.setdefault(v.options[i][k].pu, []).append(xt * y[(q, k)])
                self.inflow.setdefault(v.options[i][k].pu, []).append(xt * y[(q, k)])
            cost_e.append(sum(terms_e))
        worst = [max(t_m[i]) + max((xt for (_, _), (xt, _) in x_m[i].items()), default=0) for i in range(n)]
        self.horizon = H = sum(worst) + 1
        energy_top = sum(max(e_m[i]) + max((xe for (_, xe) in x_m[i].values()), default=0) for i in range(n)) + 1
        self.top = {"period": H, "latency": H, "energy": energy_top}
        self.min_latency = sum(min(t_m[i]) for i in range(n))     # model units: no plan is faster

        # --- stages
        self.b = [None] + [m.NewBoolVar(f"b[{i}]") for i in range(1, n)] if not v.single_stage else [None] * n
        if not v.single_stage:
            self._disjoint_pus(m, on, n)
            if max_stages is not None:
                m.Add(sum(self.b[1:]) <= max(0, max_stages - 1))
        R = [m.NewIntVar(0, H, f"R[{i}]") for i in range(n)]
        self.period = m.NewIntVar(0, H, "period")
        self.latency = m.NewIntVar(0, H, "latency")
        self.energy = m.NewIntVar(0, energy_top, "energy")
        for i in paced(range(n), deadline):
            m.Add(R[i] >= cost_t[i])
            if i:
                cont = m.Add(R[i] >= R[i - 1] + cost_t[i])
                if self.b[i] is not None:
                    cont.OnlyEnforceIf(self.b[i].Not())
            m.Add(self.period >= R[i])
        m.Add(self.latency == sum(cost_t))
        m.Add(self.energy == sum(cost_e))
        self.stages = stages = 1 if v.single_stage else min(len({p for ps in v.pus for p in ps}), max_stages or n)
        m.Add(stages * self.period >= self.latency)
        for p in dict.fromkeys(p for ps in v.pus for p in ps):   # a PU's units and inflows lie in one stage
            m.Add(self.period >= sum(cost_on[p]))
        self._segments(m, on, n)
        self.vars = {"period": self.period, "latency": self.latency, "energy": self.energy}

    @staticmethod
    def _sum_literal(m, lits, name):
        if len(lits) == 1:
            return lits[0]
        var = m.NewBoolVar(name)
        m.Add(var == sum(lits))
        return var

    def _disjoint_pus(self, m, on, n) -> None:
        """No stage boundary between two units of one PU (one stage per PU)."""
        for p in dict.fromkeys(p for ps in self.variant.pus for p in ps):
            idx = [i for i in range(n) if p in on[i]]
            if len(idx) < 2:
                continue
            first, last = idx[0], idx[-1]
            pre, suf = {}, {}
            for i in range(first + 1, last + 1):      # p runs a unit before i
                pre[i] = m.NewBoolVar(f"pre[{i},{p}]")
                if p in on[i - 1]:
                    m.AddImplication(on[i - 1][p], pre[i])
                if i - 1 in pre:
                    m.AddImplication(pre[i - 1], pre[i])
            for i in range(last, first, -1):          # p runs unit i or a later one
                suf[i] = m.NewBoolVar(f"suf[{i},{p}]")
                if p in on[i]:
                    m.AddImplication(on[i][p], suf[i])
                if i + 1 in suf:
                    m.AddImplication(suf[i + 1], suf[i])
            for i in range(first + 1, last + 1):
                m.AddBoolOr([self.b[i].Not(), pre[i].Not(), suf[i].Not()])

    def _segments(self, m, on, n) -> None:
        v = self.variant
        for p in v.one_segment:
            starts = []
            for i in range(n):
                if p not in on[i]:
                    continue
                if i and p in on[i - 1]:
                    s = m.NewBoolVar(f"s[{i},{p}]")
                    m.Add(s >= on[i][p] - on[i - 1][p])
                    starts.append(s)
                else:
                    starts.append(on[i][p])
            m.Add(sum(starts) <= 1)
        for p in v.many_segments:
            colds = []
            for i in range(n):
                if p not in on[i]:
                    continue
                cold = sum(lit for lit, o in zip(self.a[i], v.options[i]) if o.pu == p and o.cold)
                prev = on[i - 1][p] if i and p in on[i - 1] else 0
                m.Add(cold >= on[i][p] - prev)
                m.Add(cold + prev <= 1)
                colds.append(cold)
            m.Add(sum(colds) >= v.min_cold)
        for p in v.not_all_on:
            if all(p in on[i] for i in range(n)):
                m.Add(sum(on[i][p] for i in range(n)) <= n - 1)

    # ------------------------------------------------------------------ solving

    def solve(self, weights: dict[str, float], *, caps: dict[str, float] | None = None,
              window: tuple[float, float] | None = None, cutoff: float | None = None,
              hint: Plan | None = None, strict: bool = False, time_limit: float | None,
              work_limit: float | None = None, threads: int = 1, seed: int = 0) -> ChainOutcome:
        """Minimise ``sum weights[axis] x axis`` (period/latency ms, energy uJ) over the plans of
        this variant with ``axis <= caps[axis]``, the share period / latency in ``window``
        (lo, hi), and (when given) a weighted value below ``cutoff``. Caps, window and cutoff are
        relaxed by the rounding slack, so no plan that meets them is lost: a plan the model
        returns may exceed a cap by that slack (the caller checks plans with the evaluator).
        ``strict``: caps tightened by the slack instead, so every plan found meets them (its
        bound then holds for fewer plans). A weighted objective is scaled to integers by K and
        rounded down (:meth:`_scaled`): its bound stays valid, looser by at most one unit per
        variable over K."""
        from ortools.sat.python import cp_model
        m = self.m.Clone()
        var = {k: m.GetIntVarFromProtoIndex(x.Index()) for k, x in self.vars.items()}
        top, slack = dict(self.top), self.slack
        for axis, cap in (caps or {}).items():    # as the variable's domain (the scaling below uses it)
            room = -slack[axis] if strict else slack[axis]
            units = cap * self.scale[axis] + room + 1e-6
            if units >= top[axis]:    # binds nothing (1e308 ms had overflowed the integer)
                continue
            top[axis] = max(-1, math.floor(units))
            if top[axis] < 0:
                return ChainOutcome("infeasible", None, None)
            capped = m.NewIntVar(0, top[axis], f"{axis}<=cap")
            m.Add(capped == var[axis])
            var[axis] = capped
        top["latency"] = min(top["latency"], self.stages * top["period"])
        model_w = {axis: w / self.scale[axis] for axis, w in weights.items()}     # per model unit
        margin = sum(abs(w) * slack[axis] for axis, w in model_w.items())   # model vs evaluator
        if window is not None:        # 1e6 P_m against share x L_m, relaxed by the slack
            lo, hi = window
            s_p, s_t = slack["period"], slack["latency"]
            m.Add(1_000_000 * var["period"] >= math.floor(lo * 1e6) * var["latency"]
                  - math.ceil(1e6 * (s_p + lo * s_t)))
            m.Add(1_000_000 * var["period"] <= math.ceil(hi * 1e6) * var["latency"]
                  + math.ceil(1e6 * (s_p + hi * s_t)))
        scale, coef = self._scaled(model_w, top)
        objective = sum(c * var[axis] for axis, c in coef.items())
        if cutoff is not None:
            m.Add(objective <= math.floor(scale * (cutoff + margin)))
        m.Minimize(objective)
        if hint is not None:
            self._hint(m, hint)
        solver = cp_model.CpSolver()
        set_limits(solver, time_limit=time_limit, work_limit=work_limit)
        solver.parameters.num_workers = max(1, int(threads))
        solver.parameters.random_seed = int(seed)
        solver.parameters.linearization_level = 2
        code = solver.Solve(m)
        status = {cp_model.OPTIMAL: "optimal", cp_model.FEASIBLE: "feasible",
                  cp_model.INFEASIBLE: "infeasible"}.get(code, "unknown")
        if code == cp_model.MODEL_INVALID:
            raise RuntimeError(f"CP-SAT chain model invalid: {m.Validate()}")
        plan = self._extract(solver) if status in ("optimal", "feasible") else None
        lower = None
        if status in ("optimal", "feasible", "unknown"):
            best = solver.BestObjectiveBound()
            if math.isfinite(best):
                lower = true_bound(best, margin * scale, scale)
        work = work_done(solver)
        return ChainOutcome(status, plan, lower, work, stopped_by(status, work, work_limit))

    def window_room(self, window: tuple[float, float]) -> float:
        """By how much a plan's share may lie beyond the ends of ``window`` in :meth:`solve`
        (the rounding slack over the least latency, the ends rounded to 1e-6)."""
        latency = max(1.0, self.min_latency)
        return (self.slack["period"] + window[1] * self.slack["latency"]) / latency + 2e-6

    @staticmethod
    def _scaled(weights: dict[str, float], top: dict[str, int]) -> tuple[float, dict[str, int]]:
        """(K, integer coefficients): one axis is itself (K = 1 / its weight); otherwise the
        weights times the largest K that keeps the objective within ``MAX_ACTIVITY`` over the
        variables' domains (``top``: their upper ends; every variable is >= 0), rounded down (so
        the scaled objective never exceeds K x the weighted one: its bound stays valid)."""
        if len(weights) == 1:
            return 1.0 / next(iter(weights.values())), {next(iter(weights)): 1}
        activity = sum(abs(w) * top[axis] for axis, w in weights.items())
        scale = float(min(1e12, MAX_ACTIVITY / max(activity, 1.0)))
        return scale, {axis: math.floor(w * scale) for axis, w in weights.items()}

    def _hint(self, m, plan: Plan) -> None:
        """Hint ``plan``'s options where this variant holds them."""
        from pipeplan.solvers.mapping.chain_options import plan_options
        for i, k in enumerate(plan_options(self.variant, self.problem, plan)):
            if k is None:
                continue
            for j, lit in enumerate(self.a[i]):
                m.AddHint(m.GetBoolVarFromProtoIndex(lit.Index()), int(j == k))

    def _extract(self, solver) -> Plan:
        choice = [next(k for k, lit in enumerate(row) if solver.Value(lit)) for row in self.a]
        new_stage = [bool(b is not None and solver.Value(b)) for b in self.b]
        return chain_plan(self.problem, self.variant, choice, new_stage, self.dvfs)

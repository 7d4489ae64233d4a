"""The CP-SAT model of hierarchical operator parallelism with disjoint PU sets, by PU stages.

With disjoint PU sets every PU serves at most one stage, so a plan is (a) the PU of each unit
and (b) the stage of each PU: the stage of a unit is its PU's. This model decides exactly that:

* ``on[u, p]``: unit u runs on PU p; ``g[p, s]``: PU p serves stage s (one stage per PU; an
  unused PU sits in stage 0, and the used stages form a prefix);
* ``z[e, a, b] = on[src, a] AND on[dst, b]`` per edge and PU pair, linked both ways
  (``sum_b z = on[src, a]``, ``sum_a z = on[dst, b]``: the transportation form, whose LP is tight);
  ``z[e, a, b]`` forces ``stage(a) <= stage(b)``;
* one start per unit, optional intervals per (unit, PU) in a NoOverlap per PU; a tensor from
  another PU is ready after its transfer (from the stage start when the PUs' stages differ, from
  the producer's end when they are the same), from the same PU at the producer's end;
* ``F[p]``: when PU p finishes (its units' ends, the output phase after the last unit); the
  release ``R[p]`` of a PU in stage 0 is the input phase (``F[p] >= R[p] + busy[p]`` is added as
  a cut); ``T[s] >= F[p]`` for the PUs of stage s; period ``= max F`` (a PU's busy time lies inside
  its one stage), latency ``= sum T``;
* energy as the evaluator counts it (units, phases, one handoff per (unit, destination PU), idle
  power over ``period - busy`` for ``per_pu`` profiles).

Compared with the unit-by-stage model (``cpsat_model.py``, kept for shared PU sets) it has no
big-M terms, no unit-by-stage variables and its size is units x PUs + edges x PUs^2 + PUs x
stages, so it builds in time linear in the graph. Identical PUs (same times, powers and links,
such as bst's two DSPs) are symmetric: the first sits in a stage no later than the second and,
in the same stage, carries no less work. On chains the units of a stage run one after another,
so every set of PUs sharing a stage adds its loads (a cut the solver cannot see by itself).

``period_cap`` (ms) turns the model into a test of "is there a plan with period <= cap?", the
form used to refute a period (:mod:`period_search`): every time window is ``[0, cap]``, only the
(unit, PU) pairs the forced-placement test allows are in the model, with its heads and tails
as release times and deadlines. Every time is then rounded *down* to whole microseconds, so
the model is a relaxation: a plan whose evaluator period is <= cap, with each start rounded
down, satisfies every constraint (a floor of a sum is at least the sum of the floors), and an
infeasible capped model proves that no plan has a period <= cap, with no rounding slack.

Times in whole microseconds (capped: 10 ns, ``tick`` units per ms), energies in nanojoules, every
PU at its top DVFS level; the rounding is bounded by ``slack`` as in ``cpsat_model.py`` (the
same :func:`bound_from_model`). Energy and the idle-power terms are only meaningful uncapped.
"""
from __future__ import annotations

import itertools
import math

from pipeplan.core.deadline import Deadline
from pipeplan.formulations.mapping.bounds import ProblemArrays, identical_pus, period_windows
from pipeplan.formulations.mapping.plan import Plan, Stage
from pipeplan.formulations.mapping.problem import MappingProblem
from pipeplan.solvers.mapping.common import paced, transfer_times
from pipeplan.solvers.mapping.cpsat_model import MAX_ENERGY_UNITS, US, CpModelBase

CAP_TICK = 100 * US    # capped models count time in 10 ns, so that rounding down loses little


class PuStageCpModel(CpModelBase):
    def __init__(self, problem: MappingProblem, *, max_stages: int | None = None,
                 deadline: Deadline | None = None, period_cap: float | None = None,
                 data: ProblemArrays | None = None):
        from ortools.sat.python import cp_model  # here, so that the registry loads without it

        super().__init__(problem, deadline)
        deadline = self.deadline
        prof = problem.profile
        pus, units, idx = self.pus, self.units, problem.index
        k = len(pus)
        self.shared_pus = False
        self.S = S = max(1, min(max_stages or k, k, len(units)))
        m = self.m = cp_model.CpModel()
        top = {p: prof.pus[p].max_level for p in pus}
        cap = None
        self.capped = period_cap is not None
        if period_cap is not None:  # a relaxation: every time rounded down (see the module docstring)
            self.tick = CAP_TICK
            cap = math.floor(period_cap * CAP_TICK)
            self.dur = {key: math.floor(prof.time(idx[key[0]], key[1], prof.pus[key[1]].max_level) * CAP_TICK)
                        for key in self.dur}
        q = round if cap is None else math.floor
        pk = {p: i for i, p in enumerate(pus)}
        self.infeasible_cap = False
        t_in = {p: self.phase(prof.input_stage, p, q) for p in pus}
        t_out = {p: self.phase(prof.output_stage, p, q) for p in pus}
        windows = None if period_cap is None else period_windows(problem, period_cap, data=data, deadline=deadline)
        if period_cap is not None and windows is None:
            self.infeasible_cap = True          # refuted by the forced-placement test: no model needed
            return
        runnable = {u: [p for p in pus if (u, p) in self.dur and (cap is None or self.dur[(u, p)] <= cap)
                        and (windows is None or windows.allowed[idx[u], pk[p]])]
                    for u in units}
        first, last = units[0], units[-1]
        if cap is not None:
            runnable[first] = [p for p in runnable[first] if self.dur[(first, p)] + t_in[p][0] <= cap]
            runnable[last] = [p for p in runnable[last] if self.dur[(last, p)] + t_out[p][0] <= cap]
        if any(not r for r in runnable.values()):
            self.infeasible_cap = True          # some unit fits on no PU: refuted without a model
            return
        self.runnable = runnable
        xfer_ms = [{(a, b): t for a in runnable[e.src] for b in runnable[e.dst]
                    if a != b and (t := times[pk[a]][pk[b]]) > 0}
                   for e, times in paced(zip(problem.edges, transfer_times(problem).tolist()), deadline)]
        xfer = [{ab: q(t * self.tick) for ab, t in x.items()} for x in xfer_ms]
        horizon = cap if cap is not None else (
            sum(max(self.dur[(u, p)] for p in runnable[u]) for u in units)
            + sum(max(x.values(), default=0) for x in xfer)
            + max(v[0] for v in t_in.values()) + max(v[0] for v in t_out.values()) + 1)
        self.horizon = horizon

        # --- PUs to stages
        g = {(p, s): m.NewBoolVar(f"g[{p},{s}]") for p in pus for s in range(S)}
        stage = {p: m.NewIntVar(0, S - 1, f"stage[{p}]") for p in pus}
        for p in pus:
            m.AddExactlyOne(g[(p, s)] for s in range(S))
            m.Add(stage[p] == sum(s * g[(p, s)] for s in range(1, S)))
        self.on = {(u, p): m.NewBoolVar(f"on[{u},{p}]") for u in paced(units, deadline) for p in runnable[u]}
        used = {p: m.NewBoolVar(f"used[{p}]") for p in pus}
        for u in paced(units, deadline):
            m.AddExactlyOne(self.on[(u, p)] for p in runnable[u])
        for p in pus:
            mine = [self.on[(u, p)] for u in units if (u, p) in self.on]
            m.AddBoolOr(mine).OnlyEnforceIf(used[p])
            for lit in mine:
                m.AddImplication(lit, used[p])
            for s in range(1, S):
                m.AddImplication(g[(p, s)], used[p])          # an unused PU sits in stage 0
        for s in range(2, S):                                  # used stages form a prefix
            for p in pus:
                m.AddBoolOr([g[(q, s - 1)] for q in pus]).OnlyEnforceIf(g[(p, s)])
        same = {}
        before = {}
        for a, b in itertools.permutations(pus, 2):
            if (b, a) in same:
                same[(a, b)] = same[(b, a)]
            else:
                same[(a, b)] = m.NewBoolVar(f"same[{a},{b}]")
                m.Add(stage[a] == stage[b]).OnlyEnforceIf(same[(a, b)])
                m.Add(stage[a] != stage[b]).OnlyEnforceIf(same[(a, b)].Not())
            before[(a, b)] = m.NewBoolVar(f"le[{a},{b}]")
            m.Add(stage[a] <= stage[b]).OnlyEnforceIf(before[(a, b)])
        for p in runnable[first]:
            m.AddImplication(self.on[(first, p)], g[(p, 0)])

        # --- schedule
        self.start = {u: m.NewIntVar(0, horizon - min(self.dur[(u, p)] for p in runnable[u]), f"start[{u}]")
                      for u in paced(units, deadline)}
        end = {u: m.NewIntVar(0, horizon, f"end[{u}]") for u in paced(units, deadline)}
        for u in paced(units, deadline):
            m.Add(end[u] == self.start[u] + sum(self.on[(u, p)] * self.dur[(u, p)] for p in runnable[u]))
        for p in pus:
            ivs = [m.NewOptionalFixedSizeIntervalVar(self.start[u], self.dur[(u, p)], self.on[(u, p)], f"iv[{u},{p}]")
                   for u in paced(units, deadline) if (u, p) in self.on]
            if len(ivs) > 1:
                m.AddNoOverlap(ivs)
        if windows is not None:     # heads and tails of the forced-placement test, whole us inward
            for (u, p), lit in self.on.items():
                head = math.floor(windows.head[idx[u], pk[p]] * CAP_TICK)
                latest = math.floor((period_cap - windows.tail[idx[u], pk[p]]) * CAP_TICK)
                if head > 0:
                    m.Add(self.start[u] >= head).OnlyEnforceIf(lit)
                if latest < cap:
                    m.Add(end[u] <= latest).OnlyEnforceIf(lit)
        handoff: dict[tuple, object] = {}
        handoff_us: dict[tuple, int] = {}
        for e, x in paced(zip(problem.edges, xfer), deadline):
            z = {}
            for a in runnable[e.src]:
                for b in runnable[e.dst]:
                    z[(a, b)] = m.NewBoolVar(f"z[{e.src},{e.dst},{a},{b}]")
            for a in runnable[e.src]:
                m.Add(sum(z[(a, b)] for b in runnable[e.dst]) == self.on[(e.src, a)])
            for b in runnable[e.dst]:
                m.Add(sum(z[(a, b)] for a in runnable[e.src]) == self.on[(e.dst, b)])
            for (a, b), lit in z.items():
                t = x.get((a, b), 0)
                if a == b:
                    m.Add(self.start[e.dst] >= end[e.src]).OnlyEnforceIf(lit)
                    continue
                m.AddImplication(lit, before[(a, b)])
                m.Add(self.start[e.dst] >= end[e.src] + t).OnlyEnforceIf([lit, same[(a, b)]])
                if t:
                    h = handoff.setdefault((e.src, a, b), m.NewBoolVar(f"h[{e.src},{a},{b}]"))
                    handoff_us[(e.src, a, b)] = max(handoff_us.get((e.src, a, b), t), t)
                    m.AddImplication(lit, h)
            m.Add(self.start[e.dst] >= sum(t * z[ab] for ab, t in x.items()))

        busy = {p: sum(self.on[(u, p)] * self.dur[(u, p)] for u in units if (u, p) in self.on) for p in pus}
        in_time = sum(self.on[(first, p)] * t_in[p][0] for p in runnable[first])
        release = {p: m.NewIntVar(0, horizon, f"R[{p}]") for p in pus}
        finish = {p: m.NewIntVar(0, horizon, f"F[{p}]") for p in pus}
        for p in pus:
            m.Add(release[p] >= in_time).OnlyEnforceIf(g[(p, 0)])
            m.Add(finish[p] >= release[p] + busy[p])
            for u in units:
                if (u, p) in self.on:
                    m.Add(self.start[u] >= release[p]).OnlyEnforceIf(self.on[(u, p)])
                    m.Add(finish[p] >= end[u]).OnlyEnforceIf(self.on[(u, p)])
            if (last, p) in self.on and t_out[p][0]:
                m.Add(finish[p] >= end[last] + t_out[p][0]).OnlyEnforceIf(self.on[(last, p)])
        T = [m.NewIntVar(0, horizon, f"T[{s}]") for s in range(S)]
        for p in pus:
            for s in range(S):
                m.Add(T[s] >= finish[p]).OnlyEnforceIf(g[(p, s)])
        self.period = m.NewIntVar(0, horizon, "period")
        m.AddMaxEquality(self.period, list(finish.values()))
        if problem.is_chain:
            for group in _subsets(pus, 2):
                together = [same[(a, b)] for a, b in zip(group, group[1:])]
                m.Add(self.period >= sum(busy[p] for p in group)).OnlyEnforceIf(together)
        self._break_symmetry(g, stage, same, busy)
        self.latency = m.NewIntVar(0, horizon * S, "latency")
        m.Add(self.latency == sum(T))

        # --- energy (nJ)
        handoff_ms = {key: t / self.tick for key, t in handoff_us.items()}
        energy_terms = self.energy_terms(runnable, t_in, t_out, handoff, handoff_ms, busy)
        self.energy = m.NewIntVar(0, MAX_ENERGY_UNITS, "energy")  # every plan's energy (``energy_terms``)
        m.Add(self.energy == sum(energy_terms))
        self.vars = {"period": self.period, "latency": self.latency, "energy": self.energy}
        self.tops = {"period": horizon, "latency": horizon * S, "energy": MAX_ENERGY_UNITS}
        self.g = g
        self.slack = self.rounding_slack(runnable, xfer_ms, t_in, t_out, top)

    def _break_symmetry(self, g, stage, same, busy) -> None:
        """Identical PUs: the first in a stage no later than the second, and no less loaded
        when they share one (swapping two identical PUs' work maps a plan onto another)."""
        for i, j in identical_pus(self.problem):
            a, b = self.pus[i], self.pus[j]
            self.m.Add(stage[a] <= stage[b])
            self.m.Add(busy[a] >= busy[b]).OnlyEnforceIf(same[(a, b)])

    def hint(self, plan: Plan) -> None:
        """Hint ``plan``'s placement and stages; raises OutOfTime once the deadline has passed."""
        place = plan.placement()
        self.m.ClearHints()
        stage_of = {p: s for s, st in enumerate(plan.stages) for p in st.pus if st.order.get(p)}
        for (u, p), var in paced(self.on.items(), self.deadline):
            self.m.AddHint(var, 1 if place.get(u, (None, None))[1] == p else 0)
        for (p, s), var in self.g.items():
            self.m.AddHint(var, 1 if stage_of.get(p, 0) == s else 0)

    def extract(self, solver) -> Plan:
        pu_of = {u: p for (u, p), var in self.on.items() if solver.Value(var)}
        stage_of = {p: s for (p, s), var in self.g.items() if solver.Value(var)}
        stages = sorted({stage_of[p] for p in pu_of.values()})
        renumber = {s: i for i, s in enumerate(stages)}
        index = self.problem.index
        orders: list[dict[str, list[str]]] = [dict() for _ in stages]
        for u in sorted(self.units, key=lambda u: (solver.Value(self.start[u]), index[u])):
            p = pu_of[u]
            orders[renumber[stage_of[p]]].setdefault(p, []).append(u)
        return Plan(tuple(Stage(tuple(p for p in self.pus if p in o), {p: tuple(v) for p, v in o.items()})
                          for o in orders), shared_pus=False, instance=self.problem.name)


def _subsets(items: list[str], smallest: int):
    for size in range(smallest, len(items) + 1):
        yield from itertools.combinations(items, size)

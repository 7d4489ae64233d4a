"""Certified lower bounds of the mapping problem, each named by the argument that proves it.

Every bound holds for every plan the evaluator accepts with disjoint or shared PU sets (a
bound that needs disjoint sets says so), every unit at any DVFS level (times and energies at
each unit's fastest or cheapest level, copies at the receiver's fastest). The evaluator's rules
beyond per-unit times: re-entry only adds time (the bounds ignore it and stay valid); a
whole-graph plan runs its units below their profiled times, so every bound is capped by the
least value a whole-graph plan can have (:func:`whole_graph_bounds`). Two families:

Analytic, instant (:func:`lower_bounds`, used by every result's gap):

* ``fastest-unit``: period >= the largest unit on its fastest PU;
* ``average-load``: period >= all work on fastest PUs / number of PUs;
* ``input+first``: period >= input stage + first unit, each on its best PU (one stage holds both);
* ``critical-path``: latency >= the longest path with every unit on its fastest PU, the path
  from the first unit after the cheapest input phase and the one to the last unit followed by the
  cheapest output phase (transfers counted as 0); latency >= any period bound
  (the stage times sum to the latency, and a PU's work lies inside the stages it serves);
* ``cheapest-energy``: energy >= every unit at its cheapest (PU, level), plus the cheapest input
  and output phases (transfers and idle power counted as 0);
* steady-state energy (board power with a static power): E_ss >= P_s x (period bound) +
  min(gamma D, D) for D the least dynamic energy per frame (:func:`_steady_bound`); elsewhere it
  equals the per-frame energy and so its bound.

Optimisation arguments (:func:`certified_bounds`, bounded by work, not by the clock, so a bound
is the same on any machine load; for the exact solvers):

* ``load-balance``: the period is at least the optimum of scheduling the units on unrelated
  machines (the PUs) with makespan ``P``, with ``t[u,p] x[u,p] <= P`` (a unit longer than the
  period cannot run on that PU). Solved as a small model by CP-SAT (times rounded down to 10 ns,
  a relaxation) within a work limit; when that runs out its proven bound is used, so the value
  stays certified. ``load-balance-lp`` is its LP relaxation (HiGHS; the bound any LP-based model
  starts from).
* ``forced-placement``: bisection on the period ``P`` with a test that proves "no plan has a
  period <= P". At ``P`` a unit may only use PUs where it fits (``t <= P``); a lower bound on its
  start on PU p (head) and on what its stage still runs after it (tail) follows from its
  neighbours' domains: a predecessor that cannot be on p delivers its tensor over a link, which
  costs at least the cheapest transfer into p whether it sits in the same stage (after its end)
  or an earlier one (at the stage's start); one that can only be on p runs before it on p. A
  (unit, PU) whose head + time + tail exceeds ``P`` leaves the domain; this propagates to a fixed
  point. Then per PU, the units forced onto it run one after another in one stage: Jackson's
  one-machine bound ``min head + sum of times + min tail`` over every head-ordered suffix must fit
  in ``P``; and the load-balancing LP over the reduced domains must be feasible. This is how
  "below 9 ms that convolution must run on the NPU, the LRN before it cannot, so the NPU's stage
  waits for a transfer" becomes a number. The test is monotone in ``P`` (domains only grow), so
  the largest ``P`` it refutes is a valid bound.
"""
from __future__ import annotations

import copy
import itertools
import math
from dataclasses import dataclass

import numpy as np

from pipeplan.core.deadline import Deadline, stoppable
from pipeplan.formulations.mapping.problem import MappingProblem

# relative precision of the forced-placement bisection (the bound is the refuted end: valid)
BISECTION_TOL = 1e-4
# unit and edge visits of the forced-placement tests per deterministic second of work (about
# 2-5 s of Python each); the default for one problem's arrays
VISITS_PER_WORK = 2e5
TEST_BUDGET = 2 * VISITS_PER_WORK
DEFAULT_WORK = 1.0     # what the exact solvers give ``certified_bounds`` before they search


@dataclass(frozen=True)
class Bound:
    """A lower bound ``value`` (ms or mJ) proven by the argument named ``source``."""

    value: float
    source: str


def fastest_times(problem: MappingProblem) -> list[float]:
    """Each unit's least time on any PU at any DVFS level (the top level is not always the
    fastest: on the Khadas GPU some lower host levels are a little faster)."""
    prof = problem.profile
    out = []
    for i in range(len(problem.units)):
        out.append(min(t for p in prof.pus for ts in prof.time_ms[p].values() if (t := ts[i]) is not None))
    return out


def _end_phases(prof, table, i: int, pus=None):
    """(PU, level, phase or None) for every PU and level that can run unit ``i`` (the first
    unit for the input stage, the last for the output stage): the evaluator charges the phase of
    that unit's PU and level, none where the table gives none there. Bounds had taken the least
    phase among the entries given, above the optimum when a PU or level without one was best."""
    for p in pus if pus is not None else prof.pus:
        for lv, ts in prof.time_ms[p].items():
            if ts[i] is not None:
                yield p, lv, table.get(p, {}).get(lv)


def _phase_min(prof, table, i: int) -> float:
    """The shortest phase (input or output stage) unit ``i`` can carry, 0 where one has none."""
    return min((ph.time_ms if ph else 0.0 for _, _, ph in _end_phases(prof, table, i)), default=0.0)


def _phase_energy_min(prof, table, i: int) -> float:
    """The least energy (uJ) of the phase unit ``i`` can carry, 0 where one has none."""
    return min((ph.time_ms * ph.power_mw if ph else 0.0 for _, _, ph in _end_phases(prof, table, i)), default=0.0)


def whole_graph_bounds(problem: MappingProblem) -> dict[str, float]:
    """Lower bounds (objective key -> value) of the plans that run the whole network as one
    compiled graph (``Profile.whole_graph``: one stage, every unit on that PU at share r of its
    time; evaluator.whole_graph_pu), inf where there is none. Their units take less than their
    profiled time, so every other bound here, which counts profiled times, must be capped by
    these. One stage: period = latency, and the steady-state energy is the per-frame energy."""
    prof = problem.profile
    n = len(problem.units)
    last = n - 1
    # the last unit and its ancestors: the output phase follows them, and may overlap the units
    # the PU runs after them (on a graph that is no chain, the last unit need not run last)
    before_out, stack = {last}, [problem.units[last].name]
    while stack:
        for e in problem.preds[stack.pop()]:
            if problem.index[e.src] not in before_out:
                before_out.add(problem.index[e.src])
                stack.append(e.src)
    time, energy, steady = math.inf, math.inf, math.inf
    # the static power where the steady-state energy differs from the per-frame energy
    static = prof.static_power_mw if prof.power_model == "board" and prof.has_power else None
    for p, r in prof.whole_graph.items():
        levels = [[lv for lv, ts in prof.time_ms[p].items() if ts[i] is not None] for i in range(n)]
        if not all(levels):
            continue

        def cost(i: int, lv: str, out: bool) -> tuple[float, float]:
            """(time, uJ) of unit i at level lv, with the input phase as the first unit and, if
            ``out``, the output phase as the last."""
            t = r * prof.time(i, p, lv)
            e = t * prof.power(i, p, lv)
            for table, end, on in ((prof.input_stage, 0, True), (prof.output_stage, last, out)):
                if i == end and on and (ph := table.get(p, {}).get(lv)):
                    t, e = t + ph.time_ms, e + ph.time_ms * ph.power_mw
            return t, e

        def least(i: int, out: bool, k: int) -> float:
            return min(cost(i, lv, out)[k] for lv in levels[i])
        # every unit starts after the input phase: the PU's whole work, and the chain of work
        # before the output phase, each bound the stage's time
        head = 0.0 if 0 in before_out else min(cost(0, lv, False)[0] - r * prof.time(0, p, lv) for lv in levels[0])
        span = max(sum(least(i, False, 0) for i in range(n)), head + sum(least(i, True, 0) for i in before_out))
        time = min(time, span)
        energy = min(energy, sum(least(i, True, 1) for i in range(n)) / 1000.0)
        if len(before_out) < n and static is not None:
            # the output phase may run beside later units: phases overlap (c > 1), so the
            # steady-state energy may lie below the per-frame energy (_steady_bound's form)
            dynamic = sum(min(cost(i, lv, True)[1] - static * cost(i, lv, True)[0] for lv in levels[i])
                          for i in range(n))
            steady = min(steady, _steady_bound(problem, span, dynamic))
        else:
            steady = min(steady, energy)
    return {"period_ms": time, "latency_ms": time, "energy_mj": energy, "energy_ss_mj": steady}


def _capped(problem: MappingProblem, found: dict[str, list[Bound]]) -> dict[str, list[Bound]]:
    """Every bound capped by the whole-graph plans' bound (:func:`whole_graph_bounds`)."""
    whole = whole_graph_bounds(problem)
    return {key: [b if b.value <= whole[key] else Bound(whole[key], f"{b.source}, capped by the whole-graph plan")
                  for b in bounds] for key, bounds in found.items()}


def _steady_bound(problem: MappingProblem, period: float, energy_uj_dynamic: float | None) -> float | None:
    """A lower bound (mJ) of the steady-state energy from a period bound and a bound D_lb of the
    dynamic energy per frame (uJ): E_ss = P_s P + D (gamma + (1 - gamma) / c) with c >= 1, so
    E_ss >= P_s P + min(gamma D_lb, D_lb). None without a bound on D."""
    prof = problem.profile
    if energy_uj_dynamic is None:
        return None
    gamma = prof.concurrent_power_share
    return (prof.static_power_mw * period + min(gamma * energy_uj_dynamic, energy_uj_dynamic)) / 1000.0


def analytic_bounds(problem: MappingProblem) -> dict[str, list[Bound]]:
    """Every analytic bound per objective key (period_ms, latency_ms, energy_mj, energy_ss_mj)."""
    prof = problem.profile
    fast = fastest_times(problem)
    pus = list(prof.pus)
    last_i = len(problem.units) - 1
    t_in = _phase_min(prof, prof.input_stage, 0)
    t_out = _phase_min(prof, prof.output_stage, last_i)
    # the first unit with the input phase of its PU and level (none where there is none)
    first = min(((ph.time_ms if ph else 0.0) + prof.time(0, p, lv)
                 for p, lv, ph in _end_phases(prof, prof.input_stage, 0)), default=fast[0])
    period = [Bound(max(fast), "fastest-unit"), Bound(sum(fast) / len(pus), "average-load"),
              Bound(first, "input+first")]
    finish: dict[str, float] = {}
    for i, u in enumerate(problem.units):      # the first unit waits for the input phase; other
        start = max((finish[e.src] for e in problem.preds[u.name]), default=0.0 if i else t_in)
        finish[u.name] = start + fast[i]       # sources need not (they may sit in a later stage)
    last = problem.units[-1].name              # the output phase follows the last unit only
    latency = [Bound(max(max(finish.values()), finish[last] + t_out), "critical-path")]
    energy_uj = 0.0
    for i in range(len(problem.units) if prof.has_power else 0):
        energy_uj += min(t * prof.power(i, p, lv) for p in pus for lv, ts in prof.time_ms[p].items()
                         if (t := ts[i]) is not None)
    energy_uj += _phase_energy_min(prof, prof.input_stage, 0) + _phase_energy_min(prof, prof.output_stage, last_i)
    energy = [Bound(energy_uj / 1000.0, "cheapest-energy")]
    steady = energy
    if prof.power_model == "board" and prof.static_power_mw is not None and prof.has_power:
        value = _steady_bound(problem, best(period).value, _dynamic_min(problem))
        steady = [Bound(value, "static power x period + dynamic energy")] if value is not None else []
    return _capped(problem, {"period_ms": period, "latency_ms": latency, "energy_mj": energy,
                             "energy_ss_mj": list(steady)})


def _dynamic_min(problem: MappingProblem) -> float | None:
    """A lower bound (uJ) of the dynamic energy per frame, sum over phases of (power - P_s) x
    time: every unit and phase at its least, transfers at 0 when copies draw at least P_s
    (None when one may draw less: its time is not bounded here)."""
    prof = problem.profile
    static = prof.static_power_mw
    tr = prof.transfers
    factors = [f[1] for by in tr.level_scaling.values() for f in by.values()] + [1.0]
    if tr.power_mw * min(factors) < static:
        return None
    pus = list(prof.pus)
    total = sum(min(t * (prof.power(i, p, lv) - static) for p in pus for lv, ts in prof.time_ms[p].items()
                    if (t := ts[i]) is not None) for i in range(len(problem.units)))
    for table, i in ((prof.input_stage, 0), (prof.output_stage, len(problem.units) - 1)):
        total += min((ph.time_ms * (ph.power_mw - static) if ph else 0.0 for _, _, ph in _end_phases(prof, table, i)),
                     default=0.0)
    return total


def best(bounds: list[Bound]) -> Bound:
    return max(bounds, key=lambda b: b.value)


def best_analytic(problem: MappingProblem) -> dict[str, Bound]:
    """The best analytic bound per objective key (instant; no optimisation)."""
    found = analytic_bounds(problem)
    period = best(found["period_ms"])
    found["latency_ms"].append(Bound(period.value, f"period ({period.source})"))
    return {key: best(bounds) for key, bounds in found.items() if bounds}


def lower_bounds(problem: MappingProblem) -> dict[str, float]:
    """The values of :func:`best_analytic`."""
    return {key: b.value for key, b in best_analytic(problem).items()}


# ------------------------------------------------------------------ optimisation arguments


class ProblemArrays:
    """Dense arrays of one problem, each entry its least over the DVFS levels: ``t[u, p]`` (inf
    where p cannot run u), per edge the transfer matrix ``x[e, a, b]`` (the copy received at any
    level), input/output phases per PU; and the
    forced-placement tests' work so far (``visits``: unit and edge visits) against ``budget``.
    Past the budget a test answers "not refuted", which keeps every bound valid and makes it
    the same on any machine (work, not time, decides where it stops)."""

    def __init__(self, problem: MappingProblem, budget: float = TEST_BUDGET, deadline: Deadline | None = None):
        self.visits, self.budget, self.deadline = 0, budget, deadline
        prof = problem.profile
        self.pus = list(prof.pus)
        n, k = len(problem.units), len(self.pus)
        self.t = np.full((n, k), np.inf)
        for j, p in enumerate(self.pus):
            for times in prof.time_ms[p].values():
                for i, v in enumerate(times):
                    if v is not None:
                        self.t[i, j] = min(self.t[i, j], v)
        self.edges = [(problem.index[e.src], problem.index[e.dst]) for e in problem.edges]
        self.x = _transfer_matrix(problem, self.pus, deadline)

        def phase(table, i: int) -> np.ndarray:     # per PU: the least phase unit i carries there
            return np.array([min((ph.time_ms if ph else 0.0 for _, _, ph in _end_phases(prof, table, i, [p])),
                                 default=0.0) for p in self.pus])
        self.t_in, self.t_out = phase(prof.input_stage, 0), phase(prof.output_stage, n - 1)
        self.preds: list[list[int]] = [[] for _ in range(n)]
        self.succs: list[list[int]] = [[] for _ in range(n)]
        for k_, (a, b) in enumerate(self.edges):
            self.preds[b].append(k_)
            self.succs[a].append(k_)

    def with_budget(self, budget: float) -> ProblemArrays:
        """The same arrays (never written after they are made) with a work count of its own."""
        out = copy.copy(self)
        out.visits, out.budget = 0, budget
        return out

    def check_clock(self) -> None:
        """OutOfTime past the deadline the arrays were made with (a work budget keeps a test
        the same on any machine; the clock is what a time limit promises besides)."""
        if self.deadline is not None:
            self.deadline.check()


def _transfer_matrix(problem: MappingProblem, pus: list[str], deadline: Deadline | None = None) -> np.ndarray:
    tr = problem.profile.transfers
    out = np.zeros((len(problem.edges), len(pus), len(pus)))
    for k, e in enumerate(problem.edges):
        if deadline is not None and k % 256 == 0:
            deadline.check()
        for a, pa in enumerate(pus):
            for b, pb in enumerate(pus):
                if a != b:
                    out[k, a, b] = min(tr.time_ms(e.src, pa, pb, e.bytes, lv) for lv in problem.profile.pus[pb].levels)
    return out


def load_balance(problem: MappingProblem, work_limit: float = 2.0, data: ProblemArrays | None = None) -> list[Bound]:
    """The ``load-balance`` MILP bound (CP-SAT, within ``work_limit`` deterministic seconds, so
    the same on any machine load) and its LP relaxation ``load-balance-lp`` (HiGHS). The MILP
    counts time in 10 ns rounded down: a relaxation, so its bound holds for the exact times."""
    from ortools.sat.python import cp_model

    d = data or ProblemArrays(problem)
    n, k = d.t.shape
    out = []
    lp = _load_lp(d, np.isfinite(d.t))
    if lp is not None:
        out.append(Bound(lp * (1 - 1e-9), "load-balance-lp"))
    tick = 1e5                                   # model units per ms
    ticks = np.where(np.isfinite(d.t), np.floor(np.where(np.isfinite(d.t), d.t, 0) * tick), -1).astype(np.int64)
    m = cp_model.CpModel()
    horizon = int(ticks.max(axis=1).sum()) + 1
    period = m.NewIntVar(0, horizon, "P")
    x = {(i, j): m.NewBoolVar("") for i in range(n) for j in range(k) if ticks[i, j] >= 0}
    for i in range(n):
        m.AddExactlyOne(x[(i, j)] for j in range(k) if (i, j) in x)
    for j in range(k):
        m.Add(sum(int(ticks[i, j]) * x[(i, j)] for i in range(n) if (i, j) in x) <= period)
    for (i, j), lit in x.items():
        m.Add(period >= int(ticks[i, j])).OnlyEnforceIf(lit)
    m.Minimize(period)
    solver = stoppable(cp_model.CpSolver())      # a SIGTERM or Ctrl-C ends its search
    solver.parameters.max_deterministic_time = max(0.01, work_limit)
    solver.parameters.num_workers = 1
    if solver.Solve(m) in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        out.append(Bound(math.ceil(solver.BestObjectiveBound() - 1e-6) / tick, "load-balance"))
    return out


def _load_lp(d: ProblemArrays, dom: np.ndarray) -> float | None:
    """The least period of the load-balancing LP over domains ``dom``, as the bound its dual
    weights certify: None if it is infeasible, 0 (no argument) if HiGHS ends without an answer;
    OutOfTime past the arrays' deadline."""
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    d.check_clock()
    rows, cols = np.nonzero(dom)
    n, k = dom.shape
    m = len(rows)
    col = np.arange(m)
    a_eq = coo_matrix((np.ones(m), (rows, col)), shape=(n, m + 1)).tocsr()
    a_ub = coo_matrix((np.concatenate([d.t[rows, cols], -np.ones(k)]),
                       (np.concatenate([cols, np.arange(k)]), np.concatenate([col, np.full(k, m)]))),
                      shape=(k, m + 1)).tocsr()
    c = np.zeros(m + 1)
    c[-1] = 1.0
    left = None if d.deadline is None else d.deadline.remaining()
    res = linprog(c, A_ub=a_ub, b_ub=np.zeros(k), A_eq=a_eq, b_eq=np.ones(n),
                  bounds=[(0, 1)] * m + [(0, None)], method="highs",
                  options={} if left is None else {"time_limit": max(left, 1e-3)})
    if res.status == 0:
        # HiGHS's optimum holds only to its tolerances (1e-7); its duals give one that holds
        # exactly: for PU weights w >= 0 summing to 1, the period is at least the weighted load,
        # which is at least sum over units of min_j w_j t_ij (weak duality)
        w = np.maximum(-np.asarray(res.ineqlin.marginals, dtype=float), 0.0)
        if w.sum() <= 0:
            return 0.0
        w = w / w.sum()
        return float(np.where(dom, np.where(dom, d.t, 0.0) * w, np.inf).min(axis=1).sum())
    d.check_clock()
    return None if res.status == 2 else 0.0


@dataclass(frozen=True)
class Windows:
    """What the forced-placement test leaves of a period ``P``: per unit and PU (profile order)
    whether the unit may run there (``allowed``), and if it does, a lower bound on its start
    inside its stage (``head``, ms) and on how long its stage runs after its end (``tail``, ms)."""

    pus: tuple[str, ...]
    allowed: np.ndarray
    head: np.ndarray
    tail: np.ndarray


def period_windows(problem: MappingProblem, period: float, stages: tuple[int, ...] | None = None,
                   data: ProblemArrays | None = None, latency: bool = False,
                   deadline: Deadline | None = None) -> Windows | None:
    """The windows of every unit in a plan with disjoint PU sets and a period <= ``period``, or
    None when the forced-placement test proves that there is no such plan. ``stages`` (the stage
    of each PU, profile order) restricts the test to plans of that configuration, where whether
    an edge stays inside a stage is known, not inferred. ``latency``: the test of a latency <=
    ``period`` instead (heads and tails then count from the frame's start and to its end).
    ``deadline`` (when no ``data`` is given): OutOfTime once it passes."""
    d = data or ProblemArrays(problem, deadline=deadline)
    found = _propagate(d, period, None if stages is None else np.asarray(stages), latency)
    return None if found is None else Windows(tuple(d.pus), *found)


def _refutes(d: ProblemArrays, period: float) -> bool:
    """True when no plan with disjoint PU sets has a period <= ``period`` (``forced-placement``
    in the module docstring)."""
    return _propagate(d, period) is None


def _propagate(d: ProblemArrays, period: float, stages: np.ndarray | None = None, cumulative: bool = False):
    """(domains, heads, tails) at ``period``, or None if refuted; ``stages``: see period_windows.
    ``cumulative``: test a *latency* <= ``period`` instead. One frame passes the stages one after
    another, so a tensor from an earlier stage arrives after its producer's end plus the transfer
    in the frame's own time too: every edge then counts like one inside a stage, and heads and
    tails are times since the frame's start and until its end.
    Past the work budget: the untouched domains, no heads or tails (nothing refuted)."""
    n, k = d.t.shape
    if d.visits >= d.budget:
        return d.t <= period, np.zeros((n, k)), np.zeros((n, k))
    eye = np.eye(k, dtype=bool)
    dom = d.t <= period
    dom[0] &= d.t[0] + d.t_in <= period        # the first unit's stage also holds the input phase
    if stages is not None:
        dom[0] &= stages == 0
        fixed_same = (stages[:, None] == stages[None, :]) | cumulative   # [a, b]: counts as one stage
        forward = stages[:, None] <= stages[None, :]             # [a, b]: a tensor may go a -> b
    limit = period * (1 + 1e-12)
    for _ in range(n + 1):                     # domain propagation to a fixed point
        d.visits += 2 * (n + len(d.edges))
        d.check_clock()
        if not dom.any(axis=1).all():
            return None
        forced = dom & (dom.sum(axis=1) == 1)[:, None]
        t = np.where(dom, d.t, np.inf)
        # above[w, p]: w or one of its ancestors can only run on p, so p's stage is no later than
        # w's; below[v, a]: v or a descendant can only run on a. An edge w -> v with w on a and
        # v on p stays inside one stage when above[w, p] or below[v, a] (stages never go back
        # along an edge), and the tensor then leaves after w's end
        above = forced.copy()
        for v in range(n):
            for e in d.preds[v]:
                above[v] |= above[d.edges[e][0]]
        below = forced.copy()                  # w or a descendant can only run on p
        for w in range(n - 1, -1, -1):
            for e in d.succs[w]:
                below[w] |= below[d.edges[e][1]]
        head = np.zeros((n, k))
        head[0] = np.where(dom[0], d.t_in, np.inf)
        if stages is not None:     # every unit of the first stage starts after the input phase
            head[:, stages == 0] = np.min(np.where(dom[0], d.t_in, np.inf))
        for v in range(n):
            for e in d.preds[v]:
                w = d.edges[e][0]
                end = head[w] + t[w]                                   # per PU a of w
                if stages is None:
                    same = above[w][None, :] | below[v][:, None] | cumulative   # [a, p]: one stage for sure
                    via = np.where(same, end[:, None] + d.x[e], d.x[e])
                else:
                    via = np.where(forward, np.where(fixed_same, end[:, None] + d.x[e], d.x[e]), np.inf)
                via = np.where(eye, end[:, None], via)
                via = np.where(dom[w][:, None], via, np.inf)
                head[v] = np.maximum(head[v], via.min(axis=0))
        tail = np.zeros((n, k))
        tail[n - 1] = d.t_out
        for v in range(n - 1, -1, -1):
            for e in d.succs[v]:
                w = d.edges[e][1]
                rest = t[w] + tail[w]                                  # per PU b of w
                if stages is None:
                    same = below[w][:, None] | above[v][None, :] | cumulative   # [p, b]: one stage for sure
                    via = np.where(same, d.x[e] + rest[None, :], 0.0)
                else:
                    via = np.where(forward, np.where(fixed_same, d.x[e] + rest[None, :], 0.0), np.inf)
                via = np.where(eye, rest[None, :], via)
                via = np.where(dom[w][None, :], via, np.inf)
                tail[v] = np.maximum(tail[v], via.min(axis=1))
        fits = dom & (head + np.where(dom, d.t, 0.0) + tail <= limit)
        if (fits == dom).all():
            break
        dom = fits
    forced = dom.sum(axis=1) == 1
    for p in range(k):
        on = np.flatnonzero(forced & dom[:, p])
        if not on.size:
            continue
        order = on[np.argsort(head[on, p])]
        suffix_work = np.cumsum(d.t[order, p][::-1])[::-1]
        suffix_tail = np.minimum.accumulate(tail[order, p][::-1])[::-1]
        if (head[order, p] + suffix_work + suffix_tail > limit).any():
            return None
    return (dom, head, tail) if _loads_fit(d, dom, period) else None


def _loads_fit(d: ProblemArrays, dom: np.ndarray, period: float) -> bool:
    """The load-balancing LP over domains ``dom``: can fractional units fit every PU in ``period``?"""
    least = _load_lp(d, dom)
    return least is not None and least <= period * (1 + 1e-9)


def forced_placement(problem: MappingProblem, start: float, data: ProblemArrays | None = None) -> Bound | None:
    """The largest period the forced-placement test refutes, by bisection from ``start`` (a
    period already known to be a lower bound) to a relative ``BISECTION_TOL`` (a fixed number of
    steps, so the bound does not depend on the machine's speed); None if it refutes nothing
    above ``start``."""
    d = data or ProblemArrays(problem)
    lo = _largest_refuted(lambda period: _refutes(d, period), start)
    return None if lo is None else Bound(lo, "forced-placement")


def _largest_refuted(refuted, start: float, stop: float | None = None) -> float | None:
    """The largest period a monotone test ``refuted`` refutes, from ``start`` (None when it
    refutes ``start`` not) up to ``stop`` (returned when refuted; None: doubling until a period
    survives), by bisection to a relative ``BISECTION_TOL``: a fixed number of tests."""
    if not refuted(start):
        return None
    lo = start
    if stop is None:
        hi = max(lo * 2, lo + 1e-3)
        while refuted(hi):
            lo, hi = hi, hi * 2
    elif refuted(stop):
        return stop
    else:
        hi = stop
    while hi - lo > BISECTION_TOL * hi:
        mid = (lo + hi) / 2
        if refuted(mid):
            lo = mid
        else:
            hi = mid
    return lo


def identical_pus(problem: MappingProblem) -> list[tuple[int, int]]:
    """Index pairs (i < j, profile order) of interchangeable PUs: the same times and powers at
    every level, the same phases, and the same links to every other PU and between them."""
    prof = problem.profile
    tr = prof.transfers
    pus = list(prof.pus)

    def link(x: str, y: str):
        return tr.pairs.get(f"{x}->{y}", tr.default)

    def same(a: str, b: str) -> bool:
        if (prof.time_ms[a] != prof.time_ms[b] or prof.power_mw.get(a) != prof.power_mw.get(b)
                or prof.pus[a].idle_power_mw != prof.pus[b].idle_power_mw
                or prof.input_stage.get(a) != prof.input_stage.get(b)
                or prof.output_stage.get(a) != prof.output_stage.get(b) or tr.measured):
            return False
        others = [c for c in pus if c not in (a, b)]
        return link(a, b) == link(b, a) and all(link(a, c) == link(b, c) and link(c, a) == link(c, b)
                                                for c in others)
    return [(i, j) for i in range(len(pus)) for j in range(i + 1, len(pus)) if same(pus[i], pus[j])]


def stage_configurations(problem: MappingProblem, max_stages: int | None = None) -> list[tuple[int, ...]]:
    """Every configuration of a plan with disjoint PU sets: the stage of each PU (profile order),
    unused PUs in stage 0 and used stages a prefix, less the mirror images of identical PUs (the
    first of two identical PUs sits in a stage no later than the second). Every plan has exactly
    one configuration up to swapping identical PUs."""
    k = len(problem.profile.pus)
    S = max(1, min(max_stages or k, k, len(problem.units)))
    pairs = identical_pus(problem)
    out = []
    for stages in itertools.product(range(S), repeat=k):
        if sorted(set(stages)) != list(range(len(set(stages)))):
            continue
        if any(stages[i] > stages[j] for i, j in pairs):
            continue
        out.append(stages)
    return out


def configuration_bound(problem: MappingProblem, stages: tuple[int, ...], start: float, stop: float,
                        data: ProblemArrays | None = None, latency: bool = False) -> float:
    """The largest period (``latency``: latency) in [start, stop] the forced-placement test
    refutes for plans of configuration ``stages`` (``start`` when it refutes none, ``stop`` when
    it refutes all), by bisection to a relative ``BISECTION_TOL``."""
    d = data or ProblemArrays(problem)
    cfg = np.asarray(stages)
    lo = _largest_refuted(lambda period: _propagate(d, period, cfg, latency) is None, start, stop)
    return start if lo is None else lo


def configurations_bound(problem: MappingProblem, start: float, data: ProblemArrays | None = None,
                         latency: bool = False) -> Bound | None:
    """``stage-configurations``: the least over all configurations of the period (``latency``:
    latency) the forced-placement test refutes with the configuration known (then whether an edge
    stays inside a stage is a fact, not an inference). None if it does not improve on ``start``."""
    d = data or ProblemArrays(problem)
    configs = stage_configurations(problem)
    lo = start

    def all_refuted(period: float) -> bool:
        for i, c in enumerate(configs):
            if _propagate(d, period, np.asarray(c), latency) is not None:
                configs.insert(0, configs.pop(i))     # a survivor is tested first next time
                return False
        return True

    lo = _largest_refuted(all_refuted, lo)
    return None if lo is None else Bound(lo, "stage-configurations" + (" (latency)" if latency else ""))


def certified_bounds(problem: MappingProblem, work_limit: float = DEFAULT_WORK, *,
                     disjoint_pus: bool = True) -> dict[str, list[Bound]]:
    """Analytic bounds plus the optimisation arguments (the load-balancing model within
    ``work_limit`` deterministic seconds, the forced-placement tests within ``work_limit`` x
    ``VISITS_PER_WORK`` visits), per objective key; the latency inherits the best period bound,
    the steady-state energy the best period bound too. The forced-placement arguments hold for
    plans with disjoint PU sets only. Every bound is capped by the whole-graph plans'."""
    found = analytic_bounds(problem)
    d = ProblemArrays(problem, budget=work_limit * VISITS_PER_WORK)
    found["period_ms"] += load_balance(problem, work_limit, d)
    if disjoint_pus:
        for argument in (forced_placement, configurations_bound):
            lifted = argument(problem, best(found["period_ms"]).value, data=d)
            if lifted:
                found["period_ms"].append(lifted)
    top = best(found["period_ms"])
    found["latency_ms"].append(Bound(top.value, f"period ({top.source})"))
    if disjoint_pus:
        lifted = configurations_bound(problem, best(found["latency_ms"]).value, data=d, latency=True)
        if lifted:
            found["latency_ms"].append(lifted)
    prof = problem.profile
    if prof.power_model == "board" and prof.static_power_mw is not None and prof.has_power:
        value = _steady_bound(problem, top.value, _dynamic_min(problem))
        if value is not None:
            found["energy_ss_mj"].append(Bound(value, f"static power x period ({top.source}) + dynamic energy"))
    return _capped(problem, found)

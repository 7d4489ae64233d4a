"""The MILP of one variant of a chain (``chain_options.py``) in PuLP (HiGHS, else CBC): the same
decisions and constraints as ``cpsat_chain.py``, in continuous time (ms) and energy (uJ).

* ``a[i, k]``: unit i takes option k, ``sum_k a = 1``; ``on[i, p]``: the sum of its options on p;
* ``y[i, q, k]`` in [0, 1]: previous unit on q, unit i on option k (transportation form, whose
  LP is the convex hull of the pair's choices);
* ``b[i]``: a stage starts at unit i; ``pre[i, p] >= on[j, p]`` for j < i, ``suf[i, p] >= on[j, p]``
  for j >= i, ``b[i] + pre + suf <= 2`` (one stage per PU);
* ``R[i] >= R[i-1] + c[i] - H b[i]``, ``R[i] >= c[i]``, ``P >= R[i]``, ``L = sum c``, ``E = sum e``,
  ``stages x P >= L``, ``P >=`` each PU's load; the variant's segment rules as in the CP-SAT model.

HiGHS runs without presolve: HiGHS 1.16's presolve cut off the optimum of a 4-unit chain (energy
capped 5% above it: 19.168 mJ "optimal" against 18.291 mJ; with presolve off, read back from an
LP file, or on CBC: 18.291; tests/mapping/test_dvfs_chain.py keeps the case), and without it the
chain MILPs solve as fast (YOLOv3, max frequency: 15 s against 12 s).

HiGHS stops at the relative gap ``pulp_backend.GAP_REL`` (1e-7): its proven optimum is a bound
to that gap, which :meth:`MilpChainModel.solve` reports as ``lower`` (the dual bound when a limit
stops it). Constraints hold to HiGHS's feasibility tolerance (1e-7 absolute); caps are relaxed
by ``CAP_ROOM`` (relative) so that no plan on a cap is lost, and plans are checked by the caller.

Energy is in uJ while every option's and transfer's energy is at most ``MAX_ENERGY_COEF``, else
in a power-of-two multiple of the uJ that brings the largest to it (``MilpChainModel.scale``;
exact in binary, so only HiGHS's tolerances see it): a profile at its limits (1e7 ms at 1e9 mW,
1e16 uJ a block) had coefficients HiGHS refuses (over its ``large_matrix_value``, 1e15), and
PuLP's HiGHS interface then failed with an IndexError (solve exit 1). Every shipped chain's
energies (at most 6.6e7 uJ for a whole chain) keep uJ.
"""
from __future__ import annotations

import math

import pulp

from pipeplan.core.deadline import Deadline
from pipeplan.formulations.mapping.plan import Plan
from pipeplan.formulations.mapping.problem import MappingProblem
from pipeplan.solvers.mapping.chain_options import Variant, chain_plan
from pipeplan.solvers.mapping.common import paced
from pipeplan.solvers.mapping.cpsat_chain import ChainOutcome
from pipeplan.solvers.pulp_backend import highs_nodes, pick_backend, solve_once

CAP_ROOM = 1e-9     # caps and windows relaxed by this (relative), beyond the solver's tolerance
MAX_ENERGY_COEF = 1e9  # the largest energy coefficient (model units) before energy is counted coarser than uJ


def energy_scale(variant: Variant) -> float:
    """The chain MILP's energy units per uJ: 1, or the power of two below 1 that brings the
    largest option or transfer energy to at most ``MAX_ENERGY_COEF``."""
    most = max([o.energy for opts in variant.options for o in opts]
               + [e for arcs in variant.arcs for (_, e) in arcs.values()], default=0.0)
    return 1.0 if most <= MAX_ENERGY_COEF else 2.0 ** -math.ceil(math.log2(most / MAX_ENERGY_COEF))


class MilpChainModel:
    """One variant's MILP; :meth:`solve` has the signature of ``CpChainModel.solve``."""

    def __init__(self, problem: MappingProblem, variant: Variant, *, dvfs: bool, max_stages: int | None = None,
                 deadline: Deadline | None = None, backend: str = "highs", prob: pulp.LpProblem | None = None,
                 prefix: str = ""):
        """``prob``: build into this problem (several networks' chains in one joint MILP,
        solvers/mapping/multi), naming every variable with ``prefix``."""
        self.problem, self.variant, self.dvfs = problem, variant, dvfs
        self.prefix = prefix
        self.backend = pick_backend(backend)
        deadline = deadline or Deadline(None)
        v = variant
        n = len(v.options)
        es = energy_scale(v)
        self.scale = {"period": 1.0, "latency": 1.0, "energy": es}    # model units per ms, ms, uJ
        prob = self.prob = prob if prob is not None else pulp.LpProblem("chain", pulp.LpMinimize)
        self.a = [[prob.add_variable(f"{self.prefix}a_{i}_{k}", cat=pulp.LpBinary) for k in range(len(v.options[i]))]
                  for i in paced(range(n), deadline)]
        for row in self.a:
            prob += pulp.lpSum(row) == 1
        on = [{p: pulp.lpSum(row[k] for k, o in enumerate(opts) if o.pu == p) for p in v.pus[i]}
              for i, (row, opts) in enumerate(zip(self.a, v.options))]
        pk = {p: j for j, p in enumerate(dict.fromkeys(p for ps in v.pus for p in ps))}
        cost_t, cost_e = [], []
        cost_on: dict[str, list] = {}      # PU -> its units' times and the transfers into them
        self.inflow: dict[str, list] = {}  # PU -> the transfers into it (ms x variables)
        for i in paced(range(n), deadline):
            terms_t = [o.time * lit for o, lit in zip(v.options[i], self.a[i])]
            terms_e = [o.energy * es * lit for o, lit in zip(v.options[i], self.a[i])]
            if i and v.arcs[i]:
                sources = v.pus[i - 1]
                if len(sources) == 1:
                    y = {(sources[0], k): self.a[i][k] for k in range(len(v.options[i]))}
                else:
                    y = {(q, k): prob.add_variable(f"{self.prefix}y_{i}_{pk[q]}_{k}", 0, 1)
                         for k in range(len(v.options[i])) for q in sources}
                    for k in range(len(v.options[i])):
                        prob += pulp.lpSum(y[(q, k)] for q in sources) == self.a[i][k]
                    for q in sources:
                        prob += pulp.lpSum(y[(q, k)] for k in range(len(v.options[i]))) == on[i - 1][q]
                terms_t += [t * y[key] for key, (t, _) in v.arcs[i].items()]
                terms_e += [e * es * y[key] for key, (_, e) in v.arcs[i].items()]
            cost_t.append(pulp.lpSum(terms_t))
            for k, o in enumerate(v.options[i]):
                cost_on.setdefault(o.pu, []).append(o.time * self.a[i][k])
            for (q, k), (t, _) in (v.arcs[i].items() if i else ()):
                cost_on.setdefault(v.options[i][k].pu, []).append(t * y[(q, k)])
                self.inflow.setdefault(v.options[i][k].pu, []).append(t * y[(q, k)])
            cost_e.append(pulp.lpSum(terms_e))
        H = sum(max(o.time for o in v.options[i]) + max((t for t, _ in v.arcs[i].values()), default=0.0)
                for i in range(n))
        self.b = [None] * n if v.single_stage else [None] + [prob.add_variable(f"{self.prefix}b_{i}", cat=pulp.LpBinary)
                                                              for i in range(1, n)]
        if not v.single_stage:
            self._disjoint_pus(on, n, pk)
            if max_stages is not None:
                prob += pulp.lpSum(self.b[1:]) <= max(0, max_stages - 1)
        R = [prob.add_variable(f"{self.prefix}R_{i}", 0, H) for i in range(n)]
        self.period = prob.add_variable(f"{self.prefix}P", 0, H)
        self.latency = prob.add_variable(f"{self.prefix}L", 0, H)
        self.energy = prob.add_variable(f"{self.prefix}E", 0)
        for i in paced(range(n), deadline):
            prob += R[i] >= cost_t[i]
            if i:
                prob += R[i] >= R[i - 1] + cost_t[i] - (H * self.b[i] if self.b[i] is not None else 0)
            prob += self.period >= R[i]
        prob += self.latency == pulp.lpSum(cost_t)
        prob += self.energy == pulp.lpSum(cost_e)
        self.stages = 1 if v.single_stage else min(len(pk), max_stages or n)
        prob += self.stages * self.period >= self.latency
        for p in pk:                       # a PU's units and inflows lie in one stage
            prob += self.period >= pulp.lpSum(cost_on.get(p, []))
        self._segments(on, n)
        self.vars = {"period": self.period, "latency": self.latency, "energy": self.energy}
        self.min_latency = sum(min(o.time for o in opts) for opts in v.options)

    def _disjoint_pus(self, on, n, pk) -> None:
        prob = self.prob
        for p in pk:
            idx = [i for i in range(n) if p in on[i]]
            if len(idx) < 2:
                continue
            first, last = idx[0], idx[-1]
            pre = {i: prob.add_variable(f"{self.prefix}pre_{i}_{pk[p]}", 0, 1) for i in range(first + 1, last + 1)}
            suf = {i: prob.add_variable(f"{self.prefix}suf_{i}_{pk[p]}", 0, 1) for i in range(first + 1, last + 1)}
            for i in range(first + 1, last + 1):
                if p in on[i - 1]:
                    prob += pre[i] >= on[i - 1][p]
                if i - 1 in pre:
                    prob += pre[i] >= pre[i - 1]
                if p in on[i]:
                    prob += suf[i] >= on[i][p]
                if i + 1 in suf:
                    prob += suf[i] >= suf[i + 1]
                prob += self.b[i] + pre[i] + suf[i] <= 2

    def _segments(self, on, n) -> None:
        prob, v = self.prob, self.variant
        for p in v.one_segment:
            starts = []
            for i in range(n):
                if p not in on[i]:
                    continue
                if i and p in on[i - 1]:
                    s = prob.add_variable(f"{self.prefix}s_{i}_{p}", 0, 1)
                    prob += s >= on[i][p] - on[i - 1][p]
                    starts.append(s)
                else:
                    starts.append(on[i][p])
            prob += pulp.lpSum(starts) <= 1
        for p in v.many_segments:
            colds = []
            for i in range(n):
                if p not in on[i]:
                    continue
                cold = pulp.lpSum(lit for lit, o in zip(self.a[i], v.options[i]) if o.pu == p and o.cold)
                prev = on[i - 1][p] if i and p in on[i - 1] else 0
                prob += cold >= on[i][p] - prev
                prob += cold + prev <= 1
                colds.append(cold)
            prob += pulp.lpSum(colds) >= v.min_cold
        for p in v.not_all_on:
            if all(p in on[i] for i in range(n)):
                prob += pulp.lpSum(on[i][p] for i in range(n)) <= n - 1

    def window_room(self, window: tuple[float, float]) -> float:
        """By how much a plan's share may lie beyond the ends of ``window`` in :meth:`solve`."""
        return 2 * CAP_ROOM + 1e-9

    def solve(self, weights: dict[str, float], *, caps: dict[str, float] | None = None,
              window: tuple[float, float] | None = None, cutoff: float | None = None, hint: Plan | None = None,
              strict: bool = False, time_limit: float | None, work_limit: float | None = None, threads: int = 1,
              seed: int = 0, node_limit: int | None = None) -> ChainOutcome:
        """As ``CpChainModel.solve``; ``work_limit`` is not used (HiGHS has no deterministic clock),
        ``node_limit`` bounds the branch-and-bound nodes of this solve."""
        prob = self.prob
        extra = []
        for axis, cap in (caps or {}).items():
            room = -CAP_ROOM if strict else CAP_ROOM
            extra.append(self.vars[axis] <= cap * self.scale[axis] * (1 + room) + room)
        if window is not None:            # the share period / latency
            lo, hi = window
            extra.append(self.period >= lo * (1 - CAP_ROOM) * self.latency - CAP_ROOM)
            extra.append(self.period <= hi * (1 + CAP_ROOM) * self.latency + CAP_ROOM)
        objective = pulp.lpSum(w / self.scale[axis] * self.vars[axis] for axis, w in weights.items())
        if cutoff is not None:
            extra.append(objective <= cutoff + CAP_ROOM * abs(cutoff))
        names = []
        for k, c in enumerate(extra):
            name = f"extra_{k}"
            prob.addConstraint(c, name)
            names.append(name)
        prob.setObjective(objective)
        if hint is not None:
            self._hint(hint)
        try:
            state, lower, why = solve_once(prob, self.backend, time_limit=time_limit, threads=threads, seed=seed,
                                           warm=hint is not None, node_limit=node_limit,
                                           presolve=False)       # see the module docstring
            plan = self._extract() if state in ("optimal", "feasible") else None
            nodes = highs_nodes(prob, self.backend) or 0
        finally:
            table = getattr(prob, "_constraints", None)    # pulp >= 3.3 warns on the mapping view
            for name in names:
                del (prob.constraints if table is None else table)[name]
            for var in prob.variables():      # no stale values as the next solve's start
                var.varValue = None
        return ChainOutcome(state, plan, lower, 0.0, why, nodes)

    def _hint(self, plan: Plan) -> None:
        """``plan``'s options as the start (a partial start: HiGHS completes it)."""
        from pipeplan.solvers.mapping.chain_options import plan_options
        for i, k in enumerate(plan_options(self.variant, self.problem, plan)):
            if k is None:
                return
            for j, lit in enumerate(self.a[i]):
                lit.setInitialValue(float(j == k))

    def _extract(self) -> Plan:
        choice = [max(range(len(row)), key=lambda k: row[k].varValue or 0.0) for row in self.a]
        new_stage = [bool(b is not None and (b.varValue or 0.0) > 0.5) for b in self.b]
        return chain_plan(self.problem, self.variant, choice, new_stage, self.dvfs)

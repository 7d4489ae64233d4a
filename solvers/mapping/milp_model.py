"""The MILP of the operator-mapping problem in PuLP (the solver is ``milp.py``).

Plan space: the brute force's (``formulations/mapping/brute_force.py``), every PU at its top
DVFS level. Time is continuous, in ms, measured from the start of each unit's stage.

* ``x[u,s,p]``: unit u in stage s on PU p (only PUs that can run u; unit 0 only in stage 0);
  ``y[s,p]``: PU p serves stage s, at most one stage per PU; ``w[s]``: stage s is used, and
  used stages form a prefix (symmetry). Stage indices never decrease along an edge.
* Edge e = (u, v): ``z[e,a,b] >= on[u,a] + on[v,b] - 1`` marks the transfer a -> b, so
  ``start[v] >= sum z * transfer``; ``same[e] = 0`` forces v into a later stage, otherwise
  ``start[v] >= end[u] + transfer`` (big-M on ``same``).
* Units with no path between them that may share a PU get an order binary and a big-M
  disjunction per shared PU; a path already orders the others (stages are monotone, so the
  whole path lies in one stage). Those pairs are found from descendant bitsets, so the model
  grows with the pairs it holds (quadratic only where the graph is that wide).
* Every unit of stage 0 starts after the input stage of the first unit's PU; ``T[s]`` covers
  every end in s, the last unit's end plus the output stage, and (as cuts) each PU's load in s
  and the work in s of each path of a path cover.
  Period ``P >= T[s]`` and ``>= busy[p]``; latency ``= sum T[s]``.
* Energy (mJ) follows the evaluator: units, input/output phases, one handoff per (source unit,
  destination PU) (``h >= z`` over the unit's out-edges), and with ``per_pu`` the idle power of
  every PU over ``P - busy``.

Big-M is the horizon H (input + every unit on its slowest PU + every transfer at its slowest +
output): no stage of a semi-active schedule lasts longer, so ``start``/``end <= H`` is valid.

The MILP's own values only steer the search: the plan is extracted (stages compacted, per-PU
order from the start times) and re-scored by the evaluator.

Building is pure Python (PuLP) and checks its deadline per unit, edge, pair and path: past it
the builder raises OutOfTime and the solver returns its fallback plan.
"""
from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass

import networkx as nx
import pulp

from pipeplan.core.deadline import Deadline
from pipeplan.formulations.mapping.evaluator import evaluate
from pipeplan.formulations.mapping.plan import Plan, Stage
from pipeplan.solvers.mapping.common import paced, transfer_times
from pipeplan.solvers.pulp_backend import highs_nodes, make_solver, stopped_by


class MappingMilp:
    """The PuLP model of one problem; ``objectives`` maps period/latency/energy to expressions.
    Building it is pure Python and, on graphs of hundreds of operators, takes longer than many
    time limits: past ``deadline`` it raises OutOfTime."""

    def __init__(self, problem, *, max_stages: int | None = None, deadline: Deadline | None = None):
        self.deadline = deadline = deadline or Deadline(None)
        self.problem = problem
        self.prof = prof = problem.profile
        self.pus = list(prof.pus)
        self.n = len(problem.units)
        self.S = max(1, min(max_stages or len(self.pus), len(self.pus)))
        self.top = {p: prof.pus[p].max_level for p in self.pus}
        self.run = [{p: t for p in self.pus if (t := prof.time(i, p, self.top[p])) is not None}
                    for i in range(self.n)]
        # transfer time of each edge per PU pair, only where both ends can run and it costs time
        pk = {p: k for k, p in enumerate(self.pus)}
        self.xfer = [{(a, b): t for a in self.run[problem.index[e.src]] for b in self.run[problem.index[e.dst]]
                      if a != b and (t := times[pk[a]][pk[b]]) > 0}
                     for e, times in paced(zip(problem.edges, transfer_times(problem).tolist()), deadline)]
        self.t_in = {p: ph.time_ms if (ph := self.phase(prof.input_stage, p)) else 0.0 for p in self.pus}
        self.t_out = {p: ph.time_ms if (ph := self.phase(prof.output_stage, p)) else 0.0 for p in self.pus}
        self.H = (max(self.t_in.values()) + sum(max(r.values()) for r in self.run)
                  + sum(max(x.values(), default=0.0) for x in self.xfer) + max(self.t_out.values()))
        self.prob = pulp.LpProblem("mapping", pulp.LpMinimize)
        self._on, self._in_stage, self._stage_of = {}, {}, {}
        for build in (self._placement, self._edges, self._parallel, self._stage_times):
            deadline.check()
            build()
        self.objectives = {"period": self.P, "latency": pulp.lpSum(self.T), "energy": self._energy()}

    def phase(self, table, p):
        """The input or output phase of PU ``p`` at its top level, or None."""
        return table.get(p, {}).get(self.top[p])

    # each expression is built once and only ever read (PuLP's operators copy their operands)
    def on(self, i: int, p: str):
        if (i, p) not in self._on:
            self._on[i, p] = pulp.lpSum(self.x[i, s, p] for s in range(self.S) if (i, s, p) in self.x)
        return self._on[i, p]

    def in_stage(self, i: int, s: int):
        if (i, s) not in self._in_stage:
            self._in_stage[i, s] = pulp.lpSum(self.x[i, s, p] for p in self.run[i] if (i, s, p) in self.x)
        return self._in_stage[i, s]

    def stage_of(self, i: int):
        if i not in self._stage_of:
            self._stage_of[i] = pulp.lpSum(s * self.in_stage(i, s) for s in range(1, self.S))
        return self._stage_of[i]

    def busy(self, p: str):
        return pulp.lpSum(self.on(i, p) * r[p] for i, r in paced(enumerate(self.run), self.deadline) if p in r)

    def _placement(self) -> None:
        """x, y, w; each unit placed once, each PU in at most one stage, used stages a prefix."""
        m, S, n, pus, run, deadline = self.prob, self.S, self.n, self.pus, self.run, self.deadline
        self.pk = pk = {p: k for k, p in enumerate(pus)}
        self.x = x = {(i, s, p): self.prob.add_variable(f"x_{i}_{s}_{pk[p]}", cat=pulp.LpBinary)
                      for i in paced(range(n), deadline) for s in range(S if i else 1) for p in run[i]}
        self.y = y = {(s, p): self.prob.add_variable(f"y_{s}_{pk[p]}", cat=pulp.LpBinary)
                      for s in range(S) for p in pus}
        self.w = w = [self.prob.add_variable(f"w_{s}", cat=pulp.LpBinary) for s in range(S)]
        for i in paced(range(n), deadline):
            m += pulp.lpSum(self.in_stage(i, s) for s in range(S)) == 1
        for (i, s, p), var in paced(x.items(), deadline):
            m += var <= y[s, p]
        for s in range(S):
            for p in pus:
                m += y[s, p] <= pulp.lpSum(x[i, s, p] for i in paced(range(n), deadline) if (i, s, p) in x)
                m += y[s, p] <= w[s]
            m += w[s] <= pulp.lpSum(y[s, p] for p in pus)
            if s:
                m += w[s] <= w[s - 1]
        for p in pus:
            m += pulp.lpSum(y[s, p] for s in range(S)) <= 1
        self.start = [self.prob.add_variable(f"start_{i}", 0, self.H) for i in paced(range(n), deadline)]
        self.end = [self.start[i] + pulp.lpSum(self.on(i, p) * t for p, t in run[i].items())
                    for i in paced(range(n), deadline)]

    def _edges(self) -> None:
        """Monotone stages, transfers (z), precedence inside a stage (same)."""
        m, idx, start, end = self.prob, self.problem.index, self.start, self.end
        self.same, self.z = [], {}
        for k, e in paced(enumerate(self.problem.edges), self.deadline):
            u, v = idx[e.src], idx[e.dst]
            same = self.prob.add_variable(f"same_{k}", cat=pulp.LpBinary)
            self.same.append(same)
            m += self.stage_of(v) >= self.stage_of(u)
            m += self.stage_of(v) - self.stage_of(u) >= 1 - same
            for (a, b) in self.xfer[k]:
                z = self.z[k, a, b] = self.prob.add_variable(f"z_{k}_{self.pk[a]}_{self.pk[b]}", 0, 1)
                m += z >= self.on(u, a) + self.on(v, b) - 1
            moved = pulp.lpSum(self.z[k, a, b] * t for (a, b), t in self.xfer[k].items())
            if self.xfer[k]:
                m += start[v] >= moved
            m += start[v] >= end[u] + moved - (self.H + max(self.xfer[k].values(), default=0.0)) * (1 - same)

    def _parallel(self) -> None:
        """Units with no path between them: one order binary per pair, a disjunction per PU
        both can run on (they share it only inside one stage)."""
        m, start, end, H, n, deadline = self.prob, self.start, self.end, self.H, self.n, self.deadline
        idx = self.problem.index
        succs: list[list[int]] = [[] for _ in range(n)]
        for e in self.problem.edges:
            succs[idx[e.src]].append(idx[e.dst])
        below = [0] * n          # bit j of below[i]: a path leads from unit i to unit j
        for i in paced(reversed(range(n)), deadline):
            for j in succs[i]:
                below[i] |= below[j] | 1 << j
        everything = (1 << n) - 1
        self.order = {}
        for i in paced(range(n), deadline):
            free = everything >> (i + 1) << (i + 1) & ~below[i]     # later units no path from i reaches
            while free:
                j = (free & -free).bit_length() - 1
                free &= free - 1
                shared = [p for p in self.run[i] if p in self.run[j]]
                if not shared:
                    continue
                deadline.check()
                o = self.order[i, j] = self.prob.add_variable(f"o_{i}_{j}", cat=pulp.LpBinary)
                for p in shared:
                    apart = 2 - self.on(i, p) - self.on(j, p)
                    m += start[j] >= end[i] - H * (1 - o) - H * apart
                    m += start[i] >= end[j] - H * o - H * apart

    def _stage_times(self) -> None:
        """T[s] and P: input before stage 0, every end, the output after the last unit."""
        m, S, n, H, x, run, deadline = self.prob, self.S, self.n, self.H, self.x, self.run, self.deadline
        self.T = T = [self.prob.add_variable(f"T_{s}", 0, H) for s in range(S)]
        self.P = P = self.prob.add_variable("P", 0)
        in_time = pulp.lpSum(x[0, 0, p] * self.t_in[p] for p in run[0])
        in_max, out_max, last = max(self.t_in.values()), max(self.t_out.values()), n - 1
        out_time = pulp.lpSum(self.on(last, p) * self.t_out[p] for p in run[last])
        for i in paced(range(n), deadline):
            if in_max > 0:
                m += self.start[i] >= in_time - in_max * (1 - self.in_stage(i, 0))
            for s in range(S):
                if i == last and out_max > 0:
                    m += T[s] >= self.end[i] + out_time - (H + out_max) * (1 - self.in_stage(i, s))
                else:
                    m += T[s] >= self.end[i] - H * (1 - self.in_stage(i, s))
        # valid cuts that the big-M rows above hide from the LP relaxation: a stage lasts at
        # least each PU's load in it, and at least the work of its units on any one path
        groups = [[(i, p) for i in range(n) if p in run[i]] for p in self.pus]
        groups += [[(i, p) for i in path for p in run[i]] for path in _path_cover(self.problem, deadline)]
        for s in range(S):
            for group in paced(groups, deadline):
                work = pulp.lpSum(x[i, s, p] * run[i][p] for i, p in group if (i, s, p) in x)
                m += T[s] >= work + (in_time if s == 0 else 0)
            m += P >= T[s]
        for p in self.pus:
            m += P >= self.busy(p)

    def _energy(self):
        """Energy per frame (mJ) as the evaluator counts it."""
        prof, m, n, idx, last = self.prof, self.prob, self.n, self.problem.index, self.n - 1
        energy = [self.on(i, p) * t * prof.power(i, p, self.top[p]) / 1000.0
                  for i in paced(range(n), self.deadline) for p, t in self.run[i].items()]
        energy += [self.x[0, 0, p] * ph.time_ms * ph.power_mw / 1000.0
                   for p in self.run[0] if (ph := self.phase(prof.input_stage, p))]
        energy += [self.on(last, p) * ph.time_ms * ph.power_mw / 1000.0
                   for p in self.run[last] if (ph := self.phase(prof.output_stage, p))]
        # one handoff per (source unit, PU pair); its time is the longest of the unit's
        # out-edges (they are equal when, as in every catalogue instance, they carry one tensor)
        handoff: dict[tuple[int, str, str], float] = {}
        if prof.transfers.power_mw > 0:
            for k, e in paced(enumerate(self.problem.edges), self.deadline):
                for (a, b), t in self.xfer[k].items():
                    key = (idx[e.src], a, b)
                    handoff[key] = max(handoff.get(key, 0.0), t)
        self.h = {key: self.prob.add_variable(f"h_{key[0]}_{self.pk[key[1]]}_{self.pk[key[2]]}", 0, 1)
                  for key in handoff}
        for (k, a, b), z in paced(self.z.items(), self.deadline):
            if (key := (idx[self.problem.edges[k].src], a, b)) in self.h:
                m += self.h[key] >= z
        energy += [self.h[key] * t * prof.transfers.power_mw / 1000.0 for key, t in handoff.items()]
        if prof.power_model == "per_pu":
            energy += [(self.P - self.busy(p)) * prof.pus[p].idle_power_mw / 1000.0 for p in self.pus]
        return pulp.lpSum(energy)

    def add_upper_bound(self, axis: str, value: float) -> None:
        self.prob += self.objectives[axis] <= value

    def add_lower_bound(self, axis: str, value: float) -> None:
        """A certified lower bound as a cut (less a relative 1e-9, the solver's tolerance)."""
        self.prob += self.objectives[axis] >= value * (1 - 1e-9)

    # ------------------------------------------------------------------------------ plans

    def plan(self) -> Plan:
        """The plan of the current solution: stages compacted, per-PU order by start time."""
        problem, n = self.problem, len(self.problem.units)
        names = [u.name for u in problem.units]
        place = {i: (s, p) for (i, s, p), var in self.x.items() if var.varValue > 0.5}
        start = [v.varValue for v in self.start]
        end = [e.value() for e in self.end]
        stages = []
        for s in sorted({s for s, _ in place.values()}):
            members = {i for i in range(n) if place[i][0] == s}
            # a global topological order of the stage, earliest start first: it respects
            # precedence even where solver tolerances blur the start times, so it never deadlocks
            waiting = {i: 0 for i in members}
            succs: dict[int, list[int]] = {i: [] for i in members}
            for e in problem.edges:
                a, b = problem.index[e.src], problem.index[e.dst]
                if a in members and b in members:
                    waiting[b] += 1
                    succs[a].append(b)
            ready = [(start[i], end[i], i) for i in members if not waiting[i]]
            heapq.heapify(ready)
            order: dict[str, list[str]] = {}
            while ready:
                _, _, i = heapq.heappop(ready)
                order.setdefault(place[i][1], []).append(names[i])
                for j in succs[i]:
                    waiting[j] -= 1
                    if not waiting[j]:
                        heapq.heappush(ready, (start[j], end[j], j))
            pus = tuple(p for p in self.pus if p in order)
            stages.append(Stage(pus, {p: tuple(order[p]) for p in pus}))
        return Plan(tuple(stages), shared_pus=False, instance=problem.name)

    def set_start(self, plan: Plan) -> bool:
        """Load ``plan`` (scored by the evaluator) as the solver's starting solution; False when
        the plan lies outside this model (shared PUs, more stages than the model has)."""
        problem = self.problem
        if plan.shared_pus or len(plan.stages) > self.S:
            return False
        idx = problem.index
        place = {idx[u]: sp for u, sp in plan.placement().items()}
        if any((i, s, p) not in self.x for i, (s, p) in place.items()):
            return False
        ev = evaluate(problem, plan)
        rank = {u: r for stage in plan.stages for units in stage.order.values() for r, u in enumerate(units)}
        names = [u.name for u in problem.units]
        values = {var: float(place[i] == (s, p)) for (i, s, p), var in self.x.items()}
        values |= {var: float(any(q == p and t == s for t, q in place.values())) for (s, p), var in self.y.items()}
        values |= {var: float(s < len(plan.stages)) for s, var in enumerate(self.w)}
        values |= {var: ev.start_ms[names[i]] for i, var in enumerate(self.start)}
        values |= {var: (ev.stage_times_ms[s] if s < len(plan.stages) else 0.0) for s, var in enumerate(self.T)}
        values[self.P] = ev.period_ms
        for k, e in enumerate(problem.edges):
            (su, pu), (sv, pv) = place[idx[e.src]], place[idx[e.dst]]
            values[self.same[k]] = float(su == sv)
            for (a, b) in self.xfer[k]:
                values[self.z[k, a, b]] = float((a, b) == (pu, pv))
        out_edges: dict[int, list[int]] = {}
        for k, e in enumerate(problem.edges):
            out_edges.setdefault(idx[e.src], []).append(k)
        for (i, a, b), var in self.h.items():
            values[var] = max((values[self.z[k, a, b]] for k in out_edges[i] if (a, b) in self.xfer[k]), default=0.0)
        for (i, j), var in self.order.items():
            values[var] = float(place[i][1] != place[j][1] or rank[names[i]] < rank[names[j]])
        for var, value in values.items():
            var.setInitialValue(value)
        return True


def _path_cover(problem, deadline: Deadline) -> list[list[int]]:
    """Disjoint paths covering the DAG, longest (in units) first: the units of one stage on a
    path run one after another (stages are monotone along it), whatever their PUs. Each path
    costs a longest-path search of what is left, so ``deadline`` is checked per path."""
    g = problem.graph.copy()
    paths = []
    while g.number_of_nodes():
        deadline.check()
        path = nx.dag_longest_path(g, weight=None)
        paths.append([problem.index[u] for u in path])
        g.remove_nodes_from(path)
    return paths


# ------------------------------------------------------------------------------ backends


@dataclass
class MilpOutcome:
    state: str                  # optimal / feasible / infeasible / none
    value: float | None         # the MILP's objective value
    dual: float | None          # HiGHS's dual bound when not proven optimal
    stopped_by: str | None      # "work" (node limit) or "time" when a limit stopped the solve
    nodes: int | None           # HiGHS's branch-and-bound nodes


def run_milp(model: MappingMilp, axis: str, backend: str, *, time_limit, threads, seed,
             node_limit: int | None = None) -> MilpOutcome:
    """Minimise ``axis`` within ``time_limit`` seconds and ``node_limit`` nodes."""
    prob = model.prob
    prob.setObjective(model.objectives[axis])
    warm = any(v.varValue is not None for v in prob.variables())
    began = time.perf_counter()
    prob.solve(make_solver(backend, time_limit=time_limit, threads=threads, seed=seed, warm=warm,
                           node_limit=node_limit))
    wall = time.perf_counter() - began
    state = {pulp.LpSolutionOptimal: "optimal", pulp.LpSolutionIntegerFeasible: "feasible",
             pulp.LpSolutionInfeasible: "infeasible"}.get(prob.sol_status, "none")
    dual = None
    if backend == "highs" and state == "feasible":
        value = prob.solverModel.getInfo().mip_dual_bound
        dual = value + prob.objective.constant if math.isfinite(value) else None
    value = prob.objective.value() if state in ("optimal", "feasible") else None
    why = None if state in ("optimal", "infeasible") else stopped_by(
        prob, backend, node_limit=node_limit, time_limit=time_limit, wall_s=wall)
    return MilpOutcome(state, value, dual, why, highs_nodes(prob, backend))

"""The joint CP-SAT model: every network's chain model (solvers/mapping/cpsat_chain.py) in one
CpModel, coupled through the PUs they share; the same rows as the joint MILP (milp.py).

Integers: the chain models count time in ``tick`` units (TICK, 10 ns; see below) and round each option and
transfer to the nearest unit; a network's period and latency are within ``slack`` units of the
evaluator's (cpsat_chain.py), and its busy time on a PU within half a unit per unit. The
objective's factors c_i (exact.py) become integers f_i = floor(K c_i). Every row a plan must
meet (cutoff, deadlines, demands) is relaxed by the rounding, so the model keeps every plan that
meets it, and its lower bound on Z is lowered by the rounding before it is reported:
Z_true >= (Z_model - K x slack) / (K x tick). Plans are re-scored by the evaluator.

``tick`` (time units per ms, one for every chain of the joint model) is TICK unless Z's range,
max f_i x a network's horizon or a PU's busy time, or a demand row's, would pass
``MAX_JOINT_UNITS``, and no finer than any chain's own unit (``cpsat_chain.chain_tick``): two
networks at the profile limits (1e7 ms a block) made Z's domain 1.4e19, past int64 (OR-Tools:
TypeError, `multi solve --solver cpsat` exit 1). Every shipped multi-network instance keeps TICK.
"""
from __future__ import annotations

import math
from typing import Callable

from pipeplan.core.deadline import Deadline
from pipeplan.core.registry import register
from pipeplan.core.vocabulary import MultiAxis
from pipeplan.formulations.mapping.multi.plan import JointPlan
from pipeplan.formulations.mapping.multi.problem import MultiProblem
from pipeplan.solvers.cpsat_backend import set_limits, stopped_by, true_bound, work_done
from pipeplan.solvers.mapping.cpsat_chain import TICK, chain_tick, horizon_ms
from pipeplan.solvers.mapping.multi.exact import ComboOutcome, solve_exact, z_weights
from pipeplan.solvers.mapping.multi.variants import JointVariant

FACTOR_UNITS = 1e6     # the least objective factor f_i: rounding it down costs at most 1e-6 relative
MAX_JOINT_UNITS = 2 ** 61   # the most Z (and a demand row) may reach: its rows stay within int64


def busy_top(jv: JointVariant, units: Callable[[float], float] = float) -> dict[str, float]:
    """A PU's most busy time under ``jv`` (loose: every option of every unit on it, and the
    dearest transfer into each unit there), each time in ms passed through ``units`` (the joint
    model's rounding to its time unit) before it is summed."""
    top: dict[str, float] = {}
    for i, opts in enumerate(jv.variant.options):
        for j, o in enumerate(opts):
            top[o.pu] = top.get(o.pu, 0) + units(jv.busy(i, j))
    for i, arcs in enumerate(jv.variant.arcs):
        into: dict[str, float] = {}
        for (_, k), (t, _) in arcs.items():
            p = jv.variant.options[i][k].pu
            into[p] = max(into.get(p, 0), units(t))
        for p, t in into.items():
            top[p] = top.get(p, 0) + t
    return top


def joint_tick(combo: tuple[JointVariant, ...], f: list[int], g: list[int]) -> float:
    """The joint model's time units per ms: TICK, coarser where Z's range (``f``: the objective
    factors) or a demand row's (``g``) would pass ``MAX_JOINT_UNITS``, and never finer than a
    chain's own unit."""
    tops = [busy_top(jv) for jv in combo]
    pus = {p for t in tops for p in t}
    most = max([fk * (horizon_ms(jv.variant) + 1) for fk, jv in zip(f, combo)]
               + [sum(w * t.get(p, 0.0) for w, t in zip(weights, tops)) for weights in (f, g) for p in pus]
               + [1.0])
    return min([TICK, MAX_JOINT_UNITS / most] + [chain_tick(jv.variant) for jv in combo])


class JointCpModel:
    def __init__(self, problem: MultiProblem, combo: tuple[JointVariant, ...], objective: str, deadline: Deadline):
        from ortools.sat.python import cp_model

        from pipeplan.solvers.mapping.cpsat_chain import CpChainModel

        self.problem, self.combo = problem, combo
        c = z_weights(problem, objective)
        self.K = FACTOR_UNITS / min(c.values())
        f = [math.floor(self.K * c[jv.network.name]) for jv in combo]
        demands = [jv.network.min_fps for jv in combo]
        g = [math.floor((d or 0.0) * FACTOR_UNITS) for d in demands]
        self.tick = tick = joint_tick(combo, f, g)
        m = self.m = cp_model.CpModel()
        self.chains = [CpChainModel(jv.network.problem, jv.variant, dvfs=False, deadline=deadline, model=m,
                                    tick=tick) for jv in combo]
        pus = problem.pu_names
        busy: list[dict] = []
        used: list[dict] = []
        self.busy_slack = []            # per network: its busy times' rounding (units), on any PU
        self.busy_top = []
        for jv, ch in zip(combo, self.chains):
            terms: dict[str, list] = {}
            u = {}
            for i, row in enumerate(ch.a):
                for j, lit in enumerate(row):
                    p = jv.variant.options[i][j].pu
                    t = round(jv.busy(i, j) * tick)
                    terms.setdefault(p, []).append(t * lit)
                    if p not in u:
                        u[p] = m.NewBoolVar(f"u[{jv.network.name},{p}]")
                    m.AddImplication(lit, u[p])
            for p, flows in ch.inflow.items():     # transfers load the receiving PU (evaluator.py)
                terms.setdefault(p, []).extend(flows)
            busy.append({p: sum(t) for p, t in terms.items()})
            used.append(u)
            self.busy_slack.append(1.0 * len(ch.a))    # half a unit per option, half per transfer
            self.busy_top.append(busy_top(jv, lambda t: round(t * tick)))
        for k, jv in enumerate(combo):
            for p in jv.exclusive:
                for mm in range(len(combo)):
                    if mm != k and p in used[k] and p in used[mm]:
                        m.AddBoolOr([used[k][p].Not(), used[mm][p].Not()])
        if problem.sharing == "partitioned":
            for p in pus:
                users = [u[p] for u in used if p in u]
                if len(users) > 1:
                    m.AddAtMostOne(users)
        p_slack = [ch.slack["period"] for ch in self.chains]
        self.z_slack = self.K * max(max(c[jv.network.name] * s for jv, s in zip(combo, p_slack)),
                                    sum(c[jv.network.name] * s for jv, s in zip(combo, self.busy_slack)))
        top = max(max(fk * ch.horizon for fk, ch in zip(f, self.chains)),
                  max(sum(fk * bt.get(p, 0) for fk, bt in zip(f, self.busy_top)) for p in pus))
        z = self.z = m.NewIntVar(0, int(top) + 1, "Z")
        for fk, ch in zip(f, self.chains):
            m.Add(z >= fk * ch.period)
        for p in pus:
            m.Add(z >= sum(fk * b[p] for fk, b in zip(f, busy) if p in b))
        for k, (jv, ch) in enumerate(zip(combo, self.chains)):
            net = jv.network
            if net.latency_ms is not None:
                waits, room = [], ch.slack["latency"]
                if problem.sharing == "time_shared":
                    for p, u in used[k].items():
                        others = [(b[p], self.busy_top[mm].get(p, 0), self.busy_slack[mm])
                                  for mm, b in enumerate(busy) if mm != k and p in b]
                        if not others:
                            continue
                        w = m.NewIntVar(0, sum(o[1] for o in others), f"w[{net.name},{p}]")
                        m.Add(w >= sum(o[0] for o in others)).OnlyEnforceIf(u)
                        waits.append(w)
                        room += sum(o[2] for o in others)
                m.Add(ch.latency + sum(waits) <= math.floor(net.latency_ms * tick + room))
            if net.min_fps is not None:
                m.Add(ch.period <= math.floor(1000.0 / net.min_fps * tick + p_slack[k]))
        if any(d is not None for d in demands):
            room = sum((d or 0.0) * FACTOR_UNITS * s for d, s in zip(demands, self.busy_slack))
            for p in pus:
                m.Add(sum(gk * b[p] for gk, b in zip(g, busy) if p in b)
                      <= math.floor(1000.0 * tick * FACTOR_UNITS + room))
        m.Minimize(z)

    def solve(self, *, cutoff: float | None, time_limit: float | None, threads: int, seed: int,
              work_limit: float | None = None) -> ComboOutcome:
        from ortools.sat.python import cp_model

        m = self.m.Clone()
        scale = self.K * self.tick
        if cutoff is not None:     # plans at least as good as the incumbent (relaxed by the rounding)
            m.Add(m.GetIntVarFromProtoIndex(self.z.Index()) <= math.floor(cutoff * scale + self.z_slack))
        solver = cp_model.CpSolver()
        set_limits(solver, time_limit=time_limit, work_limit=work_limit)
        solver.parameters.num_workers = max(1, int(threads))
        solver.parameters.random_seed = int(seed)
        solver.parameters.linearization_level = 2
        # OR-Tools 9.15's presolve misjudges this model, whose objective coefficients reach about
        # 1e12 (FACTOR_UNITS x TICK): it proved 1.1837 optimal on a pair of 2- and 3-unit chains
        # whose optimum is 1.2780, and was wrong in 11 of 240 solves of random pairs (found by a test
        # audit); without it every one matches the brute force, and the measured instances'
        # optima are the same (google+res+squeeze's fairness in 9 s instead of 54 s)
        solver.parameters.cp_model_presolve = False
        code = solver.Solve(m)
        if code == cp_model.MODEL_INVALID:
            raise RuntimeError(f"CP-SAT joint model invalid: {m.Validate()}")
        status = {cp_model.OPTIMAL: "optimal", cp_model.FEASIBLE: "feasible",
                  cp_model.INFEASIBLE: "infeasible"}.get(code, "unknown")
        plan = None
        if status in ("optimal", "feasible"):
            plan = JointPlan({jv.network.name: ch._extract(solver) for jv, ch in zip(self.combo, self.chains)},
                             instance=self.problem.name)
        lower = None
        best = solver.BestObjectiveBound()
        if status != "infeasible" and math.isfinite(best):
            lower = true_bound(best, self.z_slack, scale)
        work = work_done(solver)
        return ComboOutcome(status, plan, lower, work, stopped_by(status, work, work_limit))


@register("multi", "cpsat", exact=True, requires=("ortools",),
          description="joint CP-SAT model of every network's chain, coupled through shared PUs")
def solve_cpsat(problem, *, time_limit=None, seed=0, threads=1, objective: MultiAxis = "fairness",
                work_limit: float | None = None):
    return solve_exact(problem, "cpsat", lambda combo, dl: JointCpModel(problem, combo, objective, dl),
                       objective=objective, time_limit=time_limit, threads=threads, seed=seed,
                       limit={"work_limit": work_limit}, params={"work_limit": work_limit})

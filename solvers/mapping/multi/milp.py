"""The joint MILP (PuLP, HiGHS; CBC where HiGHS is missing): every network's chain MILP
(solvers/mapping/milp_chain.py) in one problem, coupled through the PUs they share.

Per network i and PU p: ``b[i, p]`` = its busy ms per frame on p (the options' unit times and
the transfers into p, as the evaluator charges them),
``u[i, p]`` in {0, 1} >= every on[j, p] (i uses p). Coupling rows:

* exclusive PUs of warm variants (variants.py): u[i, p] + u[j, p] <= 1;
* partitioned instances: sum_i u[i, p] <= 1;
* Z >= c_i P_i and Z >= sum_i c_i b[i, p] (exact.py: c_i = ref_i / 1000 or 1), minimise Z;
* deadlines: L_i + sum_p z[i, p] <= D_i, z[i, p] >= sum_{j != i} b[j, p] - M (1 - u[i, p])
  (time-shared: a frame waits on each PU it uses for one frame of every other network there);
* demanded rates: P_i <= 1000 / min_fps_i, sum_i min_fps_i b[i, p] <= 1000.

Times are in ms as floats: no rounding; HiGHS's relative gap (pulp_backend.GAP_REL) and
feasibility tolerance are the only slack, so deadline and demand rows are relaxed by
milp_chain.CAP_ROOM and every plan is re-scored by the evaluator.
"""
from __future__ import annotations

from pipeplan.core.deadline import Deadline
from pipeplan.core.registry import register
from pipeplan.core.vocabulary import MultiAxis
from pipeplan.formulations.mapping.multi.plan import JointPlan
from pipeplan.formulations.mapping.multi.problem import MultiProblem
from pipeplan.solvers.mapping.multi.exact import ComboOutcome, solve_exact, z_weights
from pipeplan.solvers.mapping.multi.variants import JointVariant

CAP_ROOM = 1e-9


class JointMilp:
    def __init__(self, problem: MultiProblem, combo: tuple[JointVariant, ...], objective: str, deadline: Deadline):
        import pulp

        from pipeplan.solvers.mapping.milp_chain import MilpChainModel

        self.problem, self.combo = problem, combo
        prob = self.prob = pulp.LpProblem("joint", pulp.LpMinimize)
        self.chains = [MilpChainModel(jv.network.problem, jv.variant, dvfs=False, deadline=deadline, prob=prob,
                                      prefix=f"n{k}_") for k, jv in enumerate(combo)]
        pus = problem.pu_names
        busy: list[dict] = []
        used: list[dict] = []
        for k, (jv, ch) in enumerate(zip(combo, self.chains)):
            terms: dict[str, list] = {}
            u = {}
            for i, row in enumerate(ch.a):
                for j, lit in enumerate(row):
                    p = jv.variant.options[i][j].pu
                    terms.setdefault(p, []).append(jv.busy(i, j) * lit)
                    if p not in u:
                        u[p] = prob.add_variable(f"u_{k}_{pus.index(p)}", cat=pulp.LpBinary)
                    prob += u[p] >= lit
            for p, flows in ch.inflow.items():     # transfers load the receiving PU (evaluator.py)
                terms.setdefault(p, []).extend(flows)
            busy.append({p: pulp.lpSum(t) for p, t in terms.items()})
            used.append(u)
        for k, jv in enumerate(combo):
            for p in jv.exclusive:
                if p in used[k]:
                    for m in range(len(combo)):
                        if m != k and p in used[m]:
                            prob += used[k][p] + used[m][p] <= 1
        if problem.sharing == "partitioned":
            for p in pus:
                users = [u[p] for u in used if p in u]
                if len(users) > 1:
                    prob += pulp.lpSum(users) <= 1
        c = z_weights(problem, objective)
        z = self.z = prob.add_variable("Z", 0)
        for jv, ch in zip(combo, self.chains):
            prob += z >= c[jv.network.name] * ch.period
        for p in pus:
            prob += z >= pulp.lpSum(c[jv.network.name] * b[p] for jv, b in zip(combo, busy) if p in b)
        for k, (jv, ch) in enumerate(zip(combo, self.chains)):
            net = jv.network
            if net.latency_ms is not None:
                wait = []
                if problem.sharing == "time_shared":
                    for p, u in used[k].items():
                        others = [b[p] for m, b in enumerate(busy) if m != k and p in b]
                        if not others:
                            continue
                        big = sum(sum(max([jv2.busy(i, j) for j, o in enumerate(row) if o.pu == p] + [0.0])
                                          + max([t for (_, j), (t, _) in jv2.variant.arcs[i].items()
                                                 if jv2.variant.options[i][j].pu == p] + [0.0])
                                          for i, row in enumerate(jv2.variant.options))
                                  for m, jv2 in enumerate(combo) if m != k and p in busy[m])
                        w = prob.add_variable(f"w_{k}_{pus.index(p)}", 0)
                        prob += w >= pulp.lpSum(others) - big * (1 - u)
                        wait.append(w)
                prob += ch.latency + pulp.lpSum(wait) <= net.latency_ms * (1 + CAP_ROOM)
            if net.min_fps is not None:
                prob += ch.period <= 1000.0 / net.min_fps * (1 + CAP_ROOM)
        if any(n.min_fps is not None for n in problem.networks):
            for p in pus:
                prob += pulp.lpSum((jv.network.min_fps or 0.0) * b[p] for jv, b in zip(combo, busy) if p in b) \
                    <= 1000.0 * (1 + CAP_ROOM)
        prob.setObjective(z)

    def solve(self, *, cutoff: float | None, time_limit: float | None, threads: int, seed: int,
              node_limit: int | None = None) -> ComboOutcome:
        from pipeplan.solvers.pulp_backend import pick_backend, solve_once

        prob = self.prob
        table = getattr(prob, "_constraints", None)    # pulp >= 3.3 warns on the mapping view
        table = prob.constraints if table is None else table
        table.pop("cutoff", None)                      # a second pass's cutoff replaces the first's
        if cutoff is not None:
            prob += self.z <= cutoff * (1 - 1e-7), "cutoff"
        backend = pick_backend("highs")
        state, lower, why = solve_once(prob, backend, time_limit=time_limit, threads=threads, seed=seed, warm=False,
                                       node_limit=node_limit, presolve=False)   # milp_chain.py: presolve off
        plan = self._extract() if state in ("optimal", "feasible") else None
        return ComboOutcome(state, plan, lower, 0.0, why)

    def _extract(self) -> JointPlan:
        return JointPlan({jv.network.name: ch._extract() for jv, ch in zip(self.combo, self.chains)},
                         instance=self.problem.name)


@register("multi", "milp", exact=True, requires=("pulp",),
          description="joint MILP of every network's chain, coupled through shared PUs (HiGHS)")
def solve_milp(problem, *, time_limit=None, seed=0, threads=1, objective: MultiAxis = "fairness",
               node_limit: int | None = None):
    return solve_exact(problem, "milp", lambda combo, dl: JointMilp(problem, combo, objective, dl),
                       objective=objective, time_limit=time_limit, threads=threads, seed=seed,
                       limit={"node_limit": node_limit}, params={"node_limit": node_limit})

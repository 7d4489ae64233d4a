"""Team codes: a general (not FR-like) gradient code for heterogeneous workers, found by CP-SAT.

Structure (ours; it generalises FR's groups): the k partitions are split into blocks of q_b
consecutive partitions; each block has s+1 (or, optionally, ``extra`` more) disjoint *teams*,
and the members of a team split the block between them in consecutive chunks, one chunk per
member, of any sizes within the capacities. B is 0/1 on the support. A team that has fully
replied gives its block's sum, and s stragglers spoil at most s of a block's teams, so one
team per block always survives: the code decodes from any n-s replies (the verifier re-checks
it). A fast worker can carry a block alone while two slow ones share the same block in another
team: what equal-load groups cannot do.

The master uses the online rule (``stop = "decodable"``: stop once the replies that arrived
decode), which is never later than the *team rule* the model optimises: the step ends when
every block has one team whose members have all replied,

    step_r = max over blocks b of min over teams t of b of max over members i of t of (l_i c_i + D_ri)

(pipelined: c_i + D_ri, with l_i <= s+1). CP-SAT minimises the mean of it over the sampled
scenarios, in whole microseconds: witness team w_rbt per scenario and used block, and
T_r >= l_i c_i + D_ri enforced by (x_ibt, w_rbt). Symmetry breaking: a team's leader is its
lowest-numbered member (n for an unused team); within a block the leaders increase with the
team's slot, and the blocks are ordered by their first team's leader (the block's lowest
member), used blocks first. Any team code can be relabelled into that form. CP-SAT's bound on
this model stays weak: the proven bound of the general solver is the coverage bound.
"""
from __future__ import annotations

import numpy as np

from pipeplan.core.deadline import Deadline
from pipeplan.formulations.gradcode.coverage_bound import load_limits
from pipeplan.formulations.gradcode.gradient_code import GradientCode
from pipeplan.formulations.gradcode.placement import pipelined
from pipeplan.formulations.gradcode.problem import GradCodeProblem
from pipeplan.solvers.cpsat_backend import set_limits, stopped_by, work_done
from pipeplan.solvers.gradcode.common import units_per_second

# The team model has a literal per worker and slot (n x G x teams, G up to n / (s + 1)): at
# n = 2,000, s = 2 that is 5.3 million, and building them alone ran past a 3 s limit by
# minutes (more than 300 s, gigabytes). Above this many the search is skipped.
MAX_TEAM_LITERALS = 500_000

Team = list[tuple[int, int]]          # (worker, partitions it holds)


def team_code(problem: GradCodeProblem, blocks: list[list[Team]], scheme: str = "team") -> GradientCode:
    """The code of ``blocks`` (each a list of teams, each team's loads summing to the block's
    size): partitions numbered block after block, each team's members take consecutive chunks;
    0/1 B, least squares, online stopping rule (count-rule fallback n-s)."""
    support = np.zeros((problem.n, problem.k), dtype=bool)
    first = 0
    for teams in blocks:
        size = sum(load for _, load in teams[0])
        for team in teams:
            if sum(load for _, load in team) != size:
                raise ValueError(f"a team holds {sum(l for _, l in team)} partitions, its block {size}")
            at = first
            for worker, load in team:
                support[worker, at:at + load] = True
                at += load
        first += size
    if first != problem.k:
        raise ValueError(f"the blocks hold {first} partitions, the problem has k = {problem.k}")
    code = GradientCode(scheme=scheme, s=problem.s, support=support, B=support.astype(np.float64), decoder="lstsq",
                        wait=problem.n - problem.s, stop="decodable",
                        meta={"blocks": [[[list(m) for m in team] for team in teams] for teams in blocks]})
    return pipelined(code, scheme) if problem.pipelined else code


def team_step_times(problem: GradCodeProblem, blocks: list[list[Team]], scenarios: np.ndarray) -> np.ndarray:
    """The team rule's step per scenario (an upper bound on the online rule's)."""
    c = problem.partition_time_s / np.asarray(problem.speeds, dtype=np.float64)
    out = np.zeros(scenarios.shape[0])
    for teams in blocks:
        best = np.full(scenarios.shape[0], np.inf)
        for team in teams:
            done = np.max([(c[i] if problem.pipelined else load * c[i]) + scenarios[:, i] for i, load in team], axis=0)
            best = np.minimum(best, done)
        out = np.maximum(out, best)
    return out


def solve_teams(problem: GradCodeProblem, scenarios: np.ndarray, *, deadline: Deadline, seed: int = 0,
                threads: int = 1, extra: int = 2, hint: list[list[Team]] | None = None,
                work_limit: float | None = None) -> tuple[list[list[list[Team]]], str, str | None]:
    """CP-SAT on the team model over ``scenarios`` (R, n), worker order: (the blocks of every
    improving solution it found, the best last, so that a caller can pick among them on other
    scenarios; state; what stopped the search short of a proof: "work" for ``work_limit``,
    CP-SAT deterministic seconds, or "time"). Raises OutOfTime when the model cannot be built
    in time; state "too large" (nothing searched) above ``MAX_TEAM_LITERALS``."""
    from ortools.sat.python import cp_model

    n, k, s = problem.n, problem.k, problem.s
    L = load_limits(problem)
    teams = s + 1 + extra
    G = min(k, n // (s + 1))
    if G == 0 or L.sum() < (s + 1) * k:
        return [], "infeasible", None
    m = cp_model.CpModel()
    total = cp_model.LinearExpr.sum
    c_s = problem.partition_time_s / np.asarray(problem.speeds, dtype=np.float64)
    US = units_per_second((c_s * L).max() + scenarios.max(initial=0.0))
    c = np.round(c_s * US).astype(np.int64)
    D = np.round(scenarios * US).astype(np.int64)
    slots = [(b, t) for b in range(G) for t in range(teams)]
    if n * len(slots) > MAX_TEAM_LITERALS:
        return [], "too large", None
    x = {}
    load = [m.new_int_var(0, int(L[i]), f"l{i}") for i in range(n)]
    share = {}
    for i in range(n):
        deadline.check()
        for b, t in slots:
            x[i, b, t] = m.new_bool_var(f"x{i}_{b}_{t}")
        mine = [x[i, b, t] for b, t in slots]
        m.add_at_most_one(mine)
        m.add(load[i] >= total(mine))
        m.add(load[i] <= int(L[i]) * total(mine))
        for b, t in slots:
            v = share[i, b, t] = m.new_int_var(0, int(L[i]), f"y{i}_{b}_{t}")
            m.add(v == load[i]).only_enforce_if(x[i, b, t])
            m.add(v == 0).only_enforce_if(~x[i, b, t])
    q = [m.new_int_var(0, k, f"q{b}") for b in range(G)]
    used = [m.new_bool_var(f"used{b}") for b in range(G)]
    active = {(b, t): m.new_bool_var(f"a{b}_{t}") for b, t in slots}
    lead = {}
    for b, t in slots:
        lead[b, t] = m.new_int_var(0, n, f"lead{b}_{t}")
        m.add_min_equality(lead[b, t], [n - (n - i) * x[i, b, t] for i in range(n)])
        if t:
            m.add(lead[b, t - 1] <= lead[b, t])
    for b in range(G):
        m.add(q[b] >= used[b])
        m.add(q[b] <= k * used[b])
        if b:
            m.add(used[b] <= used[b - 1])
            m.add(lead[b - 1, 0] <= lead[b, 0])
        for t in range(teams):
            held = total([share[i, b, t] for i in range(n)])
            m.add(held == q[b]).only_enforce_if(active[b, t])
            m.add(held == 0).only_enforce_if(~active[b, t])
            m.add_implication(active[b, t], used[b])
            if t <= s:
                m.add(active[b, t] == used[b])
    m.add(total(q) == k)
    work = {i: int(c[i]) if problem.pipelined else None for i in range(n)}
    top = int((c * L).max() + D.max()) + 1
    T = []
    for r in range(D.shape[0]):
        deadline.check()
        Tr = m.new_int_var(0, top, f"T{r}")
        T.append(Tr)
        for b in range(G):
            wit = [m.new_bool_var(f"w{r}_{b}_{t}") for t in range(teams)]
            m.add(total(wit) >= used[b])
            for t in range(teams):
                m.add_implication(wit[t], active[b, t])
                for i in range(n):
                    reply = (work[i] if problem.pipelined else int(c[i]) * load[i]) + int(D[r, i])
                    m.add(Tr >= reply).only_enforce_if([x[i, b, t], wit[t]])
    m.minimize(total(T))
    if hint is not None:
        ordered = sorted(([sorted(team) for team in sorted(tb, key=min)] for tb in hint[:G]), key=lambda tb: tb[0][0])
        for b, teams_b in enumerate(ordered):
            for t, team in enumerate(teams_b[:teams]):
                for i, l in team:
                    m.add_hint(x[i, b, t], 1)
                    m.add_hint(load[i], l)
    deadline.check()
    solver = cp_model.CpSolver()
    set_limits(solver, time_limit=deadline.remaining(floor=0.05) if deadline.limit is not None else None,
               work_limit=work_limit)
    solver.parameters.num_workers = max(1, int(threads))
    solver.parameters.random_seed = int(seed)

    def read(value) -> list[list[Team]]:
        return [[[(i, int(value(load[i]))) for i in range(n) if value(x[i, b, t])]
                 for t in range(teams) if value(active[b, t])] for b in range(G) if value(used[b])]

    class Collect(cp_model.CpSolverSolutionCallback):
        def __init__(self):
            super().__init__()
            self.found = []

        def on_solution_callback(self):
            self.found.append(read(self.value))

    collect = Collect()
    status = solver.solve(m, collect)
    state = {cp_model.OPTIMAL: "optimal", cp_model.FEASIBLE: "feasible",
             cp_model.INFEASIBLE: "infeasible"}.get(status, "none")
    return collect.found, state, stopped_by(state, work_done(solver), work_limit)


def groups_as_teams(groups: list[list[int]], counts: list[int], s: int, extra: int = 2) -> list[list[Team]]:
    """A group placement as blocks of one-worker teams (members past s+1+extra left idle): a
    hint for the team model."""
    return [[[(w, q)] for w in g[:s + 1 + extra]] for g, q in zip(groups, counts)]


"""Coupled (flow-shop) lower bounds on the trainer's finish: the engine and the trainer together.

``bounds.earliest_completions`` bounds, for each count c, when c groups can be complete, each c
with its own cheapest groups; the trainer's least remaining work is then added for each update
separately. Nothing ties the groups the trainer takes first to the groups the engine finishes
first. The bounds here do.

The argument (every schedule the simulator can make, any admission policy, any trainer order).
Let the trainer run its updates in the order 1..m, update j taking the groups B_j, and let D_j =
B_1 + ... + B_j. The trainer is sequential and update j starts only when its groups are
complete, so update j starts no earlier than the completion of *every* group of D_j (each of
them belongs to an update that started no later). Hence, for every j,

    train_end >= E(D_j) + T(B_j) + ... + T(B_m)

where E(S) is a lower bound on the time at which all of S is complete, and T(B) the update
time of B. For a set S of groups (see ``bounds``):

    E(S) = a(S) + c0 * max(longest(S), tokens(S) / max_num_seqs, kv(S) / kv_capacity)

with a(S) the additive engine work of S (prefills, and the c1 and c2 terms of each decode step a
request of S is part of: the same whatever the schedule) and the bracket a lower bound on the
number of decode steps run before S is complete. So the train end is at least

    min over chains D_1 < D_2 < ... < D_m of  max_j [ E(D_j) + sum_{j' >= j} T(B_j') ]

(a two-stage flow shop: the engine a preemptive first stage, the trainer a batch second stage).
``chain_bound`` solves this relaxation with CP-SAT and returns CP-SAT's proven bound on it (valid
whether or not the search closes); ``johnson_bound`` is a closed form below it: with an additive
E (one of its additive forms a + c0 * tokens / seqs or a + c0 * kv / capacity) and an additive
update time (per group: per-token and per-micro-batch-token time and the optimizer step split
over the U groups of an update) each update may be split into U single-group updates, which only
loosens the bound, and the relaxation is then the two-machine flow shop F2||Cmax, solved exactly
by Johnson's rule.

The same constraints (``add_chain_cuts``) are implied by the offline fixed-duration model (a
linear engine holding the model's demands), but added to its CP-SAT model they slowed the
search (measured, see ``solvers/rollout/cpsat.py``): the relaxation is solved on its own.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from pipeplan.core.deadline import stoppable
from pipeplan.formulations.rollout.problem import EngineModel, RolloutProblem

SCALE = 10**6  # trainer coefficients in millionths of the time unit (rounded down)


def engine_terms(problem: RolloutProblem, engine: EngineModel, demands=None):
    """Per group: additive work (prefills + c1 + c2 terms), tokens, KV reservation, longest response."""
    add, tokens, kv, longest = [], [], [], []
    for g in range(problem.R):
        a = t = e = 0.0
        m = 0
        p = problem.prompt_tokens[g]
        for k, n in enumerate(problem.response_tokens[g]):
            a += engine.request_work(p, n) + (n == 0) * engine.prefill_time(p)   # an empty response still prefills
            t += n
            if demands is not None:
                e += demands[g * problem.K + k] * n
            elif engine.kv_mode == "reserve":
                e += (p + n) * n                     # the footprint is held for every step
            else:
                e += n * p + n * (n + 1) // 2        # on demand: what is in use after each step
            m = max(m, n)
        add.append(a)
        tokens.append(t)
        kv.append(e)
        longest.append(m)
    return add, tokens, kv, longest



@dataclass(frozen=True)
class GroupTerms:
    """Per group: additive engine work (s), decode tokens, KV token-steps, longest response;
    the engine's c0 (s), max_num_seqs and KV capacity."""

    add: tuple[float, ...]
    tokens: tuple[float, ...]
    kv: tuple[float, ...]
    longest: tuple[int, ...]
    c0: float
    seqs: int
    cap: int

    def forms(self) -> list[list[float]]:
        """The additive lower bounds on E, per group: a + c0 * tokens / seqs, a + c0 * kv / cap."""
        return [[a + self.c0 * t / self.seqs for a, t in zip(self.add, self.tokens)],
                [a + self.c0 * e / self.cap for a, e in zip(self.add, self.kv)]]

    def steps(self, groups) -> float:
        """The decode steps before every group of S can be complete: its longest response, and its
        tokens and KV token-steps within the batch and KV limits."""
        groups = list(groups)
        if not groups:
            return 0.0
        return max(max(self.longest[g] for g in groups), sum(self.tokens[g] for g in groups) / self.seqs,
                   sum(self.kv[g] for g in groups) / self.cap)

    def earliest(self, groups) -> float:
        """E(S): a lower bound on the time at which every group of S is complete."""
        groups = list(groups)
        return sum(self.add[g] for g in groups) + self.c0 * self.steps(groups)


def group_terms(problem: RolloutProblem, engine: EngineModel | None = None, demands=None) -> GroupTerms:
    engine = engine or problem.engine
    add, tokens, kv, longest = engine_terms(problem, engine, demands)
    return GroupTerms(tuple(add), tuple(tokens), tuple(kv), tuple(longest), engine.c0_s, engine.max_num_seqs,
                      engine.kv_capacity_tokens)


def flow_shop_makespan(first: list[float], second: list[float]) -> float:
    """The least makespan of the two-machine flow shop F2||Cmax (Johnson's rule, exact):
    min over orders of max_k [first(1..k) + second(k..n)]."""
    a = b = 0.0
    for i in johnson_sequence(first, second):
        a += first[i]
        b = max(a, b) + second[i]
    return b


def johnson_sequence(first: list[float], second: list[float]) -> list[int]:
    """Johnson's order: jobs quicker on the first machine by increasing first time, then the
    others by decreasing second time."""
    jobs = range(len(first))
    early = sorted((i for i in jobs if first[i] < second[i]), key=lambda i: (first[i], i))
    late = sorted((i for i in jobs if first[i] >= second[i]), key=lambda i: (-second[i], i))
    return early + late


def johnson_order(problem: RolloutProblem, engine: EngineModel | None = None, demands=None) -> list[int]:
    """The groups in Johnson's order for the flow shop (engine, trainer), the engine time of a
    group its largest additive form: a priority order for schedules (a heuristic, no bound)."""
    t = group_terms(problem, engine, demands)
    tr = problem.trainer
    first = [max(f) for f in zip(*t.forms())]
    second = [tr.s_per_token * n + (tr.optimizer_step_s + tr.s_per_microbatch) / problem.U for n in problem.group_tokens]
    return johnson_sequence(first, second)


def johnson_bound(problem: RolloutProblem, engine: EngineModel | None = None, demands=None) -> float:
    """The flow-shop relaxation with additive stages, solved by Johnson's rule (see the module
    docstring). The update time is split per group as s_per_token * tokens + s_per_microbatch *
    (tokens / token_budget) + optimizer_step / U (or with the micro-batch term counted once per
    update, s_per_microbatch / U, whichever bound is larger): an update's time is at least the
    sum over its groups, the last update of a round that U does not divide included."""
    t = group_terms(problem, engine, demands)
    tr = problem.trainer
    best = 0.0
    for once_per_update in (False, True):
        second = [tr.s_per_token * n + tr.optimizer_step_s / problem.U
                  + tr.s_per_microbatch * (1 / problem.U if once_per_update else n / tr.token_budget)
                  for n in problem.group_tokens]
        for first in t.forms():
            best = max(best, flow_shop_makespan(first, second))
    return best


def add_chain_cuts(md, x, ustart, problem: RolloutProblem, terms: GroupTerms, unit: float) -> None:
    """Add ``ustart[j] >= E(D_j)`` (in time units, every term rounded down) to a CP-SAT model
    whose Boolean ``x[g][j]`` says that group g is in update j. E's three forms are linear in
    the membership ``z[g][j] = x[g][0] + ... + x[g][j]``; the longest response of D_j is an
    integer variable above every member's. Every right-hand side is rounded down to a whole
    unit, so a start (an integer) is never pushed above the true bound."""
    R, m = problem.R, len(ustart)
    c0u = terms.c0 / unit
    a = [math.floor(v / unit) for v in terms.add]
    forms = [[math.floor(v / unit) for v in f] for f in terms.forms()]
    # c0 * longest in units, rounded down: scaled by SCALE to keep it integral
    c0_scaled = math.floor(c0u * SCALE)
    z = [[None] * m for _ in range(R)]
    for g in range(R):
        acc = 0
        for j in range(m):
            acc = acc + x[g][j]
            z[g][j] = acc
    for j in range(m):
        for f in forms:
            md.add(ustart[j] >= sum(f[g] * z[g][j] for g in range(R)))
        longest = md.new_int_var(0, max(terms.longest), f"chain_longest{j}")
        for g in range(R):
            if terms.longest[g]:
                md.add(longest >= terms.longest[g] * z[g][j])
        # ustart >= floor((sum a + c0 * longest) in units): X - (SCALE - 1) keeps an integer start
        # from being pushed past a fractional bound
        md.add(SCALE * ustart[j] >= SCALE * sum(a[g] * z[g][j] for g in range(R)) + c0_scaled * longest
               - (SCALE - 1))


def _chain_model(problem: RolloutProblem, terms: GroupTerms, unit: float):
    from ortools.sat.python import cp_model
    p, tr = problem, problem.trainer
    sizes = p.update_sizes()
    m = len(sizes)
    md = cp_model.CpModel()
    x = [[md.new_bool_var(f"x{g}_{j}") for j in range(m)] for g in range(p.R)]
    for g in range(p.R):
        md.add_exactly_one(x[g])
    for j in range(m):
        md.add(sum(x[g][j] for g in range(p.R)) == sizes[j])
    coef = [math.floor(c / unit * SCALE) for c in (tr.optimizer_step_s, tr.s_per_microbatch, tr.s_per_token)]
    most_micro = max(1, -(-sum(p.group_tokens) // tr.token_budget))
    horizon = math.ceil((terms.earliest(range(p.R)) + sum(
        tr.update_time(sum(sorted(p.group_tokens)[p.R - n:])) for n in sizes)) / unit) + 10
    ustart, prev = [], None
    for j in range(m):
        tokens = sum(p.group_tokens[g] * x[g][j] for g in range(p.R))
        micro = md.new_int_var(1, most_micro, f"mb{j}")
        md.add(micro * tr.token_budget >= tokens)
        d = md.new_int_var(0, horizon, f"d{j}")
        # d >= floor((coefficients, rounded down) . (1, micro, tokens) / SCALE): below the true time
        md.add(SCALE * d >= coef[0] + coef[1] * micro + coef[2] * tokens - (SCALE - 1))
        s = md.new_int_var(0, horizon, f"u{j}")
        if prev is not None:
            md.add(s >= prev[0] + prev[1])
        ustart.append(s)
        prev = (s, d)
    add_chain_cuts(md, x, ustart, p, terms, unit)
    obj = md.new_int_var(0, 2 * horizon, "train_end")
    md.add(obj == prev[0] + prev[1])
    md.minimize(obj)
    return md


@lru_cache(maxsize=64)
def _chain_bound_cached(problem: RolloutProblem, terms: GroupTerms, unit: float, time_limit: float,
                        work_limit: float, threads: int) -> tuple[float, bool]:
    from ortools.sat.python import cp_model
    md = _chain_model(problem, terms, unit)
    solver = stoppable(cp_model.CpSolver())      # a SIGTERM or Ctrl-C ends its search
    solver.parameters.max_time_in_seconds = float(time_limit)
    solver.parameters.max_deterministic_time = float(work_limit)
    solver.parameters.num_workers = max(1, int(threads))
    status = solver.solve(md)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return 0.0, False
    return solver.best_objective_bound * unit, status == cp_model.OPTIMAL


def chain_bound(problem: RolloutProblem, engine: EngineModel | None = None, demands=None, *,
                time_limit: float = 10.0, work_limit: float = 20.0, threads: int = 1,
                unit: float = 1e-3, closed: bool = False):
    """CP-SAT's proven lower bound on the flow-shop relaxation (module docstring), at least
    ``johnson_bound``. Every engine term and trainer coefficient is rounded down to ``unit``
    seconds, so the model's optimum (hence its bound) is below the relaxation's. With one
    thread and a work limit (deterministic seconds) that stops it first, the figure is the same
    on every machine. ``closed=True`` returns (bound, whether CP-SAT closed the relaxation).
    ``bounds.strong_train_end_lower_bound`` takes the larger of this and the fast bounds."""
    terms = group_terms(problem, engine, demands)
    value, done = _chain_bound_cached(problem, terms, unit, float(time_limit), float(work_limit), int(threads))
    value = max(value, johnson_bound(problem, engine, demands))
    return (value, done) if closed else value

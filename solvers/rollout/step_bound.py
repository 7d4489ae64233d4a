"""A step-indexed lower bound on the train end: the engine's per-step cost, its batch and KV
limits and the trainer together. It is strongest on engines whose steps cost more than ``c0``
(the real engine: ``c1`` per running request, ``c2`` per KV token in use, prefills) and on
engines whose limits bind (a linear engine in reserve mode).

Why the other bounds stay loose on such engines. ``bounds`` and ``flowshop_bound`` charge a set
of groups only its *own* work: as if it ran alone. On the paper's engine the attention term
``c2 x KV`` is most of a step's cost, so a group finishing early is slowed by everything that runs
beside it; running fewer requests at once instead costs more steps (``c0`` each) and pushes the
last groups late. That trade-off is what the step index captures.

The argument (every schedule the simulator can make: any admission policy, retractions, any
trainer order). Count decode steps. Let F_g be the number of steps the engine has run when group
g completes. After step s at most F_g - s further steps run before g completes, and a request
gains at most one token per step, so request i of g has at least ``k = (n_i - (F_g - s))^+``
tokens by step s; those tokens, their prefill and their share of every step they ran in (``c1``
and ``c2 x (prompt + tokens before)`` per token) are paid by then. So the time at step s is at
least ``c0 x s + sum over every request of w_i(k_i(s))`` with w_i the additive work of a
request's first k tokens, *provided s steps run at all* (some group completes at step >= s).
Every group completing at step >= s completes no earlier, so it is trained after that time.
So are the groups H_s the trainer has not started by then: the updates starting after it are
the last n of the fixed update sequence, holding the late groups and, to fill them, groups
complete earlier that the trainer *held back* (trained with a late partner). Their update time
is at least the tokens' and the optimizer steps' time and the micro-batches (at least n and
tokens / budget). Hence, for every step s reached,

    train_end >= c0 x s + sum_i w_i(k_i(s)) + T(H_s),   H_s >= {g : F_g >= s},
    |H_s| = the groups of the last n updates,             H_s >= H_s' for s <= s'

(a group trained after a later step is trained after an earlier one). Charging only the late
groups, as an earlier version did, lets the bound's optimum put a large group last and give
each step its own smallest partner, which no single trainer order can do: with the held-back
groups the bound at 32 buckets rose from 223.1 to 226.8 s (lsat-ar, R = 32) and from 228.9 to
232.3 s (olyphys). With one-step buckets it equals the best just-in-time plan under every
trainer order on small rounds (tested by brute force) except where micro-batches, counted
fractionally here, round up.

And s steps hold the tokens forced by then: at most ``max_num_seqs`` requests gain a token per
step, and the KV a request holds while making its tokens (its whole footprint in reserve mode,
prompt + tokens so far on demand) never exceeds the capacity, so

    sum_i k_i(s) <= max_num_seqs x s,      sum_i kv_i(k_i(s)) <= kv_capacity x s.

These rows are what bounds a linear engine (no c1, c2 or prefill work: the time is c0 per
step, and the limits decide how many steps a round needs): at R = 32 they raise lsat-ar at
rho 0.25 from 231.0 s (the flow-shop relaxation) to 233.2 s and sci-xw from 369.1 to 378.9 s.
A row that no finish steps can break (all of the real engine's at R = 32: its KV cache holds
the whole round) is left out.

The bound minimises the largest right-hand side over all finish steps F and held-back sets. With
the steps cut into buckets it is a MILP: x[g, b] says F_g lies in bucket b; at each bucket start
s the forced work of group g is at least its value at the bucket's last step (w_i is increasing
and k_i decreases in F_g; the last bucket is open: no forced work), so every term is linear in x;
y[g, b] says g is in H at bucket b's start (continuous in [0, 1]: a relaxation of the 0/1
choice, which HiGHS closes about as fast as the weaker model while the 0/1 one does not close
in 60 s at R = 32). HiGHS solves it; its proven dual bound is the figure (valid whether or not
it closes the MILP), less a tolerance. Retractions and recomputation only add time: the
bound ignores them.

The just-in-time schedule (each request admitted its length before its group's finish step)
meets the argument's forced work exactly, which is why the bound is tight where the capacity
limits do not bind (``solvers/rollout/step_plan.py`` searches such schedules).

Branching on the round's last step (``branch_s``). The single MILP is weakest in "some group
completes at or after bucket b" (v): its LP relaxation lets a fraction of a group reach a step,
so that the steps before it cost a fraction of c0 s (lsat-ar R = 32: LP 202-204 s, MILP 221.3
s). Fixing the range [a, b] of the last finish step fixes v (every step before a is reached,
none after b) and lets the buckets end at b, so each range gets its own MILP; the bound is the
least over the ranges (and, past the step where c0 F + all the work + the least last update
passes ``upper``, that floor). Solving every range to its optimum was too slow to prove much:
at lsat-ar R = 32 (real engine) 221.3 s (the single MILP, 60 s) -> 222.3-223.0 s after 200 s more
on two cores, the ranges near the best plan's last step closing at 222-225 s in 20-90 s each.
So each range's MILP only *decides* whether the train end can lie below a target (``upper`` x (1
- gap), gap from ``BRANCH_GAPS`` in turn, ``LINEAR_BRANCH_GAPS`` on a linear engine), a range
where it can is halved, and the bucket starts of a range [a, b] narrow towards a
(``GRID_POWER``: uniform buckets left [10892, 11191] at 222.6 s, these 225.1 s). At lsat-ar
R = 32 that proved 223.55 s (1.95 % below the 228.0 s schedule) in 183 s. Where halving the range alone leaves its MILP below the target, the slack is in the
buckets before it, where the groups' finish steps are coarse: so where a range's MILP found a
schedule below the target, the buckets holding its groups are halved too (a dynamic
discretization; every partition gives a valid bound). At sci-xw R = 32 the range [12928,
13519] went 281.1 -> 285.1 s with it, its halves 287.3 and 285.5 s (one more level), where
halving alone had left the ranges past step 11,743 at 281-289 s; at lsat-ar the same 223.55 s
target took 240 s (every refined range decided at once). On rounds of R = 8 the branching
closes most of a coarse partition's gap (twelve buckets: 60.5 -> 69.4 s against a 70.4 s
plan). Which integrality matters in a range's MILP: with the
finish buckets x continuous and only the update counts integer it gives 223.5 s against 224.3 s,
the LP 215.4 s (a 200-step range near the best plan's last step).
Each MILP's solution, its groups in bucket order, is also an update sequence for the planner
(``StepBound.orders``, ``step_plan.guided_plan``).
"""
from __future__ import annotations

import math
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from pipeplan.core.deadline import run_within
from pipeplan.formulations.rollout.flowshop_bound import group_terms
from pipeplan.formulations.rollout.problem import EngineModel, RolloutProblem

BUCKETS = 32          # default number of step buckets (HiGHS closes 32 at R = 32 in about 20 s)
HORIZON_FACTOR = 2    # the buckets cover this many times the longest response; the last is open
HORIZON_CAP = 3       # ... and up to this many times with a known schedule's train end (``upper``)
BOUND_TOL = 1e-6      # relative: HiGHS's dual bound is exact up to its feasibility tolerances
BRANCH_RANGES = 8     # last-step ranges the branching starts each target with
BRANCH_GAPS = (0.0195, 0.015, 0.01, 0.005)   # the branching's targets, relative to ``upper``, in turn: the
                                             # first is the 2 % goal less a margin for BOUND_TOL
# On a linear engine the single MILP starts 4-6 % below the schedules (its slack is the prefix KV
# energy of coarse buckets), where a first target of 1.95 % leaves every range below it and the
# halving spreads thin: a ladder of nearer targets proves more in the same time. Measured at
# R = 32 (400 s of branching, one thread): lsat-ar 264.0 -> 268.7 s (the 4 % target proven),
# olyphys 268.8 -> 271.4 s (3 % proven). (The real engine keeps BRANCH_GAPS: there the goal
# target itself proved lsat-ar within 420 s, and a ladder is untested.)
LINEAR_LADDER = (0.05, 0.04, 0.03, 0.025)
LINEAR_BRANCH_GAPS = LINEAR_LADDER + BRANCH_GAPS
RANGE_S = 60.0        # s a range's MILP may take before the range is halved undecided
GRID_POWER = 0.5      # a range's bucket starts: a x u ** GRID_POWER, u uniform in [0, 1): narrower towards its start a


def request_work(problem: RolloutProblem, engine: EngineModel | None = None) -> list[np.ndarray]:
    """``out[i][k]``: the additive engine time (prefill, c1 and c2 terms) of request i's first k
    tokens, k = 0..n_i."""
    engine = engine or problem.engine
    return [engine.request_work(p, np.arange(n + 1, dtype=float)) for p, n in zip(problem.prompts, problem.lengths)]


def request_load(problem: RolloutProblem, engine: EngineModel) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(tokens, kv): ``tokens[i][k] = k``, and ``kv[i][k]`` the KV-token-steps request i holds
    while making its first k tokens (its whole footprint each step in reserve mode, prompt +
    tokens so far on demand)."""
    toks, kv = [], []
    for p, n in zip(problem.prompts, problem.lengths):
        k = np.arange(n + 1, dtype=float)
        toks.append(k)
        kv.append(k * (p + n) if engine.kv_mode == "reserve" else k * p + k * (k - 1) / 2)
    return toks, kv


def least_last_update(problem: RolloutProblem) -> float:
    """The least time the round's last update can take: it holds the last ``update_sizes()``
    entry's number of groups, at least the tokens of that many smallest groups (an update's
    time grows with its tokens). At lsat-ar R = 32 (two groups per update) 5.7 s against 3.6 s
    for the smallest group alone."""
    if not problem.R:
        return 0.0
    n = problem.update_sizes()[-1]
    return problem.trainer.update_time(int(sum(sorted(problem.group_tokens)[:n])))


@dataclass(frozen=True)
class StepBound:
    bound_s: float      # the proven lower bound on the train end
    closed: bool        # HiGHS closed the MILP the figure comes from (branching: decided every range for it)
    buckets: int        # buckets of the last MILP
    width: int          # steps per bucket at the start
    rounds: int = 1     # MILPs solved (refinement rounds)
    ranges: int = 0     # last-step ranges the branching ended with (0: no branching)
    orders: tuple = ()  # the groups by bucket in each MILP's best solution (hints for a planner)


def _forced_table(problem: RolloutProblem, work: list[np.ndarray], starts: np.ndarray, last: np.ndarray):
    """``t[g][b, b2]``: group g's least forced work at step ``starts[b]`` when it completes by
    step ``last[b2]`` (inf: no limit, no forced work)."""
    K, L = problem.K, problem.lengths
    # steps left after the bucket start (an open bucket: more than any response, so none forced)
    left = np.minimum(last[None, :] - starts[:, None], max(L, default=0) + 1).astype(int)
    table = np.zeros((problem.R, starts.size, last.size))
    for i, w in enumerate(work):
        table[i // K] += w[np.clip(L[i] - left, 0, L[i])]
    return table


def _solve_buckets(problem: RolloutProblem, engine: EngineModel, work, starts: np.ndarray, time_limit: float,
                   threads: int, last_step: int | None = None, cutoff: float | None = None) -> tuple[float, bool, np.ndarray]:
    """The bucket MILP over buckets beginning at ``starts`` (the last one open): (HiGHS's dual
    bound, closed, the bucket of each group in its best solution, or an empty array). With
    ``last_step``, the round's last finish step lies in the last bucket, which ends there: every
    group completes by it, at least one in that bucket, so every step before it is reached.
    With ``cutoff``, z may not exceed it and HiGHS stops at the first solution: the figure is
    ``cutoff`` when none exists (a proof that the train end reaches it), else at most the dual
    bound then (still valid: a schedule below the cutoff is one of the model's)."""
    import highspy
    from scipy import sparse

    from pipeplan.solvers.pulp_backend import highs_model, highs_threads

    R, tr, nb = problem.R, problem.trainer, starts.size
    U = max(problem.update_sizes())
    longest = [max(r) if r else 0 for r in problem.response_tokens]
    # the last step of each bucket
    last = np.append(starts[1:] - 1, np.inf if last_step is None else last_step).astype(float)
    table = _forced_table(problem, work, starts, last)
    toks, kv = request_load(problem, engine)
    tok_table = _forced_table(problem, toks, starts, last)
    kv_table = _forced_table(problem, kv, starts, last)
    tokens = np.array(problem.group_tokens, float)
    total_work = float(sum(w[-1] for w in work))
    least_update = least_last_update(problem)

    # columns: x[g, b] (allowed when the bucket reaches the group's longest response), then per
    # bucket v (some group completes at or after it), n (updates after it), mb (micro-batches), z,
    # then y[g, b] (g is trained after the bucket starts: continuous, a relaxation of 0/1)
    allowed = [(g, b) for g in range(R) for b in range(nb) if last[b] >= longest[g]]
    xs = {key: j for j, key in enumerate(allowed)}
    nx = len(xs)
    iv, inn, imb = nx, nx + nb, nx + 2 * nb
    iz = nx + 3 * nb
    iy = iz + 1
    ncol = iy + R * nb
    short = U - problem.update_sizes()[-1] if R else 0       # groups the last update lacks
    rows, cols, vals, lo = [], [], [], []
    hi: list[float] = []

    def row(entries, lower, upper=np.inf):
        r = len(lo)
        for c, v in entries:
            rows.append(r)
            cols.append(c)
            vals.append(v)
        lo.append(lower)
        hi.append(upper)

    for g in range(R):
        row([(xs[g, b], 1.0) for b in range(nb) if (g, b) in xs], 1.0, 1.0)
    for b in range(nb):
        if b + 1 < nb:
            row([(iv + b, 1.0), (iv + b + 1, -1.0)], 0.0)
        for g in range(R):
            # some group completes at or after s if g does (its share of buckets b.. in the LP
            # relaxation: v >= x[g, b] alone left HiGHS 7,076 nodes at lsat-ar R = 32, this 4,081)
            later = [(xs[g, b2], -1.0) for b2 in range(b, nb) if (g, b2) in xs]
            if later:
                row([(iv + b, 1.0)] + later, 0.0)
        # z >= c0 s v_b + forced work at s + trainer time of the groups trained after s
        entries = [(iz, 1.0), (iv + b, -engine.c0_s * starts[b]), (inn + b, -tr.optimizer_step_s),
                   (imb + b, -tr.s_per_microbatch)]
        micro = [(imb + b, float(tr.token_budget))]
        filled = [(inn + b, -float(U))]
        for (g, b2), j in xs.items():
            if table[g, b, b2]:
                entries.append((j, -table[g, b, b2]))
        for g in range(R):
            y = iy + g * nb + b
            entries.append((y, -tr.s_per_token * tokens[g]))
            filled.append((y, 1.0))
            micro.append((y, -tokens[g]))
            # trained after s: every group completing at or after s; held back at a later bucket
            # means held back at this one
            row([(y, 1.0)] + [(xs[g, b2], -1.0) for b2 in range(b, nb) if (g, b2) in xs], 0.0)
            if b + 1 < nb:
                row([(y, 1.0), (y + 1, -1.0)], 0.0)
        row(entries, 0.0)
        # |H| is the groups of the last n updates: U n, less what the last update lacks
        row(filled, -float(short), 0.0 if not short else np.inf)
        if short:
            row(filled + [(iv + b, float(short))], -np.inf, 0.0)
            row([(inn + b, 1.0), (iv + b, -1.0)], 0.0)       # a late group needs an update
        # and when steps reach s at all: z >= c0 s + all the work + the least last update
        row([(iz, 1.0), (iv + b, -engine.c0_s * starts[b])], total_work + least_update)
        row(micro, 0.0)
        row([(imb + b, 1.0), (inn + b, -1.0)], 0.0)
        # the engine's limits: the tokens forced by s fit in max_num_seqs per step, their KV in
        # the capacity per step (rows that no choice of x can violate are left out)
        for t, limit in ((tok_table, engine.max_num_seqs), (kv_table, engine.kv_capacity_tokens)):
            if sum(max(t[g, b, b2] for b2 in range(nb) if (g, b2) in xs) for g in range(R)) > limit * starts[b]:
                row([(j, t[g, b, b2]) for (g, b2), j in xs.items() if t[g, b, b2]], -np.inf, float(limit * starts[b]))

    if last_step is not None:
        row([(xs[g, nb - 1], 1.0) for g in range(R) if (g, nb - 1) in xs], 1.0)
    a = sparse.csc_matrix((vals, (rows, cols)), shape=(len(lo), ncol))
    col_lo, col_hi = np.zeros(ncol), np.ones(ncol)
    col_hi[inn:imb] = R
    if last_step is not None:
        col_lo[iv:inn] = 1.0                                 # every bucket's start is reached
    col_hi[imb:iy] = highspy.kHighsInf                       # micro-batches and z
    if cutoff is not None:
        col_hi[iz] = cutoff
    cost = np.zeros(ncol)
    cost[iz] = 1.0
    integer = np.zeros(ncol, dtype=bool)
    integer[:inn + nb] = True                                # x, v and the update counts
    lp = highs_model(cost, col_lo, col_hi, np.array(lo), np.array(hi), a, integer)

    def solve():
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("time_limit", float(max(time_limit, 0.01)))
        highs_threads(h, threads)
        h.setOptionValue("mip_rel_gap", 1e-5)
        if cutoff is not None:
            h.setOptionValue("mip_max_improving_sols", 1)
        h.passModel(lp)
        h.run()
        status = h.getModelStatus()
        if cutoff is not None and status == highspy.HighsModelStatus.kInfeasible:
            return cutoff, True, np.empty(0, dtype=int)
        bound = h.getInfo().mip_dual_bound
        if cutoff is not None and math.isfinite(bound):
            bound = min(bound, cutoff)
        closed = status == highspy.HighsModelStatus.kOptimal
        placed = np.empty(0, dtype=int)
        if h.getInfo().primal_solution_status == 2:              # a feasible solution is known
            x = np.array(h.getSolution().col_value[:nx])
            placed = np.zeros(R, dtype=int)
            for (g, b), j in xs.items():
                if x[j] > 0.5:
                    placed[g] = b
        return (bound if math.isfinite(bound) and bound > 0 else 0.0), closed, placed

    # HiGHS can loop past its time limit (``run_within``): such a MILP proves nothing here
    return run_within(solve, time_limit) or (0.0, False, np.empty(0, dtype=int))


def step_bound(problem: RolloutProblem, engine: EngineModel | None = None, *, buckets: int = BUCKETS,
               time_limit: float = 60.0, threads: int = 1, refine: bool = True,
               upper: float | None = None, branch_s: float = 0.0, plan=None) -> StepBound:
    """The step-indexed bound (module docstring) for one round on one engine without shared
    prefixes (``engine.single``): ``buckets`` step buckets of equal width over twice the longest
    response, the last bucket open (a group in it is charged no forced work), solved with all of
    ``time_limit`` but ``branch_s``. Given the train end ``upper`` of some schedule that runs
    further, up to the step from which a single late group already costs that much (c0 s + all
    the work + the least update), at most three times the longest response, the buckets over
    that span are solved too and the larger bound stands (unless the batch and KV rows over all
    the round's tokens already need more steps than the shorter span holds: then only the
    longer). With two threads or more the spans are solved side by side, each with the whole
    time and half the threads (HiGHS's branch and bound runs on one thread: at lsat-ar R = 64,
    linear engine, 16 buckets, upper 490.1 s, the longer span closes at 459.4 s in 60 s on one
    thread beside the shorter, where alone on two it had reached 459.3 s); with one thread, one
    after the other, the shorter with half the time.
    (Neither span wins everywhere. At sci-xw R = 32 on the real engine, upper 294.3 s, twice the
    longest response closes in 30 s, refined twice, at 285.15 s, where the schedule's span
    (17,408 steps) reaches 278.2 s in 30 s and 280.4 s in 60 s without closing; an earlier model
    had the shorter span 1.6 s lower there. The cap keeps trainer-bound rounds, whose train end
    says nothing about the engine's steps, from buckets thousands of steps wide: at rho 4 HiGHS
    once ran past its time limit for minutes on such a model.) With ``refine``, once a
    MILP closes with time left, the buckets holding a group in its solution are halved and the
    MILP solved again: every partition gives a valid bound, finer ones a tighter one where the
    solution lies; the largest is returned. (Splitting before a MILP closes, or sharing the
    time out in advance, gave lower figures: the finer MILPs stop far from closing.) With
    ``branch_s`` > 0 and ``upper``, the last ``branch_s`` seconds of ``time_limit`` (with what
    the single MILP leaves) branch on the round's last step (module docstring), where the single
    MILP's bound is further below ``upper`` than the least of the gaps; ``threads`` MILPs
    run at once. ``plan(orders)``, if given, is called before the branching with the single
    MILP's solutions (``StepBound.orders``) and returns the train end of a schedule made from
    them (or None): the branching's targets come from the lesser of it and ``upper``, less
    ``LINEAR_BRANCH_GAPS`` in turn on a linear engine, else ``BRANCH_GAPS``. (A lower
    upper makes a lower target, which fewer ranges come near: at lsat-ar R = 32 the schedules
    found before the bound end at 229.8 s, the guided plan at 228.0-228.8 s, and the 1.95 %
    target of the first was not proven in 300 s.)"""
    from pipeplan.core.deadline import Deadline

    engine = engine or problem.engine
    gaps = LINEAR_BRANCH_GAPS if engine.linear else BRANCH_GAPS
    if not engine.single or problem.rounds != 1:
        raise ValueError("the step-indexed bound covers one round on one engine without shared prefixes")
    total, clock = Deadline(time_limit), Deadline(max(0.0, time_limit - branch_s))
    longest = max((max(r) for r in problem.response_tokens if r), default=1)
    reach = 0
    work = request_work(problem, engine)
    # past the last step F the engine has paid c0 F + all the work, and the last update follows
    unstepped = sum(w[-1] for w in work) + least_last_update(problem)
    horizons = [HORIZON_FACTOR * max(longest, 1)]
    if upper is not None and engine.c0_s > 0 and problem.R:
        reach = math.ceil((upper - unstepped) / engine.c0_s) + 1
        longer = min(reach, HORIZON_CAP * longest)
        if longer > horizons[0]:
            # the shorter span too, unless the round cannot end within it (the batch and KV rows
            # over every token: most R = 64 rounds on a linear engine), where its open bucket
            # holds groups that no row charges and its time would be lost to the longer span
            least = group_terms(problem, engine).steps(range(problem.R))
            horizons = [longer] if least >= horizons[0] else horizons + [longer]
    lanes = min(len(horizons), max(1, threads))

    def span(k: int, horizon: int):
        # side by side, each span has the whole time; one after another (one thread), the
        # shorter first with its share, the longer what is left
        share = clock if lanes > 1 else Deadline(clock.remaining() / (len(horizons) - k))
        width = max(1, math.ceil(horizon / buckets))
        return _refined(problem, engine, work, np.arange(buckets) * width, width, share,
                        max(1, threads // lanes), refine)

    with ThreadPoolExecutor(lanes) as pool:
        spans = list(pool.map(span, range(len(horizons)), horizons))
    rounds = sum(sp.solved for sp in spans)
    orders = [order for sp in spans for order in sp.orders]
    top = max(spans, key=lambda sp: sp.bound)
    best, best_closed = top.bound, top.closed
    ranges = 0
    if branch_s > 0 and plan is not None and upper is not None:
        planned = plan(tuple(orders))
        if planned is not None and planned < upper:     # the branching's span ends where this schedule's would
            upper, reach = planned, min(reach, math.ceil((planned - unstepped) / engine.c0_s) + 1)
    # reach is 0 unless upper is known and steps cost c0 > 0
    if branch_s > 0 and longest < reach and best < upper * (1 - min(gaps)):
        value, ranges, found, closed = _branch_last_step(problem, engine, work, (longest, reach), best, upper,
                                                         buckets, total, threads, gaps)
        value = min(value, engine.c0_s * reach + unstepped)     # the floor past the last range
        orders += found
        if value > best:
            best, best_closed = value, closed
    return StepBound(best * (1 - BOUND_TOL), best_closed, int(top.starts.size), top.width, rounds, ranges, tuple(orders))


@dataclass(frozen=True)
class _Span:
    """What the single MILP, refined, gave over one span of steps (``_refined``)."""
    bound: float            # the largest bound of its MILPs
    closed: bool            # whether the MILP of that bound closed
    solved: int             # MILPs solved
    orders: list            # their solutions' group orders (``_order``)
    starts: np.ndarray      # the last buckets' starts
    width: int              # the first buckets' width


def _refined(problem: RolloutProblem, engine: EngineModel, work, starts: np.ndarray, width: int, clock, threads: int,
             refine: bool) -> _Span:
    """The single MILP over buckets beginning at ``starts`` and, with ``refine``, again after each
    time it closes with the buckets holding a group halved."""
    best, best_closed, rounds, orders = 0.0, False, 0, []
    while True:
        value, closed, placed = _solve_buckets(problem, engine, work, starts, clock.remaining(), threads)
        rounds += 1
        orders += _order(problem, placed)
        if value > best:
            best, best_closed = value, closed
        ends = np.append(starts[1:], starts[-1] + 2 * width)   # the open bucket gains a bucket
        split = sorted({int(b) for b in placed if ends[b] - starts[b] > 1})
        if not refine or not closed or not split or clock.remaining() < 1.0:
            return _Span(best, best_closed, rounds, orders, starts, width)
        starts = np.union1d(starts, [(starts[b] + ends[b]) // 2 for b in split])


def _order(problem: RolloutProblem, placed: np.ndarray) -> list[tuple[int, ...]]:
    """The groups by their bucket in a MILP solution (ties: fewer training tokens first), or
    nothing when the MILP found none."""
    if not placed.size:
        return []
    return [tuple(sorted(range(problem.R), key=lambda g: (placed[g], problem.group_tokens[g], g)))]


def _branch_last_step(problem: RolloutProblem, engine: EngineModel, work, span: tuple[int, int], base: float,
                      upper: float, buckets: int, clock, threads: int,
                      gaps: tuple) -> tuple[float, int, list, bool]:
    """Branching on the round's last finish step F (some group's): (the bound over the ranges, the ranges of the
    last target tried, the MILP solutions' orders, whether the bound is a target every range
    was decided for). F lies in
    ``span`` = [the longest response, the step from which c0 F + all the work + the least last
    update already passes ``upper``). Each range [a, b] gets its own MILP (``last_step``): every
    group completes by b, one in [a, b], so every step before a is reached (the single MILP's
    weakest point: its LP relaxation lets a fraction of a group reach a step, at lsat-ar R = 32
    202-204 s against 221.3 s closed), over ``buckets`` buckets narrowing towards a
    (``GRID_POWER``: the groups that complete late are the long ones, whose steps cost most).

    Each MILP only decides whether the range's train end can lie below a target (the target is
    z's upper limit: HiGHS prunes every node above it and stops at the first solution below it);
    a range where it can is halved and the buckets of its solution's groups refined (``_split``),
    until every range is proven: then the target is the bound.
    The targets are ``upper`` x (1 - gap) for ``gaps`` in turn, each started afresh from
    ``BRANCH_RANGES`` ranges whose bound is the target proven before (``base`` for the first); a
    range left when the clock runs out keeps its parent's. Deciding is what makes the time
    enough: at lsat-ar R = 32 (real engine, upper 228.0 s) the first target, 223.55 s, was
    proven in 183 s on two cores (16 range MILPs, 8 halved), where solving every range to its
    optimum had reached 222.3-223.0 s in 200 s (the ranges near the best plan's last step close
    at 222-225 s, and each took 20-90 s)."""
    lo, hi = span
    edges = np.unique(np.linspace(lo, hi, BRANCH_RANGES + 1).astype(int))
    proven, orders, ranges, closed = base, [], 0, False
    lanes = max(1, threads)

    def grid(a):
        u = np.linspace(0.0, 1.0, buckets - 1, endpoint=False)
        return np.unique((a * u ** GRID_POWER).astype(int))

    def solve(leaf, target):
        _, a, b, inner = leaf
        return _solve_buckets(problem, engine, work, np.append(inner, a), min(RANGE_S, clock.remaining()), 1,
                              last_step=b, cutoff=target)

    for gap in gaps:
        target = upper * (1 - gap)
        if target <= proven:
            continue
        todo = [(proven, int(a), int(b) - 1, grid(int(a))) for a, b in pairwise(edges)]
        done: list[float] = []
        running: dict = {}
        # ``threads`` single-threaded MILPs in flight, each in its own process (``run_within``)
        with ThreadPoolExecutor(lanes) as pool:
            while todo or running:
                while todo and len(running) < lanes and not clock.expired():
                    leaf = todo.pop(0)
                    running[pool.submit(solve, leaf, target)] = leaf
                if not running:
                    break
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    parent, a, b, inner = running.pop(future)
                    value, _, placed = future.result()
                    orders += _order(problem, placed)
                    value = max(parent, value)
                    children = [] if value >= target * (1 - BOUND_TOL) else _split(value, a, b, inner, placed)
                    if children:
                        todo += children
                    else:       # decided, or a single step with nothing left to refine
                        done.append(value)
        ranges = len(done) + len(todo)
        # out of time, or a single step below the target: what the ranges reached still holds
        reached = min(done + [r[0] for r in todo])
        decided = reached >= target * (1 - BOUND_TOL)
        if decided or reached > proven:
            proven, closed = max(proven, reached), decided
        if not decided:
            break
    return proven, ranges, orders, closed


def _split(value: float, a: int, b: int, inner: np.ndarray, placed: np.ndarray) -> list:
    """The leaves that replace range [a, b] (bucket starts ``inner`` before a) when its MILP
    found a schedule below the target (``placed``: each group's bucket) or was undecided
    (``placed`` empty). A range wider than one step is halved, each half keeping ``inner`` (the
    right half with a as one more start: any partition of the steps gives a valid bound). A
    schedule's groups in the buckets before a then also get those buckets halved: the range's
    bound is loose where its groups' finish steps are coarse (dynamic discretization), which
    halving the range alone does not touch (sci-xw R = 32: ranges past step 11,743 stayed at
    281-289 s against a 295.9 s schedule)."""
    used: set[int] = set()
    if placed.size:
        starts = np.append(inner, a)
        ends = np.append(starts[1:], a)
        used = {int(k) for k in placed if k < inner.size and ends[k] - starts[k] > 1}
        inner = np.union1d(inner, [(starts[k] + ends[k]) // 2 for k in used]).astype(int)
    if b <= a:
        return [(value, a, b, inner)] if placed.size and used else []
    middle = (a + b) // 2
    return [(value, a, middle, inner), (value, middle + 1, b, np.union1d(inner, [a]).astype(int))]

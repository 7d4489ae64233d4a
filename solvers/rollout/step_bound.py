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
least over the ranges (and, past the step where c0 F + all the work + the least update passes
``upper``, that floor). The range of least bound is halved until every range is within
``BRANCH_GAP`` of ``upper``. Measured at lsat-ar R = 32 (real engine): 221.3 s (the single
MILP, 60 s) -> 222.9 s after 240 s more on two cores; on rounds of R = 8 it closes most of a
coarse partition's gap (twelve buckets: 60.5 -> 69.4 s against a 70.4 s plan). What is left
there is the bucket width: within a range of 200 steps around the best plan's last step, 32
buckets give 224.3 s, 48 give 224.9 s, halving the occupied buckets three times 224.8 s, against
plans of 228.1-228.7 s. (Which integrality matters: with the finish buckets x continuous and
only the update counts integer the range's MILP gives 223.5 s against 224.3 s, the LP 215.4 s.)
Each MILP's solution, its groups in bucket order, is also an update sequence for the planner
(``StepBound.orders``, ``step_plan.guided_plan``).
"""
from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from pipeplan.core.deadline import run_within
from pipeplan.formulations.rollout.problem import EngineModel, RolloutProblem

BUCKETS = 32          # default number of step buckets (HiGHS closes 32 at R = 32 in about 20 s)
HORIZON_FACTOR = 2    # the buckets cover this many times the longest response; the last is open
HORIZON_CAP = 3       # ... and up to this many times with a known schedule's train end (``upper``)
BOUND_TOL = 1e-6      # relative: HiGHS's dual bound is exact up to its feasibility tolerances
BRANCH_RANGES = 4     # last-step ranges the branching starts with
BRANCH_GAP = 0.015    # the branching stops once every range's bound is this close (relative) to ``upper``


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


@dataclass(frozen=True)
class StepBound:
    bound_s: float      # the proven lower bound on the train end
    closed: bool        # HiGHS closed the MILP of the partition the figure comes from
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
                   threads: int, last_step: int | None = None) -> tuple[float, bool, np.ndarray]:
    """The bucket MILP over buckets beginning at ``starts`` (the last one open): (HiGHS's dual
    bound, closed, the bucket of each group in its best solution, or an empty array). With
    ``last_step``, the round's last finish step lies in the last bucket, which ends there: every
    group completes by it, at least one in that bucket, so every step before it is reached."""
    import highspy
    from scipy import sparse

    from pipeplan.solvers.pulp_backend import highs_banner_off

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
    least_update = tr.update_time(int(tokens.min())) if R else 0.0

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
    cost = np.zeros(ncol)
    cost[iz] = 1.0
    integer = np.zeros(ncol, dtype=bool)
    integer[:inn + nb] = True                                # x, v and the update counts
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = ncol, len(lo)
    lp.col_cost_, lp.col_lower_, lp.col_upper_ = cost, col_lo, col_hi
    lp.row_lower_, lp.row_upper_ = np.array(lo), np.array(hi)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = a.indptr, a.indices, a.data
    lp.integrality_ = [highspy.HighsVarType.kInteger if t else highspy.HighsVarType.kContinuous for t in integer]
    highs_banner_off()

    def solve():
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("time_limit", float(max(time_limit, 0.01)))
        h.setOptionValue("threads", max(1, int(threads)))
        h.setOptionValue("mip_rel_gap", 1e-5)
        h.passModel(lp)
        h.run()
        bound = h.getInfo().mip_dual_bound
        closed = h.getModelStatus() == highspy.HighsModelStatus.kOptimal
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
               upper: float | None = None, branch_s: float = 0.0) -> StepBound:
    """The step-indexed bound (module docstring) for one round on one engine without shared
    prefixes (``engine.single``): ``buckets`` step buckets of equal width over twice the longest
    response or, given the train end ``upper`` of some schedule, up to the step from which a
    single late group already costs that much (c0 s + all the work + the least update), at most
    three times the longest response, the last bucket open, solved with all of ``time_limit``. (A group in the open bucket is charged
    no forced work: where the best schedules run past twice the longest response, sci-xw at
    R = 32, the shorter horizon left the bound 1.6 s lower. The cap keeps trainer-bound rounds,
    whose train end says nothing about the engine's steps, from buckets thousands of steps wide:
    at rho 4 HiGHS once ran past its time limit for minutes on such a model.) With ``refine``, once a
    MILP closes with time left, the buckets holding a group in its solution are halved and the
    MILP solved again: every partition gives a valid bound, finer ones a tighter one where the
    solution lies; the largest is returned. (Splitting before a MILP closes, or sharing the
    time out in advance, gave lower figures: the finer MILPs stop far from closing.) With
    ``branch_s`` > 0 and ``upper``, the last ``branch_s`` seconds of ``time_limit`` (with what
    the single MILP leaves) branch on the round's last step (module docstring), where the single
    MILP's bound is more than ``BRANCH_GAP`` below ``upper``; ``threads`` MILPs run at once."""
    from pipeplan.core.deadline import Deadline

    engine = engine or problem.engine
    if not engine.single or problem.rounds != 1:
        raise ValueError("the step-indexed bound covers one round on one engine without shared prefixes")
    total, clock = Deadline(time_limit), Deadline(max(0.0, time_limit - branch_s))
    longest = max((max(r) for r in problem.response_tokens if r), default=1)
    reach = 0
    work = request_work(problem, engine)
    horizon = HORIZON_FACTOR * max(longest, 1)
    if upper is not None and engine.c0_s > 0 and problem.R:
        least = problem.trainer.update_time(min(problem.group_tokens))
        reach = math.ceil((upper - sum(w[-1] for w in work) - least) / engine.c0_s) + 1
        horizon = max(horizon, min(reach, HORIZON_CAP * longest))
    width = max(1, math.ceil(horizon / buckets))
    starts = np.arange(buckets) * width
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
            break
        starts = np.union1d(starts, [(starts[b] + ends[b]) // 2 for b in split])
    ranges = 0
    if branch_s > 0 and upper is not None and engine.c0_s > 0 and longest < reach and best < upper * (1 - BRANCH_GAP):
        value, ranges, found, closed = _branch_last_step(problem, engine, work, (longest, reach), best, upper,
                                                         buckets, total, threads)
        orders += found
        if value > best:
            best, best_closed = value, closed
    return StepBound(best * (1 - BOUND_TOL), best_closed, int(starts.size), width, rounds, ranges, tuple(orders))


def _order(problem: RolloutProblem, placed: np.ndarray) -> list[tuple[int, ...]]:
    """The groups by their bucket in a MILP solution (ties: fewer training tokens first), or
    nothing when the MILP found none."""
    if not placed.size:
        return []
    return [tuple(sorted(range(problem.R), key=lambda g: (placed[g], problem.group_tokens[g], g)))]


def _branch_last_step(problem: RolloutProblem, engine: EngineModel, work, span: tuple[int, int], base: float,
                      upper: float, buckets: int, clock, threads: int) -> tuple[float, int, list, bool]:
    """Branching on the round's last finish step F (some group's): (the least bound over the
    ranges of F, ranges, the solutions' orders, whether HiGHS closed every range's MILP). F lies
    in ``span`` = [the longest response, the step from which c0 F + all the work + the least
    update already passes ``upper``); each range
    [a, b] gets its own MILP (``last_step``): every group completes by b, one in [a, b], over
    ``buckets`` buckets, so every step before a is reached (the single-range MILP's weakest
    point: its LP relaxation lets a fraction of a group reach a step, at lsat-ar R = 32 202-204 s
    against 221.3 s closed) and the buckets are narrower. A range's bound is the larger of its
    MILP's and its parent's; the range of least bound is halved until every range is within
    ``BRANCH_GAP`` of ``upper`` or the clock runs out (a range not yet solved keeps ``base``)."""
    lo, hi = span
    edges = np.unique(np.linspace(lo, hi, BRANCH_RANGES + 1).astype(int))
    ranges = [[base, int(a), int(b) - 1, False] for a, b in pairwise(edges)]
    orders, closed_all = [], True

    def solve(leaf):
        _, a, b, _ = leaf
        starts = np.unique(np.append(np.linspace(0, a, buckets - 1, endpoint=False).astype(int), a))
        return _solve_buckets(problem, engine, work, starts, clock.remaining(), 1, last_step=b)

    while not clock.expired():
        pending = [r for r in ranges if not r[3]]
        if not pending:
            ranges.sort(key=lambda r: r[0])
            value, a, b, _ = ranges[0]
            if value >= upper * (1 - BRANCH_GAP) or b <= a:
                break
            middle = (a + b) // 2
            ranges[0:1] = [[value, a, middle, False], [value, middle + 1, b, False]]
            continue
        batch = pending[:max(1, threads)]       # one single-threaded MILP per thread, each in its own process
        with ThreadPoolExecutor(len(batch)) as pool:
            for leaf, (value, closed, placed) in zip(batch, pool.map(solve, batch)):
                orders += _order(problem, placed)
                closed_all &= closed
                leaf[0], leaf[3] = max(leaf[0], value), True
    beyond = engine.c0_s * hi + sum(w[-1] for w in work) + problem.trainer.update_time(min(problem.group_tokens))
    closed_all &= all(r[3] for r in ranges)
    return min(beyond, *(r[0] for r in ranges)), len(ranges), orders, closed_all

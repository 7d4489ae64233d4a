"""How high an energy bound can go: the fluid relaxation of a linear engine's round and a
feasible point of it, whose train end no bound of that family can exceed.

The fluid model. A schedule of it is a finish step F_g per group such that at every step s the
tokens and the KV-token-steps *forced* by s fit in what s steps offer: request i of group g has
made at least ``k_i(s) = (n_i - (F_g - s))^+`` tokens by step s (one token a step at most), so

    sum_i k_i(s) <= max_num_seqs x s,      sum_i footprint_i x k_i(s) <= kv_capacity x s,

and the trainer runs its updates after the groups' finish times ``c0 x F_g``. Every schedule of
a linear engine (reserve mode, ``c0`` per step and nothing else: ``EngineModel.linear``) is one,
so the fluid optimum is at or below the true optimum. It is also at or above every bound that
argues from these rows alone: the step-indexed bound (``step_bound``; on a linear engine its
rows are exactly these, checked at bucket starts with coarsened finish steps, and its trainer
rows hold for any finish steps) whatever its buckets or branching. What the fluid model drops is
that a request runs *without interruption*: it may spend its KV-token-steps at any time before
they are forced.

For a fixed order of the finish steps the fluid model is an LP: the left-hand sides are convex
in s between two finish steps (each ``(n_i - F_g + s)^+`` is), so checking the rows at the
finish steps themselves is exact, and each group's forced tokens and KV at another group's
finish step are the largest of its affine pieces (one per request, longest first). With the
trainer taking the groups in that order (``update_sizes()`` at a time, each update as soon as
its groups are complete and the previous one ends), the LP's least train end, plus one step's
``c0`` (finish steps rounded up to whole steps never force more), is the train end of a fluid
schedule: a *ceiling* for the bounds above. ``energy_ceiling`` searches orders for a low one.

Why it matters: where the ceiling lies more than 2 % below the best schedule known, no bound of
this family can prove a 2 % gap against that schedule; the gap is then either in the schedules
(a better one exists) or in the interruption the relaxation drops, which only a bound that
reasons about whole requests can see.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from pipeplan.formulations.rollout.problem import RolloutProblem
from pipeplan.formulations.rollout.trainer import chunks

CEILING_S = 60.0      # default search time (s): at lsat-ar R = 32 (linear) 273.9 s after 20 s, 273.8 s after 150 s


@dataclass(frozen=True)
class Ceiling:
    train_end_s: float          # a fluid schedule's train end (the LP's, plus one step)
    order: tuple[int, ...]      # the groups in the order of their finish steps and updates
    finish_steps: tuple[float, ...]   # each group's finish step in that schedule (by group)
    evaluations: int            # LPs solved


def _pieces(problem: RolloutProblem) -> np.ndarray:
    """``out[g, j]``: the affine pieces of group g's forced tokens and KV at distance d before its
    finish step, over its j + 1 longest requests: (tokens at d = 0, tokens lost per step, KV at
    d = 0, KV lost per step); the forced amount is the largest piece (and at least 0)."""
    out = np.zeros((problem.R, problem.K, 4))
    for g in range(problem.R):
        reqs = sorted(problem.group_requests(g), key=lambda i: -problem.lengths[i])
        n = np.array([problem.lengths[i] for i in reqs], float)
        fp = np.array([problem.footprint(i) for i in reqs], float)
        out[g, :len(reqs)] = np.cumsum(np.stack([n, np.ones_like(n), fp * n, fp], axis=1), axis=0)
    return out


def _check(problem: RolloutProblem) -> None:
    if not problem.engine.linear or problem.rounds != 1:
        raise ValueError("the fluid model covers one round on a linear engine (EngineModel.linear)")


def fluid_train_end(problem: RolloutProblem, order, pieces: np.ndarray | None = None) -> tuple[float, np.ndarray]:
    """The least train end of the fluid model (module docstring) with the groups finishing in
    ``order`` and trained in it, plus one step's ``c0``, and the finish steps (by position in
    ``order``); (inf, empty) if none exists. An LP solved by HiGHS. The token rows are left out
    where they cannot bind (``max_num_seqs`` at least the round's requests: a request is forced
    at most s tokens by step s)."""
    import highspy
    from scipy import sparse

    from pipeplan.solvers.pulp_backend import highs_model, highs_threads

    _check(problem)
    order = np.asarray(order, dtype=int)
    R, eng, tr = problem.R, problem.engine, problem.trainer
    if sorted(order.tolist()) != list(range(R)):
        raise ValueError("the order must hold every group once")
    pieces = _pieces(problem) if pieces is None else pieces
    limits = [(2, 3, float(eng.kv_capacity_tokens))]            # (value at 0, slope) columns of a piece
    if eng.max_num_seqs < problem.n_requests:
        limits.append((0, 1, float(eng.max_num_seqs)))
    batches = chunks(order.tolist(), problem.update_sizes())
    durations = [tr.update_time(sum(problem.group_tokens[g] for g in b)) for b in batches]
    # columns: F by position (steps); per limit and ordered pair a < b the forced amount of the
    # group at b at the finish step of the group at a (in units of one step's limit); the
    # updates' starts (s); the train end
    a_of, b_of = np.triu_indices(R, k=1)
    P, K = a_of.size, problem.K
    first_update = R + len(limits) * P
    end = first_update + len(batches)
    rows, cols, vals, lower, upper = [], [], [], [], []
    nrow = 0

    def add(r, c, v):
        rows.append(np.asarray(r).ravel())
        cols.append(np.asarray(c).ravel())
        vals.append(np.asarray(v, float).ravel())

    # finish steps follow the order
    r = nrow + np.arange(R - 1)
    add(np.repeat(r, 2), np.stack([np.arange(1, R), np.arange(R - 1)], 1), np.tile([1.0, -1.0], R - 1))
    lower.append(np.zeros(R - 1))
    upper.append(np.full(R - 1, np.inf))
    nrow += R - 1
    full = pieces[order, -1]                                    # every request of the group
    for k, (at0, slope, limit) in enumerate(limits):
        forced = R + k * P + np.arange(P)
        piece = pieces[order[b_of]] / limit                     # P x K x 4
        # forced >= piece at d = F_b - F_a, per pair and piece
        r = nrow + np.arange(P * K).reshape(P, K)
        add(r, np.broadcast_to(forced[:, None], (P, K)), np.ones((P, K)))
        add(r, np.broadcast_to(b_of[:, None], (P, K)), piece[:, :, slope])
        add(r, np.broadcast_to(a_of[:, None], (P, K)), -piece[:, :, slope])
        lower.append(piece[:, :, at0].ravel())
        upper.append(np.full(P * K, np.inf))
        nrow += P * K
        # at the finish step of the group at a: what is done plus what later groups have forced
        r = nrow + np.arange(R)
        add(nrow + a_of, forced, np.ones(P))
        add(r, np.arange(R), -np.ones(R))
        lower.append(np.full(R, -np.inf))
        upper.append(-np.cumsum(full[:, at0]) / limit)
        nrow += R
    position, entries = 0, []
    for k, batch in enumerate(batches):
        position += len(batch)
        entries.append(([(first_update + k, 1.0), (position - 1, -eng.c0_s)], 0.0))   # after its last group
        if k:
            entries.append(([(first_update + k, 1.0), (first_update + k - 1, -1.0)], durations[k - 1]))
    entries.append(([(end, 1.0), (end - 1, -1.0)], durations[-1]))
    for row_entries, lo in entries:
        add([nrow] * len(row_entries), [c for c, _ in row_entries], [v for _, v in row_entries])
        lower.append([lo])
        upper.append([np.inf])
        nrow += 1
    ncol = end + 1
    matrix = sparse.csc_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                               shape=(nrow, ncol))
    col_lower = np.zeros(ncol)
    col_lower[:R] = [max(problem.lengths[i] for i in problem.group_requests(g)) for g in order]
    cost = np.zeros(ncol)
    cost[end] = 1.0
    lp = highs_model(cost, col_lower, np.full(ncol, highspy.kHighsInf), np.concatenate(lower), np.concatenate(upper),
                     matrix)
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    highs_threads(h, 1)
    h.passModel(lp)
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return float("inf"), np.empty(0)
    values = np.array(h.getSolution().col_value)
    return float(values[end]) + eng.c0_s, values[:R]


def energy_ceiling(problem: RolloutProblem, *, seconds: float = CEILING_S, moves: int | None = None, seed: int = 0,
                   start=None) -> Ceiling:
    """A low fluid train end over orders: a descent from ``start`` (default: the groups by
    their longest response) by random swaps and moves of one group, each order's LP solved
    (``fluid_train_end``) and a move kept when it is no worse, for ``seconds`` or, given
    ``moves``, that many moves, whichever ends first."""
    _check(problem)
    R = problem.R
    pieces = _pieces(problem)
    order = list(start) if start is not None else \
        sorted(range(R), key=lambda g: (max(problem.lengths[i] for i in problem.group_requests(g)), g))
    best, steps = fluid_train_end(problem, order, pieces)
    rng = np.random.default_rng(seed)
    deadline, made = time.perf_counter() + seconds, 0
    while R > 1 and (moves is None or made < moves) and time.perf_counter() < deadline:
        candidate = order.copy()
        a, b = (int(x) for x in rng.choice(R, size=2, replace=False))
        if rng.random() < 0.5:
            candidate[a], candidate[b] = candidate[b], candidate[a]
        else:
            candidate.insert(b, candidate.pop(a))
        value, found = fluid_train_end(problem, candidate, pieces)
        made += 1
        if value <= best:
            best, order, steps = value, candidate, found
    by_group = [0.0] * R
    for position, g in enumerate(order):
        by_group[g] = float(steps[position])
    return Ceiling(best, tuple(order), tuple(by_group), made + 1)

"""Heterogeneity-aware gradient coding (Wang, Liu and Shroff, "Heterogeneity-aware gradient
coding for straggler tolerance", ICDCS 2019): each partition is stored on s+1 workers, and a
worker's number of partitions follows its speed, so that every worker finishes its share at
about the same time; the master waits for any n-s replies (count rule) and decodes by least
squares.

* Loads (``speed_loads``): (s+1) k partition copies in all, handed out one at a time to the
  worker that would finish its share soonest (smallest (l_i + 1) / speed_i), each worker at
  least one while copies last, none past its capacity (nor k; pipelined: s+1). This is
  loads proportional to speed, rounded, within the capacities.
* Support (``cyclic_fill``): the paper's cyclic filling: the sequence 0..k-1 repeated s+1 times
  is cut into consecutive chunks of l_0, l_1, ... partitions; a chunk of at most k consecutive
  positions holds distinct partitions, and the s+1 copies of a partition lie in different
  chunks, so every partition has s+1 distinct holders.
* Encoding (``mds_matrix``): B = Lambda Theta with Lambda a random n x (n-s) matrix (any n-s of
  its rows invertible, almost surely) and Theta's first row all ones; column j of Theta is
  chosen so that B vanishes on the workers that do not hold partition j (at most n-s-1 linear
  conditions on its n-s-1 free entries). The replies F of any n-s workers then decode with
  a^T = e_1^T Lambda_F^-1: a^T B_F = e_1^T Theta = 1^T. This is the standard MDS-based
  construction of gradient codes on an arbitrary support with s+1 holders per partition (as in
  Halbawi, Azizan, Salehi and Hassibi, ISIT 2018); written here from that idea. Random codes
  can be badly conditioned, so several seeds are tried and the best conditioned one (verifier)
  is kept, as CR does.
"""
from __future__ import annotations

import heapq

import numpy as np

from pipeplan.core.deadline import Deadline
from pipeplan.core.registry import register
from pipeplan.core.result import Termination
from pipeplan.formulations.gradcode.coverage_bound import load_limits
from pipeplan.formulations.gradcode.gradient_code import GradientCode, check_lstsq_size
from pipeplan.formulations.gradcode.placement import pipelined
from pipeplan.formulations.gradcode.problem import GradCodeProblem
from pipeplan.formulations.gradcode.verifier import Verification
from pipeplan.solvers.gradcode.common import scored_result, search_deadline
from pipeplan.solvers.gradcode.cyclic import best_conditioned


def speed_loads(problem: GradCodeProblem) -> np.ndarray:
    """Partitions per worker, about proportional to speed within the capacities, (s+1) k in
    all; ValueError when the capacities hold fewer copies."""
    cap = load_limits(problem)
    total = (problem.s + 1) * problem.k
    if cap.sum() < total:
        raise ValueError(f"the capacities hold {cap.sum()} partition copies, fewer than (s+1) k = {total}")
    speed = np.asarray(problem.speeds, dtype=np.float64)
    loads = np.zeros(problem.n, dtype=np.int64)
    for i in np.argsort(-speed, kind="stable")[:total]:    # one each first (fastest first when short)
        loads[i] = 1
    heap = [((loads[i] + 1) / speed[i], i) for i in range(problem.n) if loads[i] < cap[i]]
    heapq.heapify(heap)
    for _ in range(total - int(loads.sum())):
        _, i = heapq.heappop(heap)
        loads[i] += 1
        if loads[i] < cap[i]:
            heapq.heappush(heap, ((loads[i] + 1) / speed[i], i))
    return loads


def cyclic_fill(loads, k: int) -> np.ndarray:
    """(n, k) support: worker i takes the next ``loads[i]`` positions of 0, 1, ..., k-1, 0, 1, ...
    (each load at most k)."""
    loads = np.asarray(loads, dtype=np.int64)
    if (loads > k).any() or (loads < 0).any():
        raise ValueError(f"loads must lie in 0..k = {k}, got {loads.tolist()}")
    support = np.zeros((loads.size, k), dtype=bool)
    start = 0
    for i, load in enumerate(loads):
        support[i, (start + np.arange(load)) % k] = True
        start += int(load)
    return support


def mds_matrix(support: np.ndarray, s: int, rng: np.random.Generator) -> np.ndarray:
    """B = Lambda Theta on ``support`` (every partition on at least s+1 workers): decodes from
    any n-s rows; rows scaled to unit length (which leaves decodability unchanged)."""
    n, k = support.shape
    holders = support.sum(axis=0)
    if (holders < s + 1).any():
        raise ValueError("every partition needs at least s+1 holders")
    lam = rng.standard_normal((n, n - s))
    theta = np.zeros((n - s, k))
    theta[0] = 1.0
    exact = holders == s + 1
    if exact.any() and n > s + 1:
        theta[1:, exact] = _square_columns(lam, support[:, exact], s)
    for j in np.flatnonzero(~exact):
        off = np.flatnonzero(~support[:, j])
        if off.size:
            rest, *_ = np.linalg.lstsq(lam[off, 1:], -lam[off, 0], rcond=None)
            theta[1:, j] = rest
    B = np.where(support, lam @ theta, 0.0)
    norms = np.linalg.norm(B, axis=1, keepdims=True)
    return np.divide(B, norms, out=np.zeros_like(B), where=norms > 0)


def _square_columns(lam: np.ndarray, support: np.ndarray, s: int) -> np.ndarray:
    """Theta's free entries for the partitions held by exactly s+1 workers H, all at once: each
    solves the square system A[off] x = b[off] (A = Lambda's last n-s-1 columns, b = -Lambda's
    first, off = the n-s-1 workers outside H). One partition at a time that was one dense solve
    each, n^3 apiece: at n = k = 2,000 about 50 minutes for one code, past any time limit. Here
    x solves it exactly when the residual A x - b lies on H, i.e. when N^T (b + E_H z) = 0 for
    N A's left null space (n x (s+1)) and the residual's values z on H; so z = -(N_H^T)^-1 N^T b
    (an (s+1)-square solve per partition) and x = A^+ (b + E_H z), one QR of A for every
    partition (N_H is invertible exactly when A[off] is)."""
    from scipy.linalg import qr, solve_triangular

    n, k = support.shape
    a, b = lam[:, 1:], -lam[:, 0]
    q, r = qr(a)                                      # complete: q's last s+1 columns are N
    null = q[:, n - s - 1:]
    held = np.sort(np.argsort(~support, axis=0, kind="stable")[:s + 1], axis=0).T      # (k, s+1) holders
    z = -np.linalg.solve(np.swapaxes(null[held], 1, 2), np.broadcast_to(null.T @ b, (k, s + 1))[..., None])[..., 0]
    rhs = np.repeat(b[:, None], k, axis=1)
    np.add.at(rhs, (held, np.arange(k)[:, None]), z)
    return solve_triangular(r[:n - s - 1], q[:, :n - s - 1].T @ rhs)


def hetero_aware_code(problem: GradCodeProblem, loads=None, *, seed: int = 0, tries: int = 8,
                      scheme: str = "hetero-aware", deadline: Deadline | None = None
                      ) -> tuple[GradientCode, Verification]:
    """The code on cyclic-filled ``loads`` (default ``speed_loads``), count rule n-s, least
    squares; the best conditioned of ``tries`` seeds (fewer past the ``deadline``) and its
    verification. ``meta`` records the loads, the seed and how many seeds were tried."""
    if tries < 1:
        raise ValueError(f"tries must be >= 1, got {tries}")
    loads = speed_loads(problem) if loads is None else np.asarray(loads, dtype=np.int64)
    support = cyclic_fill(loads, problem.k)
    B, chosen, tried, v = best_conditioned(lambda rng: mds_matrix(support, problem.s, rng), support, problem.s,
                                           problem.n - problem.s, seed=seed, tries=tries, deadline=deadline)
    meta = {"loads": loads.tolist(), "seed": chosen, "tries": tries, "tried": tried,
            "worst_condition": v.worst_condition}
    code = GradientCode(scheme=scheme, s=problem.s, support=support, B=B, decoder="lstsq",
                        wait=problem.n - problem.s, meta=meta)
    return (pipelined(code, scheme) if problem.pipelined else code), v


@register("gradcode", "hetero-aware",
          description="heterogeneity-aware GC (Wang, Liu, Shroff 2019): loads by speed, cyclic filling, any n-s decode")
def solve_hetero_aware(problem, *, seed: int = 0, tries: int = 8, time_limit=None):
    search = search_deadline(time_limit, problem)
    check_lstsq_size(problem.n, problem.name, "n", "hetero-aware")
    code, v = hetero_aware_code(problem, seed=seed, tries=tries, deadline=search)
    cut = code.meta["tried"] < tries
    return scored_result(problem, "hetero-aware", code, termination=Termination.TIME_LIMIT if cut else Termination.COMPLETED,
                         params={"tries": tries}, message=f"loads {code.meta['loads']}", verification=v,
                         stopped_by="time" if cut else None)

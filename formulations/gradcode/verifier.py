"""Decodability verifier: decode from straggler sets of size s and report the worst residual
max_j |(a^T B_F)_j - 1|, the decoding error ||a^T B_F - 1||^2 / k (worst and mean: the figure of
merit of approximate codes) and the worst condition number of the decoding.

Three methods, named in the result (``method``):

* ``exhaustive``: every one of the C(n, s) sets (n <= 24 and at most ``max_sets`` sets);
* ``structure``: the code's structure proves the verdict for every set at once (``structure``:
  groups codes, cyclic-MDS), then numeric decodes confirm it: a built failing set, or sampled
  sets as a check on the arithmetic (all ``samples`` for the cheap fixed decoders, for least
  squares as many as fit ``CHECK_CELLS`` matrix entries, at least one);
* ``sampled``: ``samples`` random sets. A failing set found is a proof; none found is not, and
  the verdict says so (``Verification.verdict``): ``decodable`` is then "no failing set among
  those checked", never a claim about the others.

``method="auto"`` takes the first that applies, in that order. With a ``deadline`` (a solver's
time limit) the verifier stops after the chunk in progress once it has passed, having checked at
least one set: ``sets_checked`` says how many, an enumeration cut short counts as sampled.

The least-squares decodes are batched: one SVD per chunk of straggler sets (numpy's stacked
``svd``), the minimum-norm solution from the singular values kept above numpy's ``lstsq``
cut-off (max(n, k) * eps * sigma_max); the condition number is sigma_max / sigma_min over the
kept values, i.e. of B_F on its row space. The groups and linear decoders invert nothing
(condition 1); their decodes sum over B's non-zeros only, so a large sparse code costs what its
support holds, not n x k per straggler set. Chunks grow from one set to at most ``CELLS``
matrix entries. One least-squares set costs an SVD of an (n-s) x k matrix: seconds at n = 2,000.
"""
from __future__ import annotations

import itertools
import math
import time
from dataclasses import asdict, dataclass

import numpy as np
from threadpoolctl import threadpool_limits

from pipeplan.core.deadline import Deadline
from pipeplan.formulations.gradcode.gradient_code import GradientCode
from pipeplan.formulations.gradcode.structure import certificate

RESIDUAL_TOL = 1e-6
EXHAUSTIVE_MAX_N = 24
CELLS = 1 << 22          # most matrix entries a chunk of straggler sets holds (32 MiB of float64)
CHECK_CELLS = 1 << 20    # least squares under a structural verdict: sampled sets up to this many entries
ONE_THREAD_CELLS = 1 << 16  # stacked matrices up to this size are decomposed on one BLAS thread
QR_CONDITION = 1e8       # least squares through QR below this condition number, else through the SVD
METHODS = ("auto", "exhaustive", "structure", "sampled")


@dataclass(frozen=True)
class Verification:
    decoder: str
    stragglers: int
    decodable: bool                # no checked set failed (a proof unless method == "sampled")
    sets_checked: int
    exhaustive: bool
    worst_residual: float
    worst_condition: float
    worst_set: tuple[int, ...]     # the straggler set with the worst residual (the failing one)
    method: str = "exhaustive"
    workers: int = 0
    total_sets: int = 1            # C(n, s)
    worst_error: float = 0.0       # ||a^T B_F - 1||^2 / k over the checked sets
    mean_error: float = 0.0
    approximate: bool = False      # the code does not claim exactness (linear decoder, meta)
    proof: str = ""                # the structural argument (method "structure")

    @property
    def proven(self) -> bool:
        """Whether the verdict holds for every straggler set (a failing set always proves)."""
        return not self.decodable or self.method != "sampled"

    @property
    def verdict(self) -> str:
        n, s = self.workers, self.stragglers
        of = f"{self.sets_checked:,} of C({n},{s}) = {self.total_sets:,} sets"
        if self.decodable and self.method == "exhaustive":
            return f"decodable (exhaustive: all {self.total_sets:,} straggler sets)"
        if self.decodable and self.method == "structure":
            return f"decodable (structure: {self.proof}; numeric check on {self.sets_checked:,} sets)"
        if self.decodable:
            return f"sampled: no failing set among {of} (not a proof)"
        if self.approximate:
            how = "all sets" if self.method == "exhaustive" else f"sampled: {of}"
            return (f"approximate: worst error {self.worst_error:.3g}, mean error {self.mean_error:.3g} "
                    f"(||a^T B_F - 1||^2 / k; {how})")
        why = f"; {self.proof}" if self.proof else ""
        return (f"NOT decodable: straggler set {list(self.worst_set)} leaves residual "
                f"{self.worst_residual:.3g} ({self.method}{why})")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["worst_set"] = list(self.worst_set)
        d["proven"] = self.proven
        d["verdict"] = self.verdict
        return d


def straggler_sets(n: int, s: int, *, max_sets: int = 250_000, samples: int = 20_000,
                   seed: int = 0, enumerate_all: bool | None = None) -> tuple[np.ndarray, bool]:
    """All C(n, s) straggler sets when n <= 24 and there are at most ``max_sets`` (or as
    ``enumerate_all`` says), else ``samples`` random ones without repeats, in the order drawn
    (so that a verification cut short by its deadline has checked a uniform sample); returns
    (sets as an (m, s) array, exhaustive?)."""
    if s == 0:
        return np.zeros((1, 0), dtype=np.int64), True
    if enumerate_all is None:
        enumerate_all = n <= EXHAUSTIVE_MAX_N and math.comb(n, s) <= max_sets
    if enumerate_all:
        flat = np.fromiter(itertools.chain.from_iterable(itertools.combinations(range(n), s)),
                           dtype=np.int64, count=math.comb(n, s) * s)
        return flat.reshape(-1, s), True
    return np.concatenate(list(sampled_sets(n, s, samples=samples, seed=seed))), False


def sampled_sets(n: int, s: int, *, samples: int, seed: int = 0):
    """``samples`` random straggler sets without repeats (the one empty set when s = 0), in the
    order drawn, as a stream of (m, s) arrays. Row by row the s smallest of n uniform draws, drawn in chunks of
    at most CELLS entries (the same stream as one (samples, n) draw) and picked by a partial
    sort. A stream, because drawing costs samples x n: 1 s for 20,000 sets at n = 2,000, where a
    verification under a deadline may decode one."""
    if s == 0:
        yield np.zeros((1, 0), dtype=np.int64)
        return
    rng = np.random.default_rng(seed)
    rows, seen = max(1, CELLS // n), set()
    for lo in range(0, samples, rows):
        sets = np.argpartition(rng.random((min(rows, samples - lo), n)), s - 1, axis=1)[:, :s]
        sets.sort(axis=1)
        _, first = np.unique(sets, axis=0, return_index=True)
        fresh = []
        for i in np.sort(first):
            key = sets[i].tobytes()
            if key not in seen:
                seen.add(key)
                fresh.append(i)
        yield sets[fresh]


def _survivors(n: int, stragglers: np.ndarray) -> np.ndarray:
    alive = np.ones((stragglers.shape[0], n), dtype=bool)
    np.put_along_axis(alive, stragglers, False, axis=1)
    return np.nonzero(alive)[1].reshape(stragglers.shape[0], n - stragglers.shape[1])


def _lstsq_batch(code: GradientCode, surv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(decoded a^T B_F, condition) per survivor set for the least-squares decoder.

    The singular values alone (stacked; the full SVD is 10-100 times slower past 25 columns)
    give the condition. A well-conditioned B_F of full row rank is solved through a stacked QR
    of B_F^T (a = R^-1 Q^T 1, the unique least-squares solution, error about condition x eps);
    the rest one by one through ``lstsq`` (SVD, the cut-off below)."""
    BF = code.B[surv]                                  # (m, n-s, k)
    if BF.shape[1] * BF.shape[2] > ONE_THREAD_CELLS:
        return _lstsq_each(BF)
    S = np.linalg.svd(BF, compute_uv=False)
    keep = S > max(BF.shape[1:]) * np.finfo(np.float64).eps * S[:, :1]
    smallest = np.where(keep, S, np.inf).min(axis=1)
    condition = np.where(np.isfinite(smallest), S[:, 0] / smallest, np.inf)
    decoded = np.empty((BF.shape[0], code.k))
    qr = keep.all(axis=1) & (condition < QR_CONDITION) & (BF.shape[1] <= BF.shape[2])
    if qr.any():
        Q, R = np.linalg.qr(np.swapaxes(BF[qr], 1, 2))           # B_F^T = Q R, Q (m, k, r)
        a = np.linalg.solve(R, Q.sum(axis=1)[..., None])[..., 0]          # R a = Q^T 1
        decoded[qr] = np.einsum("mr,mrk->mk", a, BF[qr])
    for i in np.flatnonzero(~qr):
        decoded[i] = np.linalg.lstsq(BF[i].T, np.ones(code.k), rcond=None)[0] @ BF[i]
    return decoded, condition


def _lstsq_each(BF: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``_lstsq_batch`` for large matrices, one ``lstsq`` each: stacking gains nothing there, and
    the singular values ``lstsq`` returns (same cut-off) give the condition, where the batch's
    separate SVD doubled the cost of an ill-conditioned set (2.5 -> 1.3 s at n = 2,000)."""
    decoded, condition = np.empty((BF.shape[0], BF.shape[2])), np.empty(BF.shape[0])
    for i, M in enumerate(BF):
        a, _, rank, S = np.linalg.lstsq(M.T, np.ones(M.shape[1]), rcond=None)
        decoded[i] = a @ M
        condition[i] = S[0] / S[rank - 1] if rank else np.inf
    return decoded, condition


def _padded(lists: list[np.ndarray], fill: int) -> np.ndarray:
    """Rows of different lengths as one (len(lists), longest) array padded with ``fill``."""
    out = np.full((len(lists), max((x.size for x in lists), default=0)), fill, dtype=np.int64)
    for r, x in enumerate(lists):
        out[r, :x.size] = x
    return out


class _FixedBatch:
    """Decodes per straggler set for the groups and linear decoders, from B's non-zeros: each
    partition's decoded coefficient sums the weights of the (at most ``width``) workers that
    encode it, so a set costs k x width, not n x k. Calling it gives the residuals."""

    def __init__(self, code: GradientCode):
        self.code = code
        holders = [np.flatnonzero(code.B[:, j]) for j in range(code.k)]
        self.workers = _padded(holders, code.n)        # column n: a worker that never has weight
        self.coef = np.where(self.workers < code.n, code.B[np.minimum(self.workers, code.n - 1),
                                                          np.arange(code.k)[:, None]], 0.0)
        if code.decoder == "groups":
            self.members = _padded([np.array(sorted(g), dtype=np.int64) for g in code.groups], code.n)

    @property
    def width(self) -> int:
        return self.code.k * max(1, self.workers.shape[1])

    def decoded(self, stragglers: np.ndarray) -> np.ndarray:
        """a^T B per set, (m, k)."""
        code, m = self.code, stragglers.shape[0]
        alive = np.ones((m, code.n + 1), dtype=bool)
        alive[:, code.n] = False
        np.put_along_axis(alive, stragglers, False, axis=1)
        if code.decoder == "linear":
            a = alive * code.linear_weight
        else:   # the first surviving member of each group (members in worker order) gets 1
            first = np.full((m, self.members.shape[0]), code.n)       # column n: no survivor
            for col in self.members.T[::-1]:
                first = np.where(alive[:, col], col, first)
            a = np.zeros(alive.shape)
            a[np.arange(m)[:, None], first] = 1.0
            a[:, code.n] = 0.0
        return np.einsum("mkw,kw->mk", a[:, self.workers], self.coef)

    def __call__(self, stragglers: np.ndarray) -> np.ndarray:
        return np.abs(self.decoded(stragglers) - 1.0).max(axis=1)


class _Decoder:
    """(residual, error, condition) per straggler set, batched in chunks."""

    def __init__(self, code: GradientCode):
        self.code = code
        self.fixed = None if code.decoder == "lstsq" else _FixedBatch(code)
        self.cells = (code.n - code.s) * code.k if self.fixed is None else self.fixed.width

    def __call__(self, sets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self.fixed is None:
            # many small decompositions gain nothing from BLAS threads; on a busy machine the
            # threads cost 5-25x (measured: 300 SVDs of 90 x 100, 4.8 s against 0.18 s)
            with threadpool_limits(1 if self.cells <= ONE_THREAD_CELLS else None, user_api="blas"):
                decoded, condition = _lstsq_batch(self.code, _survivors(self.code.n, sets))
        else:
            decoded, condition = self.fixed.decoded(sets), np.ones(sets.shape[0])
        off = decoded - 1.0
        return np.abs(off).max(axis=1), (off ** 2).sum(axis=1) / self.code.k, condition


def _run(decode: _Decoder, source, deadline: Deadline | None):
    """Decode the straggler sets of ``source`` (a stream of (m, s) arrays) in chunks
    that double up to CELLS entries (with a deadline: to what the time left allows at the pace
    so far; the first chunk, one set, is always checked). Returns (figures, the sets decoded)."""
    most = max(1, CELLS // decode.cells)
    stream = iter(source)
    pending = next(stream)
    figures, decoded = [], []
    done, chunk, began = 0, 1, time.perf_counter()
    while not (done and deadline is not None and deadline.expired()):
        while pending.shape[0] < chunk and (more := next(stream, None)) is not None:
            pending = np.concatenate([pending, more])
        if not pending.shape[0]:
            break
        part, pending = pending[:chunk], pending[chunk:]
        figures.append(np.array(decode(part)))
        decoded.append(part)
        done += part.shape[0]
        chunk = min(2 * chunk, most)
        if deadline is not None and deadline.limit is not None:
            pace = (time.perf_counter() - began) / done
            chunk = max(1, int(min(chunk, deadline.remaining() / pace)) if pace > 0 else chunk)   # min first: 1e308 s / pace is inf
    return np.concatenate(figures, axis=1), np.concatenate(decoded)


def _confirmed(cert, decode: _Decoder, s: int):
    """The structural verdict's built failing sets decoded: (figures, sets) of the first that
    fails, or None when none does."""
    if not cert.candidates:
        return None
    sets = np.array(cert.candidates, dtype=np.int64).reshape(len(cert.candidates), s)
    figures = np.array(decode(sets))
    bad = np.flatnonzero(figures[0] > RESIDUAL_TOL)[:1]
    return (figures[:, bad], sets[bad]) if bad.size else None


def verify(code: GradientCode, *, max_sets: int = 250_000, samples: int = 20_000, seed: int = 0,
           deadline: Deadline | None = None, method: str = "auto") -> Verification:
    """``method``: "auto" (exhaustive when n <= 24 and C(n, s) <= ``max_sets``, else the
    structure when it settles the question, else sampled) or one of them forced (ValueError
    when it cannot apply)."""
    if method not in METHODS:
        raise ValueError(f"unknown verification method {method!r} ({', '.join(METHODS)})")
    n, s = code.n, code.s
    total = math.comb(n, s)
    small = n <= EXHAUSTIVE_MAX_N and total <= max_sets
    if method == "exhaustive" and total > max_sets:
        raise ValueError(f"C({n},{s}) = {total:,} straggler sets, more than max_sets = {max_sets:,}")
    decode = _Decoder(code)
    cert, figures = None, None
    if method == "structure" or (method == "auto" and not small):
        cert = certificate(code)
        if cert is not None and not cert.decodable:
            figures = _confirmed(cert, decode, s)
            cert = cert if figures is not None else None     # the built sets decode: no verdict
        if cert is None and method == "structure":
            raise ValueError(f"no structural verdict for this {code.decoder} code ({code.scheme})")
    if figures is not None:
        (figures, sets), used = figures, "structure"
    else:
        if cert is not None:           # decodable by structure: a numeric check on sampled sets
            budget = samples if code.decoder != "lstsq" else min(samples, max(1, CHECK_CELLS // decode.cells))
            sets = sampled_sets(n, s, samples=budget, seed=seed)
        elif method == "exhaustive" or (method == "auto" and small):
            sets = [straggler_sets(n, s, enumerate_all=True)[0]]
        else:
            sets = sampled_sets(n, s, samples=samples, seed=seed)
        figures, sets = _run(decode, sets, deadline)
        exhaustive = cert is None and sets.shape[0] == total    # a sample without repeats can hold them all
        used = "structure" if cert is not None else "exhaustive" if exhaustive else "sampled"
    residual, error, condition = figures
    worst = int(np.argmax(residual))
    decodable = bool(residual.max() <= RESIDUAL_TOL)
    approximate = code.decoder == "linear" or bool(code.meta.get("approximate"))
    return Verification(decoder=code.decoder, stragglers=s, decodable=decodable, sets_checked=int(sets.shape[0]),
                        exhaustive=used == "exhaustive", worst_residual=float(residual.max()),
                        worst_condition=float(condition.max()), worst_set=tuple(int(x) for x in sets[worst]),
                        method=used, workers=n, total_sets=total, worst_error=float(error.max()),
                        mean_error=float(error.mean()), approximate=approximate,
                        proof=cert.proof if cert is not None else "")

"""Decodability verifier: for every straggler set of size s (exhaustive up to n = 24 workers,
sampled above or past ``max_sets`` sets) decode from the survivors and report the worst
residual max_j |(a^T B_F)_j - 1| and the worst condition number of the decoding.

The least-squares decodes are batched: one SVD per chunk of straggler sets (numpy's stacked
``svd``), the minimum-norm solution from the singular values kept above numpy's ``lstsq``
cut-off (max(n, k) * eps * sigma_max); the condition number is sigma_max / sigma_min over the
kept values, i.e. of B_F on its row space. The groups and linear decoders invert nothing
(condition 1); their residuals are summed over B's non-zeros only, so a large sparse code costs
what its support holds, not n x k per straggler set.

Chunks of straggler sets grow from one set to at most ``CELLS`` matrix entries. With a
``deadline`` (a solver's time limit) the verifier stops after the chunk in progress once it has
passed, having checked at least one set: ``sets_checked`` says how many sets that was and
``exhaustive`` is then False. One least-squares set costs an SVD of an (n-s) x k matrix:
seconds at n = 2,000.
"""
from __future__ import annotations

import itertools
import math
import time
from dataclasses import asdict, dataclass

import numpy as np

from pipeplan.core.deadline import Deadline
from pipeplan.formulations.gradcode.gradient_code import GradientCode

RESIDUAL_TOL = 1e-6
EXHAUSTIVE_MAX_N = 24
CELLS = 1 << 22          # most matrix entries a chunk of straggler sets holds (32 MiB of float64)


@dataclass(frozen=True)
class Verification:
    decoder: str
    stragglers: int
    decodable: bool
    sets_checked: int
    exhaustive: bool
    worst_residual: float
    worst_condition: float
    worst_set: tuple[int, ...]     # the straggler set with the worst residual

    def to_dict(self) -> dict:
        d = asdict(self)
        d["worst_set"] = list(self.worst_set)
        return d


def straggler_sets(n: int, s: int, *, max_sets: int = 250_000, samples: int = 20_000,
                   seed: int = 0) -> tuple[np.ndarray, bool]:
    """All C(n, s) straggler sets when n <= 24 and there are at most ``max_sets``, else
    ``samples`` random ones without repeats, in the order drawn (so that a verification cut
    short by its deadline has checked a uniform sample); returns (sets as an (m, s) array,
    exhaustive?)."""
    if s == 0:
        return np.zeros((1, 0), dtype=np.int64), True
    if n <= EXHAUSTIVE_MAX_N and math.comb(n, s) <= max_sets:
        flat = np.fromiter(itertools.chain.from_iterable(itertools.combinations(range(n), s)),
                           dtype=np.int64, count=math.comb(n, s) * s)
        return flat.reshape(-1, s), True
    # row by row the s smallest of n uniform draws: drawn in chunks (the same stream as one
    # (samples, n) draw) and picked by a partial sort, so memory stays at CELLS entries
    rng = np.random.default_rng(seed)
    rows = max(1, CELLS // n)
    sets = np.concatenate([np.argpartition(rng.random((min(rows, samples - lo), n)), s - 1, axis=1)[:, :s]
                           for lo in range(0, samples, rows)])
    sets.sort(axis=1)
    _, first = np.unique(sets, axis=0, return_index=True)     # without repeats, in the order drawn
    return sets[np.sort(first)], False


def _survivors(n: int, stragglers: np.ndarray) -> np.ndarray:
    alive = np.ones((stragglers.shape[0], n), dtype=bool)
    np.put_along_axis(alive, stragglers, False, axis=1)
    return np.nonzero(alive)[1].reshape(stragglers.shape[0], n - stragglers.shape[1])


def _lstsq_batch(code: GradientCode, surv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(residual, condition) per survivor set for the least-squares decoder."""
    BF = code.B[surv]                                  # (m, n-s, k)
    U, S, Vt = np.linalg.svd(BF, full_matrices=False)  # U (m, r, r'), S (m, r'), Vt (m, r', k)
    cut = max(BF.shape[1:]) * np.finfo(np.float64).eps * S[:, :1]
    keep = S > cut
    inv = np.where(keep, 1.0 / np.where(keep, S, 1.0), 0.0)
    coef = Vt.sum(axis=2) * inv                        # Vt @ 1, scaled
    a = np.einsum("mrq,mq->mr", U, coef)               # (m, n-s)
    residual = np.abs(np.einsum("mr,mrk->mk", a, BF) - 1.0).max(axis=1)
    smallest = np.where(keep, S, np.inf).min(axis=1)
    condition = np.where(np.isfinite(smallest), S[:, 0] / smallest, np.inf)
    return residual, condition


def _padded(lists: list[np.ndarray], fill: int) -> np.ndarray:
    """Rows of different lengths as one (len(lists), longest) array padded with ``fill``."""
    out = np.full((len(lists), max((x.size for x in lists), default=0)), fill, dtype=np.int64)
    for r, x in enumerate(lists):
        out[r, :x.size] = x
    return out


class _FixedBatch:
    """Residual per straggler set for the groups and linear decoders, from B's non-zeros: each
    partition's decoded coefficient sums the weights of the (at most ``width``) workers that
    encode it, so a set costs k x width, not n x k."""

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

    def __call__(self, stragglers: np.ndarray) -> np.ndarray:
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
        decoded = np.einsum("mkw,kw->mk", a[:, self.workers], self.coef)     # a^T B
        return np.abs(decoded - 1.0).max(axis=1)


def verify(code: GradientCode, *, max_sets: int = 250_000, samples: int = 20_000, seed: int = 0,
           deadline: Deadline | None = None) -> Verification:
    sets, exhaustive = straggler_sets(code.n, code.s, max_sets=max_sets, samples=samples, seed=seed)
    fixed = None if code.decoder == "lstsq" else _FixedBatch(code)
    most = max(1, CELLS // ((code.n - code.s) * code.k if fixed is None else fixed.width))
    residuals = np.empty(sets.shape[0])
    conditions = np.ones(sets.shape[0])
    # chunks double up to ``most`` sets, and with a deadline to what the time left allows at the
    # pace so far; the first, always checked, is one set
    done, chunk, began = 0, 1, time.perf_counter()
    while done < sets.shape[0] and not (done and deadline is not None and deadline.expired()):
        part = sets[done:done + chunk]
        if code.decoder == "lstsq":
            residuals[done:done + chunk], conditions[done:done + chunk] = _lstsq_batch(code, _survivors(code.n, part))
        else:
            residuals[done:done + chunk] = fixed(part)
        done += part.shape[0]
        chunk = min(2 * chunk, most)
        if deadline is not None and deadline.limit is not None:
            pace = (time.perf_counter() - began) / done
            chunk = max(1, min(chunk, int(deadline.remaining() / pace) if pace > 0 else chunk))
    residuals, conditions = residuals[:done], conditions[:done]
    worst = int(np.argmax(residuals))
    return Verification(decoder=code.decoder, stragglers=code.s,
                        decodable=bool(residuals.max() <= RESIDUAL_TOL), sets_checked=done,
                        exhaustive=exhaustive and done == sets.shape[0], worst_residual=float(residuals.max()),
                        worst_condition=float(conditions.max()), worst_set=tuple(int(x) for x in sets[worst]))

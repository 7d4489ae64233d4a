"""Decodability verifier: for every straggler set of size s (exhaustive up to n = 24 workers,
sampled above or past ``max_sets`` sets) decode from the survivors and report the worst
residual max_j |(a^T B_F)_j - 1| and the worst condition number of the decoding.

The least-squares decodes are batched: one SVD per chunk of straggler sets (numpy's stacked
``svd``), the minimum-norm solution from the singular values kept above numpy's ``lstsq``
cut-off (max(n, k) * eps * sigma_max); the condition number is sigma_max / sigma_min over the
kept values, i.e. of B_F on its row space. The groups and linear decoders invert nothing
(condition 1).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass

import numpy as np

from pipeplan.formulations.gradcode.decoders import group_index
from pipeplan.formulations.gradcode.gradient_code import GradientCode

RESIDUAL_TOL = 1e-6
EXHAUSTIVE_MAX_N = 24


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
    ``samples`` random ones; returns (sets as an (m, s) array, exhaustive?)."""
    if s == 0:
        return np.zeros((1, 0), dtype=np.int64), True
    if n <= EXHAUSTIVE_MAX_N and math.comb(n, s) <= max_sets:
        flat = np.fromiter(itertools.chain.from_iterable(itertools.combinations(range(n), s)),
                           dtype=np.int64, count=math.comb(n, s) * s)
        return flat.reshape(-1, s), True
    rng = np.random.default_rng(seed)
    sets = np.sort(np.argsort(rng.random((samples, n)), axis=1)[:, :s], axis=1)
    return np.unique(sets, axis=0), False


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


def _fixed_batch(code: GradientCode, stragglers: np.ndarray) -> np.ndarray:
    """Residual per straggler set for the groups and linear decoders."""
    n = code.n
    alive = np.ones((stragglers.shape[0], n), dtype=bool)
    np.put_along_axis(alive, stragglers, False, axis=1)
    if code.decoder == "linear":
        a = alive * code.linear_weight
    else:
        a = np.zeros(alive.shape)
        of = group_index(code)
        for g in range(len(code.groups)):
            members = np.flatnonzero(of == g)
            sub = alive[:, members]
            first = members[sub.argmax(axis=1)]
            has = sub.any(axis=1)
            a[np.flatnonzero(has), first[has]] = 1.0
    return np.abs(a @ code.B - 1.0).max(axis=1)


def verify(code: GradientCode, *, max_sets: int = 250_000, samples: int = 20_000, seed: int = 0,
           chunk: int = 8192) -> Verification:
    sets, exhaustive = straggler_sets(code.n, code.s, max_sets=max_sets, samples=samples, seed=seed)
    residuals = np.empty(sets.shape[0])
    conditions = np.ones(sets.shape[0])
    for lo in range(0, sets.shape[0], chunk):
        part = sets[lo:lo + chunk]
        if code.decoder == "lstsq":
            residuals[lo:lo + chunk], conditions[lo:lo + chunk] = _lstsq_batch(code, _survivors(code.n, part))
        else:
            residuals[lo:lo + chunk] = _fixed_batch(code, part)
    worst = int(np.argmax(residuals))
    return Verification(decoder=code.decoder, stragglers=code.s,
                        decodable=bool(residuals.max() <= RESIDUAL_TOL), sets_checked=int(sets.shape[0]),
                        exhaustive=exhaustive, worst_residual=float(residuals.max()),
                        worst_condition=float(conditions.max()), worst_set=tuple(int(x) for x in sets[worst]))

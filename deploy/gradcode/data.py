"""The dataset: scikit-learn's handwritten digits (1,797 8x8 images, 10 classes), shipped inside
the scikit-learn wheel, so nothing is downloaded. Pixels are scaled to [0, 1]; a fixed seeded
split keeps 1,440 images for training (divisible by 12, 24, ...) and 357 for testing."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

TRAIN_SIZE = 1440
SPLIT_SEED = 7


@dataclass(frozen=True, eq=False)
class Dataset:
    X: np.ndarray
    y: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    classes: int = 10

    def partitions(self, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """k contiguous, near-equal partitions of the training set."""
        return [(X, y) for X, y in zip(np.array_split(self.X, k), np.array_split(self.y, k))]


@lru_cache(maxsize=1)
def digits() -> Dataset:
    from sklearn.datasets import load_digits

    raw = load_digits()
    X = raw.data.astype(np.float64) / 16.0
    y = raw.target.astype(np.int64)
    perm = np.random.default_rng(SPLIT_SEED).permutation(len(y))
    tr, te = perm[:TRAIN_SIZE], perm[TRAIN_SIZE:]
    return Dataset(X[tr], y[tr], X[te], y[te])

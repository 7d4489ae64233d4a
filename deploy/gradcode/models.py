"""Two small models in numpy with flat parameter vectors: softmax regression and a one-hidden-
layer MLP (tanh). ``grad_sum`` returns the *sum* of the per-sample cross-entropy gradients, so
that the gradients of all partitions, each divided by the training-set size, add up to the
gradient of the mean loss (what gradient coding decodes)."""
from __future__ import annotations

import numpy as np

MODELS = ("softmax", "mlp")


def _softmax_ce(logits: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """(summed cross-entropy, d loss / d logits per sample)."""
    z = logits - logits.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    rows = np.arange(len(y))
    loss = float(-np.log(p[rows, y] + 1e-300).sum())
    p[rows, y] -= 1.0
    return loss, p


class SoftmaxRegression:
    def __init__(self, features: int, classes: int):
        self.d, self.c = features, classes
        self.size = features * classes + classes

    def init(self, seed: int) -> np.ndarray:
        return np.zeros(self.size)

    def _split(self, w):
        return w[: self.d * self.c].reshape(self.d, self.c), w[self.d * self.c:]

    def logits(self, w, X):
        W, b = self._split(w)
        return X @ W + b

    def loss_and_grad_sum(self, w, X, y) -> tuple[float, np.ndarray]:
        loss, dz = _softmax_ce(self.logits(w, X), y)
        return loss, np.concatenate([(X.T @ dz).ravel(), dz.sum(axis=0)])


class MLP:
    def __init__(self, features: int, classes: int, hidden: int = 32):
        self.d, self.c, self.h = features, classes, hidden
        self.shapes = [(features, hidden), (hidden,), (hidden, classes), (classes,)]
        self.size = sum(int(np.prod(s)) for s in self.shapes)

    def init(self, seed: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        W1 = rng.standard_normal((self.d, self.h)) / np.sqrt(self.d)
        W2 = rng.standard_normal((self.h, self.c)) / np.sqrt(self.h)
        return np.concatenate([W1.ravel(), np.zeros(self.h), W2.ravel(), np.zeros(self.c)])

    def _split(self, w):
        out, at = [], 0
        for s in self.shapes:
            size = int(np.prod(s))
            out.append(w[at:at + size].reshape(s))
            at += size
        return out

    def logits(self, w, X):
        W1, b1, W2, b2 = self._split(w)
        return np.tanh(X @ W1 + b1) @ W2 + b2

    def loss_and_grad_sum(self, w, X, y) -> tuple[float, np.ndarray]:
        W1, b1, W2, b2 = self._split(w)
        H = np.tanh(X @ W1 + b1)
        loss, dz = _softmax_ce(H @ W2 + b2, y)
        dH = (dz @ W2.T) * (1.0 - H * H)
        return loss, np.concatenate([(X.T @ dH).ravel(), dH.sum(axis=0), (H.T @ dz).ravel(), dz.sum(axis=0)])


def make_model(name: str, features: int, classes: int):
    if name == "softmax":
        return SoftmaxRegression(features, classes)
    if name == "mlp":
        return MLP(features, classes)
    raise ValueError(f"unknown model {name!r} ({', '.join(MODELS)})")


def mean_loss(model, w, X, y) -> float:
    return _softmax_ce(model.logits(w, X), y)[0] / len(y)


def accuracy(model, w, X, y) -> float:
    return float((model.logits(w, X).argmax(axis=1) == y).mean())

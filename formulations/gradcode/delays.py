"""Vectorised sampling of the extra reply delays of every worker in every step."""
from __future__ import annotations

import numpy as np

from pipeplan.formulations.gradcode.straggler import StragglerModel


class DelaySampler:
    """Draws (steps, n) delay matrices chunk by chunk; the Markov state and the trace position
    carry over between chunks, so ``next(a)`` then ``next(b)`` equals one stream of a+b steps."""

    def __init__(self, model: StragglerModel, probs, rng: np.random.Generator):
        self.model = model
        self.p = np.asarray(probs, dtype=np.float64)
        self.n = self.p.size
        self.rng = rng
        self.offset = 0
        if model.kind == "markov":
            self.state = rng.random(self.n) < self.p   # start from the stationary distribution

    def next(self, steps: int) -> np.ndarray:
        m, rng, n = self.model, self.rng, self.n
        if m.kind == "none":
            return np.zeros((steps, n))
        if m.kind == "trace":
            rows = np.asarray(m.trace, dtype=np.float64)[:, :n]
            idx = (self.offset + np.arange(steps)) % rows.shape[0]
            self.offset += steps
            return rows[idx]
        if m.kind == "markov":
            straggling = self._markov(steps)
        else:
            straggling = rng.random((steps, n)) < self.p
        if m.kind == "pareto":
            extra = m.scale_s * (1.0 + rng.pareto(m.alpha, size=(steps, n)))
            return np.where(straggling, extra, 0.0)
        # the draws of rng.exponential(mean_s, ...) made in place and kept where a worker
        # straggles (finite, so a product): one (steps, n) array where there were three, which
        # at n = 2,000 took half the re-scoring's second (fresh memory is slow to touch)
        extra = np.zeros((steps, n))
        if m.mean_s > 0:
            rng.standard_exponential(out=extra)
            extra *= m.mean_s
        if m.kind == "shifted-exponential":
            extra += m.shift_s
        extra *= straggling
        return extra

    def _markov(self, steps: int) -> np.ndarray:
        """Straggling flags of the two-state chain, built from geometric run lengths per worker.
        A straggler stays one with probability ``stay``; a normal worker becomes one with
        probability a = p (1 - stay) / (1 - p), so that it straggles p of the time.
        ``self.state`` is the state of the next step to draw."""
        leave_bad = 1.0 - self.model.stay
        out = np.empty((steps, self.n), dtype=bool)
        for i in range(self.n):
            p = self.p[i]
            if p <= 0 or p >= 1:
                out[:, i] = p >= 1
                continue
            enter_bad = min(1.0, p * leave_bad / (1.0 - p))
            leave = {True: leave_bad, False: enter_bad}
            filled, bad = 0, bool(self.state[i])
            while filled < steps:
                runs = np.empty(64, dtype=np.int64)     # alternating runs, the first in state `bad`
                runs[0::2] = self.rng.geometric(leave[bad], size=32)
                runs[1::2] = self.rng.geometric(leave[not bad], size=32)
                flags = np.repeat(np.resize([bad, not bad], 64), runs)
                take = min(flags.size, steps - filled)
                out[filled:filled + take, i] = flags[:take]
                filled += take
                # 64 runs end in state `not bad`: a further batch starts again in state `bad`
            last = bool(out[-1, i])
            self.state[i] = self.rng.random() < (self.model.stay if last else enter_bad)
        return out


def stratified_delays(model: StragglerModel, probs, count: int, rng: np.random.Generator) -> np.ndarray:
    """(count, n) delays for the models that are independent across steps (exponential, shifted
    exponential, Pareto), stratified per worker (Latin hypercube): worker i straggles in about
    p_i * count scenarios, and its delays there are one draw from each of that many equal-
    probability strata of the delay distribution, in random order. The marginals match the model
    far better than plain draws, so a sample-average objective over few scenarios varies less
    with the seed (the assignment solvers use it)."""
    if model.kind not in ("exponential", "shifted-exponential", "pareto"):
        raise ValueError(f"stratified sampling needs an independent model, not {model.kind!r}")
    p = np.asarray(probs, dtype=np.float64)
    out = np.zeros((count, p.size))
    for i in range(p.size):
        u = (rng.permutation(count) + rng.random(count)) / count
        hit = np.flatnonzero(u < p[i])
        v = (rng.permutation(hit.size) + rng.random(hit.size)) / max(hit.size, 1)
        if model.kind == "pareto":
            out[hit, i] = model.scale_s * (1.0 - v) ** (-1.0 / model.alpha)
        else:
            out[hit, i] = -model.mean_s * np.log1p(-v) + (model.shift_s if model.kind == "shifted-exponential" else 0.0)
    return out

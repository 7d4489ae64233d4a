"""The heterogeneous worker tiers of the gradient-coding instances (numbers in
``instances/gradcode.py``'s docstring), shared by the catalogue and the synthetic clusters."""
from __future__ import annotations

from pipeplan.formulations.gradcode.problem import GradCodeProblem
from pipeplan.formulations.gradcode.straggler import StragglerModel

TIERS = {"A": (2.0, 0.05, 2), "B": (1.0, 0.15, 1), "C": (0.5, 0.40, 1)}   # speed, p, capacity / (s+1)
PATTERN = "ABCBACBBACBC"


def heterogeneous_problem(name: str, s: int, *, pipelined: bool = False,
                          straggler: StragglerModel | None = None, pattern: str = PATTERN) -> GradCodeProblem:
    tiers = [TIERS[t] for t in pattern]
    n = len(tiers)
    return GradCodeProblem(name=name, n=n, s=s, k=n, speeds=tuple(t[0] for t in tiers),
                           straggle_prob=tuple(t[1] for t in tiers), capacity=tuple(t[2] * (s + 1) for t in tiers),
                           straggler=straggler or StragglerModel(), pipelined=pipelined)

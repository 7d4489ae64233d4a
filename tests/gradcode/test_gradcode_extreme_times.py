"""Gradient-coding problems at the edges the input rules accept: the CP-SAT assignment must
place them (its microseconds had overflowed CP-SAT's integers, or made it answer INFEASIBLE)."""
import math

import pytest

import pipeplan
from pipeplan.formulations.gradcode.problem import GradCodeProblem
from pipeplan.formulations.gradcode.straggler import StragglerModel

pytest.importorskip("ortools")


def _problem(**kw) -> GradCodeProblem:
    base = dict(name="edge", n=6, s=1, k=6, speeds=(2.0, 1.0, 0.5, 1.0, 2.0, 0.5),
                straggle_prob=(0.05, 0.15, 0.4, 0.15, 0.05, 0.4), capacity=(3, 2, 2, 2, 3, 2))
    base.update(kw)
    return GradCodeProblem(**base)


@pytest.mark.parametrize("problem", [
    # 1e6 s per partition on workers of speed 1e-6: 1e12 s a partition, both at their limits
    _problem(partition_time_s=1e6, speeds=(1e-6,) * 6),
    # pareto delays at scale 1e6 s and shape 0.5: draws up to about 1e44 s
    _problem(straggle_prob=(1.0,) * 6, straggler=StragglerModel(kind="pareto", scale_s=1e6, alpha=0.5)),
], ids=["slow-workers", "pareto-tail"])
def test_cpsat_places_extreme_times(problem):
    r = pipeplan.solve(problem, "cpsat", time_limit=5, seed=0)
    assert r.termination.value == "optimal", r.message
    assert r.objectives and all(math.isfinite(v) and v >= 0 for v in r.objectives.values())

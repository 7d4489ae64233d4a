"""Catalogue of gradient-coding instances (``gradcode/<preset>``).

Not from the paper (whose cluster is not described in numbers here): partition time 0.5 s on a
speed-1 worker; homogeneous workers straggle with probability 0.2; the straggler delay is
exponential with mean 1 s (the PGC experiments use means of 1 s and 2 s). Heterogeneous
clusters mix three tiers in a fixed interleaved order: fast (speed 2, straggles 5% of the
steps, stores 2(s+1) partitions), medium (speed 1, 15%, s+1) and slow (speed 0.5, 40%, s+1);
``hetero-n24-s2`` repeats the 12-worker pattern twice.
"""
from __future__ import annotations

from pipeplan.core.errors import InputError
from pipeplan.core.io import instance_name
from pipeplan.formulations.gradcode.problem import GradCodeProblem, homogeneous_problem
from pipeplan.formulations.gradcode.straggler import StragglerModel
from pipeplan.instances.gradcode_clusters import PATTERN, heterogeneous_problem


def _catalogue() -> dict[str, callable]:
    out = {}
    for s in (1, 2, 3):
        out[f"gradcode/homog-n12-s{s}"] = lambda s=s: homogeneous_problem(12, s, name=f"gradcode/homog-n12-s{s}")
        out[f"gradcode/hetero-n12-s{s}"] = lambda s=s: heterogeneous_problem(f"gradcode/hetero-n12-s{s}", s)
    for s in (1, 2):
        out[f"gradcode/homog-n12-s{s}-pipe"] = lambda s=s: homogeneous_problem(
            12, s, name=f"gradcode/homog-n12-s{s}-pipe", pipelined=True)
        out[f"gradcode/hetero-n12-s{s}-pipe"] = lambda s=s: heterogeneous_problem(
            f"gradcode/hetero-n12-s{s}-pipe", s, pipelined=True)
    out["gradcode/hetero-n12-s2-markov"] = lambda: heterogeneous_problem(
        "gradcode/hetero-n12-s2-markov", 2, straggler=StragglerModel(kind="markov", mean_s=1.0, stay=0.95))
    out["gradcode/hetero-n12-s2-pareto"] = lambda: heterogeneous_problem(
        "gradcode/hetero-n12-s2-pareto", 2, straggler=StragglerModel(kind="pareto", scale_s=0.5, alpha=1.5))
    out["gradcode/homog-n24-s3"] = lambda: homogeneous_problem(24, 3, name="gradcode/homog-n24-s3")
    out["gradcode/hetero-n24-s2"] = lambda: heterogeneous_problem("gradcode/hetero-n24-s2", 2, pattern=PATTERN * 2)
    return out


_CATALOGUE = _catalogue()


def instance_names() -> list[str]:
    return list(_CATALOGUE)


def load_instance(name: str) -> GradCodeProblem:
    """A catalogue instance, a synthetic cluster (``gradcode/synthetic-n<N>...``, see
    ``synthetic_gradcode``), or a problem JSON file (``pipeplan.gradcode-problem/1``)."""
    name = instance_name(name)
    if name in _CATALOGUE:
        return _CATALOGUE[name]()
    from pipeplan.instances.synthetic_gradcode import synthetic_by_name
    synthetic = synthetic_by_name(name)
    if synthetic is not None:
        return synthetic
    if name.endswith(".json"):
        from pipeplan.core.io import load_json
        from pipeplan.formulations.gradcode.problem import problem_from_dict
        return problem_from_dict(load_json(name), name)
    raise InputError(name, "instance", f"unknown gradcode instance (known: {', '.join(instance_names())})")

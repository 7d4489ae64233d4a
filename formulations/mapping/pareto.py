"""Pareto-front utilities for the mapping objectives (all minimised).

Hypervolumes are only comparable under one reference point, so :func:`reference_point` fixes it
per instance from plans every solver can reach (the whole network on one PU), never from the
fronts being compared. Points beyond the reference point add nothing to the hypervolume.
"""
from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from pipeplan.core.vocabulary import MAPPING_KEYS as AXIS_KEYS
from pipeplan.formulations.mapping.evaluator import evaluate
from pipeplan.formulations.mapping.plan import Plan, Stage
from pipeplan.formulations.mapping.problem import MappingProblem

REFERENCE_MARGIN = 1.1
DIGITS = 9  # objective values equal to this many decimals are one point (float noise of sums)


def dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    """``a`` is no worse than ``b`` on every axis and better on at least one."""
    return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))


def rounded(point: Sequence[float]) -> tuple[float, ...]:
    return tuple(round(float(v), DIGITS) for v in point)


def non_dominated(points: Iterable[Sequence[float]]) -> list[tuple[float, ...]]:
    """The distinct non-dominated points, rounded to ``DIGITS`` decimals, in lexicographic order.

    In lexicographic order no point can be dominated by a later one, so each point only needs
    checking against the front kept so far (small), not against every other point.
    """
    front: list[tuple[float, ...]] = []
    for p in sorted(set(rounded(p) for p in points)):
        if not any(dominates(q, p) for q in front):
            front.append(p)
    return front


def single_pu_plans(problem: MappingProblem) -> list[Plan]:
    """One plan per PU that runs every unit: one stage, that PU, its top DVFS level."""
    units = tuple(u.name for u in problem.units)
    prof = problem.profile
    return [Plan((Stage((pu,), {pu: units}),), instance=problem.name)
            for pu in problem.pu_names if all(prof.can_run(i, pu) for i in range(len(units)))]


def reference_point(problem: MappingProblem, axes: Sequence[str], plans: Sequence[Plan]) -> tuple[float, ...]:
    """1.1 x the worst value on each axis among ``plans``: plans every solver can reach, the
    single-PU plans (``single_pu_plans``), or HEFT's when no single PU runs the whole network
    (``pipeplan.solvers.mapping.warm_start.reference_plans`` picks them)."""
    if not plans:
        raise ValueError(f"no reference plan for {problem.name}")
    scores = [evaluate(problem, plan).objectives() for plan in plans]
    return tuple(REFERENCE_MARGIN * max(s[AXIS_KEYS[a]] for s in scores) for a in axes)


def hypervolume(points: Iterable[Sequence[float]], ref: Sequence[float]) -> float:
    """Hypervolume dominated by ``points`` and bounded by ``ref`` (pymoo's HV)."""
    from pymoo.indicators.hv import HV

    pts = np.array(list(points), dtype=float)
    if pts.size == 0:
        return 0.0
    return float(HV(ref_point=np.array(ref, dtype=float))(pts))


def hv_ratio(front: Iterable[Sequence[float]], exact_front: Iterable[Sequence[float]],
             ref: Sequence[float]) -> float:
    """Hypervolume of ``front`` over that of ``exact_front`` (1.0 when both are empty under ``ref``)."""
    exact = hypervolume(exact_front, ref)
    found = hypervolume(front, ref)
    if exact == 0.0:
        return 1.0 if found == 0.0 else float("inf")
    return found / exact

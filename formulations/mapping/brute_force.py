"""Brute-force enumeration of every plan of a tiny mapping instance: the ground truth the exact
solvers are tested against.

Plan space (the same as the exact models'): every unit in one stage on one PU; stage indices
never decrease along edges and the unit that reads the input (the first unit) is in the first
stage; stages are numbered without gaps; PU sets of stages are disjoint unless
``shared_pus``; on each PU the units of a stage run in any order that respects precedence.
Every candidate is scored by the one evaluator. Exponential: meant for <= 6 units, <= 3 PUs.
With ``dvfs`` every plan is also taken at every combination of its units' DVFS levels (each
unit at any level of its PU where it has a time): meant for <= 5 units and 2-3 levels per PU.
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import Iterator

from pipeplan.core.vocabulary import MAPPING_KEYS
from pipeplan.formulations.mapping.evaluator import Evaluation, evaluate
from pipeplan.formulations.mapping.plan import Plan, Stage
from pipeplan.formulations.mapping.problem import MappingProblem


def _linear_extensions(units: list[str], preds: dict[str, set[str]]) -> Iterator[tuple[str, ...]]:
    if not units:
        yield ()
        return
    for u in units:
        if not (preds[u] & set(units)):
            rest = [v for v in units if v != u]
            for tail in _linear_extensions(rest, preds):
                yield (u,) + tail


def all_plans(problem: MappingProblem, *, shared_pus: bool = False, max_stages: int | None = None,
              dvfs: bool = False) -> Iterator[Plan]:
    """Every plan (module docstring); with ``dvfs`` at every combination of levels."""
    for plan in _plans(problem, shared_pus=shared_pus, max_stages=max_stages):
        if not dvfs:
            yield plan
            continue
        place = plan.placement()
        names = [u.name for u in problem.units]
        prof = problem.profile
        choices = [[lv for lv in prof.pus[place[u][1]].levels if prof.time(problem.index[u], place[u][1], lv) is not None]
                   for u in names]
        for levels in itertools.product(*choices):
            yield dataclasses.replace(plan, levels=dict(zip(names, levels)))


def _plans(problem: MappingProblem, *, shared_pus: bool, max_stages: int | None) -> Iterator[Plan]:
    names = [u.name for u in problem.units]
    pus = list(problem.pu_names)
    prof = problem.profile
    preds = {u: {e.src for e in problem.preds[u]} for u in names}
    runnable = {u: [p for p in pus if prof.can_run(problem.index[u], p)] for u in names}
    limit = max_stages or len(names)
    for stages in itertools.product(range(limit), repeat=len(names)):
        st = dict(zip(names, stages))
        if st[names[0]] != 0 or sorted(set(stages)) != list(range(max(stages) + 1)):
            continue
        if any(st[e.src] > st[e.dst] for e in problem.edges):
            continue
        for choice in itertools.product(*(runnable[u] for u in names)):
            pu_of = dict(zip(names, choice))
            n_st = max(stages) + 1
            sets = [sorted({pu_of[u] for u in names if st[u] == s}, key=pus.index) for s in range(n_st)]
            if not shared_pus and len({p for s in sets for p in s}) != sum(len(s) for s in sets):
                continue
            groups = [(s, p, [u for u in names if st[u] == s and pu_of[u] == p]) for s in range(n_st) for p in sets[s]]
            for orders in itertools.product(*(list(_linear_extensions(g, preds)) for _, _, g in groups)):
                stage_orders: list[dict[str, tuple[str, ...]]] = [dict() for _ in range(n_st)]
                for (s, p, _), order in zip(groups, orders):
                    stage_orders[s][p] = order
                yield Plan(tuple(Stage(tuple(sets[s]), stage_orders[s]) for s in range(n_st)),
                           shared_pus=shared_pus, instance=problem.name)


def scored_plans(problem: MappingProblem, **kw) -> list[tuple[Evaluation, Plan]]:
    out = []
    for plan in all_plans(problem, **kw):
        try:
            out.append((evaluate(problem, plan), plan))
        except ValueError:  # a deadlocking cross-PU order: not a plan
            continue
    return out


def optimum(problem: MappingProblem, objective: str = "period", **kw) -> float:
    key = MAPPING_KEYS[objective]
    return min(getattr(ev, key) for ev, _ in scored_plans(problem, **kw))


def pareto_front(problem: MappingProblem, x: str = "period", y: str = "latency", **kw) -> list[tuple[float, float]]:
    """Every non-dominated (x, y) pair over all plans, sorted by x."""
    kx = MAPPING_KEYS[x]
    ky = MAPPING_KEYS[y]
    pts = sorted({(round(getattr(ev, kx), 9), round(getattr(ev, ky), 9)) for ev, _ in scored_plans(problem, **kw)})
    front, best_y = [], float("inf")
    for px, py in pts:
        if py < best_y - 1e-12:
            front.append((px, py))
            best_y = py
    return front

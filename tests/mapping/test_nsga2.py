"""NSGA-II against brute-force Pareto fronts on tiny instances; the gene repair; front utilities."""
from functools import lru_cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pipeplan
from pipeplan.core.registry import get_solver
from pipeplan.core.result import Quality, Termination
from pipeplan.formulations.mapping import brute_force
from pipeplan.formulations.mapping.checker import violations
from pipeplan.formulations.mapping.evaluator import evaluate
from pipeplan.formulations.mapping.pareto import (
    dominates,
    hv_ratio,
    hypervolume,
    non_dominated,
    reference_point,
    rounded,
)
from pipeplan.formulations.mapping.plan import plan_from_dict, plan_from_string
from pipeplan.instances.catalog import load_mapping
from pipeplan.instances.tiny import tiny_catalogue
from pipeplan.solvers.mapping.nsga2 import GeneCodec
from pipeplan.solvers.mapping.warm_start import reference_plans
from tests.helpers import tiny_problem

TINY = {p.name: p for p in tiny_catalogue()}
from pipeplan.core.vocabulary import MAPPING_KEYS as KEYS


@lru_cache(maxsize=None)
def run(name: str, objectives=("period", "latency"), seed: int = 0):
    return pipeplan.solve(TINY[name], "nsga2", pop_size=24, generations=40, objectives=objectives, seed=seed)


def points(result, axes):
    return [rounded([f["objectives"][KEYS[a]] for a in axes]) for f in result.front]


@pytest.mark.parametrize("name", TINY)
def test_front_plans_are_feasible_and_scored_by_the_evaluator(name):
    problem, r = TINY[name], run(name)
    assert (r.termination, r.quality) == (Termination.COMPLETED, Quality.FEASIBLE)
    assert r.front
    for member in r.front:
        plan = plan_from_dict(member["plan"])
        assert violations(problem, plan) == []
        assert evaluate(problem, plan).objectives() == member["objectives"]
    assert points(r, ("period", "latency")) == sorted(points(r, ("period", "latency")))
    assert r.plan == r.front[0]["plan"] and r.objectives == r.front[0]["objectives"]


@pytest.mark.parametrize("name", TINY)
def test_front_matches_the_brute_force_front(name):
    problem, r = TINY[name], run(name)
    found = points(r, ("period", "latency"))
    exact = brute_force.pareto_front(problem, "period", "latency")
    assert not [(f, e) for f in found for e in exact if dominates(f, e)]
    assert hv_ratio(found, exact, reference_point(problem, ("period", "latency"), reference_plans(problem))) >= 0.99


def test_three_objectives_match_brute_force():
    name = "tiny/module5-3pu"
    axes = ("period", "latency", "energy")
    problem, r = TINY[name], run(name, axes)
    exact = non_dominated([ev.period_ms, ev.latency_ms, ev.energy_mj] for ev, _ in brute_force.scored_plans(problem))
    found = points(r, axes)
    assert found == non_dominated(found)
    assert not [(f, e) for f in found for e in exact if dominates(f, e)]
    assert hv_ratio(found, exact, reference_point(problem, axes, reference_plans(problem))) >= 0.99


def test_same_seed_same_front_and_never_worse_than_pipeline_dp():
    problem = load_mapping("khadas-vim3/SqueezeV1")
    a, b = (pipeplan.solve(problem, "nsga2", pop_size=20, generations=15, seed=3) for _ in range(2))
    assert a.front == b.front and a.plan == b.plan
    dp = pipeplan.solve(problem, "pipeline-dp")
    assert a.objectives["period_ms"] <= dp.objectives["period_ms"] + 1e-9  # seeded with its plan


def test_registered_as_heuristic_needing_pymoo():
    info = get_solver("mapping", "nsga2")
    assert not info.exact and info.requires == ("pymoo",)
    with pytest.raises(ValueError, match=r"objectives must be two or three distinct .*got \('period',\)"):
        info.func(TINY["tiny/chain4-2pu"], objectives=("period",))


def _repair_is_sound(codec: GeneCodec, genes):
    fixed = codec.repair(genes)
    assert (fixed >= 0).all() and (fixed <= codec.upper).all()
    assert (codec.repair(fixed) == fixed).all()  # feasible genotypes are left alone
    plan = codec.plan(fixed)
    assert violations(codec.problem, plan) == []
    assert len(plan.stages) <= codec.n_stages
    evaluate(codec.problem, plan)


def _gene_vectors(codec: GeneCodec):
    return st.tuples(*(st.integers(0, int(u)) for u in codec.upper))


CODECS = [GeneCodec(TINY["tiny/chain5-3pu"]), GeneCodec(TINY["tiny/module5-3pu"]),
          GeneCodec(TINY["tiny/diamond-3pu"], max_stages=2)]
SQUEEZE = GeneCodec(load_mapping("khadas-vim3/SqueezeV1"))


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_repair_makes_any_tiny_gene_vector_feasible(data):
    codec = data.draw(st.sampled_from(CODECS))
    _repair_is_sound(codec, data.draw(_gene_vectors(codec)))


@settings(max_examples=100, deadline=None)
@given(_gene_vectors(SQUEEZE))
def test_repair_makes_any_squeezenet_gene_vector_feasible(genes):
    _repair_is_sound(SQUEEZE, genes)


def test_repair_merges_a_stage_that_finds_no_pu():
    # u1 only runs on A, and A stays with u1's stage (more work there); u0, which only runs on
    # A too, has no PU left in stage 0, so stage 1 merges into stage 0
    problem = tiny_problem({"A": [1.0, 5.0, 1.0], "B": [None, None, 1.0]})
    codec = GeneCodec(problem)
    plan = codec.plan(codec.repair([0, 0, 1, 0, 1, 1]))
    assert [(s.pus, s.order) for s in plan.stages] == [(("A", "B"), {"A": ("u0", "u1"), "B": ("u2",)})]


def test_encode_keeps_a_feasible_pipeline():
    problem = load_mapping("khadas-vim3/SqueezeV1")
    plan = plan_from_dict(pipeplan.solve(problem, "pipeline-dp").plan)
    codec = GeneCodec(problem)
    assert evaluate(problem, codec.plan(codec.encode(plan))).objectives() == evaluate(problem, plan).objectives()


def test_non_dominated_and_hypervolume_by_hand():
    assert non_dominated([(1, 3), (2, 1), (2, 2), (3, 3), (1, 3)]) == [(1.0, 3.0), (2.0, 1.0)]
    # [1,4]x[3,4] (area 3) and [2,4]x[1,4] (area 6) overlap on [2,4]x[3,4] (area 2)
    assert hypervolume([(1, 3), (2, 1)], (4, 4)) == pytest.approx(7.0)
    assert hypervolume([(1, 3), (2, 1), (3, 3), (5, 0)], (4, 4)) == pytest.approx(7.0)
    assert hv_ratio([(2, 1)], [(1, 3), (2, 1)], (4, 4)) == pytest.approx(6 / 7)


def test_reference_point_is_the_worst_single_pu_plan_plus_ten_percent():
    problem = TINY["tiny/chain4-2pu"]
    units = tuple(u.name for u in problem.units)
    evs = [evaluate(problem, plan_from_string(units, problem.pu_names, pu * len(units))) for pu in problem.pu_names]
    assert reference_point(problem, ("period", "energy"), reference_plans(problem)) == pytest.approx(
        (1.1 * max(ev.period_ms for ev in evs), 1.1 * max(ev.energy_mj for ev in evs)))


def test_reference_point_falls_back_to_heft_when_no_pu_runs_everything():
    problem = tiny_problem({"A": [1.0, None, 2.0], "B": [3.0, 1.0, None]}, transfer=0.5)
    heft = pipeplan.solve(problem, "heft").objectives
    assert reference_point(problem, ("latency", "period"), reference_plans(problem)) == pytest.approx(
        (1.1 * heft["latency_ms"], 1.1 * heft["period_ms"]))

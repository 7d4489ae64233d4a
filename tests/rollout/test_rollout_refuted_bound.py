"""The refuted bound (``refuted_bound``): its threshold cuts never cut off an optimum (brute
force), a target a schedule meets is never refuted, and it needs an exact model."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ortools.sat.python import cp_model

from pipeplan.formulations.rollout import brute_force
from pipeplan.instances.rollout import TINY, tiny_instance
from pipeplan.solvers.rollout.refuted_bound import cut_model, refuted, refuted_bound
from tests.rollout_helpers import small_round


@st.composite
def tiny_linear_rounds(draw):
    """Rounds brute force solves quickly (at most 6 requests), the KV limit often binding."""
    R = draw(st.integers(1, 4))
    K = draw(st.integers(1, 6 // R))
    responses = [[draw(st.integers(1, 12)) for _ in range(K)] for _ in range(R)]
    prompts = [draw(st.integers(1, 5)) for _ in range(R)]
    need = max(prompts) + max(max(r) for r in responses)
    return small_round(responses, prompts, seqs=draw(st.integers(1, R * K)), cap=need + draw(st.integers(0, 80)),
                       U=draw(st.integers(1, R)), per_token=draw(st.sampled_from([0.001, 0.01, 0.05])),
                       optimizer=draw(st.sampled_from([0.0, 0.05, 0.5])), budget=draw(st.sampled_from([20, 10_000])))


def minimum(model) -> float:
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = 30
    solver.parameters.num_workers = 1
    assert solver.Solve(model.md) == cp_model.OPTIMAL
    return solver.ObjectiveValue() * model.unit


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(tiny_linear_rounds())
def test_the_threshold_cuts_keep_the_optimum_and_a_met_target_is_never_refuted(problem):
    optimum = brute_force.optimum(problem)[0]
    model = cut_model(problem)
    # the model rounds update times up to its unit: its optimum lies within that slack above
    assert optimum - 1e-9 <= minimum(model) <= optimum + model.slack_s + 1e-9
    assert refuted(problem, optimum + model.slack_s + 1e-9, 5) is None
    assert refuted_bound(problem, 0.0, 2 * optimum, time_limit=10, probe_s=2) <= optimum + 1e-9


def test_a_round_whose_requests_run_side_by_side_keeps_its_optimum():
    # the rollout takes 6 steps of the 38 its requests would take one at a time: a cut that
    # charged every threshold step, late groups or not, would put the train end past the latter
    p = small_round([[6, 5], [4, 6], [3, 6], [6, 2]], seqs=8, c0=0.1, U=2, per_token=0.001, optimizer=0.0)
    optimum = brute_force.optimum(p)[0]
    assert optimum < p.engine.c0_s * sum(p.lengths) / 2
    model = cut_model(p)
    assert optimum - 1e-9 <= minimum(model) <= optimum + model.slack_s + 1e-9


@pytest.mark.parametrize("k", range(TINY))
def test_on_the_tiny_instances_a_target_below_the_optimum_is_refuted(k):
    p = tiny_instance(k)
    optimum = brute_force.optimum(p)[0]
    assert refuted(p, 0.99 * optimum, 10) == pytest.approx(0.99 * optimum, abs=1e-3)
    assert 0.98 * optimum <= refuted_bound(p, 0.5 * optimum, 1.5 * optimum, time_limit=20, probe_s=5) <= optimum


def test_the_refuted_bound_needs_an_exact_model():
    with pytest.raises(ValueError, match="linear engine"):
        cut_model(small_round([[3, 2], [1, 4]], c1=0.001), 1.0)

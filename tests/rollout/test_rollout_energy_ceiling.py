"""The fluid relaxation's LP (``energy_ceiling.fluid_train_end``) against brute force and real
schedules, and its ceiling over the step-indexed bound."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeplan.formulations.rollout.simulator import simulate
from pipeplan.formulations.rollout.trainer import chunks, run_updates
from pipeplan.solvers.rollout.energy_ceiling import energy_ceiling, fluid_train_end
from pipeplan.solvers.rollout.online import POLICIES, make_policy
from pipeplan.solvers.rollout.step_bound import step_bound
from tests.rollout_helpers import small_round


@st.composite
def linear_rounds(draw, max_groups=4):
    """Small rounds on a linear engine whose KV (and sometimes batch) limit binds."""
    R, K = draw(st.integers(2, max_groups)), draw(st.integers(1, 3))
    responses = [[draw(st.integers(1, 7)) for _ in range(K)] for _ in range(R)]
    prompts = [draw(st.integers(1, 4)) for _ in range(R)]
    need = max(prompts) + max(max(r) for r in responses)
    return small_round(responses, prompts, seqs=draw(st.integers(1, R * K)), cap=need + draw(st.integers(0, 15)),
                       U=draw(st.integers(1, R)), per_token=draw(st.sampled_from([0.0, 0.001, 0.01])),
                       optimizer=draw(st.sampled_from([0.0, 0.05])), budget=draw(st.sampled_from([16, 10_000])))


def fluid_by_hand(problem, order, horizon):
    """The least train end over whole finish steps F following ``order``, none past ``horizon``,
    with the forced tokens and KV checked at *every* step: brute force over F (numpy)."""
    L, K, eng = np.array(problem.lengths), problem.K, problem.engine
    fp = np.array([problem.footprint(i) for i in range(problem.n_requests)])
    F = np.array(list(itertools.combinations_with_replacement(range(horizon + 1), problem.R)))   # by position
    F = F[:, np.argsort(order)]                                    # by group
    F = F[(F >= L.reshape(problem.R, K).max(1)).all(1)]
    s = np.arange(1, horizon + 1)
    ahead = np.maximum(0, F[:, np.arange(problem.n_requests) // K, None] - s)      # steps to go, per request and s
    forced = np.maximum(0, L[None, :, None] - ahead)
    fits = ((forced.sum(1) <= eng.max_num_seqs * s)
            & ((forced * fp[None, :, None]).sum(1) <= eng.kv_capacity_tokens * s)).all(1)
    batches = chunks(list(order), problem.update_sizes())
    return min((run_updates(problem, list(eng.c0_s * f), batches)[-1].end_s for f in F[fits]), default=float("inf"))


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(linear_rounds(max_groups=3), st.randoms(use_true_random=False))
def test_the_lp_is_the_fluid_optimum_checked_at_every_step(problem, rnd):
    # checking the rows at the finish steps alone is exact (convexity between them): the LP's
    # figure, less the step it adds, is at most the brute-force optimum over whole steps, and
    # its finish steps rounded up are one of the brute force's (the horizon holds them)
    order = list(range(problem.R))
    rnd.shuffle(order)
    value, steps = fluid_train_end(problem, order)
    by_hand = fluid_by_hand(problem, order, math.ceil(max(steps) - 1e-9))
    c0 = problem.engine.c0_s
    assert value - c0 <= by_hand + 1e-9 and by_hand <= value + 1e-9
    assert all(b >= a - 1e-6 for a, b in zip(steps, steps[1:]))     # they follow the order


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(linear_rounds())
def test_every_streamed_schedule_of_a_linear_engine_is_a_fluid_schedule(problem):
    # a schedule's finish steps meet every fluid row, so the LP over its completion order
    # (the stream trainer's) is at or below its train end
    for name in POLICIES:
        schedule = simulate(problem, make_policy(name))
        if schedule.trainer_mode != "stream":
            continue
        order = [g for u in schedule.updates for g in u.groups]
        value, _ = fluid_train_end(problem, order)
        assert value - problem.engine.c0_s <= schedule.metrics()["train_end_s"] + 1e-9, name


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(linear_rounds())
def test_the_step_indexed_bound_never_exceeds_the_ceiling(problem):
    ceiling = energy_ceiling(problem, moves=60, seconds=30)
    for buckets in (4, 12):
        assert step_bound(problem, buckets=buckets, time_limit=10).bound_s <= ceiling.train_end_s + 1e-9
    assert sorted(ceiling.order) == list(range(problem.R)) and ceiling.evaluations <= 61
    # its finish steps, by group, follow its order
    steps = [ceiling.finish_steps[g] for g in ceiling.order]
    assert all(b >= a - 1e-6 for a, b in zip(steps, steps[1:]))


def test_the_search_reaches_the_best_order_of_a_small_round_and_keeps_its_start_otherwise():
    problem = small_round([[9, 2], [8, 8], [3, 1], [7, 6]], [3, 1, 2, 2], seqs=3, cap=24, U=2, per_token=0.01)
    values = {o: fluid_train_end(problem, o)[0] for o in itertools.permutations(range(4))}
    best = min(values.values())
    assert max(values.values()) > best + 0.01         # the order matters here
    found = energy_ceiling(problem, moves=300, seconds=60)
    assert found.train_end_s == pytest.approx(best)
    worst = max(values, key=values.get)
    assert energy_ceiling(problem, moves=0, start=worst).train_end_s == pytest.approx(values[worst])


def test_the_fluid_model_needs_one_round_on_a_linear_engine_and_a_whole_order():
    with pytest.raises(ValueError, match="linear engine"):
        fluid_train_end(small_round([[3, 2], [1, 4]], c1=0.001), [0, 1])
    with pytest.raises(ValueError, match="every group once"):
        fluid_train_end(small_round([[3, 2], [1, 4]]), [0, 0])


def test_the_gap_study_reports_the_ceiling_of_a_linear_round_above_its_step_indexed_bound(monkeypatch):
    from pipeplan.app.studies import rollout_optimum
    from pipeplan.app.studies.rollout import linearized
    from pipeplan.formulations.rollout.workloads import preset_round
    for moves in ("PROOF_EVALUATIONS", "PLAN_EVALUATIONS"):      # the planner's annealing: not what is tested
        monkeypatch.setattr(rollout_optimum, moves, 200)
    p = linearized(preset_round("sci-jl", 4))
    r = rollout_optimum.gap_row(p, workload="sci-jl", R=4, engine="linear", rho="preset", time_limit=2, threads=1,
                                bound_time=2)
    assert r["step_bound_s"] <= r["ceiling_s"] and r["bound_s"] <= r["best_s"] * (1 + 1e-9)
    assert r["ceiling_gap"] == pytest.approx((r["best_s"] - r["ceiling_s"]) / r["best_s"])
    # no ceiling where the slow bounds do not run
    fast = rollout_optimum.gap_row(p, workload="sci-jl", R=4, engine="linear", rho="preset", time_limit=None,
                                   threads=1, bound_time=None)
    assert fast["ceiling_s"] is None and fast["ceiling_gap"] is None
    md = rollout_optimum.optimum_gaps_markdown([r, fast], "test")
    assert f"| {r['ceiling_s']:.1f} |" in md and "energy ceiling (s)" in md


def test_an_lp_in_this_process_leaves_the_step_bounds_forked_milps_whole():
    # HiGHS's task executor, once started in a process, hung every MILP forked from it after
    # (``run_within``), and the step bound came back 0; run_within now shuts it down first
    from pipeplan.app.studies.rollout import linearized
    from pipeplan.formulations.rollout.workloads import preset_round
    p = linearized(preset_round("lsat-ar", 8))
    before = step_bound(p, time_limit=10).bound_s
    fluid_train_end(p, list(range(p.R)))
    assert before > 0 and step_bound(p, time_limit=10).bound_s == pytest.approx(before)


def test_an_lp_in_this_process_leaves_later_pulp_milps_solvable():
    # HiGHS makes one scheduler per process with its first solve's thread count; a later solve
    # asking another count did not run at all (kNotset): after the ceiling's LP, the chain MILP
    # on MobileV1 came back "stopped by its time limit" after 0.1 s (pulp_backend.highs_threads)
    import pipeplan
    from pipeplan.app.studies.rollout import linearized
    from pipeplan.formulations.mapping.evaluator import evaluate
    from pipeplan.formulations.mapping.plan import plan_from_dict
    from pipeplan.formulations.rollout.workloads import preset_round
    from pipeplan.instances.catalog import load_mapping

    p = linearized(preset_round("lsat-ar", 4))
    assert math.isfinite(fluid_train_end(p, list(range(p.R)))[0])
    problem = load_mapping("khadas-vim3/MobileV1")
    for threads in (1, 2, 1):           # and the count may change from one solve to the next
        r = pipeplan.solve(problem, "milp", time_limit=30, threads=threads)
        assert r.quality.value == "proven_optimal", r.message
        assert evaluate(problem, plan_from_dict(r.plan)).objectives() == r.objectives

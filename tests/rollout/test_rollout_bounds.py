"""The flow-shop lower bounds: below the brute-force optimum of tiny rounds, below every
policy's simulated train end on random small rounds (every engine mode and term), never below
the separate bound they replace, and strictly above it where the engine and the trainer must
be coupled."""
import itertools

import pytest
from hypothesis import HealthCheck, given, settings

import pipeplan
from pipeplan.formulations.rollout import brute_force
from pipeplan.formulations.rollout.bounds import separate_bound, strong_train_end_lower_bound, train_end_lower_bound
from pipeplan.formulations.rollout.checker import check
from pipeplan.formulations.rollout.flowshop_bound import chain_bound, flow_shop_makespan, johnson_bound
from pipeplan.formulations.rollout.replay import replay
from pipeplan.formulations.rollout.simulator import simulate
from pipeplan.instances.rollout import TINY, tiny_instance
from pipeplan.solvers.rollout.online import POLICIES, make_policy
from tests.rollout_helpers import random_rounds, small_round

TINIES = [tiny_instance(k) for k in range(TINY)]
QUICK = {"time_limit": 5.0, "work_limit": 5.0, "threads": 1}


@pytest.mark.parametrize("problem", TINIES, ids=lambda p: p.name)
def test_bounds_are_below_the_brute_force_optimum_and_above_the_separate_bound(problem):
    optimum = brute_force.optimum(problem)[0]
    old = separate_bound(problem)
    fast = train_end_lower_bound(problem)
    strong, closed = chain_bound(problem, **QUICK, closed=True)
    assert closed                                   # tiny relaxations are solved to the end
    assert old - 1e-9 <= fast <= strong_train_end_lower_bound(problem, **QUICK) <= optimum + 1e-9
    assert johnson_bound(problem) <= strong + 1e-9 and strong <= optimum + 1e-9


def test_coupling_raises_the_bound_to_the_optimum_by_hand():
    # one slot, 1 s per step; group 0 is 1 step and trains 1.1 s, group 1 is 5 steps and trains
    # 3.1 s (2 and 6 tokens at 0.5 s, 0.1 s per micro-batch), U = 1. Separately: one group can
    # be done at 1 s (then 4.2 s of training) and both at 6 s (then 1.1 s): 7.1 s. Coupled:
    # short first trains 1-2.1 and 6-9.1; long first 5-8.1 and 8.1-9.2: the optimum is 9.1 s.
    p = small_round([[1], [5]], prompts=[1, 1], seqs=1, c0=1.0, per_token=0.5, optimizer=0.0, U=1)
    optimum = brute_force.optimum(p)[0]
    assert optimum == pytest.approx(9.1)
    assert separate_bound(p) == pytest.approx(7.1)
    assert johnson_bound(p) == pytest.approx(9.1) and train_end_lower_bound(p) == pytest.approx(9.1)
    assert chain_bound(p, **QUICK) == pytest.approx(9.1, abs=2e-3)


def test_johnson_rule_is_the_flow_shop_optimum():
    first, second = [3.0, 1.0, 4.0, 1.5, 2.0], [2.0, 5.0, 1.0, 3.0, 2.5]

    def makespan(order):
        a = b = 0.0
        for i in order:
            a += first[i]
            b = max(a, b) + second[i]
        return b

    best = min(makespan(order) for order in itertools.permutations(range(5)))
    assert flow_shop_makespan(first, second) == pytest.approx(best)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_rounds())
def test_bounds_hold_for_every_policy_on_random_rounds(problem):
    old, fast = separate_bound(problem), train_end_lower_bound(problem)
    strong = strong_train_end_lower_bound(problem, **QUICK)
    assert old - 1e-9 <= fast <= strong + 1e-9
    for name in POLICIES:
        end = simulate(problem, make_policy(name)).metrics()["train_end_s"]
        assert end >= strong - 1e-9, name


def test_cpsat_reports_at_least_the_fast_bound_on_a_preset():
    from pipeplan.formulations.rollout.workloads import preset_round
    p = preset_round("sci-jl", 4, seed=1)
    r = pipeplan.solve(p, "cpsat", time_limit=5, threads=1)
    assert train_end_lower_bound(p) - 1e-9 <= r.bound["train_end_s"] <= r.objectives["train_end_s"]
    assert replay(p, r.plan).metrics() == pytest.approx(r.objectives)        # re-scored


def test_chain_bound_stays_below_an_optimum_with_fractional_units():
    # a linear engine whose c0 is not a whole number of milliseconds: the longest-response form
    # of E is fractional in the relaxation's time unit and must be rounded down
    import dataclasses

    from pipeplan.formulations.rollout.problem import EngineModel
    from pipeplan.formulations.rollout.workloads import preset_round
    p = preset_round("lsat-ar", 4)
    p = dataclasses.replace(p, engine=EngineModel(p.engine.max_num_seqs, p.engine.kv_capacity_tokens, 0.008022),
                            trainer=p.trainer.scaled(2.83))
    r = pipeplan.solve(p, "cpsat", time_limit=10, threads=1)
    assert r.quality.value == "proven_optimal", r.message
    # the optimum is the simulator's figure for its plan, whole-millisecond units or not
    schedule = replay(p, r.plan)
    assert check(p, schedule) == [] and schedule.metrics() == pytest.approx(r.objectives)
    assert chain_bound(p, **QUICK) <= r.objectives["train_end_s"] + 1e-9

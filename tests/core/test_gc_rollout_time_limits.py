"""Time limits of the gradient-coding and rollout solvers at sizes where the exact models cannot
even be built in time: the run stops with termination time_limit and a plan the formulation
re-scores (the quick placements / the hint schedule), with a valid bound and its gap."""
import json

import numpy as np
import pytest

import pipeplan
from pipeplan.core.deadline import Deadline
from pipeplan.formulations.gradcode.brute_force import optimum
from pipeplan.formulations.gradcode.evaluator import evaluate, scenario_objective
from pipeplan.formulations.gradcode.gradient_code import code_from_dict
from pipeplan.formulations.gradcode.placement import groups_code
from pipeplan.formulations.gradcode.problem import homogeneous_problem, problem_from_dict
from pipeplan.formulations.gradcode.verifier import _FixedBatch, straggler_sets, verify
from pipeplan.formulations.rollout.bounds import train_end_lower_bound
from pipeplan.formulations.rollout.checker import check
from pipeplan.formulations.rollout.replay import replay
from pipeplan.formulations.rollout.workloads import preset_round
from pipeplan.instances.gradcode import load_instance
from pipeplan.instances.synthetic_gradcode import synthetic_gradcode
from pipeplan.solvers.gradcode.assignment import (
    assignment_data,
    check_solution,
    code_from_assignment,
    greedy_shape,
    lower_bound,
)
from pipeplan.solvers.gradcode.baselines import ignore_stragglers_gc
from tests.cli_helpers import run_cli

HETERO_N6 = problem_from_dict({"name": "hetero-n6-s1", "n": 6, "s": 1, "speeds": [2, 1, 0.5, 1, 2, 0.5],
                               "straggle_prob": [0.05, 0.15, 0.4, 0.15, 0.05, 0.4], "capacity": [3, 2, 2, 2, 3, 2]})


def test_synthetic_clusters_any_size_and_by_name():
    p = synthetic_gradcode(500, seed=3, s=3, pipelined=True)
    assert (p.n, p.k, p.s, p.pipelined) == (500, 500, 3, True)
    assert set(p.speeds) == {2.0, 1.0, 0.5}                           # the catalogue's three tiers
    q = load_instance(p.name)
    assert q == p and load_instance("gradcode/synthetic-n40").n == 40
    assert synthetic_gradcode(40).speeds != synthetic_gradcode(40, seed=1).speeds


@pytest.mark.parametrize("objective", ["expected", "worst"])
@pytest.mark.parametrize("problem", [HETERO_N6, homogeneous_problem(6, 1, pipelined=True)],
                         ids=["hetero", "homog-pipe"])
def test_lower_bound_and_greedy_placement_bracket_the_brute_force_optimum(problem, objective):
    data = assignment_data(problem, objective, scenarios=16, seed=0)
    scenarios = data.scenarios[:, data.order.argsort()]
    best = optimum(problem, scenarios, objective)
    groups, counts = greedy_shape(data)
    check_solution(data, groups, counts)
    assert 0 < lower_bound(data) <= best + 1e-12
    assert scenario_objective(problem, code_from_assignment(data, groups, counts, "greedy"), scenarios,
                              objective) >= best - 1e-12


@pytest.mark.parametrize("solver", ["cpsat", "milp"])
def test_assignment_solver_past_its_limit_returns_a_rescored_quick_placement_with_a_gap(solver):
    problem = synthetic_gradcode(600)            # 600 workers: the model holds millions of literals
    r = pipeplan.solve(problem, solver, time_limit=0.5, seed=0)
    assert r.termination.value == "time_limit" and r.quality.value == "feasible", r.message
    assert "within the time limit" in r.message
    code = code_from_dict(r.plan)
    ev = evaluate(problem, code)
    assert ev.violations == () and r.objectives["expected_step_s"] == ev.expected_step_s
    assert r.plan["verification"]["decodable"] and r.plan["verification"]["sets_checked"] >= 1
    assert 0 < r.bound["saa_step_s"] <= r.objectives["saa_step_s"] and 0 < r.gap < 1


def test_cr_seed_search_and_its_verification_stop_at_the_limit():
    problem = synthetic_gradcode(300)
    r = pipeplan.solve(problem, "cr", time_limit=0.5, seed=0, tries=1000)
    assert r.termination.value == "time_limit" and r.quality.value == "feasible", r.message
    meta, v = r.plan["meta"], r.plan["verification"]
    assert 1 <= meta["tried"] < 1000 and v["decodable"] and 1 <= v["sets_checked"] < 20_000
    assert not v["exhaustive"]
    ev = evaluate(problem, code_from_dict(r.plan))       # the code kept is the one scored
    assert ev.violations == () and r.objectives == ev.objectives()


def test_place_cr_with_many_tries_stops_at_the_limit(tmp_path):
    out = tmp_path / "cr.json"
    proc = run_cli("gradcode", "place", "--scheme", "cr", "--n", "200", "--s", "2", "--tries", "10000",
                   "--time-limit", "1", "--out", out)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["n"] == 200 and 1 <= doc["meta"]["tried"] < 10000
    code = code_from_dict(doc)
    assert verify(code, samples=20).decodable


def test_verifier_past_its_deadline_checks_a_prefix_of_the_same_sets():
    code = groups_code("fr", 2, 300, [list(range(a, a + 3)) for a in range(0, 300, 3)], [3] * 100)
    sets, _ = straggler_sets(300, 2, samples=2000)
    full = verify(code, samples=2000)
    cut = verify(code, samples=2000, deadline=Deadline(1e-9))
    assert full.sets_checked == len(sets) > 1900 and full.decodable
    assert 1 <= cut.sets_checked < full.sets_checked and not cut.exhaustive and cut.decodable
    assert cut.worst_set == full.worst_set == tuple(sets[0])     # all residuals 0: the first set drawn


@pytest.mark.parametrize("code", [
    groups_code("fr", 1, 6, [[0, 1], [2, 3], [4, 5]], [2, 2, 2]),
    groups_code("uneven", 1, 7, [[0, 1, 2], [3, 4], [5, 6]], [1, 3, 2]),
    ignore_stragglers_gc(9, 2)], ids=["fr", "uneven-groups", "linear"])
def test_sparse_fixed_decoder_residuals_match_the_dense_product(code):
    sets = np.array(list(np.ndindex(*(code.n,) * code.s)))
    sets = sets[(np.diff(sets, axis=1) > 0).all(axis=1)] if code.s > 1 else sets
    got = _FixedBatch(code)(sets)
    for stragglers, residual in zip(sets, got):
        alive = [w for w in range(code.n) if w not in stragglers]
        a = np.zeros(code.n)
        if code.decoder == "linear":
            a[alive] = code.linear_weight
        else:
            for members in code.groups:
                first = [w for w in members if w in alive]
                if first:
                    a[first[0]] = 1.0
        assert residual == pytest.approx(np.abs(a @ code.B - 1).max(), abs=1e-12)


def _assert_hint_result(problem, r):
    assert r.termination.value == "time_limit" and r.quality.value == "feasible", r.message
    assert "hint" in r.params and "the hint" in r.message
    again = replay(problem, r.plan)
    assert check(problem, again) == []
    assert again.metrics()["train_end_s"] == pytest.approx(r.objectives["train_end_s"])
    assert r.bound["train_end_s"] == train_end_lower_bound(problem) and 0 < r.gap < 1


def test_rollout_cpsat_past_its_limit_returns_the_hint_schedule():
    problem = preset_round("lsat-ar", 300)        # 2,400 requests, 45,000 assignment literals
    r = pipeplan.solve(problem, "cpsat", time_limit=0.3, seed=0)
    _assert_hint_result(problem, r)


def test_rollout_optimum_cli_past_its_limit_writes_the_hint_schedule(tmp_path):
    out = tmp_path / "opt.json"
    # R = 150 keeps the eight policies the command also runs quick; a 0.1 s limit is all the
    # replay's share, so the model is never built
    proc = run_cli("rollout", "optimum", "--workload", "lsat-ar", "--R", "150", "--time-limit", "0.1",
                   "--threads", "1", "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("cpsat: time_limit/feasible")
    doc = json.loads(out.read_text())
    assert doc["termination"] == "time_limit" and doc["plan"]["admissions"]
    _assert_hint_result(preset_round("lsat-ar", 150), pipeplan.SolveResult.from_dict(doc))


def test_rollout_step_plan_past_its_limit_returns_the_best_online_schedule():
    """The update-sequence search plans its first sequence by a backward pass that took 17 s at
    R = 300 (2,400 requests) before the clock reached into it; with a 0.2 s limit the planner
    now stops there, and the best online schedule simulated in time (fifo's first) stands."""
    problem = preset_round("lsat-ar", 300)
    r = pipeplan.solve(problem, "step-plan", time_limit=0.2, seed=0)
    assert r.termination.value == "time_limit" and r.quality.value == "feasible", r.message
    assert r.params["sequence_moves_done"] == 0
    again = replay(problem, r.plan)
    assert check(problem, again) == []
    assert again.metrics()["train_end_s"] == pytest.approx(r.objectives["train_end_s"])
    assert r.objectives["train_end_s"] <= pipeplan.solve(problem, "fifo").objectives["train_end_s"] * (1 + 1e-9)


def test_rollout_deadline_policy_past_its_limit_admits_the_rest_in_cgp_order():
    """``deadline`` ranks every group at every decision (quadratic in the round: 46 s at
    R = 1,000); past its limit it admits the rest in the engine's order, a checked schedule."""
    problem = preset_round("lsat-ar", 300)
    r = pipeplan.solve(problem, "deadline", time_limit=0.05)
    assert r.termination.value == "time_limit" and r.stopped_by == "time"
    assert r.params["switched_to_cgp_at_s"] >= 0 and "CGP's order" in r.message
    again = replay(problem, r.plan)
    assert check(problem, again) == [] and again.metrics() == pytest.approx(r.objectives, rel=1e-9)
    free = pipeplan.solve(preset_round("lsat-ar", 32), "deadline", time_limit=60.0)
    assert free.termination.value == "completed" and "switched_to_cgp_at_s" not in free.params

"""The coverage bound (every exact code of the problem's execution), the heterogeneity-aware code, team codes, the online
stopping rule and the ``general`` solver."""
import itertools

import numpy as np
import pytest

import pipeplan
from pipeplan.core.deadline import Deadline
from pipeplan.core.errors import InputError
from pipeplan.formulations.gradcode import brute_force
from pipeplan.formulations.gradcode.checker import violations
from pipeplan.formulations.gradcode.coverage_bound import (
    admissible_loads,
    coverage_step_times,
    load_limits,
    relaxed_bound,
)
from pipeplan.formulations.gradcode.decoders import decodable_stop_times, decoding_vector, needed_replies
from pipeplan.formulations.gradcode.evaluator import evaluate, scenario_objective
from pipeplan.formulations.gradcode.gradient_code import GradientCode, code_from_dict
from pipeplan.formulations.gradcode.problem import GradCodeProblem
from pipeplan.formulations.gradcode.simulator import compute_times
from pipeplan.formulations.gradcode.verifier import verify
from pipeplan.solvers.gradcode.assignment import draw_scenarios
from pipeplan.solvers.gradcode.general_assignment import bound_model
from pipeplan.solvers.gradcode.heterogeneous import cyclic_fill, hetero_aware_code, mds_matrix, speed_loads
from pipeplan.solvers.gradcode.team_codes import team_code, team_step_times

TINY = GradCodeProblem("tiny-n4", 4, 1, 3, (2.0, 1.0, 1.0, 0.5), (0.1, 0.3, 0.2, 0.4), (3, 2, 2, 1))


def _online(support, B, s):
    return GradientCode(scheme="brute", s=s, support=support, B=B, decoder="lstsq", wait=support.shape[0] - s,
                        stop="decodable")


def _supports(problem):
    """Every support within the capacities with each partition on at least s+1 workers."""
    n, k, s = problem.n, problem.k, problem.s
    rows = [[np.isin(np.arange(k), sub) for size in range(min(problem.capacity[i], k) + 1)
             for sub in itertools.combinations(range(k), size)] for i in range(n)]
    for choice in itertools.product(*rows):
        support = np.array(choice)
        if (support.sum(axis=0) >= s + 1).all():
            yield support


def _bound(problem, scenarios):
    loads, bound, state = bound_model(problem, scenarios, deadline=Deadline(30))
    assert state == "optimal"
    return loads, bound


def test_bound_is_the_exact_minimum_over_loads_and_below_every_code_by_brute_force():
    scenarios = draw_scenarios(TINY, 8, 3)
    loads, bound = _bound(TINY, scenarios)
    # the MILP is exact: its value is the minimum of the coverage objective over all loads
    every = [np.array(l) for l in itertools.product(*(range(c + 1) for c in load_limits(TINY)))
             if admissible_loads(TINY, l)]
    assert bound == pytest.approx(min(coverage_step_times(TINY, l, scenarios).mean() for l in every), abs=1e-9)
    assert coverage_step_times(TINY, loads, scenarios).mean() == pytest.approx(bound, abs=1e-9)
    # per-scenario loads without the storage rule: below each scenario's best admissible loads
    per_scenario = np.array([[coverage_step_times(TINY, l, scenarios[[r]])[0] for l in every]
                             for r in range(scenarios.shape[0])])
    assert 0 < relaxed_bound(TINY, scenarios) <= per_scenario.min(axis=1).mean() + 1e-12
    assert relaxed_bound(TINY, scenarios) <= bound + 1e-12
    # no exact code beats it: every support, with a 0/1 B and a generic B, online stopping rule
    rng = np.random.default_rng(0)
    best, checked = np.inf, 0
    for support in _supports(TINY):
        for B in (support.astype(float), mds_matrix(support, TINY.s, rng)):
            code = _online(support, B, TINY.s)
            if not verify(code).decodable:
                continue
            value = scenario_objective(TINY, code, scenarios)
            assert value >= bound - 1e-9, (support.astype(int).tolist(), value, bound)
            best, checked = min(best, value), checked + 1
    assert checked > 100 and best < np.inf


def test_bound_hand_computed_and_attained():
    """n = 3, s = 1, k = 2, 1 s per partition, delays (0, 0.5, 3): loads (1, 1, 2) let workers
    0 and 1 cover both partitions at 1.5 s, and no load vector does better (checked by hand:
    (2, 2, 0) 2.0, (2, 1, 1) 2.0, (1, 2, 1) 2.5, (2, 2, 2) 2.0); the code {0}, {1}, {0, 1} with
    0/1 rows attains it and tolerates any one straggler."""
    p = GradCodeProblem("hand", 3, 1, 2, (1.0, 1.0, 1.0), (0.0, 0.0, 0.0), (2, 2, 2), partition_time_s=1.0)
    scenarios = np.array([[0.0, 0.5, 3.0]])
    loads, bound = _bound(p, scenarios)
    assert bound == pytest.approx(1.5) and loads.tolist() == [1, 1, 2]
    support = np.array([[1, 0], [0, 1], [1, 1]], dtype=bool)
    code = _online(support, support.astype(float), 1)
    assert verify(code).decodable and violations(code, p) == []
    assert scenario_objective(p, code, scenarios) == pytest.approx(1.5)


def test_pipelined_bound_counts_stored_partitions_at_one_partition_of_work():
    p = GradCodeProblem("pipe", 4, 1, 4, (2.0, 1.0, 1.0, 0.5), (0.1, 0.2, 0.2, 0.4), (4, 4, 4, 4), pipelined=True)
    scenarios = draw_scenarios(p, 6, 1)
    loads, bound = _bound(p, scenarios)
    assert (loads <= p.s + 1).all()
    every = [l for l in itertools.product(*(range(c + 1) for c in load_limits(p))) if admissible_loads(p, l)]
    assert bound == pytest.approx(min(coverage_step_times(p, l, scenarios).mean() for l in every), abs=1e-9)
    assert relaxed_bound(p, scenarios) <= bound + 1e-12


@pytest.mark.parametrize("seed", range(6))
def test_hetero_aware_code_decodes_from_every_n_minus_s_set_for_random_loads(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 10))
    s = int(rng.integers(1, 4))
    k = int(rng.integers(n - 1, n + 3))
    caps = rng.integers(s + 1, k + 1, size=n)
    loads = np.ones(n, dtype=np.int64)
    while loads.sum() < (s + 1) * k:           # random loads within the capacities
        room = np.flatnonzero(loads < caps)
        loads[rng.choice(room)] += 1
    p = GradCodeProblem("rand", n, s, k, tuple(rng.uniform(0.5, 2, n)), (0.2,) * n, tuple(int(c) for c in caps))
    code, v = hetero_aware_code(p, loads, seed=seed, tries=2)
    assert (code.support.sum(axis=1) == loads).all() and (code.support.sum(axis=0) == s + 1).all()
    assert v.exhaustive and v.decodable and violations(code, p) == []
    assert verify(code).decodable


def test_speed_loads_follow_speed_within_capacities():
    p = GradCodeProblem("tiers", 6, 1, 6, (2.0, 2.0, 1.0, 1.0, 0.5, 0.5), (0.1,) * 6, (3, 4, 2, 2, 2, 2))
    loads = speed_loads(p)
    assert loads.sum() == 12 and (loads <= load_limits(p)).all() and (loads >= 1).all()
    assert loads[0] >= loads[2] >= loads[4] and loads[1] >= loads[3] >= loads[5]
    with pytest.raises(ValueError, match=r"the capacities hold 4 partition copies, fewer than \(s\+1\) k = 6"):
        speed_loads(GradCodeProblem("short", 3, 1, 3, (1.0,) * 3, (0.1,) * 3, (1, 1, 2)))
    assert cyclic_fill([2, 2, 2], 3).sum(axis=0).tolist() == [2, 2, 2]


def test_online_rule_stops_at_the_first_decoding_prefix_and_never_after_the_team_rule():
    p = GradCodeProblem("teams", 5, 1, 4, (2.0, 1.0, 1.0, 0.5, 0.5), (0.1, 0.2, 0.2, 0.4, 0.4), (4, 2, 2, 2, 2))
    blocks = [[[(0, 4)], [(1, 2), (2, 2)]]]
    code = team_code(p, blocks)
    assert verify(code).decodable and violations(code, p) == []
    rng = np.random.default_rng(1)
    D = rng.exponential(1.0, size=(200, 5)) * (rng.random((200, 5)) < 0.5)
    T = compute_times(p, code) + D          # workers 3 and 4 hold nothing: they never reply
    online = decodable_stop_times(code, T)
    for row, t in zip(T, online):
        order = np.argsort(row, kind="stable")
        kept = order[:needed_replies(code, order)]
        assert t == row[kept[-1]]
        assert np.allclose(decoding_vector(code, kept) @ code.B, 1.0)     # the kept replies decode exactly
    assert (online <= team_step_times(p, blocks, D) + 1e-12).all()
    assert (online <= np.sort(T, axis=1)[:, p.n - p.s - 1] + 1e-12).all()    # the count rule's step
    again = code_from_dict(code.to_dict())
    assert again.same_as(code) and again.stop == "decodable"
    with pytest.raises(InputError, match=r"stop: expected .*got .soon."):
        code_from_dict({**code.to_dict(), "stop": "soon"})


HETERO_N6 = GradCodeProblem("hetero-n6", 6, 1, 6, (2.0, 1.0, 0.5, 1.0, 2.0, 0.5), (0.05, 0.15, 0.4, 0.15, 0.05, 0.4),
                            (4, 2, 2, 2, 4, 2))


@pytest.mark.parametrize("team_work", [2.0, None])
def test_general_solver_is_rescored_by_the_evaluator_and_its_gap_matches_its_bound(team_work):
    p = HETERO_N6
    r = pipeplan.solve(p, "general", time_limit=5, scenarios=16, seed=0, team_work=team_work)
    assert r.params["team_work"] == team_work
    assert r.quality.value != "none", r.message
    code = code_from_dict(r.plan)
    scenarios = draw_scenarios(p, 16, 0)
    assert r.objectives["expected_step_s"] == pytest.approx(evaluate(p, code).expected_step_s, rel=1e-12)
    assert r.objectives["saa_step_s"] == pytest.approx(scenario_objective(p, code, scenarios), rel=1e-12)
    assert r.plan["verification"]["decodable"]
    bound = r.bound["saa_step_s"]
    assert bound == pytest.approx(_bound(p, scenarios)[1], rel=1e-6)
    assert r.gap == pytest.approx((r.objectives["saa_step_s"] - bound) / r.objectives["saa_step_s"], abs=1e-9)
    # the bound holds for every code: the best group placement (brute force) too
    assert bound <= brute_force.optimum(p, scenarios) + 1e-9
    assert r.objectives["saa_step_s"] <= brute_force.optimum(p, scenarios) + 1e-9


def test_general_without_a_work_budget_needs_a_time_limit():
    r = pipeplan.solve(HETERO_N6, "general", team_work=None)
    assert r.termination.value == "error" and "team_work" in r.message and "needs a time limit" in r.message


def test_general_solver_reports_infeasible_capacities():
    p = GradCodeProblem("short", 3, 1, 3, (1.0,) * 3, (0.1,) * 3, (1, 1, 2))      # 4 copies < (s+1) k = 6
    r = pipeplan.solve(p, "general", time_limit=5)
    assert r.termination.value == "infeasible" and r.quality.value == "none"


@pytest.mark.parametrize("n,k,s,extra", [(7, 7, 1, 0), (12, 9, 2, 0), (30, 45, 3, 0), (10, 8, 1, 3)])
def test_mds_matrix_solves_every_partition_as_one_solve_per_partition_would(n, k, s, extra):
    """Theta's columns for the partitions held by exactly s+1 workers come from one QR of
    Lambda (``_square_columns``); each must equal the partition's own least-squares solve, the
    construction's definition (``extra`` partitions get one more holder: the general path)."""
    from pipeplan.solvers.gradcode.heterogeneous import _square_columns

    loads = np.full(n, (s + 1) * k // n)
    loads[: (s + 1) * k - loads.sum()] += 1
    support = cyclic_fill(loads, k)
    for j in range(extra):                      # a fourth holder for a few partitions
        support[np.flatnonzero(~support[:, j])[0], j] = True
    lam = np.random.default_rng(n).standard_normal((n, n - s))
    exact = support.sum(axis=0) == s + 1
    fast = _square_columns(lam, support[:, exact], s)
    for col, j in enumerate(np.flatnonzero(exact)):
        off = np.flatnonzero(~support[:, j])
        one, *_ = np.linalg.lstsq(lam[off, 1:], -lam[off, 0], rcond=None)
        assert fast[:, col] == pytest.approx(one, rel=1e-9, abs=1e-9)
    B = mds_matrix(support, s, np.random.default_rng(n))
    assert not B[~support].any()
    code = GradientCode(scheme="t", s=s, support=support, B=B, decoder="lstsq", wait=n - s)
    assert verify(code).decodable


def test_the_team_model_is_skipped_above_its_literal_cap():
    """n = 2,000, s = 2: 5.3 million worker-slot literals, whose building alone ran minutes past
    a 3 s limit; the search is skipped without building them."""
    from pipeplan.instances.gradcode import load_instance
    from pipeplan.solvers.gradcode.team_codes import solve_teams

    problem = load_instance("gradcode/synthetic-n2000")
    assert solve_teams(problem, np.zeros((1, problem.n)), deadline=Deadline(None), extra=1) == ([], "too large", None)


def test_general_past_its_clock_builds_no_more_random_codes():
    """A random code of n = 2,000 workers takes seconds to build and verify; past the clock the
    solver keeps the first (speed loads) and builds neither the tuned one nor the chosen one again."""
    from pipeplan.instances.gradcode import load_instance

    problem = load_instance("gradcode/synthetic-n200")
    r = pipeplan.solve(problem, "general", time_limit=0.01)
    assert r.termination.value == "time_limit" and r.quality.value == "feasible"
    assert "hetero-aware" in r.message and "hetero-tuned" not in r.message
    assert "greedy" in r.message         # the group search cut, the quick placements compete
    ev = evaluate(problem, code_from_dict(r.plan))       # the code it keeps is the one it scored
    assert ev.violations == () and {k: v for k, v in r.objectives.items() if k != "saa_step_s"} == ev.objectives()


def test_general_past_its_clock_above_the_cheap_size_keeps_the_quick_placements():
    """Above CHEAP_RANDOM_N workers, past the clock with the quick placements at hand, no random
    code is built (at n = 2,001 one took 2.5-4 s past a 3 s limit); the one chosen is re-scored and
    verified like any other, and here the greedy placement beats FR on the validation scenarios."""
    from pipeplan.instances.gradcode import load_instance
    from pipeplan.solvers.gradcode.general_assignment import CHEAP_RANDOM_N

    problem = load_instance("gradcode/synthetic-n504")
    assert problem.n > CHEAP_RANDOM_N and problem.n % (problem.s + 1) == 0
    r = pipeplan.solve(problem, "general", time_limit=0.01)
    assert r.termination.value == "time_limit" and r.quality.value == "feasible"
    assert "hetero" not in r.message and "greedy" in r.message and "fr " in r.message
    assert r.plan["verification"]["decodable"] and r.plan["verification"]["proven"]
    ev = evaluate(problem, code_from_dict(r.plan))
    assert ev.violations == () and {k: v for k, v in r.objectives.items() if k != "saa_step_s"} == ev.objectives()

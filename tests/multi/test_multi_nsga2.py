"""The multi-network NSGA-II: brute-force optima of tiny pairs, its scorer against the joint
evaluator, its seeds, limits and refusals."""
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeplan.core.result import Quality, Termination
from pipeplan.formulations.mapping.evaluator import InfeasiblePlan
from pipeplan.formulations.mapping.multi.evaluator import evaluate_joint
from pipeplan.formulations.mapping.multi.plan import joint_plan_from_dict
from pipeplan.formulations.mapping.multi.problem import MultiProblem, Network
from pipeplan.instances.multi import load_multi
from pipeplan.solvers.mapping.multi.baselines import (
    solve_alone_best_pu,
    solve_greedy_partition,
    solve_npu_only,
    solve_own_optimum,
)
from pipeplan.solvers.mapping.multi.common import objective_value
from pipeplan.solvers.mapping.multi.nsga2 import JointCodec, JointScorer, _random_plan, solve_nsga2
from tests.multi.helpers import brute_force, chain, tiny_pair

SMALL = {"max_evaluations": 1500, "pop_size": 24}
DEMANDS = {"a": {"min_fps": 120.0, "latency_ms": 10.0}, "b": {"min_fps": 120.0, "latency_ms": 12.0}}


def rescored(problem, result):
    return evaluate_joint(problem, joint_plan_from_dict(result.plan))


@pytest.mark.parametrize("shared_pus", [False, True])
@pytest.mark.parametrize("sharing, fields, objective", [
    ("time_shared", {}, "fairness"),
    ("time_shared", {}, "rate"),
    ("time_shared", {"a": {"weight": 2.0}}, "total"),
    ("partitioned", {}, "fairness"),
    ("partitioned", {}, "rate"),
    ("time_shared", DEMANDS, "energy"),     # shared PUs: 8 feasible plans of 486
    ("time_shared", DEMANDS, "fairness"),
])
def test_reaches_the_brute_force_optimum_of_a_tiny_pair(sharing, fields, objective, shared_pus):
    problem = tiny_pair(sharing, **fields)
    r = solve_nsga2(problem, objective=objective, shared_pus=shared_pus, **SMALL)
    assert r.quality == Quality.FEASIBLE
    best = brute_force(problem, objective, shared_pus)
    assert objective_value(rescored(problem, r), objective) == pytest.approx(best, rel=1e-9)
    assert shared_pus or not any(p.shared_pus for p in joint_plan_from_dict(r.plan).plans.values())


def test_disjoint_pu_sets_by_default_shared_ones_on_request():
    """The default searches the exact models' space (each PU holds at most one stage of a
    network); ``shared_pus`` opens the larger one, whose plans the evaluator scores as found.
    Since a transfer loads its receiving PU, spreading a network over many small stages is
    no longer free: on the Khadas pair the larger space finds no better plan than the default."""
    problem = load_multi("multi/yolo+mobile")
    disjoint, shared = (solve_nsga2(problem, max_evaluations=3000, pop_size=40, shared_pus=s) for s in (False, True))
    assert not any(p.shared_pus for p in joint_plan_from_dict(disjoint.plan).plans.values())
    for r in (disjoint, shared):
        ev = evaluate_joint(problem, joint_plan_from_dict(r.plan))
        assert ev.min_norm_throughput == pytest.approx(r.objectives["min_norm_throughput"])
    # what the docstring says: the larger space finds no better plan here
    assert shared.objectives["min_norm_throughput"] <= disjoint.objectives["min_norm_throughput"] * (1 + 1e-12)


@pytest.mark.parametrize("name, sharing, fields", [
    ("multi/yolo+mobile", None, {}),                    # both on the NPU: eviction
    ("multi/alex+mobile", None, {}),
    ("multi/yolo+mobile-partitioned", None, {}),
    ("tiny", "time_shared", DEMANDS),                   # deadlines and demands
    ("tiny", "partitioned", DEMANDS),
])
@pytest.mark.parametrize("shared_pus", [False, True])
def test_scorer_matches_the_joint_evaluator(name, sharing, fields, shared_pus):
    """The search's own scores (feasibility, every objective) are the joint evaluator's."""
    problem = tiny_pair(sharing, **fields) if name == "tiny" else load_multi(name)
    codec = JointCodec(problem, shared_pus=shared_pus)
    objectives = ["fairness", "rate", "total"] + (["energy"] if fields else [])
    scorers = {o: JointScorer(codec, o, None) for o in objectives}
    rng = np.random.default_rng(1)
    feasible = 0
    for _ in range(60):
        x = codec.repair(rng.integers(0, codec.upper + 1)) if rng.random() < 0.5 else _random_plan(codec, rng)
        plan = codec.joint_plan(x)
        try:
            ev = evaluate_joint(problem, plan)
        except InfeasiblePlan:
            ev = None
        if not shared_pus and any(p.shared_pus for p in plan.plans.values()):
            ev = None           # outside the search space: a violation (the repair merges such runs)
        for o, scorer in scorers.items():
            score = scorer.score(x)
            assert (score.violation == 0) == (ev is not None)
            if ev is not None:
                assert abs(score.value) == pytest.approx(objective_value(ev, o), rel=1e-12)
        feasible += ev is not None
    assert feasible > 0


def test_repair_moves_units_only_off_pus_that_cannot_run_them():
    codec = JointCodec(tiny_pair(), shared_pus=True)
    x = np.array([2, 2, 2, 0, 2, 2])            # b's last unit cannot run on N (index 2)
    fixed = codec.repair(x)
    assert fixed.tolist() == [2, 2, 2, 0, 2, 1]    # its fastest PU: B
    assert codec.repair(fixed).tolist() == fixed.tolist()
    plan = codec.joint_plan(fixed)
    assert plan.plans["b"].mapping_string(("b0", "b1", "b2")) == "ANB"
    assert codec.encode(plan).tolist() == fixed.tolist()
    # A, N, A: A holds two runs, a plan with shared PUs
    assert codec.joint_plan(np.array([0, 2, 0, 0, 0, 0])).plans["a"].shared_pus


def test_repair_gives_each_pu_one_run_without_shared_pus():
    codec = JointCodec(tiny_pair())
    # a: A, N, A -> the second run of A joins N's; b: N, A, N -> b2 cannot run on N: joins A
    fixed = codec.repair(np.array([0, 2, 0, 2, 0, 2]))
    assert fixed.tolist() == [0, 2, 2, 2, 0, 0]
    assert codec.repair(fixed).tolist() == fixed.tolist()
    assert not any(p.shared_pus for p in codec.joint_plan(fixed).plans.values())
    # b: A, N, A where b2 can run on A, yet A is taken: its fastest free PU, B
    assert codec.repair(np.array([0, 0, 0, 0, 2, 0])).tolist()[3:] == [0, 2, 1]


@pytest.mark.parametrize("name", ["multi/alex+mobile", "multi/yolo+mobile-partitioned"])
def test_never_worse_than_the_feasible_baselines(name):
    problem = load_multi(name)
    r = solve_nsga2(problem, max_evaluations=300, pop_size=20)
    assert r.quality == Quality.FEASIBLE
    compared = []
    for solve in (solve_alone_best_pu, solve_npu_only, solve_own_optimum, solve_greedy_partition):
        if solve is solve_npu_only and name == "multi/alex+mobile":
            with pytest.raises(ValueError, match="network alex: its profile has no time on the NPU N"):
                solve(problem)
            continue
        base = solve(problem)
        if base.quality == Quality.FEASIBLE:
            assert r.objectives["min_norm_throughput"] >= base.objectives["min_norm_throughput"] - 1e-12
            compared.append(solve.__name__)
    # the baselines feasible on each pair (the others share a PU the partitioned pair may not)
    assert compared == {"multi/alex+mobile": ["solve_alone_best_pu", "solve_own_optimum", "solve_greedy_partition"],
                        "multi/yolo+mobile-partitioned": ["solve_greedy_partition"]}[name]


def test_result_is_rescored_and_a_partition_where_partitioned():
    problem = load_multi("multi/yolo+mobile-partitioned")
    r = solve_nsga2(problem, max_evaluations=2000, pop_size=30)
    ev = rescored(problem, r)
    assert {k: v for k, v in r.objectives.items() if not k.endswith(".fps_fair")} == ev.objectives()
    plan = joint_plan_from_dict(r.plan)
    assert not plan.pus_of("yolo") & plan.pus_of("mobile")
    assert (r.termination, r.stopped_by) == (Termination.TIME_LIMIT, "work") and r.params["evaluations"] == 2000
    assert 0 <= r.gap < 1 and r.bound_source == {"min_norm_throughput": "analytic"}


def test_same_seed_same_plan():
    problem = load_multi("multi/google+res+squeeze")
    a, b = (solve_nsga2(problem, max_evaluations=1500, pop_size=30, seed=7) for _ in range(2))
    assert a.plan == b.plan and a.objectives == b.objectives and a.params == b.params


def test_time_limit_stops_the_run():
    problem = load_multi("multi/yolo+mobile")
    start = time.perf_counter()
    r = solve_nsga2(problem, time_limit=1.0, max_evaluations=None)
    assert time.perf_counter() - start < 1.0 * 1.1 + 2      # the limits' goal (docs/errors-and-limits.md)
    assert (r.termination, r.quality, r.stopped_by) == (Termination.TIME_LIMIT, Quality.FEASIBLE, "time")


def test_stops_at_the_analytic_bound():
    """Alex and ZFNet each alone on their best core reach the bound of fairness 1: optimal."""
    r = solve_nsga2(load_multi("multi/host-alex+zf"))
    assert (r.termination, r.stopped_by, r.gap) == (Termination.COMPLETED, None, 0.0)
    assert r.objectives["min_norm_throughput"] == pytest.approx(1.0)
    assert "reached the analytic bound" in r.message and r.params["evaluations"] < 10


def test_no_feasible_plan():
    r = solve_nsga2(tiny_pair(a={"latency_ms": 8.0}, b={"latency_ms": 8.0}), **SMALL)
    assert r.quality == Quality.NONE and r.plan is None
    assert "no feasible plan" in r.message and "exceeds its deadline" in r.message


def test_refuses_operator_graphs_and_bad_limits():
    diamond = chain("d", {"A": [1.0, 2.0, 2.0, 1.0], "B": [2.0, 1.0, 1.0, 2.0]}, edges=[(0, 1), (0, 2), (1, 3), (2, 3)])
    problem = MultiProblem(name="dag", networks=(Network("d", diamond), tiny_pair().networks[0]))
    with pytest.raises(ValueError, match="nsga2 needs chain networks: d"):
        solve_nsga2(problem)
    with pytest.raises(ValueError, match="max_evaluations"):
        solve_nsga2(tiny_pair(), max_evaluations=0)
    with pytest.raises(ValueError, match="min_fps"):
        solve_nsga2(tiny_pair(), objective="energy")


def khadas_networks(count: int) -> MultiProblem:
    """``count`` networks, the Khadas chains in turn: many networks on one SoC."""
    from pipeplan.instances.catalog import load_mapping
    chains = [load_mapping(f"khadas-vim3/{n}") for n in ("Alex", "MobileV1", "YOLOv3", "SqueezeV1")]
    return MultiProblem(f"khadas-x{count}", tuple(Network(f"n{i}", chains[i % len(chains)]) for i in range(count)))


def test_seeds_are_the_baselines_then_their_mixes_in_product_order():
    """The lazy walk gives what listing every mix of the baselines' plans and keeping the first
    of each gene vector gave (the seeding before the walk)."""
    import itertools

    from pipeplan.core.deadline import Deadline
    from pipeplan.formulations.mapping.multi.plan import JointPlan
    from pipeplan.solvers.mapping.multi.nsga2 import mixed_seeds, seed_plans
    problem = load_multi("multi/google+res+squeeze")
    codec = JointCodec(problem)
    plans = seed_plans(problem, "fairness", Deadline(None))
    names = [n.name for n in problem.networks]
    options = [[p.plans[m] for p in plans] for m in names]
    listed = plans + [JointPlan(dict(zip(names, combo)), instance=problem.name) for combo in itertools.product(*options)]
    expected = list({x.tobytes(): x for x in map(codec.encode, listed)}.values())
    assert len(plans) >= 3 and len(expected) > len(plans)
    for count in (2, len(expected) - 1, 10 ** 6):
        got = mixed_seeds(codec, plans, count)
        assert [x.tolist() for x in got] == [x.tolist() for x in expected[:count]]


def test_many_networks_seed_without_listing_their_mixes():
    """40 networks and three or more baseline plans make 3^40 mixes or more; a population
    takes 100 of them, and only those are built."""
    from pipeplan.core.deadline import Deadline
    from pipeplan.solvers.mapping.multi.nsga2 import mixed_seeds, seed_plans
    problem = khadas_networks(40)
    codec = JointCodec(problem)
    plans = seed_plans(problem, "fairness", Deadline(None))
    got = mixed_seeds(codec, plans, 100)
    assert len(got) == 100 and len({x.tobytes() for x in got}) == 100
    assert [x.tolist() for x in got[:2]] == [codec.encode(p).tolist() for p in plans[:2]]


@settings(max_examples=40, deadline=None)
@given(genes=st.lists(st.lists(st.integers(0, 3), min_size=4, max_size=4), min_size=1, max_size=30),
       others=st.lists(st.lists(st.integers(0, 3), min_size=4, max_size=4), max_size=10))
def test_duplicates_by_genes_are_pymoo_s_duplicates(genes, others):
    """The linear-time elimination marks what pymoo's default (every pair, cdist) marks: the
    default had held 2.4 GB at pop_size 12,000 (found by a hostile-input audit)."""
    from pymoo.core.duplicate import DefaultDuplicateElimination
    from pymoo.core.population import Population

    from pipeplan.solvers.mapping.multi.nsga2 import same_genes
    pop = Population.new("X", np.array(genes))
    other = Population.new("X", np.array(others)) if others else None
    against = [other] if other is not None else []
    _, mine, _ = same_genes().do(pop, *against, return_indices=True)
    _, theirs, _ = DefaultDuplicateElimination().do(pop, *against, return_indices=True)
    assert mine == theirs

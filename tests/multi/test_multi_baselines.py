"""The multi-network baselines: their plans, their scores (always the joint evaluator's) and
their refusals (no NPU, a shared PU on a partitioned instance, a missed deadline)."""
import pytest

from pipeplan.core.result import Quality, Termination
from pipeplan.formulations.mapping.evaluator import evaluate
from pipeplan.formulations.mapping.multi.evaluator import evaluate_joint
from pipeplan.formulations.mapping.multi.plan import joint_plan_from_dict
from pipeplan.formulations.mapping.multi.problem import MultiProblem, Network, reference_fps
from pipeplan.formulations.mapping.problem import restrict_pus
from pipeplan.instances.catalog import load_mapping
from pipeplan.instances.multi import load_multi
from pipeplan.solvers.mapping.cpsat import solve_cpsat
from pipeplan.solvers.mapping.multi.baselines import (
    alone_best_pu_plan,
    greedy_partition_plan,
    own_optimum,
    own_optimum_on,
    own_optimum_plan,
    solve_alone_best_pu,
    solve_greedy_partition,
    solve_npu_only,
    solve_own_optimum,
)
from tests.multi.helpers import brute_force, tiny_pair

BASELINES = (solve_alone_best_pu, solve_npu_only, solve_own_optimum, solve_greedy_partition)


def rescored(problem, result):
    """The result's plan scored again by the joint evaluator."""
    return evaluate_joint(problem, joint_plan_from_dict(result.plan))


@pytest.mark.parametrize("objective", ["fairness", "rate", "total"])
@pytest.mark.parametrize("name", ["multi/yolo+mobile", "multi/alex+mobile", "multi/google+res+squeeze"])
def test_results_are_the_joint_evaluators_scores(name, objective):
    problem = load_multi(name)
    for solve in BASELINES:
        try:
            r = solve(problem, objective=objective)
        except ValueError as exc:        # npu-only without a usable NPU
            assert solve is solve_npu_only and "NPU" in str(exc)
            continue
        assert (r.termination, r.quality) == (Termination.COMPLETED, Quality.FEASIBLE)
        ev = rescored(problem, r)
        assert {k: v for k, v in r.objectives.items() if not k.endswith(".fps_fair")} == ev.objectives()
        assert r.params["objective"] == objective and r.gap is not None and r.gap >= 0


def test_alone_best_pu_puts_each_network_on_the_pu_of_its_reference_rate():
    problem = load_multi("multi/google+res+squeeze")
    plan = joint_plan_from_dict(solve_alone_best_pu(problem).plan)
    pus = [plan.pus_of(n.name) for n in problem.networks]
    assert all(len(p) == 1 for p in pus) and len(set.union(*pus)) == 3      # B, L, G: one each
    for net in problem.networks:
        p = plan.plans[net.name]
        assert len(p.stages) == 1
        assert evaluate(net.problem, p).throughput_fps == pytest.approx(reference_fps(net))
    # alone on different PUs, nobody waits: every network at its reference rate
    assert evaluate_joint(problem, plan).min_norm_throughput == pytest.approx(1.0)


def test_npu_only_runs_every_network_whole_on_the_npu():
    problem = load_multi("multi/yolo+mobile")
    r = solve_npu_only(problem)
    plan = joint_plan_from_dict(r.plan)
    assert all(plan.pus_of(n.name) == {"N"} for n in problem.networks)
    # both whole on N: each frame finds the other's graph loaded (the evicted first unit)
    assert r.objectives["min_norm_throughput"] < 1.0


@pytest.mark.parametrize("name, why", [("multi/google+res+squeeze", "has no NPU"),
                                       ("multi/alex+mobile", "network alex: its profile has no time on the NPU N")])
def test_npu_only_refuses_without_a_usable_npu(name, why):
    with pytest.raises(ValueError, match=why):
        solve_npu_only(load_multi(name))


def test_npu_only_names_a_unit_the_npu_cannot_run():
    with pytest.raises(ValueError, match="network b: the NPU N cannot run unit b2"):
        solve_npu_only(tiny_pair())


@pytest.mark.parametrize("instance", ["khadas-vim3/MobileV1", "khadas-vim3/Alex", "khadas-vim3/SqueezeV1"])
def test_own_optimum_is_the_exact_chain_optimum(instance):
    """On PU subsets too: the greedy partition's periods are exact (the NPU's whole-graph plan
    included, which the pipeline DP alone misses)."""
    problem = load_mapping(instance)
    subsets = [tuple(problem.profile.pus), ("L", "G"), ("B",), ("G", "N"), ("L", "B", "N")]
    for pus in subsets:
        if not set(pus) <= set(problem.profile.pus):
            continue
        mine = own_optimum(problem)[0] if len(pus) == len(problem.profile.pus) else own_optimum_on(problem, pus)[0]
        exact = solve_cpsat(restrict_pus(problem, pus), objective="period", tie_break=None)
        assert exact.termination == Termination.OPTIMAL
        assert evaluate(problem, mine).period_ms == pytest.approx(exact.objectives["period_ms"], rel=1e-6)
        assert {pu for _, pu in mine.placement().values()} <= set(pus) and mine.instance == problem.name


def test_own_optimum_on_pus_that_cannot_run_the_network_is_none():
    problem = tiny_pair().networks[1].problem         # its last unit cannot run on N
    assert own_optimum_on(problem, ("N",)) == (None, True)
    assert own_optimum_on(problem, ("X",)) == (None, True)


@pytest.mark.parametrize("objective", ["fairness", "rate", "total"])
@pytest.mark.parametrize("name", ["multi/yolo+mobile-partitioned", "multi/alex+mobile", "multi/google+res+squeeze"])
def test_greedy_partition_is_a_partition_of_own_optima(name, objective):
    problem = load_multi(name)
    r = solve_greedy_partition(problem, objective=objective)
    assert (r.termination, r.quality) == (Termination.COMPLETED, Quality.FEASIBLE)
    plan = joint_plan_from_dict(r.plan)
    held = [plan.pus_of(n.name) for n in problem.networks]
    assert sum(map(len, held)) == len(set.union(*held))           # no PU serves two networks
    assert r.params["partition"] == {n.name: sorted(h, key=problem.pu_names.index)
                                     for n, h in zip(problem.networks, held)}
    for net, pus in zip(problem.networks, held):
        best = own_optimum_on(net.problem, pus)[0]
        assert evaluate(net.problem, plan.plans[net.name]).period_ms == pytest.approx(
            evaluate(net.problem, best).period_ms)


def test_greedy_partition_gives_the_contested_pu_to_the_network_with_the_poorer_alternative():
    """Both want the NPU; YOLO off it runs 6-8x slower, MobileNet 3.5x: YOLO keeps it, and
    MobileNet pipelines over the other three PUs."""
    problem = load_multi("multi/yolo+mobile")
    plan, complete, why = greedy_partition_plan(problem, "fairness")
    assert complete and why == ""
    assert plan.pus_of("yolo") == {"N"} and plan.pus_of("mobile") == {"L", "B", "G"}


def test_greedy_partition_without_enough_pus_is_infeasible():
    problem = tiny_pair()
    one_pu = type(problem)(name="one", networks=tuple(
        type(n)(name=n.name, problem=restrict_pus(n.problem, ("A",))) for n in problem.networks))
    r = solve_greedy_partition(one_pu)
    assert (r.termination, r.quality) == (Termination.INFEASIBLE, Quality.NONE)
    assert "no free PUs run network" in r.message and r.plan is None


@pytest.mark.parametrize("solve, pu", [(solve_alone_best_pu, "N"), (solve_npu_only, "N"), (solve_own_optimum, "B")])
def test_plans_sharing_a_pu_are_infeasible_on_a_partitioned_instance(solve, pu):
    r = solve(load_multi("multi/yolo+mobile-partitioned"))
    assert (r.termination, r.quality) == (Termination.INFEASIBLE, Quality.NONE)
    assert f"PU {pu} serves yolo and mobile" in r.message and r.plan is None


def test_a_missed_deadline_is_infeasible_with_the_evaluators_reason():
    problem = tiny_pair(a={"latency_ms": 5.0})
    r = solve_own_optimum(problem)
    assert (r.termination, r.quality) == (Termination.INFEASIBLE, Quality.NONE)
    assert "a: worst-case latency" in r.message and "exceeds its deadline 5 ms" in r.message


def test_energy_needs_demanded_rates():
    with pytest.raises(ValueError, match="min_fps"):
        solve_alone_best_pu(tiny_pair(), objective="energy")
    problem = tiny_pair(a={"min_fps": 20.0}, b={"min_fps": 20.0})
    r = solve_greedy_partition(problem, objective="energy")
    assert r.quality == Quality.FEASIBLE
    assert rescored(problem, r).power_mw == pytest.approx(r.objectives["power_mw"], rel=1e-12)
    # a partition of one-PU-per-unit plans: never below the brute-force least power over them
    assert r.objectives["power_mw"] >= brute_force(problem, "energy") * (1 - 1e-12)


def test_networks_that_run_one_model_share_its_work_and_get_its_plans():
    """Six streams of two models: each model's best single PU, own optimum and reference rate
    are worked out once, and every network gets what it gets alone."""
    models = [load_mapping("khadas-vim3/YOLOv3"), load_mapping("khadas-vim3/MobileV1")]
    streams = MultiProblem("streams", tuple(Network(f"s{i}", models[i % 2]) for i in range(6)))
    for net in streams.networks:
        alone = MultiProblem("alone", (Network(net.name, net.problem),))
        assert alone_best_pu_plan(streams).plans[net.name] == alone_best_pu_plan(alone).plans[net.name]
        assert own_optimum_plan(streams)[0].plans[net.name] == own_optimum_plan(alone)[0].plans[net.name]
        assert reference_fps(net) == reference_fps(Network("fresh", net.problem))
    assert alone_best_pu_plan(streams).plans["s0"] != alone_best_pu_plan(streams).plans["s1"]

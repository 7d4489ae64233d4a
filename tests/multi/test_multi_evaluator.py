"""The joint evaluator: the single-network special case, capacity, eviction, worst-case
latency, demands, the weighted-total LP, and the loaders' bad-input rules."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from pipeplan.core.errors import InputError
from pipeplan.formulations.mapping.evaluator import InfeasiblePlan, evaluate
from pipeplan.formulations.mapping.multi.evaluator import evaluate_joint, pu_time
from pipeplan.formulations.mapping.multi.plan import JointPlan, joint_plan_from_dict
from pipeplan.formulations.mapping.multi.problem import MultiProblem, Network, reference_fps, single_pu_plans
from pipeplan.formulations.mapping.plan import plan_from_string
from pipeplan.instances.catalog import load_mapping
from pipeplan.instances.multi import load_multi, load_multi_file, multi_names, tiny_multi

TINY = {p.name: p for p in tiny_multi()}


def plan(problem, mapping: str):
    names = tuple(u.name for u in problem.units)
    return plan_from_string(names, tuple(problem.profile.pus), mapping)


def test_one_network_is_the_single_network_model():
    yolo = load_mapping("khadas-vim3/YOLOv3")
    mp = MultiProblem("one", (Network("yolo", yolo),))
    p = plan(yolo, "G" * 30 + "N" * 45)
    alone = evaluate(yolo, p)
    ev = evaluate_joint(mp, JointPlan({"yolo": p}))
    assert ev.networks["yolo"].period_ms == alone.period_ms
    assert ev.networks["yolo"].worst_latency_ms == alone.latency_ms
    assert ev.sustained_fps == pytest.approx(alone.throughput_fps)
    assert ev.weighted_fps == pytest.approx(alone.throughput_fps)
    assert ev.min_norm_throughput == pytest.approx(alone.throughput_fps / reference_fps(mp.networks[0]))


def test_reference_rate_is_the_best_single_pu():
    net = Network("g", load_mapping("khadas-vim3/Google"))
    rates = {pu: evaluate(net.problem, p).throughput_fps for pu, p in single_pu_plans(net).items()}
    assert set(rates) == {"L", "B", "G"} and reference_fps(net) == max(rates.values())
    assert reference_fps(replace(net, reference_fps=3.0)) == 3.0


def test_time_shared_pu_fits_both_networks_and_waits_add_to_latency():
    mp = TINY["tiny-multi/pair"]
    a, b = (n.problem for n in mp.networks)
    pa, pb = plan(a, "AAB"), plan(b, "ACC")
    ev = evaluate_joint(mp, JointPlan({"a": pa, "b": pb}))
    ea, eb = evaluate(a, pa), evaluate(b, pb)
    load_a = pu_time(ea)["A"] + pu_time(eb)["A"]
    assert ev.pu_load_ms["A"] == pytest.approx(load_a)
    assert ev.sustained_fps == pytest.approx(1000 / max(ea.period_ms, eb.period_ms, load_a,
                                                        pu_time(ea)["B"], pu_time(eb)["C"]))
    # a waits on A for b's frame there, b on A for a's; B and C are their own
    assert ev.networks["a"].worst_latency_ms == pytest.approx(ea.latency_ms + pu_time(eb)["A"])
    assert ev.networks["b"].worst_latency_ms == pytest.approx(eb.latency_ms + pu_time(ea)["A"])
    ref = {n.name: reference_fps(n) for n in mp.networks}
    tau = max(ea.period_ms * ref["a"], eb.period_ms * ref["b"], pu_time(ea)["A"] * ref["a"] + pu_time(eb)["A"] * ref["b"],
              pu_time(ea)["B"] * ref["a"], pu_time(eb)["C"] * ref["b"]) / 1000
    assert ev.min_norm_throughput == pytest.approx(1 / tau)
    assert all(ev.fair_fps[n] == pytest.approx(ref[n] / tau) for n in ref)


def test_transfers_load_the_receiving_pu():
    """A transfer is in the receiving stage's time: its PU holds the stage while it waits, so
    the capacity rule charges it there (else spreading a network would look free)."""
    mp = TINY["tiny-multi/pair"]
    a = mp.networks[0].problem
    pa = plan(a, "ABB")
    ea = evaluate(a, pa)
    assert ea.copy_ms["B"] > 0 and "A" not in ea.copy_ms
    ev = evaluate_joint(mp, JointPlan({"a": pa, "b": plan(mp.networks[1].problem, "CCC")}))
    assert ev.networks["a"].busy_ms["B"] == pytest.approx(ea.pu_busy_ms["B"] + ea.copy_ms["B"])
    assert ev.networks["a"].busy_ms["B"] <= ea.stage_times_ms[1] + 1e-9     # alone: within its stage


def test_weighted_total_puts_a_shared_pu_where_it_earns_most():
    """Both networks wholly on A: one row r_a b_a + r_b b_b <= 1000, r_i <= 1000 / P_i; the LP
    fills A with the network of the larger w / b first."""
    mp = TINY["tiny-multi/pair"]
    a, b = (n.problem for n in mp.networks)
    pa, pb = plan(a, "AAA"), plan(b, "AAA")
    ev = evaluate_joint(mp, JointPlan({"a": pa, "b": pb}))
    ea, eb = evaluate(a, pa), evaluate(b, pb)
    ba, bb = pu_time(ea)["A"], pu_time(eb)["A"]
    wa, wb = mp.networks[0].weight, mp.networks[1].weight
    first, second = sorted([("a", wa, ba, ea.period_ms), ("b", wb, bb, eb.period_ms)], key=lambda x: -x[1] / x[2])
    r1 = min(1000 / first[3], 1000 / first[2])
    r2 = min(1000 / second[3], (1000 - r1 * first[2]) / second[2])
    assert ev.total_fps[first[0]] == pytest.approx(r1, rel=1e-6)
    assert ev.total_fps[second[0]] == pytest.approx(r2, rel=1e-6, abs=1e-6)
    assert ev.weighted_fps == pytest.approx(first[1] * r1 + second[1] * r2, rel=1e-6)


def test_a_shared_reentry_pu_makes_every_segment_start_cold():
    mp = TINY["tiny-multi/reentry"]
    a, b = (n.problem for n in mp.networks)
    pa, pb = plan(a, "BAA"), plan(b, "ABBB")
    shared = evaluate_joint(mp, JointPlan({"a": pa, "b": pb}))
    k = a.profile.reentry["B"]
    # alone, one segment on B is warm; shared, its first unit is cold
    assert shared.details["a"].pu_busy_ms["B"] == pytest.approx(evaluate(a, pa).pu_busy_ms["B"] * (1 + k))
    assert shared.details["b"].pu_busy_ms["B"] == pytest.approx(
        evaluate(b, pb).pu_busy_ms["B"] + k * b.profile.time(1, "B", "max"))
    apart = evaluate_joint(mp, JointPlan({"a": plan(a, "CAA"), "b": pb}))
    assert apart.details["b"].pu_busy_ms["B"] == pytest.approx(evaluate(b, pb).pu_busy_ms["B"])


def test_partitioned_plans_give_each_pu_to_one_network():
    mp = TINY["tiny-multi/pair-partitioned"]
    a, b = (n.problem for n in mp.networks)
    with pytest.raises(InfeasiblePlan, match="PU A serves a and b"):
        evaluate_joint(mp, JointPlan({"a": plan(a, "AAB"), "b": plan(b, "ACC")}))
    ev = evaluate_joint(mp, JointPlan({"a": plan(a, "AAB"), "b": plan(b, "CCC")}))
    assert ev.networks["a"].worst_latency_ms == ev.networks["a"].latency_ms
    assert ev.weighted_fps == pytest.approx(sum(1000 / s.period_ms for s in ev.networks.values()))


def test_deadlines_and_demanded_rates_are_checked():
    mp = TINY["tiny-multi/demands"]
    a, b = (n.problem for n in mp.networks)
    pa, pb = plan(a, "AAA"), plan(b, "AAAA")     # both on A: a waits for a frame of b there
    ea, eb = evaluate(a, pa), evaluate(b, pb)
    deadline, demand = mp.networks[0].latency_ms, mp.networks[1].min_fps
    assert ea.latency_ms <= deadline < ea.latency_ms + pu_time(eb)["A"]    # the wait alone breaks it
    with pytest.raises(InfeasiblePlan, match="a: worst-case latency .* exceeds its deadline"):
        evaluate_joint(mp, JointPlan({"a": pa, "b": pb}))
    pb = plan(b, "CCCC")
    ok = evaluate_joint(mp, JointPlan({"a": pa, "b": pb}))
    assert ok.networks["b"].period_ms * demand <= 1000 and ok.power_mw is None    # a has no min_fps


def test_missing_and_unknown_networks_are_listed():
    mp = TINY["tiny-multi/pair"]
    a = mp.networks[0].problem
    with pytest.raises(InfeasiblePlan) as err:
        evaluate_joint(mp, JointPlan({"a": plan(a, "AAA"), "zz": plan(a, "AAA")}))
    assert "no plan for network b" in str(err.value) and "unknown network 'zz'" in str(err.value)


def test_shipped_instances_load(tmp_path):
    assert {"multi/yolo+mobile", "multi/alex+mobile", "multi/google+res+squeeze"} <= set(multi_names())
    mp = load_multi("multi/google+res+squeeze")
    assert [n.name for n in mp.networks] == ["google", "res", "squeeze"] and mp.pu_names == ("L", "B", "G")
    doc = JointPlan({n.name: p for n, p in zip(mp.networks, [single_pu_plans(n)["B"] for n in mp.networks])}).to_dict()
    assert joint_plan_from_dict(json.loads(json.dumps(doc))).plans.keys() == {"google", "res", "squeeze"}


def write(tmp_path, networks, **extra):
    f = tmp_path / "m.json"
    f.write_text(json.dumps({"schema": "pipeplan.multi-instance/1", "name": "m", "networks": networks, **extra}))
    return f


@pytest.mark.parametrize("networks,field,words", [
    ([{"instance": "khadas-vim3/Alex", "weight": 0}], "networks[0].weight", "> 0"),
    ([{"instance": "khadas-vim3/Alex", "weight": -1.5}], "networks[0].weight", "> 0"),
    ([{"instance": "khadas-vim3/Alex", "min_fps": 500}], "networks[0].min_fps", "at most"),
    ([{"instance": "khadas-vim3/Alex", "latency_ms": 1}], "networks[0].latency_ms", "least latency"),
    ([{"instance": "khadas-vim3/Alex", "name": "x"}, {"instance": "khadas-vim3/Google", "name": "x"}],
     "networks[1].name", "duplicate"),
    ([{"instance": "khadas-vim3/Nope"}], "networks[0].instance", "unknown instance"),
    ([{"instance": "../outside.json"}], "networks[0].instance", "not a file inside"),
    # by the text's ending these had been catalogue names, and the loader read the file anyway
    ([{"instance": "../outside.json/", "name": "o"}], "networks[0].instance", "not a file inside"),
    ([{"instance": "../outside.json/.", "name": "o"}], "networks[0].instance", "not a file inside"),
    ([{"instance": "khadas-vim3/Alex", "speed": 2}], "networks[0].speed", "unknown field"),
])
def test_bad_instance_files_name_file_and_field(tmp_path, networks, field, words):
    (tmp_path.parent / "outside.json").write_text("{}")
    with pytest.raises(InputError) as err:
        load_multi_file(write(tmp_path, networks))
    assert err.value.field == field and words in err.value.message and err.value.source.endswith("m.json")


def test_demands_the_pus_cannot_hold_together_are_refused(tmp_path):
    nets = [{"instance": "khadas-vim3/Alex", "name": f"a{i}", "min_fps": 7} for i in range(6)]
    with pytest.raises(InputError) as err:
        load_multi_file(write(tmp_path, nets))
    assert err.value.field == "networks" and "PU time per second" in err.value.message


def test_a_network_no_pu_can_run_is_refused():
    with pytest.raises(InputError, match="no PU can run unit"):
        MultiProblem("m", (Network("y", _unrunnable(load_mapping("khadas-vim3/YOLOv3"))),))


def _unrunnable(problem):
    """``problem`` with its first unit runnable nowhere (built past its own checks)."""
    prof = problem.profile
    times = {p: {lv: (None,) + tuple(t[1:]) for lv, t in by.items()} for p, by in prof.time_ms.items()}
    return replace(problem, profile=replace(prof, time_ms=times))


def test_networks_naming_one_instance_share_it(tmp_path):
    """Streams of one model load it once, so that the solvers' per-model work is shared (1,000
    networks of two models: the exact models' refusal 6.5 -> 0.9 s on the command line)."""
    doc = {"schema": "pipeplan.multi-instance/1", "name": "streams", "sharing": "time_shared",
           "networks": [{"name": f"s{i}", "instance": "khadas-vim3/" + ("YOLOv3" if i % 2 else "MobileV1")}
                        for i in range(4)]}
    (tmp_path / "streams.json").write_text(json.dumps(doc))
    problem = load_multi_file(tmp_path / "streams.json")
    nets = problem.networks
    assert nets[0].problem is nets[2].problem and nets[1].problem is nets[3].problem
    assert nets[0].problem is not nets[1].problem and nets[0].problem.name != nets[1].problem.name

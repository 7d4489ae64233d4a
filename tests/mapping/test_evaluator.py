"""The mapping evaluator and checker on instances small enough to compute by hand."""
import pytest

from pipeplan.formulations.mapping.checker import violations
from pipeplan.formulations.mapping.evaluator import InfeasiblePlan, evaluate
from pipeplan.formulations.mapping.plan import Plan, Stage, plan_from_dict, plan_from_string
from tests.helpers import tiny_problem


def chain3():
    # u0 -> u1 -> u2 ; A is fast on u0, B on u1/u2; transfers 1 ms
    return tiny_problem({"A": [2.0, 6.0, 5.0], "B": [4.0, 3.0, 2.0]}, transfer=1.0,
                        input_ms={"A": 0.5, "B": 0.7}, output_ms={"A": 0.25, "B": 0.3})


def test_pipelined_chain_by_hand():
    p = chain3()
    plan = plan_from_string(("u0", "u1", "u2"), ("A", "B"), "ABB")
    ev = evaluate(p, plan)
    # stage 0: input on A's side 0.5 + u0 2.0 = 2.5; stage 1: transfer 1 + 3 + 2 + output 0.3 = 6.3
    assert ev.stage_times_ms == pytest.approx([2.5, 6.3])
    assert ev.period_ms == pytest.approx(6.3)
    assert ev.latency_ms == pytest.approx(8.8)
    # board energy: input 0.5*1000 + units (2+3+2)*1000 + transfer 1*500 + output 0.3*1000 (uJ)
    assert ev.energy_mj == pytest.approx((500 + 7000 + 500 + 300) / 1000)


def test_serial_mode_period_is_latency():
    p = chain3()
    plan = plan_from_string(("u0", "u1", "u2"), ("A", "B"), "ABB", mode="serial")
    ev = evaluate(p, plan)
    assert ev.period_ms == pytest.approx(ev.latency_ms) == pytest.approx(8.8)


def test_shared_pu_busy_time_bounds_period():
    # ABA: A serves stages 0 and 2, its busy time (2 + 5) exceeds every stage time
    p = chain3()
    plan = plan_from_string(("u0", "u1", "u2"), ("A", "B"), "ABA")
    assert plan.shared_pus
    ev = evaluate(p, plan)
    assert ev.pu_busy_ms["A"] == pytest.approx(7.0)
    assert max(ev.stage_times_ms) < 7.0
    assert ev.period_ms == pytest.approx(7.0)


def test_parallel_branches_in_one_stage():
    # diamond u0 -> (u1, u2) -> u3, both PUs in one stage; transfers 1 ms
    p = tiny_problem({"A": [1.0, 4.0, 4.0, 1.0], "B": [1.0, 4.0, 4.0, 1.0]},
                     edges=[("u0", "u1"), ("u0", "u2"), ("u1", "u3"), ("u2", "u3")], transfer=1.0)
    plan = Plan((Stage(("A", "B"), {"A": ("u0", "u1", "u3"), "B": ("u2",)}),))
    ev = evaluate(p, plan)
    # u0 [0,1] A; u1 [1,5] A; u2 ready 1+1=2 on B -> [2,6]; u3 ready max(5, 6+1)=7 -> [7,8]
    assert ev.finish_ms["u2"] == pytest.approx(6.0)
    assert ev.latency_ms == pytest.approx(8.0)
    serial = evaluate(p, Plan((Stage(("A",), {"A": ("u0", "u1", "u2", "u3")}),)))
    assert serial.latency_ms == pytest.approx(10.0)


def test_per_pu_power_model_charges_idle_over_the_period():
    p = tiny_problem({"A": [2.0, 2.0], "B": [3.0, 3.0]}, power_model="per_pu", idle={"A": 100.0, "B": 200.0},
                     power={"A": [1000.0, 1000.0], "B": [2000.0, 2000.0]})
    ev = evaluate(p, plan_from_string(("u0", "u1"), ("A", "B"), "AA"))
    # active 4 ms x 1000 mW; A idle 0 over a 4 ms period, B idle 4 ms x 200 mW
    assert ev.energy_mj == pytest.approx((4000 + 800) / 1000)


def test_checker_lists_every_violation():
    p = chain3()
    plan = Plan((Stage(("A",), {"A": ("u1", "u1")}), Stage(("A", "Z"), {"A": ("u0",)})))
    bad = violations(p, plan)
    text = "\n".join(bad)
    assert "placed twice" in text
    assert "u2 is not placed" in text
    assert "unknown PU 'Z'" in text
    assert "goes backwards" in text
    assert "serves stages 0 and 1" in text
    with pytest.raises(InfeasiblePlan) as err:
        evaluate(p, plan)
    assert err.value.problems == bad          # the evaluator refuses the plan for what the checker finds


def test_unit_that_cannot_run_on_pu():
    p = tiny_problem({"A": [1.0, None], "B": [1.0, 1.0]})
    assert any("cannot run" in v for v in violations(p, plan_from_string(("u0", "u1"), ("A", "B"), "AA")))


def test_plan_json_round_trip():
    p = chain3()
    plan = plan_from_string(("u0", "u1", "u2"), ("A", "B"), "ABB")
    again = plan_from_dict(plan.to_dict())
    assert again == plan
    assert evaluate(p, again).period_ms == evaluate(p, plan).period_ms

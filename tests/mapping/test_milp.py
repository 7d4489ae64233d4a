"""The MILP mapping solver against brute force on the tiny catalogue, and on a measured instance."""
import json
import subprocess
import sys
from functools import lru_cache

import pulp
import pytest

import pipeplan
from pipeplan.core.result import Quality, Termination
from pipeplan.core.vocabulary import MAPPING_KEYS as AXES
from pipeplan.core.vocabulary import MAPPING_TIE_BREAK as TIE_BREAK
from pipeplan.formulations.mapping import brute_force
from pipeplan.formulations.mapping.bounds import lower_bounds
from pipeplan.formulations.mapping.evaluator import evaluate
from pipeplan.formulations.mapping.plan import plan_from_dict
from pipeplan.instances.catalog import load_mapping
from pipeplan.instances.tiny import tiny_catalogue

TINY = {p.name: p for p in tiny_catalogue()}
LIMIT = 30


@lru_cache(maxsize=None)
def scored(name: str):
    """Every plan of a tiny instance with its evaluation."""
    return tuple(brute_force.scored_plans(TINY[name]))


def best(name: str, objective: str, **bounds) -> float:
    key = AXES[objective]
    return min(getattr(ev, key) for ev, _ in scored(name)
               if all(getattr(ev, k) <= v for k, v in bounds.items()))


def close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6 * max(1.0, abs(b))


@pytest.mark.parametrize("objective", list(AXES))
@pytest.mark.parametrize("name", list(TINY))
def test_reaches_brute_force_optimum(name, objective):
    problem = TINY[name]
    r = pipeplan.solve(problem, "milp", objective=objective, time_limit=LIMIT)
    assert r.termination == Termination.OPTIMAL and r.quality == Quality.PROVEN_OPTIMAL, r.message
    key, tie = AXES[objective], AXES[TIE_BREAK[objective]]
    optimum = brute_force.optimum(problem, objective)
    assert close(r.objectives[key], optimum)
    # the bound is the optimum less HiGHS's gap tolerances (1e-7 relative, 1e-6 absolute)
    assert r.bound[key] <= optimum and r.gap <= 1e-6
    # the tie-break is the best among the plans at the primary optimum
    assert close(r.objectives[tie], best(name, TIE_BREAK[objective], **{key: r.objectives[key] + 1e-9}))
    # the reported objectives are the evaluator's numbers for the returned plan
    assert evaluate(problem, plan_from_dict(r.plan)).objectives() == pytest.approx(r.objectives, rel=1e-12)
    assert r.params["backend"] == "highs" and r.params["objective"] == objective


@pytest.mark.parametrize("max_stages", [1, 2])
@pytest.mark.parametrize("name", ["tiny/chain4-3pu", "tiny/diamond-3pu", "tiny/module5-3pu"])
def test_max_stages(name, max_stages):
    problem = TINY[name]
    r = pipeplan.solve(problem, "milp", max_stages=max_stages, time_limit=LIMIT)
    plan = plan_from_dict(r.plan)
    assert r.termination == Termination.OPTIMAL and len(plan.stages) <= max_stages
    assert evaluate(problem, plan).objectives() == pytest.approx(r.objectives, rel=1e-12)    # re-scored
    assert close(evaluate(problem, plan).period_ms, brute_force.optimum(problem, "period", max_stages=max_stages))


@pytest.mark.parametrize("solver", ["milp", "cpsat"])
@pytest.mark.parametrize("name", ["tiny/diamond-3pu", "tiny/module5-3pu"])
def test_a_run_out_of_time_keeps_to_max_stages(solver, name):
    """10 ms is too little to load the model: the plan that comes back is the fallback, which had
    been the heuristics' 3-stage plan under max_stages=1. Whatever path the run takes, its plan
    has at most max_stages stages and the evaluator's figures."""
    problem = TINY[name]
    r = pipeplan.solve(problem, solver, max_stages=1, time_limit=0.01)
    assert r.plan is not None, r.message
    plan = plan_from_dict(r.plan)
    assert len(plan.stages) == 1
    assert evaluate(problem, plan).objectives() == pytest.approx(r.objectives, rel=1e-12)
    assert r.objectives["period_ms"] >= brute_force.optimum(problem, "period", max_stages=1) * (1 - 1e-9)


@pytest.mark.parametrize("name", ["tiny/diamond-3pu", "tiny/module5-3pu", "tiny/chain5-3pu"])
def test_epsilon_bounds(name):
    problem = TINY[name]
    lat_opt = brute_force.optimum(problem, "latency")
    energy_opt = brute_force.optimum(problem, "energy")
    # a bound nobody meets: an infeasible result with the reason, not an exception
    for objective, bounds in (("period", {"latency_ms": lat_opt * 0.99}),
                              ("latency", {"energy_mj": energy_opt * 0.99})):
        r = pipeplan.solve(problem, "milp", objective=objective, bounds=bounds, time_limit=LIMIT)
        assert r.termination == Termination.INFEASIBLE and r.quality == Quality.NONE
        assert r.plan is None and "bounds" in r.message and r.params["bounds"] == bounds
    # a bound some plans meet: the best period among them
    cap = (lat_opt + best(name, "latency", period_ms=brute_force.optimum(problem, "period") + 1e-9)) / 2
    r = pipeplan.solve(problem, "milp", objective="period", bounds={"latency_ms": cap}, time_limit=LIMIT)
    assert r.termination == Termination.OPTIMAL
    assert r.objectives["latency_ms"] <= cap + 1e-9
    assert close(r.objectives["period_ms"], best(name, "period", latency_ms=cap))


@pytest.mark.skipif(not pulp.PULP_CBC_CMD(msg=False).available(), reason="PuLP's CBC binary is not available")
@pytest.mark.parametrize("name", ["tiny/chain5-3pu", "tiny/module5-3pu"])
def test_cbc_agrees_with_highs(name):
    for objective in AXES:
        highs, cbc = (pipeplan.solve(TINY[name], "milp", objective=objective, backend=b, time_limit=LIMIT)
                      for b in ("highs", "cbc"))
        assert cbc.params["backend"] == "cbc" and cbc.termination == Termination.OPTIMAL
        assert close(cbc.objectives[AXES[objective]], highs.objectives[AXES[objective]])
        # CBC's solution is read back into a plan its own way: re-scored by the evaluator
        assert evaluate(TINY[name], plan_from_dict(cbc.plan)).objectives() == pytest.approx(cbc.objectives, rel=1e-12)


def test_warm_start_keeps_the_optimum():
    problem = TINY["tiny/module5-3pu"]
    start = plan_from_dict(pipeplan.solve(problem, "pipeline-dp").plan)
    r = pipeplan.solve(problem, "milp", warm_start=start, time_limit=LIMIT)
    assert r.termination == Termination.OPTIMAL
    assert evaluate(problem, plan_from_dict(r.plan)).objectives() == pytest.approx(r.objectives, rel=1e-12)
    assert close(r.objectives["period_ms"], brute_force.optimum(problem, "period"))


def test_measured_squeezenet_between_bound_and_pipeline_dp():
    """A cold start (the default), so the MILP finds the optimum on its own."""
    problem = load_mapping("khadas-vim3/SqueezeV1")
    r = pipeplan.solve(problem, "milp", time_limit=LIMIT)
    dp = pipeplan.solve(problem, "pipeline-dp")
    assert r.termination == Termination.OPTIMAL, r.message
    assert lower_bounds(problem)["period_ms"] - 1e-9 <= r.objectives["period_ms"] <= dp.objectives["period_ms"] + 1e-9
    assert evaluate(problem, plan_from_dict(r.plan)).objectives() == pytest.approx(r.objectives, rel=1e-12)


def test_time_limit_returns_warm_plan_and_dual_bound():
    """YOLOv3 (75 blocks) is not proven in 2 s: the run stops with a plan no worse than its warm
    start and HiGHS's dual bound below it."""
    problem = load_mapping("khadas-vim3/YOLOv3")
    dp = pipeplan.solve(problem, "pipeline-dp")
    r = pipeplan.solve(problem, "milp", time_limit=2, warm_start=plan_from_dict(dp.plan))
    assert r.termination == Termination.TIME_LIMIT and r.quality == Quality.FEASIBLE
    assert r.objectives["period_ms"] <= dp.objectives["period_ms"] + 1e-9
    # the plan cut short is the one reported: re-scored by the evaluator
    assert evaluate(problem, plan_from_dict(r.plan)).objectives() == pytest.approx(r.objectives, rel=1e-12)
    assert 0.0 < r.bound["period_ms"] <= r.objectives["period_ms"] + 1e-6
    assert 0.0 < r.gap < 1.0


def test_cli_stdout_is_only_the_result():
    """HiGHS prints a banner on C stdout; the solver silences it so the JSON parses (and the
    bench's hundreds of runs stay quiet)."""
    proc = subprocess.run([sys.executable, "-m", "pipeplan.app.cli", "solve", "khadas-vim3/Google", "--solver", "milp",
                           "--time-limit", str(LIMIT)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["solver"] == "milp" and result["termination"] == "optimal"
    assert "HiGHS" not in proc.stderr


@pytest.mark.parametrize("name, objective", [("cap_chain", "period"), ("cap_chain", "energy"),
                                             ("cap_chain_ss", "energy_ss")])
def test_the_chain_milp_plans_at_the_profile_limits(name, objective):
    # 1e7 ms at 1e9 mW: 1e16 uJ a block, past HiGHS's largest coefficient (PuLP's HiGHS
    # interface then failed with an IndexError); the chain MILP now counts energy coarser there
    import math
    from pathlib import Path

    from pipeplan.formulations.mapping.instance_io import load_problem_file
    problem = load_problem_file(Path(__file__).resolve().parent / "limits" / name / "inst.json")
    assert problem.is_chain
    r = pipeplan.solve(problem, "milp", time_limit=10, seed=0, objective=objective)
    assert r.termination == Termination.OPTIMAL and r.quality == Quality.PROVEN_OPTIMAL, r.message
    again = evaluate(problem, plan_from_dict(r.plan)).objectives()
    assert all(math.isfinite(v) and again[k] == v for k, v in r.objectives.items() if k in again)
    key = {"period": "period_ms", "energy": "energy_mj", "energy_ss": "energy_ss_mj"}[objective]
    assert r.objectives[key] == {"period": 4e7, "energy": 6e13, "energy_ss": 4e13}[objective]

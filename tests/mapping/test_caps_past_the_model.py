"""A cap (``bounds``) far past every plan binds nothing: the exact solvers give the plan they
give without it. 1e15 ms had reached CP-SAT as an integer past 64 bits and 1e308 as infinity,
a solver error (exit 1) where the MILP accepted both (found by a hostile-input audit)."""
from pathlib import Path

import pytest

import pipeplan
from pipeplan.formulations.mapping.instance_io import load_problem_file
from pipeplan.instances.catalog import load_mapping

GOOD = Path(__file__).resolve().parents[1] / "bad_inputs" / "good"

CASES = [("diamond", "period", "latency_ms"), ("diamond", "energy", "latency_ms"),
         ("khadas-vim3/Alex", "period", "latency_ms"), ("khadas-vim3/Alex", "energy", "period_ms")]


def _problem(name):
    return load_problem_file(GOOD / "diamond.json") if name == "diamond" else load_mapping(name)


@pytest.mark.parametrize("solver", ["cpsat", "milp"])
@pytest.mark.parametrize("name, objective, key", CASES)
def test_a_cap_past_every_plan_changes_nothing(solver, name, objective, key):
    problem = _problem(name)
    free = pipeplan.solve(problem, solver, objective=objective, time_limit=60)
    assert free.quality.value == "proven_optimal", free.message
    for cap in (1e15, 1e308):
        capped = pipeplan.solve(problem, solver, objective=objective, bounds={key: cap}, time_limit=60)
        assert capped.quality.value == "proven_optimal", capped.message
        value = "energy_mj" if objective == "energy" else f"{objective}_ms"
        assert capped.objectives[value] == pytest.approx(free.objectives[value], rel=1e-9)

"""Mapping instances at the profile's limits (1e7 ms, 1e9 mW): the CP-SAT models must plan
them; their energies in nanojoules had passed 64-bit integers (OR-Tools: TypeError)."""
import copy
import json
import math
from pathlib import Path

import pytest

import pipeplan
from pipeplan.formulations.mapping import brute_force
from pipeplan.formulations.mapping.evaluator import evaluate
from pipeplan.formulations.mapping.instance_io import load_problem_file, problem_from_dict
from pipeplan.formulations.mapping.plan import plan_from_dict

pytest.importorskip("ortools")
GOOD = Path(__file__).resolve().parents[1] / "bad_inputs" / "good"


def _at_the_limits():
    doc = json.loads((GOOD / "diamond.json").read_text())
    prof = json.loads((GOOD / "profile.json").read_text())
    for table in ("time_ms", "power_mw"):
        for pu in prof[table].values():
            for level in pu:
                pu[level] = [1e7 if table == "time_ms" else 1e9] * len(pu[level])
    for phase in ("input_stage", "output_stage"):
        for pu in prof[phase].values():
            for level in pu.values():
                level.update(time_ms=1e7, power_mw=1e9)
    prof["transfers"].update(default={"fixed_ms": 1e7, "ms_per_mb": 0.0}, power_mw=1e9)
    doc["profile"] = prof
    return problem_from_dict(copy.deepcopy(doc), "edge.json", GOOD)


@pytest.mark.parametrize("objective, extra", [("period", {}), ("energy", {}), ("period", {"shared_pus": True})])
def test_cpsat_plans_at_the_profile_limits(objective, extra):
    """Its optimum is the brute force's. With shared PUs the comparison had been with the result
    itself, and hid a wrong proof: CP-SAT's presolve took 4e7 ms for the optimum where 3e7 ms
    is feasible (durations past 2^30 model units; ``cpsat_model.PRESOLVE_SAFE_UNITS``)."""
    problem = _at_the_limits()
    r = pipeplan.solve(problem, "cpsat", time_limit=5, seed=0, objective=objective, **extra)
    assert r.termination.value == "optimal", r.message
    key = {"period": "period_ms", "energy": "energy_mj"}[objective]
    stages = {"max_stages": r.params["max_stages"]} if extra else {}
    assert r.objectives[key] == pytest.approx(brute_force.optimum(problem, objective, **extra, **stages), rel=1e-4)
    again = evaluate(problem, plan_from_dict(r.plan)).objectives()
    assert all(math.isfinite(v) and again[k] == v for k, v in r.objectives.items() if k in again)


@pytest.mark.parametrize("objective", ["period", "energy"])
def test_the_chain_model_plans_at_the_profile_limits(objective):
    # a chain goes to the chain model (cpsat_chain.py), whose 10 nJ units had passed int64 there
    problem = _at_the_limits()
    doc = problem.to_dict()
    doc["graph"]["edges"] = [{"src": f"u{i}", "dst": f"u{i + 1}", "bytes": None} for i in range(3)]
    chain = problem_from_dict(doc, "chain.json", GOOD)
    assert chain.is_chain
    r = pipeplan.solve(chain, "cpsat", time_limit=5, seed=0, objective=objective)
    assert r.termination.value == "optimal", r.message
    again = evaluate(chain, plan_from_dict(r.plan)).objectives()
    assert all(math.isfinite(v) and again[k] == v for k, v in r.objectives.items() if k in again)


LIMITS = Path(__file__).resolve().parent / "limits"


def test_the_chain_model_proves_energy_ss_at_the_profile_limits():
    # the steady-state window rows weighed 1e13 units of 10 ns by 1e6 (CP-SAT: "Possible integer
    # overflow in constraint"); the chain model now counts time (and energy) coarser there
    problem = load_problem_file(LIMITS / "cap_chain_ss" / "inst.json")
    assert problem.is_chain and problem.profile.static_power_mw == 1e9
    r = pipeplan.solve(problem, "cpsat", time_limit=10, seed=0, objective="energy_ss")
    assert r.termination.value == "optimal" and r.quality.value == "proven_optimal", r.message
    again = evaluate(problem, plan_from_dict(r.plan)).objectives()
    assert all(math.isfinite(v) and again[k] == v for k, v in r.objectives.items() if k in again)
    assert r.objectives["energy_ss_mj"] == pytest.approx(4e13, rel=1e-9)

"""The offline optimum: CP-SAT against brute force on tiny rounds (linear engine, where the
fixed-duration model is the simulator), no policy beating a proven optimum, and the replay
of CP-SAT's plan reproducing its objective."""
import pytest

import pipeplan
from pipeplan.core.result import Quality, Termination
from pipeplan.formulations.rollout import brute_force
from pipeplan.formulations.rollout.checker import check
from pipeplan.formulations.rollout.fixed_model import (
    best_trainer,
    completions,
    fixed_model,
    list_schedule,
    serial_schedule,
)
from pipeplan.formulations.rollout.replay import replay
from pipeplan.instances.rollout import TINY, tiny_instance
from pipeplan.solvers.rollout.online import POLICIES
from tests.rollout_helpers import small_round

TINIES = [tiny_instance(k) for k in range(TINY)]


@pytest.fixture(scope="module")
def optima():
    return {p.name: brute_force.optimum(p)[0] for p in TINIES}


@pytest.mark.solvers("rollout", exact=True)
@pytest.mark.parametrize("problem", TINIES, ids=lambda p: p.name)
def test_exact_solver_reaches_the_brute_force_optimum(solver, problem, optima):
    r = pipeplan.solve(problem, solver, time_limit=20, threads=1)
    assert r.termination is Termination.OPTIMAL and r.quality is Quality.PROVEN_OPTIMAL, r.message
    assert r.objectives["train_end_s"] == pytest.approx(optima[problem.name], abs=1e-9)
    assert r.bound["train_end_s"] == pytest.approx(optima[problem.name], abs=1e-9) and r.gap == pytest.approx(0, abs=1e-12)
    s = replay(problem, r.plan)
    assert check(problem, s) == [] and s.metrics() == pytest.approx(r.objectives)


@pytest.mark.parametrize("problem", TINIES, ids=lambda p: p.name)
def test_no_policy_beats_the_optimum_and_some_are_worse(problem, optima):
    ends = {q: pipeplan.solve(problem, q).objectives["train_end_s"] for q in POLICIES}
    assert min(ends.values()) >= optima[problem.name] - 1e-9
    if problem.name == "rollout/tiny-2":     # every policy reaches its optimum (13.75 s), sync included
        assert ends == pytest.approx({q: optima[problem.name] for q in POLICIES}, abs=1e-9)
    else:
        assert ends["sync"] > optima[problem.name] + 1e-9


def test_a_tiny_optimum_by_hand():
    # one slot, two groups of one request (3 and 1 steps of 1 s), U = 1, every update 1 s + tokens
    p = small_round([[3], [1]], prompts=[1, 1], seqs=1, c0=1.0, per_token=0.0, optimizer=2.0, U=1)
    # short first: group 1 done at 1 s, trains 1-3.1; group 0 done at 4 s, trains 4-6.1
    value, starts, batches = brute_force.optimum(p)
    assert value == pytest.approx(6.1) and starts == [1.0, 0.0] and batches == [[1], [0]]
    assert pipeplan.solve(p, "cpsat", time_limit=10).objectives["train_end_s"] == pytest.approx(6.1)


def test_serial_schedule_never_starts_later_than_a_list_schedule_of_the_same_order():
    p = TINIES[1]
    m = fixed_model(p)
    order = sorted(range(p.n_requests), key=lambda i: -p.lengths[i])
    serial, listed = serial_schedule(m, order), list_schedule(m, order)
    assert all(a <= b + 1e-12 for a, b in zip(serial, listed))
    assert best_trainer(p, completions(p, m, serial))[0] <= best_trainer(p, completions(p, m, listed))[0] + 1e-12


def test_cpsat_on_a_realistic_engine_is_feasible_and_rescored():
    from pipeplan.formulations.rollout.workloads import preset_round
    p = preset_round("sci-jl", 4, seed=3)
    r = pipeplan.solve(p, "cpsat", time_limit=10, threads=1)
    assert r.quality is Quality.FEASIBLE and r.params["model_exact"] is False, r.message
    s = replay(p, r.plan)
    assert check(p, s) == [] and s.metrics() == pytest.approx(r.objectives)
    assert r.objectives["train_end_s"] >= r.bound["train_end_s"]


def test_a_model_built_too_late_to_load_is_left_unsolved(monkeypatch):
    """CP-SAT spends about 0.2 x the build time loading a model before it reads its time limit
    (5.6 s at R = 2,000 with 0.1 s left): with less left than that share the hint comes back."""
    from pipeplan.solvers.rollout import cpsat
    problem = tiny_instance(0)
    monkeypatch.setattr(cpsat, "LOAD_PER_BUILD", 1e9)       # no time left is ever enough
    r = pipeplan.solve(problem, "cpsat", time_limit=20, threads=1)
    assert r.termination is Termination.TIME_LIMIT and r.quality is Quality.FEASIBLE
    assert "built with too little of the time limit left to load it" in r.message
    monkeypatch.setattr(cpsat, "LOAD_PER_BUILD", 0.25)
    assert pipeplan.solve(problem, "cpsat", time_limit=20, threads=1).termination is Termination.OPTIMAL



@pytest.mark.parametrize("solver", ["cpsat", "cpsat-lns"])
def test_a_round_past_cp_sats_integer_time_is_refused_by_name(solver):
    """Times within the problem's limits can still exceed CP-SAT's 64-bit integers in model
    units (10,000-token responses at 1e6 s per token: about 1e17 ms): a one-line error naming
    the time unit, where OR-Tools had failed with a TypeError; the coarser unit it names fits."""
    big = small_round([[10_000, 4], [3, 1]], [2, 10_000], seqs=2, cap=30_000, c0=1e6, c1=1e6, c2=1e6,
                      prefill_s_per_token=1e6, per_token=1e6, optimizer=1.5, budget=40_000, U=1)
    r = pipeplan.solve(big, solver, time_limit=10, threads=1)
    assert r.termination is Termination.ERROR and "time_unit_s: the round spans about" in r.message
    assert "64-bit" in r.message and "TypeError" not in r.message
    if solver == "cpsat-lns":          # it takes no time unit, so it names none
        assert "fits it" not in r.message
        return
    unit = float(r.message.split("time_unit_s=")[1].split(" ")[0])
    r = pipeplan.solve(big, "cpsat", time_limit=10, threads=1, time_unit_s=unit)
    assert r.quality is not Quality.NONE, r.message
    assert check(big, replay(big, r.plan)) == []

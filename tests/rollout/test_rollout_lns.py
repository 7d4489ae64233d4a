"""The large-neighbourhood search (``cpsat-lns``): it reaches the brute-force optimum of tiny
rounds, a part with every request free is CP-SAT on the whole round and one with none free
keeps the schedule, it never ends after its starts, and bad settings are refused."""
import dataclasses
import math

import numpy as np
import pytest

import pipeplan
from pipeplan.core.errors import InputError
from pipeplan.core.result import Quality, Termination
from pipeplan.formulations.rollout import brute_force
from pipeplan.formulations.rollout.fixed_model import fixed_model, serial_schedule
from pipeplan.formulations.rollout.problem import EngineModel
from pipeplan.formulations.rollout.replay import replay
from pipeplan.formulations.rollout.trainer import chunks
from pipeplan.formulations.rollout.workloads import preset_round
from pipeplan.instances.rollout import TINY, tiny_instance
from pipeplan.solvers.rollout.cpsat import GRID, RolloutCpModel
from pipeplan.solvers.rollout.lns import _Search, solve_lns
from pipeplan.solvers.rollout.online import POLICIES
from tests.rollout_helpers import small_round

TINIES = [tiny_instance(k) for k in range(TINY)]


@pytest.mark.parametrize("problem", TINIES, ids=lambda p: p.name)
def test_on_tiny_rounds_the_search_reaches_the_brute_force_optimum_and_claims_no_proof(problem):
    optimum = brute_force.optimum(problem)[0]
    r = pipeplan.solve(problem, "cpsat-lns", time_limit=20, part_s=0.2, patience=20)
    assert r.objectives["train_end_s"] == pytest.approx(optimum, abs=1e-9)
    # ended by its patience, and a heuristic: it never says optimal
    assert r.termination is Termination.COMPLETED and r.quality is Quality.FEASIBLE, r.message
    assert r.params["parts"] >= 20
    assert replay(problem, r.plan).metrics() == pytest.approx(r.objectives)


@pytest.mark.parametrize("k", range(TINY))
def test_a_part_freeing_every_request_is_cpsat_and_one_freeing_none_keeps_the_starts(k):
    problem = tiny_instance(k)
    m = fixed_model(problem)
    unit = m.tau / GRID
    model = RolloutCpModel(problem, m, unit, GRID)
    search = _Search(problem, model, np.random.default_rng(0))
    # a poor start: the longest requests last
    order = sorted(range(problem.n_requests), key=lambda i: problem.lengths[i])
    starts = [GRID * math.ceil(s / unit / GRID - 1e-9) for s in serial_schedule(m, order)]
    batches = chunks(list(range(problem.R)), problem.update_sizes())
    kept = search.fixed_solve(starts, batches, np.zeros(problem.n_requests, bool), 5.0, 0, 1)
    assert kept is not None and kept[0] == starts
    freed = search.fixed_solve(starts, batches, np.ones(problem.n_requests, bool), 5.0, 0, 1)
    assert freed[2] * unit == pytest.approx(brute_force.optimum(problem)[0], rel=1e-6)
    assert freed[2] <= kept[2]


def test_the_search_never_ends_after_the_best_online_policy_or_the_start_it_is_given():
    p = preset_round("olyphys", 8, K=4, seed=3)
    p = dataclasses.replace(p, engine=EngineModel(p.engine.max_num_seqs, 60_000, 0.025))   # linear, KV-bound
    assert p.engine.linear
    online = min(pipeplan.solve(p, q).objectives["train_end_s"] for q in POLICIES)
    planned = pipeplan.solve(p, "step-plan", evaluations=300, sequence_moves=0)
    r = pipeplan.solve(p, "cpsat-lns", time_limit=4, part_s=0.5, start=planned.plan)
    end = r.objectives["train_end_s"]
    assert end <= online + 1e-9 and end <= planned.objectives["train_end_s"] + 1e-9
    # where the model is the engine, a policy's own times are a start the model scores as simulated
    # (less what re-choosing the trainer's updates saves)
    assert r.params["start_train_end_s"] <= online * (1 + 1e-9)
    assert replay(p, r.plan).metrics()["train_end_s"] == pytest.approx(end)


@pytest.mark.parametrize("setting, field", [
    ({"time_limit": 0}, "time_limit"), ({"time_limit": -1}, "time_limit"), ({"time_limit": math.inf}, "time_limit"),
    ({"time_limit": True}, "time_limit"), ({"part_s": 0}, "part_s"), ({"patience": 0}, "patience"),
    ({"patience": 2.5}, "patience"), ({"start": {"admissions": [[0, 0.0]], "updates": [[0], [1]]}}, "start"),
    ({"start": {"admissions": [[0, 0.0], [1, 0.0]]}}, "start")])
def test_bad_settings_are_refused_in_one_line(setting, field):
    with pytest.raises(InputError) as err:
        solve_lns(small_round([[2], [3]]), **setting)
    assert err.value.field == field


def test_the_gap_study_starts_the_search_from_its_best_schedule_and_keeps_what_it_finds(monkeypatch):
    from pipeplan.app.studies import rollout_optimum
    monkeypatch.setattr(rollout_optimum, "PLAN_EVALUATIONS", 200)   # the planner's annealing: not what is tested
    p = preset_round("olyphys", 8, K=4, seed=3)
    p = dataclasses.replace(p, engine=EngineModel(p.engine.max_num_seqs, 60_000, 0.025))
    r = rollout_optimum.gap_row(p, workload="olyphys", R=8, engine="linear", rho="preset", time_limit=None,
                                threads=1, bound_time=None, lns_time=3)
    # started from the least of the policies and the planner, so never after it
    assert r["lns_s"] <= min(r["online_s"], r["step_plan_s"]) + 1e-9
    assert r["best_s"] == pytest.approx(min(r["lns_s"], r["online_s"], r["step_plan_s"]))
    real = rollout_optimum.gap_row(preset_round("olyphys", 8, K=4, seed=3), workload="olyphys", R=8, engine="real",
                                   rho="preset", time_limit=None, threads=1, bound_time=None, lns_time=3)
    assert real["lns_s"] is None            # the model is the engine's only on a linear one

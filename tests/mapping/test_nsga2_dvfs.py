"""NSGA-II with DVFS levels in its genes: on a tiny two-level instance it finds the exhaustive
(plans x levels) front, on the measured Alex instance it beats the proven best max-frequency
plan's energy under the same period bound; the level genes repair by rank; every output is
re-scored by the evaluator."""
import itertools
from functools import lru_cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pipeplan
from pipeplan.core.errors import InputError
from pipeplan.core.registry import solvers
from pipeplan.formulations.mapping import brute_force
from pipeplan.formulations.mapping.checker import violations
from pipeplan.formulations.mapping.evaluator import evaluate
from pipeplan.formulations.mapping.pareto import dominates, hv_ratio, non_dominated, rounded
from pipeplan.formulations.mapping.plan import plan_from_dict
from pipeplan.formulations.mapping.problem import Edge, MappingProblem, Unit
from pipeplan.formulations.mapping.profile import profile_from_dict
from pipeplan.instances.catalog import load_mapping
from pipeplan.solvers.mapping.nsga2 import GeneCodec


def dvfs_problem() -> MappingProblem:
    """Three units in a chain on two CPUs with a slow and a fast level: the slow level draws
    0.4x the power for 1.2x the time, so slowing a stage that is not the bottleneck saves
    energy at the same period."""
    units = ["u0", "u1", "u2"]
    doc = {
        "schema": "pipeplan.profile/1", "name": "tiny/dvfs", "power_model": "board", "static_power_mw": 500.0,
        "concurrent_power_share": 0.5,
        "pus": {p: {"kind": "cpu", "levels": ["lo", "hi"]} for p in ("A", "B")},
        "units": units,
        "time_ms": {"A": {"lo": [7.2, 2.4, 2.4], "hi": [6.0, 2.0, 2.0]},
                    "B": {"lo": [6.0, 1.8, 1.2], "hi": [5.0, 1.5, 1.0]}},
        "power_mw": {"A": {"lo": [1200.0] * 3, "hi": [3000.0] * 3},
                     "B": {"lo": [1000.0] * 3, "hi": [2500.0] * 3}},
        "transfers": {"default": {"fixed_ms": 0.5, "ms_per_mb": 0.0}, "power_mw": 800.0},
    }
    return MappingProblem(name="tiny/dvfs", units=tuple(Unit(u) for u in units),
                          edges=tuple(Edge(a, b, None) for a, b in zip(units, units[1:])),
                          profile=profile_from_dict(doc, "tiny/dvfs"), source="tiny/dvfs")


TINY = dvfs_problem()
AXES = ("period", "energy")
KEYS = ("period_ms", "energy_mj")


def exhaustive(problem):
    """(evaluation, plan) of every plan of brute force at every combination of levels."""
    import dataclasses
    levels = [problem.profile.pus[p].levels for p in problem.pu_names]
    out = []
    for plan in brute_force.all_plans(problem):
        place = plan.placement()
        names = [u.name for u in problem.units]
        for combo in itertools.product(*(levels[problem.pu_names.index(place[u][1])] for u in names)):
            p = dataclasses.replace(plan, levels=dict(zip(names, combo)))
            try:
                out.append((evaluate(problem, p), p))
            except ValueError:        # a deadlocking cross-PU order: not a plan (as brute force)
                break
    return out


@lru_cache(maxsize=None)
def run(name: str, dvfs: bool, objectives=AXES, pop_size=24, generations=30):
    problem = TINY if name == TINY.name else load_mapping(name)
    return problem, pipeplan.solve(problem, "nsga2", objectives=objectives, dvfs=dvfs, pop_size=pop_size,
                                   generations=generations, seed=0)


def test_every_front_plan_is_feasible_and_rescored():
    problem, r = run(TINY.name, True)
    assert r.params["dvfs"] is True and r.front
    for member in r.front:
        plan = plan_from_dict(member["plan"])
        assert violations(problem, plan) == []
        assert evaluate(problem, plan).objectives() == member["objectives"]


def test_tiny_front_is_the_exhaustive_front_over_plans_and_levels():
    problem, r = run(TINY.name, True)
    scored = exhaustive(problem)
    exact = non_dominated([getattr(ev, k) for k in KEYS] for ev, _ in scored)
    found = [rounded([m["objectives"][k] for k in KEYS]) for m in r.front]
    assert not [(f, e) for f in found for e in exact if dominates(f, e)]
    ref = (1.1 * max(ev.period_ms for ev, _ in scored), 1.1 * max(ev.energy_mj for ev, _ in scored))
    assert hv_ratio(found, exact, ref) >= 0.99
    # the levels pay: at the best top-level period, a slower level costs less energy per frame
    top = [(ev.period_ms, ev.energy_mj) for ev, p in scored if set(p.levels.values()) == {"hi"}]
    period = min(t[0] for t in top)
    best_top = min(e for p, e in top if p <= period + 1e-9)
    assert min(e for p, e in found if p <= period + 1e-9) < best_top - 1e-6


def test_alex_beats_the_best_max_frequency_plan_under_the_same_period_bound():
    """Reference: CP-SAT's proven minimum energy per frame among top-level plans with a period
    at most 1.05 x the proven minimum period. NSGA-II with DVFS finds a plan within that
    period with less energy per frame; without DVFS it cannot."""
    problem = load_mapping("khadas-vim3/Alex")
    fastest = pipeplan.solve(problem, "cpsat", objective="period", time_limit=30)
    bound = 1.05 * fastest.objectives["period_ms"]
    ref = pipeplan.solve(problem, "cpsat", objective="energy", bounds={"period_ms": bound}, time_limit=30)
    assert ref.quality.value == "proven_optimal"
    best = {}
    for dvfs in (False, True):
        _, r = run(problem.name, dvfs)
        within = [m for m in r.front if m["objectives"]["period_ms"] <= bound]
        assert within
        member = min(within, key=lambda m: m["objectives"]["energy_mj"])
        plan = plan_from_dict(member["plan"])
        assert evaluate(problem, plan).objectives() == member["objectives"]
        assert bool(plan.levels) == dvfs         # only a DVFS run leaves the top levels
        best[dvfs] = member["objectives"]["energy_mj"]
    assert best[False] >= ref.objectives["energy_mj"] - 1e-6   # a proven optimum is never beaten at top level
    assert best[True] < 0.97 * ref.objectives["energy_mj"]     # measured: about 0.93 x


def test_steady_state_energy_is_an_objective():
    problem, r = run(TINY.name, True, objectives=("energy_ss", "period", "latency"))
    assert r.params["objectives"] == ["energy_ss", "period", "latency"]
    best = min(evaluate(problem, plan_from_dict(m["plan"])).energy_ss_mj for m in r.front)
    assert r.objectives["energy_ss_mj"] == pytest.approx(best)
    assert best == pytest.approx(min(ev.energy_ss_mj for ev, _ in exhaustive(problem)))


ALEX = GeneCodec(load_mapping("khadas-vim3/Alex"), dvfs=True)


def test_level_genes_map_by_rank_onto_the_units_pu():
    codec = ALEX
    g, b, lit = (codec.pus.index(p) for p in ("G", "B", "L"))
    assert len(codec.levels[0][g]) == 40 and len(codec.levels[0][lit]) == 6 and codec.rank == 40
    genes = codec.encode(plan_from_dict({"stages": [{"pus": ["G"], "order": {"G": [f"b{i}" for i in range(8)]}}]}))
    assert list(genes[2::3]) == [codec._level_gene(0, g, 39)] * 8           # top level throughout
    genes[1::3] = lit                                                        # move every unit to L ...
    fixed = codec.repair(genes)
    assert codec.plan(fixed).levels == {}                                    # ... still at its top level
    genes[2::3] = 0
    assert set(codec.plan(codec.repair(genes)).levels.values()) == {"0"}     # the slowest maps to the slowest
    genes[2::3] = 20                                                         # the middle of G's 40 ...
    assert set(codec.plan(codec.repair(genes)).levels.values()) == {"3"}     # ... is the 4th of L's 6
    genes[1::3] = b
    assert set(codec.plan(codec.repair(genes)).levels.values()) == {"4"}     # and the 5th of B's 8


def test_a_plan_with_levels_round_trips_through_the_genes():
    problem = ALEX.problem
    plan = plan_from_dict({"stages": [{"pus": ["G"], "order": {"G": ["b0", "b1", "b2"]}},
                                      {"pus": ["B"], "order": {"B": ["b3", "b4", "b5", "b6", "b7"]}}],
                           "levels": {"b0": "2.3", "b4": "5", "b7": "0"}})
    back = ALEX.plan(ALEX.encode(plan))
    assert back.levels == plan.levels
    assert evaluate(problem, back).objectives() == evaluate(problem, plan).objectives()


def _vectors(codec):
    return st.tuples(*(st.integers(0, int(u)) for u in codec.upper))


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_repair_makes_any_dvfs_gene_vector_feasible(data):
    codec = data.draw(st.sampled_from([ALEX, GeneCodec(TINY, dvfs=True)]))
    fixed = codec.repair(np.array(data.draw(_vectors(codec))))
    assert (codec.repair(fixed) == fixed).all()
    plan = codec.plan(fixed)
    assert violations(codec.problem, plan) == []
    evaluate(codec.problem, plan)


def test_dvfs_only_for_solvers_that_declare_it():
    declared = {s.name: s.params["dvfs"].default for s in solvers("mapping") if "dvfs" in s.params}
    assert declared == {"nsga2": False, "cpsat": False, "milp": False}
    with pytest.raises(InputError, match="dvfs"):
        pipeplan.solve(TINY, "heft", dvfs=True)
    with pytest.raises(InputError, match="dvfs: nsga2 takes true or false, got 'yes'"):   # before any work
        pipeplan.solve(TINY, "nsga2", dvfs="yes")

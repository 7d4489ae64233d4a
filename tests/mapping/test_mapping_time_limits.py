"""Time limits of the mapping solvers at any size: the synthetic instance generator, the shared
deadline in every builder and heuristic, and the plans that come back when time runs out."""
import json
import math

import networkx as nx
import pytest

import pipeplan
from pipeplan.core.deadline import Deadline, OutOfTime
from pipeplan.core.errors import InputError
from pipeplan.core.result import Quality, Termination
from pipeplan.formulations.mapping.checker import violations
from pipeplan.formulations.mapping.evaluator import evaluate
from pipeplan.formulations.mapping.graph_limits import MAX_EDGES, MAX_UNITS
from pipeplan.formulations.mapping.instance_io import INSTANCE_SCHEMA
from pipeplan.formulations.mapping.plan import plan_from_dict
from pipeplan.formulations.mapping.profile import load_profile
from pipeplan.instances.catalog import load_mapping
from pipeplan.instances.paths import PLATFORMS_DIR
from pipeplan.instances.synthetic_mapping import synthetic_mapping
from pipeplan.profiles.roofline import load_platform, roofline_profile
from pipeplan.solvers.mapping.common import transfer_times
from pipeplan.solvers.mapping.cpsat_model import MappingCpModel
from pipeplan.solvers.mapping.heft import heft_plan
from pipeplan.solvers.mapping.milp_model import MappingMilp
from pipeplan.solvers.mapping.pipeline_dp import pipeline_plan
from pipeplan.solvers.mapping.single import fastest_pu_plan, single_plan
from pipeplan.solvers.mapping.warm_start import best_heuristic_plan
from tests.cli_helpers import ROOT, assert_input_error, run_cli
from tests.helpers import tiny_problem

LARGE = synthetic_mapping(2000)


def expired() -> Deadline:
    return Deadline(0)


def assert_time_limited_plan(r):
    """Status time_limit, a plan the checker accepts and the evaluator's objectives, a gap."""
    assert r.termination == Termination.TIME_LIMIT and r.quality == Quality.FEASIBLE, r.message
    plan = plan_from_dict(r.plan)
    assert violations(LARGE, plan) == []
    assert r.objectives == evaluate(LARGE, plan).objectives()
    assert r.gap is not None and 0 < r.gap < 1


# ------------------------------------------------------------------------------ generator


def test_synthetic_instance_has_the_size_asked_and_is_seeded():
    p = synthetic_mapping(500, seed=3)
    assert len(p.units) == 500 and p.name == "synthetic/mapping-n500-seed3"
    assert p.to_dict() == synthetic_mapping(500, seed=3).to_dict()
    assert p.to_dict() != synthetic_mapping(500, seed=4).to_dict()
    g = p.graph
    assert nx.is_directed_acyclic_graph(g)
    assert [u for u in g if not g.in_degree(u)] == ["u0"] and [u for u in g if not g.out_degree(u)] == ["u499"]
    assert any(g.out_degree(u) > 1 for u in g)                       # parallel branches
    npu = p.profile.time_ms["N"]["max"]
    assert None in npu and all(t is not None for t in p.profile.time_ms["B"]["max"])
    with pytest.raises(InputError, match="n_units: need 2 to 20,000 units, got 1"):
        synthetic_mapping(1)


def test_a_graph_at_the_measured_size_is_taken_and_one_past_it_refused_before_it_is_parsed(tmp_path):
    """Past MAX_UNITS the time limits no longer hold (100,000 units: cpsat under a 2 s limit
    took 13 s), so an instance or profile that large is refused naming its field, before its
    units are read: the cap is checked on the list's length, not after parsing it."""
    assert len(synthetic_mapping(MAX_UNITS).units) == MAX_UNITS
    with pytest.raises(InputError, match="n_units: need 2 to 20,000 units"):     # before it is drawn
        synthetic_mapping(MAX_UNITS + 1)
    units = [{"name": f"u{i}", "flops": "not read"} for i in range(MAX_UNITS + 1)]
    inst = tmp_path / "big.json"
    inst.write_text(json.dumps({"schema": INSTANCE_SCHEMA, "graph": {"units": units}, "profile": "absent.json"}))
    assert_input_error(run_cli("solve", inst, "--solver", "single"), f"{inst}: graph.units: 20,001 units, above")
    chain = [{"src": "u0", "dst": "u1"}] * (MAX_EDGES + 1)
    inst.write_text(json.dumps({"schema": INSTANCE_SCHEMA, "graph": {"units": units[:2], "edges": chain}}))
    assert_input_error(run_cli("solve", inst, "--solver", "single"), f"{inst}: graph.edges: 80,001 edges")
    prof = tmp_path / "prof.json"
    doc = json.loads((ROOT / "profiles" / "data" / "khadas-vim3" / "Alex.json").read_text())
    doc.update(units=[f"u{i}" for i in range(MAX_UNITS + 1)], time_ms="not read")
    prof.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=r"units: 20,001 units, above the 20,000"):
        load_profile(prof)

def test_a_plan_larger_than_any_graph_is_refused_before_its_stages_are_read():
    """No plan places more units, stages or levels than the largest graph holds units; a joint
    plan holds at most MAX_NETWORKS plans (a 60 MB joint plan of 200,000 stages had taken 22 s
    and 2.7 GB in multi evaluate before the checker refused it)."""
    from pipeplan.formulations.mapping.multi.plan import joint_plan_from_dict
    from pipeplan.formulations.mapping.multi.problem import MAX_NETWORKS

    stage = {"pus": ["A"], "order": {"A": ["u0"]}}
    with pytest.raises(InputError, match=r"stages: 20,001 entries, more than the 20,000 units"):
        plan_from_dict({"stages": [stage] * (MAX_UNITS + 1)}, "p.json")
    crowded = {"pus": ["A"], "order": {"A": [f"u{i}" for i in range(MAX_UNITS + 1)]}}
    with pytest.raises(InputError, match=r"stages\[\]\.order: 20,001 entries"):
        plan_from_dict({"stages": [crowded]}, "p.json")
    with pytest.raises(InputError, match=r"levels: 20,001 entries"):
        plan_from_dict({"stages": [stage], "levels": {f"u{i}": "max" for i in range(MAX_UNITS + 1)}}, "p.json")
    assert len(plan_from_dict({"stages": [stage] * MAX_UNITS}, "p.json").stages) == MAX_UNITS
    plans = {f"n{i}": {"stages": [stage]} for i in range(MAX_NETWORKS + 1)}
    with pytest.raises(InputError, match=r"plans: 1,001 networks, at most 1000"):
        joint_plan_from_dict({"schema": "pipeplan.multi-plan/1", "plans": plans}, "j.json")

def test_synthetic_costs_are_the_roofline_estimate():
    p = synthetic_mapping(80, seed=1)
    g = nx.DiGraph()
    for u in p.units:
        g.add_node(u.name, op=u.op, flops=u.flops, param_bytes=u.param_bytes, out_bytes=u.out_bytes)
    for e in p.edges:
        g.add_edge(e.src, e.dst, bytes=e.bytes)
    ref = roofline_profile(g, load_platform(PLATFORMS_DIR / "a311d.json"))
    assert ref.units == p.profile.units and ref.power_mw == p.profile.power_mw
    for pu, by_level in ref.time_ms.items():
        for a, b in zip(by_level["max"], p.profile.time_ms[pu]["max"]):
            assert (a is None and b is None) or math.isclose(a, b, rel_tol=1e-12)


def test_transfer_table_matches_the_profile():
    for p in (load_mapping("khadas-vim3/Google"), synthetic_mapping(60)):   # measured, then affine links
        t, pus = transfer_times(p), list(p.profile.pus)
        assert t.shape == (len(p.edges), len(pus), len(pus))
        for k, e in enumerate(p.edges):
            for a, pa in enumerate(pus):
                for b, pb in enumerate(pus):
                    assert t[k, a, b] == p.profile.transfers.time_ms(e.src, pa, pb, e.bytes)


# ------------------------------------------------------------------------------ deadline checks


def test_builders_and_heuristics_stop_at_an_expired_deadline():
    for build in (lambda: MappingCpModel(LARGE, deadline=expired()), lambda: MappingMilp(LARGE, deadline=expired()),
                  lambda: heft_plan(LARGE, expired()), lambda: single_plan(LARGE, deadline=expired())):
        with pytest.raises(OutOfTime):
            build()


def test_cut_pipeline_dp_returns_its_best_one_pu_pipeline():
    plan, complete = pipeline_plan(LARGE, deadline=expired())
    assert not complete and len(plan.stages) == 1 and violations(LARGE, plan) == []
    stuck = tiny_problem({"A": [1.0, None, 1.0], "B": [None, 1.0, 1.0]})   # no PU runs every unit
    with pytest.raises(OutOfTime):
        pipeline_plan(stuck, deadline=expired())


def test_fallback_without_time_is_the_fastest_pu_and_costs_no_evaluation():
    plan = best_heuristic_plan(LARGE, "period", expired())
    assert plan == fastest_pu_plan(LARGE) and violations(LARGE, plan) == []
    totals = {p: sum(LARGE.profile.time_ms[p]["max"]) for p in ("B", "L", "G")}   # N misses operators
    assert plan.stages[0].pus == (min(totals, key=totals.get),)
    stuck = tiny_problem({"A": [1.0, None, 3.0], "B": [2.0, 1.0, None]}, edges=[("u0", "u1"), ("u0", "u2")])
    plan = fastest_pu_plan(stuck)              # no PU runs every unit: each on its fastest
    assert violations(stuck, plan) == [] and plan.placement() == {"u0": (0, "A"), "u1": (0, "B"), "u2": (0, "A")}


def test_milp_orders_exactly_the_pairs_without_a_path_that_share_a_pu():
    p = synthetic_mapping(150, seed=2)
    model = MappingMilp(p)
    reach = nx.transitive_closure_dag(p.graph)
    names = [u.name for u in p.units]
    expected = {(i, j) for i in range(150) for j in range(i + 1, 150)
                if not reach.has_edge(names[i], names[j]) and set(model.run[i]) & set(model.run[j])}
    assert expected and set(model.order) == expected


# ------------------------------------------------------------------------------ solvers


@pytest.mark.parametrize("solver", ["cpsat", "milp"])
def test_exact_solver_on_2000_units_returns_a_scored_plan_at_its_limit(solver):
    assert_time_limited_plan(pipeplan.solve(LARGE, solver, time_limit=1, threads=1))


def test_nsga2_on_2000_units_returns_a_scored_plan_at_its_limit():
    r = pipeplan.solve(LARGE, "nsga2", time_limit=0.5, threads=1)
    assert_time_limited_plan(r)
    assert r.params["evaluations"] >= 1 and r.front and r.front[0]["objectives"] == r.objectives


def test_nsga2_with_no_time_still_returns_its_first_seed():
    problem = load_mapping("khadas-vim3/SqueezeV1")
    r = pipeplan.solve(problem, "nsga2", time_limit=1e-6)
    assert r.termination == Termination.TIME_LIMIT and r.params["generations_run"] == 0
    plan = plan_from_dict(r.plan)
    assert violations(problem, plan) == [] and r.objectives == evaluate(problem, plan).objectives()
    assert r.params["evaluations"] >= 1


def test_pipeline_dp_honours_its_time_limit():
    r = pipeplan.solve(LARGE, "pipeline-dp", time_limit=0.3)
    assert_time_limited_plan(r)

"""results/mapping/optima.csv, the stored optima of the mapping catalogue (``pipeplan optima``):
it covers every catalogue instance, its bounds hold, both exact solvers reproduce the optima that
prove in seconds, and no heuristic beats a stored optimum (neither the runs recorded beside it
nor fresh runs here)."""
import pytest

import pipeplan
from pipeplan.app.stored_optima import STORED, read_optima, references
from pipeplan.core.result import Quality
from pipeplan.formulations.mapping.evaluator import evaluate
from pipeplan.formulations.mapping.plan import plan_from_dict
from pipeplan.instances.catalog import load_mapping, mapping_instance_names
from pipeplan.solvers.mapping.stage_configs import PROOF_GAP

ROWS = read_optima(STORED)
REFS = references(ROWS)
OPTIMAL = [r for r in ROWS if r["status"] == "optimal" and r["objective"] == "period_ms"]
# proven within 3 s when stored: re-proven here (a few, to keep the suite short)
QUICK = sorted((r for r in OPTIMAL if r["seconds"] <= 3.0), key=lambda r: r["seconds"])[:6]


def test_every_catalogue_instance_has_a_stored_period_reference():
    missing = [n for n in mapping_instance_names() if n.partition("/")[0] != "host" and (n, "period_ms") not in REFS]
    assert not missing, f"no stored optimum or bound for {missing[:5]}: run `pipeplan optima`"


def rescored(problem, r) -> dict:
    """The evaluator's figures for the plan a solver returned: they are the figures it reports."""
    assert r.plan is not None, r.message
    figures = evaluate(problem, plan_from_dict(r.plan)).objectives()
    assert figures == pytest.approx(r.objectives, rel=1e-12), (figures, r.objectives)
    return figures


# the table keeps 6 significant digits (earlier rows; newer ones 10): comparisons allow for that
DIGITS = 1e-5


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r['instance']}:{r['objective']}")
def test_stored_bounds_hold_and_proofs_are_tight(row):
    assert row["bound"] <= row["value"] * (1 + DIGITS)
    assert row["gap"] == pytest.approx((row["value"] - row["bound"]) / row["value"], abs=DIGITS)
    if row["status"] == "optimal":
        assert row["gap"] <= PROOF_GAP * (1 + 1e-6)


# the MILP (a cold start, an independent check) proves these block chains in about a second
MILP_QUICK = [r for r in OPTIMAL if r["instance"] in ("khadas-vim3/SqueezeV1", "khadas-vim3/MobileV1",
                                                      "khadas-vim3/Alex")]


@pytest.mark.parametrize("row", QUICK, ids=lambda r: r["instance"])
def test_cpsat_reproduces_the_stored_optimum(row):
    problem = load_mapping(row["instance"])
    r = pipeplan.solve(problem, "cpsat", time_limit=60, threads=1)
    assert r.quality is Quality.PROVEN_OPTIMAL, r.message
    assert rescored(problem, r)["period_ms"] == pytest.approx(row["value"], rel=PROOF_GAP)
    assert r.bound["period_ms"] <= row["value"] * (1 + DIGITS)


@pytest.mark.parametrize("row", MILP_QUICK, ids=lambda r: r["instance"])
def test_milp_reproduces_the_stored_optimum(row):
    problem = load_mapping(row["instance"])
    r = pipeplan.solve(problem, "milp", time_limit=60, threads=1)
    assert r.quality is Quality.PROVEN_OPTIMAL, r.message
    assert rescored(problem, r)["period_ms"] == pytest.approx(row["value"], rel=PROOF_GAP)


def test_recorded_heuristic_runs_never_beat_a_stored_optimum():
    from pipeplan.app.studies.optima import read_comparison
    compared = read_comparison(STORED.parent / "optima_heuristics.csv")
    assert compared
    for c in compared:
        ref = REFS.get((c["instance"], "period_ms"))
        if ref and ref["status"] == "optimal":
            assert float(c["period_ms"]) >= ref["value"] * (1 - DIGITS), c


@pytest.mark.parametrize("row", OPTIMAL[:12], ids=lambda r: r["instance"])
@pytest.mark.parametrize("solver", ["single", "heft", "pipeline-dp"])
def test_fresh_heuristic_runs_never_beat_a_stored_optimum(row, solver):
    problem = load_mapping(row["instance"])
    r = pipeplan.solve(problem, solver, time_limit=30)
    assert rescored(problem, r)["period_ms"] >= row["value"] * (1 - DIGITS)

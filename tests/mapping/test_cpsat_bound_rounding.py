"""The unit-by-stage CP-SAT model (``shared_pus``) rounds times to whole microseconds, so a plan's
model value and its evaluator value differ by up to the model's rounding slack. Epsilon bounds
(``bounds=``) used to be cut to whole units with no allowance for it: a bound equal to the
optimum's own latency cut the optimum off (a 1.3% worse "proven" period), and a bound just below
a plan's latency let that plan through, breaking the bound."""
import pipeplan
from pipeplan.core.result import Quality, Termination
from pipeplan.formulations.mapping.evaluator import evaluate
from pipeplan.formulations.mapping.plan import plan_from_dict
from pipeplan.instances.catalog import load_mapping


def _solve(problem, **bounds):
    return pipeplan.solve(problem, "cpsat", time_limit=60, objective="period", shared_pus=True,
                          bounds=bounds or None)


def test_a_bound_at_the_optimum_s_own_latency_keeps_the_optimum():
    problem = load_mapping("khadas-vim3/Alex")
    free = _solve(problem)
    at = _solve(problem, latency_ms=free.objectives["latency_ms"])
    assert free.quality == at.quality == Quality.PROVEN_OPTIMAL
    assert at.objectives["period_ms"] == free.objectives["period_ms"]


def test_a_plan_beyond_a_bound_is_never_returned_and_no_infeasibility_is_claimed():
    problem = load_mapping("khadas-vim3/Alex")
    r = _solve(problem, latency_ms=135.5363)       # 150 ns below a plan's 135.53645 ms
    if r.plan is not None:
        assert evaluate(problem, plan_from_dict(r.plan)).objectives()["latency_ms"] <= 135.5363
    assert r.termination != Termination.INFEASIBLE


def test_an_energy_optimum_the_rounding_leaves_uncertified_is_not_called_proven():
    """On operator graphs the configuration search's energy optimum holds in the model's whole
    units; the bound that holds for the evaluator's values lies below it by the rounding. It had
    been reported as proven with the plan's own value as its bound (gap 0)."""
    from pipeplan.instances.tiny import tiny_catalogue
    from pipeplan.solvers.mapping.stage_configs import PROOF_GAP
    problem = next(p for p in tiny_catalogue() if p.name == "tiny/diamond-3pu")
    r = pipeplan.solve(problem, "cpsat", objective="energy", time_limit=30, threads=1)
    assert r.bound["energy_mj"] < r.objectives["energy_mj"]
    assert r.gap > PROOF_GAP and r.quality is Quality.FEASIBLE and r.termination is Termination.COMPLETED

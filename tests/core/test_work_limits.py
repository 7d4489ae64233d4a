"""Work limits and honest bounds.

Work limits (CP-SAT deterministic time ``work_limit``, NSGA-II ``max_evaluations``, HiGHS
``node_limit``): the same seed and work limit give the same plan, objectives and bound, on an
instance the solver does not finish, also while the machine is loaded, and the result says that
the work limit (``stopped_by == "work"``), not the wall clock, stopped it. A run the wall clock
cuts says ``stopped_by == "time"``.

Honest bounds: no exact solver reports a bound above the objective it bounds (CP-SAT's integer
model units once rounded the bound of khadas-vim3/SqueezeV1 up to 40.725 over a period of
40.7246 ms).
"""
import math
import multiprocessing as mp
import time
from contextlib import contextmanager

import pytest

import pipeplan
from pipeplan.app.bench import catalogue
from pipeplan.core.errors import InputError
from pipeplan.core.registry import get_solver, solvers
from pipeplan.core.result import Quality, Termination
from pipeplan.instances.tiny import tiny_catalogue
from pipeplan.solvers.mapping.cpsat_model import bound_from_model
from pipeplan.solvers.mapping.stage_configs import PROOF_GAP

TINY = tiny_catalogue()


def load(system, name):
    return catalogue(system)[1](name)


def _spin(until: float) -> None:
    while time.time() < until:
        pass


@contextmanager
def loaded_machine(seconds: float = 120.0):
    """Every core busy with a spinning process while the block runs (stopped when it ends)."""
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    procs = [ctx.Process(target=_spin, args=(time.time() + seconds,), daemon=True) for _ in range(mp.cpu_count())]
    for p in procs:
        p.start()
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.join()


def same_run(a, b):
    assert a.plan == b.plan and a.objectives == b.objectives and a.bound == b.bound
    assert a.termination == b.termination and a.stopped_by == b.stopped_by


# ----------------------------------------------------------------------------- declared limits

WORK_LIMITS = {("mapping", "cpsat"): "work_limit", ("mapping", "milp"): "node_limit",
               ("mapping", "nsga2"): "max_evaluations", ("gradcode", "cpsat"): "work_limit",
               ("gradcode", "milp"): "node_limit", ("rollout", "cpsat"): "work_limit",
               ("multi", "cpsat"): "work_limit", ("multi", "milp"): "node_limit"}


@pytest.mark.parametrize("system,solver", list(WORK_LIMITS), ids=lambda x: str(x))
def test_search_solvers_declare_a_work_limit(system, solver):
    info = get_solver(system, solver)
    param = info.params[WORK_LIMITS[system, solver]]
    assert param.default is None and "time_limit" in info.params


@pytest.mark.parametrize("system,solver,value", [("mapping", "cpsat", -1.0), ("mapping", "nsga2", 0),
                                                 ("mapping", "milp", 2.5), ("rollout", "cpsat", math.inf)])
def test_a_bad_work_limit_is_refused_before_the_solve(system, solver, value):
    """The registry's declared values: an InputError naming the parameter, before any work (it
    had been an error result once the solver ran, and in a bench an error record)."""
    problem = TINY[0] if system == "mapping" else load(system, "rollout/tiny-0")
    with pytest.raises(InputError) as err:
        pipeplan.solve(problem, solver, time_limit=10, **{WORK_LIMITS[system, solver]: value})
    assert err.value.field == WORK_LIMITS[system, solver]


# ----------------------------------------------------------------------------- determinism

def test_cpsat_work_limit_gives_the_same_plan_on_a_loaded_machine():
    problem = load("mapping", "a311d/shufflenet")   # no proof in 0.1 deterministic s
    a = pipeplan.solve(problem, "cpsat", time_limit=120, seed=3, work_limit=0.1)
    assert a.termination is Termination.TIME_LIMIT and a.stopped_by == "work", a.message
    assert 0.1 <= a.params["work"] < 0.2 and "work limit" in a.message
    with loaded_machine():
        b = pipeplan.solve(problem, "cpsat", time_limit=120, seed=3, work_limit=0.1)
    same_run(a, b)


def test_nsga2_max_evaluations_gives_the_same_front_on_a_loaded_machine():
    problem = load("mapping", "a311d/squeezenet")
    a = pipeplan.solve(problem, "nsga2", time_limit=120, seed=5, max_evaluations=150)
    assert a.termination is Termination.TIME_LIMIT and a.stopped_by == "work", a.message
    assert a.params["evaluations"] == 150 and a.params["generations_run"] < a.params["generations"]
    with loaded_machine():
        b = pipeplan.solve(problem, "nsga2", time_limit=120, seed=5, max_evaluations=150)
    same_run(a, b)
    assert a.front == b.front


def test_nsga2_that_ends_its_generations_is_completed_not_cut():
    r = pipeplan.solve(TINY[0], "nsga2", time_limit=60, seed=0, pop_size=12, generations=3, max_evaluations=10**6)
    assert r.termination is Termination.COMPLETED and r.stopped_by is None


def test_milp_node_limit_gives_the_same_plan_on_a_loaded_machine():
    problem = load("gradcode", "gradcode/hetero-n12-s1")   # hetero-n12-s2 is proven at once since the floor
    # 16 scenarios: still cut by the node limit, in half the time of the default 64
    a = pipeplan.solve(problem, "milp", time_limit=120, node_limit=3, scenarios=16)
    assert a.termination is Termination.TIME_LIMIT and a.stopped_by == "work", a.message
    with loaded_machine():
        b = pipeplan.solve(problem, "milp", time_limit=120, node_limit=3, scenarios=16)
    same_run(a, b)


def test_mapping_milp_node_limit_is_recorded():
    problem = load("mapping", "khadas-vim3/YOLOv3")
    r = pipeplan.solve(problem, "milp", time_limit=120, node_limit=1)
    assert r.termination is Termination.TIME_LIMIT and r.stopped_by == "work", r.message
    assert r.params["node_limit"] == 1 and r.params["nodes"] >= 1


def test_gradcode_cpsat_work_limit_is_deterministic():
    problem = load("gradcode", "gradcode/hetero-n12-s2")
    a = pipeplan.solve(problem, "cpsat", time_limit=120, work_limit=0.2)
    b = pipeplan.solve(problem, "cpsat", time_limit=120, work_limit=0.2)
    assert a.termination is Termination.TIME_LIMIT and a.stopped_by == "work", a.message
    same_run(a, b)


def test_rollout_cpsat_work_limit_is_deterministic():
    problem = load("rollout", "rollout/sci-jl-R32")
    a = pipeplan.solve(problem, "cpsat", time_limit=120, work_limit=0.3)
    b = pipeplan.solve(problem, "cpsat", time_limit=120, work_limit=0.3)
    assert a.termination is Termination.TIME_LIMIT and a.stopped_by == "work", a.message
    same_run(a, b)


def test_multi_cpsat_work_budget_is_shared_deterministically():
    """The joint model's work budget is sliced over its variant combinations by work done, not
    by the clock: the same plan and bound on a loaded machine."""
    problem = load("multi", "multi/yolo+mobile")
    a = pipeplan.solve(problem, "cpsat", time_limit=120, work_limit=1.0)
    with loaded_machine(60):
        b = pipeplan.solve(problem, "cpsat", time_limit=120, work_limit=1.0)
    assert a.termination is Termination.TIME_LIMIT and a.stopped_by == "work", a.message
    same_run(a, b)


def test_a_run_the_wall_clock_cuts_says_time():
    problem = load("mapping", "a311d/inception_v2")   # 95 fused units: far from done in 2 s
    r = pipeplan.solve(problem, "cpsat", time_limit=2.0, work_limit=1000.0)
    assert r.termination is Termination.TIME_LIMIT and r.stopped_by == "time", r.message
    r = pipeplan.solve(problem, "nsga2", time_limit=2.0, max_evaluations=10**6)
    assert r.termination is Termination.TIME_LIMIT and r.stopped_by == "time", r.message


def test_finished_runs_say_nothing_stopped_them():
    r = pipeplan.solve(TINY[0], "cpsat", time_limit=30, work_limit=100.0)
    assert r.termination is Termination.OPTIMAL and r.stopped_by is None
    r = pipeplan.solve(TINY[0], "heft")
    assert r.termination is Termination.COMPLETED and r.stopped_by is None


def test_a_tie_break_the_work_limit_cuts_names_its_axis():
    """The block-chain search (YOLOv3, 75 blocks) proves the least period within 1.6
    deterministic seconds and has none left to prove the least latency among those plans: the
    message says which tie-break was not proven, as the unit-by-stage model and the MILP do."""
    r = pipeplan.solve(load("mapping", "khadas-vim3/YOLOv3"), "cpsat", objective="period",
                       time_limit=60, work_limit=1.6, threads=1)
    assert r.quality is Quality.PROVEN_OPTIMAL, r.message
    assert r.message == "tie-break (latency) not proven"


# ----------------------------------------------------------------------------- honest bounds

def _bounds_hold(r):
    assert r.plan is not None, r.message
    for key, value in r.bound.items():
        if key in r.objectives:
            assert value <= r.objectives[key], f"{r.solver} {r.instance}: bound {key} {value} > {r.objectives[key]}"
    if r.gap is not None:
        assert r.gap >= 0.0


MAPPING_CASES = [*TINY, load("mapping", "khadas-vim3/SqueezeV1")]


@pytest.mark.solvers("mapping", exact=True)
@pytest.mark.parametrize("problem", MAPPING_CASES, ids=lambda p: p.name)
@pytest.mark.parametrize("objective", ["period", "latency", "energy"])
def test_mapping_exact_bounds_never_exceed_the_objective(solver, problem, objective):
    r = pipeplan.solve(problem, solver, objective=objective, time_limit=30)
    _bounds_hold(r)
    if r.quality is Quality.PROVEN_OPTIMAL:     # to the configuration search's certified 0.01%
        assert r.gap <= PROOF_GAP * (1 + 1e-9)


def test_squeezenet_v1_proven_period_bound_is_at_most_the_period():
    r = pipeplan.solve(load("mapping", "khadas-vim3/SqueezeV1"), "cpsat", time_limit=30)
    assert r.quality is Quality.PROVEN_OPTIMAL
    assert r.bound["period_ms"] <= r.objectives["period_ms"] == pytest.approx(40.7246, abs=1e-4)


def test_a_cut_cpsat_bound_holds_for_the_evaluator_values():
    """Cut short, the bound is a certified one (configurations refuted with times rounded down)."""
    problem = load("mapping", "a311d/shufflenet")
    r = pipeplan.solve(problem, "cpsat", time_limit=120, work_limit=0.1)
    assert r.termination is Termination.TIME_LIMIT, r.message
    _bounds_hold(r)
    best = pipeplan.solve(problem, "pipeline-dp")
    assert r.bound["period_ms"] <= best.objectives["period_ms"]


@pytest.mark.solvers("gradcode", exact=True)
@pytest.mark.parametrize("objective", ["expected", "worst"])
def test_gradcode_exact_bounds_never_exceed_the_objective(solver, objective):
    from tests.core.test_gc_rollout_time_limits import HETERO_N6
    _bounds_hold(pipeplan.solve(HETERO_N6, solver, objective=objective, time_limit=30))


@pytest.mark.solvers("rollout", exact=True)
@pytest.mark.parametrize("name", ["rollout/tiny-0", "rollout/tiny-1", "rollout/tiny-2", "rollout/tiny-3"])
def test_rollout_exact_bounds_never_exceed_the_objective(solver, name):
    _bounds_hold(pipeplan.solve(load("rollout", name), solver, time_limit=30))


def test_bound_from_model_rounds_down():
    assert bound_from_model("period", 40725.0) <= 40.725
    assert bound_from_model("period", 40724.3) == bound_from_model("period", 40725.0)   # integer objective
    assert bound_from_model("period", 40725.0, slack=8.6) <= (40725 - 8.6) / 1000
    assert bound_from_model("energy", 10**6) <= 1.0
    for units in (1, 3, 7, 40725, 123457, 10**9 + 7):
        assert bound_from_model("period", units) * 1000.0 <= units


def test_every_exact_solver_is_covered():
    exact = {(s.kind, s.name) for s in solvers() if s.exact and s.available()[0]}
    assert exact <= set(WORK_LIMITS)


@pytest.mark.parametrize("suite", ["quick", "full"])
def test_suites_give_every_search_solver_its_work_limit(suite):
    from pipeplan.app.bench import load_suite, plan_runs
    _, spec = load_suite(suite)
    for run in plan_runs(spec):
        param = WORK_LIMITS.get((run.system, run.solver))
        if param is not None:
            assert run.params.get(param), f"{suite}: {run.key} runs without its {param}"

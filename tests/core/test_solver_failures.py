"""Solver failures become results with status error and the message, never a crash of the
command: a CP-SAT model the library rejects, HiGHS (and CBC) missing, an exception inside pymoo.
CP-SAT's rejection is its own MODEL_INVALID status, forced by replacing CpSolver.Solve (only the
error path is exercised: no result of the replaced solver is counted as a solve)."""
import json

import pulp
import pytest
from ortools.sat.python import cp_model

import pipeplan
from pipeplan.core.result import Quality, Termination
from pipeplan.formulations.gradcode.problem import homogeneous_problem
from pipeplan.instances.rollout import load_instance as load_rollout
from tests.helpers import tiny_problem

# Times of 1e15 ms had overflowed CP-SAT's integer model, but the profile limits now refuse them
# (1e7 ms at most), so no loadable problem makes CP-SAT reject its model: this one it solves
# (period 1 ms), and the tests below make CpSolver.Solve answer MODEL_INVALID, its own status for
# a model it rejects
TINY = tiny_problem({"A": [3.0, 1.0], "B": [1.0, 3.0]}, name="tiny-invalid")


def _cpsat_rejects_every_model(monkeypatch):
    monkeypatch.setattr(cp_model.CpSolver, "Solve", lambda self, model, *a, **k: cp_model.MODEL_INVALID)


def test_cpsat_model_error_is_an_error_result_and_other_solvers_still_run(monkeypatch):
    _cpsat_rejects_every_model(monkeypatch)
    r = pipeplan.solve(TINY, "cpsat", time_limit=10)
    assert r.termination is Termination.ERROR and r.quality is Quality.NONE
    assert r.plan is None and "model invalid" in r.message
    heft = pipeplan.solve(TINY, "heft")
    assert heft.quality is Quality.FEASIBLE and heft.objectives["period_ms"] == pytest.approx(2.0)


def test_cli_prints_the_error_result_and_exits_1_without_traceback(tmp_path, monkeypatch):
    """In process (the monkeypatch must reach the command): `solve` prints the error result and
    exits 1; `compare` records the row and goes on with the other solvers (exit 0), and where
    every solver failed it exits 1 after writing the rows, as `rollout compare` does."""
    from typer.testing import CliRunner

    from pipeplan.app.cli.main import app
    from pipeplan.core.errors import SolverFailure
    _cpsat_rejects_every_model(monkeypatch)
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(TINY.to_dict()))
    res = CliRunner().invoke(app, ["solve", str(path), "--solver", "cpsat", "--time-limit", "10"])
    assert res.exit_code == 1 and isinstance(res.exception, SystemExit), res.output
    assert json.loads(res.stdout)["termination"] == "error"
    res = CliRunner().invoke(app, ["compare", str(path), "--solvers", "cpsat,heft", "--time-limit", "10",
                                   "--out", str(tmp_path / "cmp")])
    assert res.exit_code == 0, res.output
    rows = (tmp_path / "cmp" / "compare.csv").read_text()
    assert "cpsat,error" in rows and "heft,completed" in rows
    # every solver failed: the rows are printed and written, then exit 1 (SolverFailure: one line)
    res = CliRunner().invoke(app, ["compare", str(path), "--solvers", "cpsat", "--time-limit", "10",
                                   "--out", str(tmp_path / "only")])
    assert isinstance(res.exception, SolverFailure), res.output
    assert res.exception.one_line().startswith("tiny-invalid: compare: every solver failed (1); cpsat: ")
    assert "| cpsat |" in res.stdout and "cpsat,error" in (tmp_path / "only" / "compare.csv").read_text()


@pytest.mark.parametrize("system", ["gradcode", "rollout"])
def test_cpsat_invalid_model_status_is_an_error_not_a_time_limit(system, monkeypatch):
    """CP-SAT's MODEL_INVALID answer (what it returns for a model it rejects) must not be read
    as "no solution within the time limit"."""
    monkeypatch.setattr(cp_model.CpSolver, "Solve", lambda self, model, *a, **k: cp_model.MODEL_INVALID)
    problem = homogeneous_problem(6, 1) if system == "gradcode" else load_rollout("rollout/tiny-1")
    r = pipeplan.solve(problem, "cpsat", time_limit=5)
    assert r.termination is Termination.ERROR and "model invalid" in r.message


def _without(monkeypatch, *backends):
    if "highs" in backends:
        monkeypatch.setattr(pulp.HiGHS, "available", lambda self: False)
    if "cbc" in backends:
        monkeypatch.setattr(pulp.PULP_CBC_CMD, "available", lambda self: False)


def test_milp_without_highs_falls_back_to_cbc(monkeypatch):
    if not pulp.PULP_CBC_CMD(msg=False).available():
        pytest.skip("CBC is not installed either")
    problem = tiny_problem({"A": [3.0, 1.0, 2.0], "B": [1.0, 3.0, 2.0]})
    exact = pipeplan.solve(problem, "cpsat", time_limit=20)
    _without(monkeypatch, "highs")
    r = pipeplan.solve(problem, "milp", time_limit=20)
    assert r.params["backend"] == "cbc" and r.termination is Termination.OPTIMAL
    assert r.objectives["period_ms"] == pytest.approx(exact.objectives["period_ms"])


@pytest.mark.parametrize("system", ["mapping", "gradcode"])
def test_milp_without_any_backend_is_an_error_result(system, monkeypatch):
    _without(monkeypatch, "highs", "cbc")
    problem = tiny_problem({"A": [1.0, 2.0], "B": [2.0, 1.0]}) if system == "mapping" else homogeneous_problem(6, 1)
    r = pipeplan.solve(problem, "milp", time_limit=5)
    assert r.termination is Termination.ERROR and "neither HiGHS" in r.message


def test_exception_inside_pymoo_is_an_error_result(monkeypatch):
    from pymoo.operators.crossover.pntx import TwoPointCrossover

    def broken(self, *args, **kwargs):
        raise FloatingPointError("crossover produced NaN")
    monkeypatch.setattr(TwoPointCrossover, "_do", broken)
    r = pipeplan.solve(tiny_problem({"A": [1.0, 2.0, 3.0], "B": [2.0, 1.0, 1.0]}), "nsga2", time_limit=5, seed=0)
    assert r.termination is Termination.ERROR
    # the exception, then the line that raised it (not the caret line of Python 3.11's traceback)
    assert r.message == ("FloatingPointError: crossover produced NaN | at test_solver_failures.py:"
                         f"{broken.__code__.co_firstlineno + 1} in broken")


def test_failed_exact_sweep_is_one_line_exit_1_and_writes_nothing(tmp_path, monkeypatch):
    """In process, as above: the sweep's failure is a SolverFailure, which the CLI's ``main``
    prints as one ``error:`` line with exit 1; nothing is written."""
    from typer.testing import CliRunner

    from pipeplan.app.cli.main import app
    from pipeplan.core.errors import SolverFailure
    _cpsat_rejects_every_model(monkeypatch)
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(TINY.to_dict()))
    res = CliRunner().invoke(app, ["pareto", str(path), "--time-limit", "10", "--out", str(tmp_path / "front")])
    assert isinstance(res.exception, SolverFailure), res.output
    assert res.exception.one_line().startswith("tiny-invalid: exact period/latency front:")
    assert "\n" not in res.exception.one_line()
    assert not (tmp_path / "front").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.json"]


def test_input_errors_and_solver_failures_cross_a_process_pool_whole():
    """A worker's InputError reached its pool's parent as a TypeError in the result thread (it
    could not be rebuilt from its message alone), and the pool then waited forever: `rollout
    regimes --frontier 1e12` hung (found by a hostile-input audit)."""
    import multiprocessing as mp
    import pickle

    from pipeplan.core.errors import InputError, SolverFailure

    error = pickle.loads(pickle.dumps(InputError("f.json", "field", "why")))
    assert (error.source, error.field, error.message) == ("f.json", "field", "why")
    failure = pickle.loads(pickle.dumps(SolverFailure("cpsat", "broke")))
    assert (failure.what, failure.message) == ("cpsat", "broke")
    with mp.get_context("fork").Pool(1) as pool:
        with pytest.raises(InputError, match="f.json: field: why"):
            pool.apply_async(_raise_input_error).get(timeout=60)


def _raise_input_error():
    from pipeplan.core.errors import InputError
    raise InputError("f.json", "field", "why")

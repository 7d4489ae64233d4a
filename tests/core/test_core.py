"""Core: SolveResult JSON round-trip, registry, solve() turning solver crashes into results."""
import pytest

import pipeplan
from pipeplan.core import registry
from pipeplan.core.errors import InputError
from pipeplan.core.registry import get_solver, register, solvers
from pipeplan.core.result import Quality, SolveResult, Termination
from tests.helpers import tiny_problem


def test_result_round_trip():
    p = tiny_problem({"A": [1.0, 2.0], "B": [2.0, 1.0]})
    r = pipeplan.solve(p, "pipeline-dp", seed=3)
    again = SolveResult.from_json(r.to_json())
    assert again == r
    assert again.termination is Termination.COMPLETED and again.quality is Quality.FEASIBLE
    assert again.params["seed"] == 3
    assert "ortools" in again.versions and "numpy" in again.versions


def test_registry_lookup_and_unknown_name():
    assert get_solver("mapping", "heft").name == "heft"
    assert {s.name for s in solvers("mapping")} >= {"single", "heft", "pipeline-dp"}
    with pytest.raises(InputError, match="unknown mapping solver"):
        get_solver("mapping", "nope")


@pytest.fixture
def scratch_registry(monkeypatch):
    """Solvers registered inside a test disappear after it."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    # the systems loaded during the test are forgotten with what they registered: otherwise a
    # system first loaded here would look loaded, with no solvers, to every later test
    monkeypatch.setattr(registry, "_loaded", set(registry._loaded))


def test_solver_crash_becomes_error_result(scratch_registry):
    @register("mapping", "test-crash", description="raises on purpose")
    def crash(problem):
        raise RuntimeError("boom")

    p = tiny_problem({"A": [1.0]})
    r = pipeplan.solve(p, "test-crash")
    assert r.termination is Termination.ERROR and r.quality is Quality.NONE
    assert "boom" in r.message


def test_unavailable_solver_reports_why(scratch_registry):
    @register("mapping", "test-missing-lib", requires=("surely_not_installed_pkg",))
    def never(problem):  # pragma: no cover - never called
        raise AssertionError

    r = pipeplan.solve(tiny_problem({"A": [1.0]}), "test-missing-lib")
    assert r.termination is Termination.ERROR and "surely_not_installed_pkg" in r.message


def test_staged_folder_publishes_everything_or_nothing(tmp_path):
    from pipeplan.core.io import staged_folder, write_atomic

    out = tmp_path / "deep" / "results"
    with pytest.raises(RuntimeError):
        with staged_folder(out) as stage:
            write_atomic(stage / "a.csv", "1\n")
            raise RuntimeError("midway")
    assert not (tmp_path / "deep").exists() and list(tmp_path.iterdir()) == []   # nothing created, no stage left
    with staged_folder(out) as stage:
        write_atomic(stage / "a.csv", "1\n")
        write_atomic(stage / "plots" / "b.png", b"png")
    (out / "keep.txt").write_text("mine")
    with pytest.raises(RuntimeError):
        with staged_folder(out) as stage:
            write_atomic(stage / "a.csv", "2\n")
            raise RuntimeError("midway")
    assert (out / "a.csv").read_text() == "1\n" and (out / "plots" / "b.png").read_bytes() == b"png"
    assert (out / "keep.txt").read_text() == "mine"
    assert sorted(p.name for p in (tmp_path / "deep").iterdir()) == ["results"]

"""Core: SolveResult JSON round-trip, registry, solve() turning solver crashes into results."""
import os
from pathlib import Path

import pytest

import pipeplan
from pipeplan.core import registry
from pipeplan.core.errors import InputError
from pipeplan.core.io import staged_folder
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
        with staged_folder(out, marked=False) as stage:
            write_atomic(stage / "a.csv", "1\n")
            raise RuntimeError("midway")
    assert not (tmp_path / "deep").exists() and list(tmp_path.iterdir()) == []   # nothing created, no stage left
    with staged_folder(out, marked=False) as stage:
        write_atomic(stage / "a.csv", "1\n")
        write_atomic(stage / "plots" / "b.png", b"png")
    (out / "keep.txt").write_text("mine")
    with pytest.raises(RuntimeError):
        with staged_folder(out, marked=False) as stage:
            write_atomic(stage / "a.csv", "2\n")
            raise RuntimeError("midway")
    assert (out / "a.csv").read_text() == "1\n" and (out / "plots" / "b.png").read_bytes() == b"png"
    assert (out / "keep.txt").read_text() == "mine"
    assert sorted(p.name for p in (tmp_path / "deep").iterdir()) == ["results"]


@pytest.mark.parametrize("fail_at", [1, 2, 3])
def test_staged_folder_commit_failing_partway_leaves_out_as_it_was(tmp_path, monkeypatch, fail_at):
    """The files move into an existing --out one by one: a move failing partway (here the
    second or third; the third replaces a file and needs a new subfolder) undoes the moves
    before it, so --out is unchanged and nothing is left beside it."""
    from pipeplan.core import io as core_io

    out = tmp_path / "out"
    out.mkdir()
    (out / "a.csv").write_text("old a")
    (out / "keep.txt").write_text("mine")
    real_replace, calls = os.replace, []

    def failing_replace(src, dst):
        calls.append(dst)
        if len(calls) == fail_at:
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)

    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with pytest.raises(InputError, match="cannot write .No space left on device"):
        with staged_folder(out, marked=False) as stage:
            (stage / "a.csv").write_text("new a")
            (stage / "b.csv").write_text("new b")
            (stage / "sub").mkdir()
            (stage / "sub" / "c.csv").write_text("new c")
            monkeypatch.setattr(core_io.os, "replace", failing_replace)
    monkeypatch.undo()
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in out.iterdir()) == ["a.csv", "keep.txt"]          # no sub/ left
    assert [p.name for p in tmp_path.iterdir()] == ["out"]                          # no stage, no backup
    with staged_folder(out, marked=False) as stage:                                  # and it still works
        (stage / "a.csv").write_text("new a")
        (stage / "sub").mkdir()
        (stage / "sub" / "c.csv").write_text("new c")
    assert (out / "a.csv").read_text() == "new a" and (out / "sub" / "c.csv").read_text() == "new c"
    assert (out / "keep.txt").read_text() == "mine" and [p.name for p in tmp_path.iterdir()] == ["out"]


def test_staged_folder_stages_inside_an_existing_out(tmp_path):
    """The stage of an existing --out lies inside it, on the file system of the files it
    replaces: beside it, a --out that is a mount point (a container's volume) had failed at the
    commit (EBUSY / EXDEV), and a writable --out under a read-only parent had been refused."""
    out = tmp_path / "out"
    out.mkdir()
    with staged_folder(out, marked=False) as stage:
        assert stage.parent == out
        (stage / "a.csv").write_text("1")
    assert sorted(p.name for p in out.iterdir()) == ["a.csv"] and [p.name for p in tmp_path.iterdir()] == ["out"]


def test_an_export_that_cannot_replace_its_folder_is_one_error(tmp_path, monkeypatch):
    """A mount point as export --out cannot be renamed onto (EBUSY): one error, the folder and
    an earlier export in it as they were (it had been an OSError traceback)."""
    from deploy import export

    out = tmp_path / "m"
    out.mkdir()
    (out / "manifest.json").write_text("old")
    monkeypatch.setattr(export, "_check_target", lambda path: None)
    real_replace = os.replace

    def busy(src, dst):
        if out in (Path(src), Path(dst)):      # a mount point is renamed neither way
            raise OSError(16, "Device or resource busy")
        return real_replace(src, dst)

    monkeypatch.setattr(export.os, "replace", busy)
    with pytest.raises(InputError, match="cannot replace this folder .Device or resource busy"):
        with export.temp_export_folder(out) as tmp:
            (tmp / "manifest.json").write_text("new")
            export._publish(tmp, out)
    assert [p.name for p in tmp_path.iterdir()] == ["m"] and (out / "manifest.json").read_text() == "old"


def test_staged_folder_new_out_appears_by_one_rename(tmp_path, monkeypatch):
    """A new --out is the stage renamed once: a failing rename creates nothing (nor the
    missing parents); a working one gives the folder mkdir's mode, without empty subfolders."""
    from pipeplan.core import io as core_io

    out = tmp_path / "deep" / "results"

    def failing_rename(src, dst):
        raise OSError(28, "No space left on device")

    with pytest.raises(InputError, match="cannot write"):
        with staged_folder(out, marked=False) as stage:
            (stage / "a.csv").write_text("1")
            monkeypatch.setattr(core_io.os, "rename", failing_rename)
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []
    with staged_folder(out, marked=False) as stage:
        (stage / "a.csv").write_text("1")
        (stage / "empty").mkdir()
    mask = os.umask(0)
    os.umask(mask)
    assert sorted(p.name for p in out.iterdir()) == ["a.csv"]
    assert out.stat().st_mode & 0o777 == 0o777 & ~mask
    assert [p.name for p in (tmp_path / "deep").iterdir()] == ["results"]


def test_an_error_quoting_a_huge_value_stays_a_readable_line(tmp_path):
    """A file's 20,000-character schema or DVFS level had been quoted whole: 20 KB error lines.
    The field and the message are cut, saying how long they were; the file is named in full."""
    from pipeplan.formulations.mapping.profile import profile_from_dict

    with pytest.raises(InputError) as err:
        profile_from_dict({"schema": "s" * 20_000}, "my/profile.json")
    line = err.value.one_line()
    assert line.startswith("my/profile.json: schema: unsupported schema 'sss") and len(line) < 800
    assert line.endswith("characters)") and "20,0" in line
    long_field = InputError("f.json", "time_ms.A." + "L" * 20_000, "unknown level")
    assert len(long_field.one_line()) < 400 and long_field.one_line().endswith(": unknown level")
    assert InputError("f.json", "x", "short").one_line() == "f.json: x: short"


@pytest.mark.parametrize("text, field", [
    ("{}", "problem_kind"),                                                  # had been KeyError
    ('{"problem_kind": "mapping", "stoped_by": 1}', "stoped_by"),            # had been TypeError
    ('{"problem_kind": "mapping", "instance": "x", "solver": "heft", "termination": "done", "quality": "none"}',
     "termination"),                                                         # had been ValueError
    ("[" * 100_000, ""),                                                     # had been RecursionError
    ('{"solver": "a", "solver": "b"}', "solver")])                           # had kept the second
def test_a_result_read_back_names_what_is_wrong(text, field):
    with pytest.raises(InputError) as info:
        SolveResult.from_json(text, "r.json")
    assert (info.value.source, info.value.field) == ("r.json", field)


@pytest.mark.parametrize("loader", ["pipeplan.instances.catalog:load_mapping", "pipeplan.instances.gradcode:load_instance",
                                    "pipeplan.instances.rollout:load_instance", "pipeplan.instances.multi:load_multi"])
@pytest.mark.parametrize("name", [None, 5, ["x"], "", "a\x00.json"])
def test_a_loader_given_no_name_says_so(loader, name):
    """Through the API these had been TypeError or pathlib's ValueError (NUL)."""
    import importlib
    module, func = loader.split(":")
    with pytest.raises(InputError, match="expected a catalogue name or a file path"):
        getattr(importlib.import_module(module), func)(name)


@pytest.mark.parametrize("generator, args, kwargs", [
    ("synthetic_mapping", (10**12,), {}),            # a MemoryError after drawing
    ("synthetic_mapping", (5,), {"seed": -1}),       # numpy's ValueError
    ("synthetic_gradcode", (5,), {"s": "2"}),        # a TypeError
    ("synthetic_gradcode", (5,), {"seed": -1})])
def test_the_instance_generators_check_their_arguments_first(generator, args, kwargs):
    import importlib
    with pytest.raises(InputError):
        getattr(importlib.import_module(f"pipeplan.instances.{generator}"), generator)(*args, **kwargs)


def test_a_stage_a_killed_run_left_in_out_does_not_make_it_the_users(tmp_path):
    """SIGKILL (the OOM killer, a CI timeout) inside staged_folder leaves its stage in an
    existing --out; the next run on that folder had been refused as not pipeplan's."""
    out = tmp_path / "out"
    out.mkdir()
    (out / ".pp-stage-abc123").mkdir()          # what the killed run left
    with staged_folder(out) as stage:
        (stage / "a.csv").write_text("1")
    assert (out / "a.csv").read_text() == "1"
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")      # a folder of the user's is still refused
    with pytest.raises(InputError, match="not a folder pipeplan wrote"):
        with staged_folder(tmp_path / "mine"):
            pass

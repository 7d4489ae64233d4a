"""SIGTERM stops a command the way a failure does: exit 143, one line on stderr, and nothing
staged is left behind (``core.io.staged_folder``'s ``.pp-stage-*`` folder, ``write_atomic``'s
temporary files); a process forked from the command dies as by default instead of running its
parent's cleanup."""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli_helpers import ROOT

WAIT_S = 120   # how long a command may take to reach the point where it is stopped


def _spawn(argv: list[str], cwd: Path) -> subprocess.Popen:
    """A fresh interpreter in a session of its own (so that what it started can be killed with it)."""
    return subprocess.Popen([sys.executable, *argv], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, env={**os.environ, "PYTHONPATH": str(ROOT)})


def _start(*args, cwd: Path) -> subprocess.Popen:
    return _spawn(["-m", "pipeplan.app.cli", *map(str, args)], cwd)


def _wait_for(predicate, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        assert proc.poll() is None, proc.communicate()
        if time.monotonic() >= deadline:
            os.killpg(proc.pid, signal.SIGKILL)       # what it started too (its own session)
            raise AssertionError("the command never reached the point to stop it at")
        time.sleep(0.05)


def _terminate(proc: subprocess.Popen) -> tuple[int, str]:
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=WAIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)       # what it started too (its own session)
        raise
    return proc.returncode, err


def test_sigterm_during_a_staged_study_leaves_no_stage_folder(tmp_path):
    out = tmp_path / "study"
    proc = _start("study", "--out", out, "--solvers", "cpsat", "--time-limit", 60, "--threads", 1,
                  "--instances", "bst/resnet50", cwd=tmp_path)
    _wait_for(lambda: any(tmp_path.glob(".pp-stage-*")), proc)
    status, err = _terminate(proc)
    assert status == 143
    assert err.strip().splitlines()[-1] == "error: terminated by SIGTERM (nothing half-written is left)"
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "a stage folder or a partial --out was left"


def test_sigterm_during_a_bench_stops_its_runs_and_keeps_the_finished_records(tmp_path):
    out = tmp_path / "bench"
    proc = _start("bench", "--suite", "quick", "--jobs", 1, "--out", out, cwd=tmp_path)
    runs = out / "runs.jsonl"
    _wait_for(lambda: runs.exists() and runs.read_text().count("\n") >= 1, proc)
    status, err = _terminate(proc)
    assert status == 143
    assert err.strip().splitlines()[-1] == "error: terminated by SIGTERM (nothing half-written is left)"
    assert "Traceback" not in err
    assert not [p for p in out.rglob("*") if p.name.startswith(".pp-")], "a temporary file was left"
    # every record kept is a whole line (a rerun resumes from them)
    assert runs.read_text().endswith("\n")


def _child_under_the_handler(owner: int, marker: str) -> None:
    from pipeplan.app.cli.main import _terminate_here
    signal.signal(signal.SIGTERM, _terminate_here(owner))
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    finally:
        Path(marker).write_text("the parent's cleanup ran in the child")


def test_a_forked_process_dies_by_sigterm_without_its_parents_cleanup(tmp_path):
    marker = tmp_path / "marker"
    child = mp.get_context("fork").Process(target=_child_under_the_handler, args=(os.getpid(), str(marker)))
    child.start()
    child.join(WAIT_S)
    assert child.exitcode == -signal.SIGTERM
    assert not marker.exists()


def test_in_the_owning_process_sigterm_is_an_exception_that_cleans_up(tmp_path, monkeypatch):
    from pipeplan.app.cli.main import _terminate_here
    from pipeplan.core import deadline
    from pipeplan.core.errors import Terminated
    monkeypatch.setattr(deadline, "_stopping", None)      # the handler stops run_within: undone after the test
    previous = signal.signal(signal.SIGTERM, _terminate_here(os.getpid()))
    cleaned = False
    try:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        finally:
            cleaned = True
    except Terminated as exc:
        assert exc.code == 143
    else:
        raise AssertionError("SIGTERM raised nothing")
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert cleaned


STEP_BOUND_SCRIPT = """
import os, signal, sys
from pathlib import Path

import pytest
from pipeplan.app.cli.main import _terminate_here
from pipeplan.core.errors import Terminated
from pipeplan.formulations.rollout.workloads import preset_round
from pipeplan.solvers.rollout.step_bound import step_bound

signal.signal(signal.SIGTERM, _terminate_here(os.getpid()))
try:
    step_bound(preset_round("lsat-ar", 16), time_limit=600, threads=1)
except Terminated as exc:
    sys.exit(exc.code)
"""


def test_sigterm_during_the_step_indexed_bound_kills_its_milp_child(tmp_path):
    """The bound's MILPs run in children of the command (``core.deadline.run_within``): the
    handler kills them instead of letting the exit wait out their time limit (600 s here)."""
    proc = _spawn(["-c", STEP_BOUND_SCRIPT], tmp_path)
    _wait_for(lambda: bool(_children(proc.pid)), proc)      # a MILP is running in a child
    children = _children(proc.pid)
    status, err = _terminate(proc)      # communicate() waits at most WAIT_S, far below the MILP's 600 s
    assert status == 143, err
    assert not [pid for pid in children if Path(f"/proc/{pid}").exists()], "a MILP's child outlived the command"


def _children(pid: int) -> list[int]:
    """The processes ``pid``'s threads have started (Linux: one children file per thread)."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return found


class _SignalsInDel:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):           # the handler runs here, inside __del__: Python drops its exception
            pass


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")    # the dropped one
def test_a_sigterm_whose_exception_is_dropped_is_raised_again_at_the_next_deadline_check(monkeypatch):
    """How a bench once went on after SIGTERM: the handler ran inside a ``__del__`` and Python
    printed and dropped its exception. The next deadline check (every solver loop, the bench's
    loop) raises it again."""
    from pipeplan.app.cli.main import _terminate_here
    from pipeplan.core import deadline
    from pipeplan.core.errors import Terminated

    monkeypatch.setattr(deadline, "_stopping", None)
    previous = signal.signal(signal.SIGTERM, _terminate_here(os.getpid()))
    try:
        _SignalsInDel()                 # dropped at once: __del__ runs, its Terminated is swallowed
        with pytest.raises(Terminated):
            deadline.Deadline(None).expired()
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_dropped_terminated_prints_nothing_and_other_dropped_errors_still_do():
    from types import SimpleNamespace

    from pipeplan.app.cli.main import _quiet_when_dropped
    from pipeplan.core.errors import Terminated

    seen = []
    hook = _quiet_when_dropped(seen.append)
    hook(SimpleNamespace(exc_value=Terminated(143)))
    other = SimpleNamespace(exc_value=ValueError("in a __del__"))
    hook(other)
    assert seen == [other]


def _endless_model(path: Path) -> None:
    """X -> Loop without a trip count whose condition stays true (ONNX Runtime runs it for ever;
    a constant count of 2^62 is now refused before the run) -> Y."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    body = h.make_graph([h.make_node("Identity", ["c_in"], ["c_out"]), h.make_node("Identity", ["v_in"], ["v_out"])],
                        "body", [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("c_in", T.BOOL, []),
                                 h.make_tensor_value_info("v_in", T.FLOAT, [1, 4])],
                        [h.make_tensor_value_info("c_out", T.BOOL, []), h.make_tensor_value_info("v_out", T.FLOAT, [1, 4])])
    graph = h.make_graph([h.make_node("Loop", ["", "c", "X"], ["Y"], body=body, name="loop")], "g",
                         [h.make_tensor_value_info("X", T.FLOAT, [1, 4])], [h.make_tensor_value_info("Y", T.FLOAT, [1, 4])],
                         [h.make_tensor("c", T.BOOL, [], [True])])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


def test_sigterm_stops_profile_inside_onnx_runtime(tmp_path):
    """The profiler's runs happened on the main thread, inside ONNX Runtime, where no signal
    handler runs: a model that never ends ignored SIGTERM (and Ctrl-C) until SIGKILL."""
    _endless_model(tmp_path / "endless.onnx")
    proc = _start("profile", tmp_path / "endless.onnx", "--runs", 1, "--warmup", 0, "--out", tmp_path / "p.json",
                  cwd=tmp_path)
    time.sleep(3)
    assert proc.poll() is None
    started = time.monotonic()
    status, err = _terminate(proc)
    assert status == 143 and time.monotonic() - started < 15, err
    assert err.strip().splitlines()[-1] == "error: terminated by SIGTERM (nothing half-written is left)"
    assert not (tmp_path / "p.json").exists()


def test_a_swallowed_sigterm_commits_no_staged_folder_and_no_atomic_write(tmp_path, monkeypatch):
    """matplotlib's draw swallowed the handler's exception (or turned it into a ValueError), and
    ``costmodel``, ``report`` and ``compare`` then committed their folder and exited 0 (a
    hostile-input audit: about 1 in 6 SIGTERMs near the end of costmodel). The commit checks for
    a stop first."""
    from pipeplan.core import deadline
    from pipeplan.core.errors import Terminated
    from pipeplan.core.io import staged_folder, write_atomic

    out = tmp_path / "out"
    out.mkdir()
    (out / ".pipeplan-out").write_text("")
    (out / "report.md").write_text("old")
    monkeypatch.setattr(deadline, "_stopping", None)
    with pytest.raises(Terminated):
        with staged_folder(out) as stage:
            (stage / "report.md").write_text("new")
            deadline.stop(143)                       # the handler ran; its exception was dropped
    assert (out / "report.md").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]          # no stage folder left
    with pytest.raises(Terminated):
        write_atomic(out / "report.md", "newer")
    assert (out / "report.md").read_text() == "old"
    assert sorted(p.name for p in out.iterdir()) == [".pipeplan-out", "report.md"]   # no .pp-*.tmp


SWALLOWING_COMMAND = """
import sys
from pipeplan.app.cli import app, main
from pipeplan.core import deadline

@app.command("swallow")
def swallow(fail: bool = False):
    deadline.stop(143)                     # as the handler does, its exception then dropped
    if fail:
        raise ValueError("Invalid affine transformation matrix")   # what matplotlib made of it

main(sys.argv[1:])
"""


@pytest.mark.parametrize("fail", [False, True])
def test_a_command_that_swallowed_sigterm_still_exits_143_with_one_line(tmp_path, fail):
    proc = _spawn(["-c", SWALLOWING_COMMAND, "swallow", *(["--fail"] if fail else [])], tmp_path)
    out, err = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 143, err
    assert err.strip().splitlines() == ["error: terminated by SIGTERM (nothing half-written is left)"]


@pytest.mark.parametrize("sig, status, line", [(signal.SIGTERM, 143, "error: terminated by SIGTERM"),
                                               (signal.SIGINT, 130, "aborted")])
def test_a_signal_stops_a_native_cpsat_solve_at_once(tmp_path, sig, status, line):
    """A Python handler runs only between bytecodes: a SIGTERM had waited out the whole CP-SAT
    solve (at a 1e308 s limit it was still running 11 minutes later), and CP-SAT's own SIGINT
    handler had swallowed Ctrl-C (the command went on and exited 0) or let it kill the process
    with its temporary folders left. The signal watcher stops the search; Ctrl-C says so."""
    proc = _start("rollout", "sweep", "--R", 32, "--rhos", 1, "--engines", "linear", "--time-limit", "1e308",
                  "--out", tmp_path / "sweep", cwd=tmp_path)
    began = time.monotonic()
    _wait_for(lambda: time.monotonic() - began > 6, proc)      # past the sync round, inside CP-SAT
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=WAIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    assert proc.returncode == status, err
    assert err.strip().splitlines()[-1].startswith(line) and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_sigterm_stops_an_in_process_highs_milp(tmp_path):
    """HiGHS through PuLP in the command's process ignored the signal until its limit (6-9 s in
    `gradcode study --quick`; at a 1e308 s limit this MILP was still running 150 s after the
    SIGTERM): highspy honours cancelSolve only with its user interrupt on, which
    ``core.deadline.stoppable_highs`` turns on for the watcher."""
    proc = _start("gradcode", "place", "--scheme", "solver", "--solver-backend", "milp", "--instance",
                  "gradcode/hetero-n24-s2", "--time-limit", "1e308", "--out", tmp_path / "code.json", cwd=tmp_path)
    began = time.monotonic()
    _wait_for(lambda: time.monotonic() - began > 8, proc)      # inside the MILP's branch and bound
    status, err = _terminate(proc)
    assert status == 143, err
    assert err.strip().splitlines()[-1] == "error: terminated by SIGTERM (nothing half-written is left)"
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_the_library_keeps_cp_sat_s_own_ctrl_c():
    """Only a process whose signals are watched (the CLI) switches CP-SAT's SIGINT handler off:
    in a user's program, Ctrl-C still stops a solve as CP-SAT does it (with the handler off and
    no watcher, it would wait for the solve to end). A fresh interpreter: this test process may
    have run the CLI's main in process already."""
    code = ("from ortools.sat.python import cp_model\n"
            "from pipeplan.core.deadline import stoppable\n"
            "print(stoppable(cp_model.CpSolver()).parameters.catch_sigint_signal)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=WAIT_S,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout.strip() == "True", proc.stderr

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

from tests.cli_helpers import ROOT

WAIT_S = 120   # how long a command may take to reach the point where it is stopped


def _start(*args, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pipeplan.app.cli", *map(str, args)], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})


def _wait_for(predicate, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the command never reached the point to stop it at"
        time.sleep(0.05)


def _terminate(proc: subprocess.Popen) -> tuple[int, str]:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=WAIT_S)
    return proc.returncode, err


def test_sigterm_during_a_staged_study_leaves_no_stage_folder(tmp_path):
    out = tmp_path / "study"
    proc = _start("study", "--out", out, "--solvers", "cpsat", "--time-limit", 60, "--threads", 1,
                  "--instances", "bst/resnet50", cwd=tmp_path)
    _wait_for(lambda: any(tmp_path.glob(".pp-stage-*")), proc)
    status, err = _terminate(proc)
    assert status == 143
    assert err.strip().splitlines()[-1] == "error: terminated by SIGTERM (its temporary files are removed)"
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "a stage folder or a partial --out was left"


def test_sigterm_during_a_bench_stops_its_runs_and_keeps_the_finished_records(tmp_path):
    out = tmp_path / "bench"
    proc = _start("bench", "--suite", "quick", "--jobs", 1, "--out", out, cwd=tmp_path)
    runs = out / "runs.jsonl"
    _wait_for(lambda: runs.exists() and runs.read_text().count("\n") >= 1, proc)
    status, err = _terminate(proc)
    assert status == 143
    assert err.strip().splitlines()[-1] == "error: terminated by SIGTERM (its temporary files are removed)"
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


def test_in_the_owning_process_sigterm_is_an_exception_that_cleans_up(tmp_path):
    from pipeplan.app.cli.main import Terminated, _terminate_here
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

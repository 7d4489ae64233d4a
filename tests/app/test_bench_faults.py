"""The bench under faults: a torn or garbage last line of runs.jsonl (a crash mid-write), two
benches on one folder (the lock), a run selected twice, Ray missing, unusable --suite/--out."""
import fcntl
import json
import os
import socket
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pipeplan.app import bench
from pipeplan.app.bench import (
    LOCK,
    MAX_RECORD_MAGNITUDE,
    RECORDS,
    bench_lock,
    open_records,
    record_key,
    run_suite,
    scan_records,
)
from pipeplan.core.errors import InputError
from pipeplan.core.io import OUT_MARKER
from tests.cli_helpers import ROOT, assert_input_error, run_cli

ONE = '[[mapping]]\ninstances = ["khadas-vim3/SqueezeV1"]\nsolvers = ["single"]\ntime_limit = 5\n'
TWO = '[[mapping]]\ninstances = ["khadas-vim3/SqueezeV1"]\nsolvers = ["single", "heft"]\ntime_limit = 5\n'


# a run record as a bench writes it (the fields that make a runs.jsonl a bench's)
RECORD = {"system": "mapping", "instance": "khadas-vim3/SqueezeV1", "solver": "single", "seed": 0}


def suite_file(folder: Path, body: str) -> str:
    path = folder / "suite.toml"
    path.write_text(body)
    return str(path)


def fake_engine(runs, jobs, on_record, grace_s):
    """Stands in for run_local where what is tested is the records file, not the solving."""
    for run in runs:
        on_record({**bench._stopped(run, "error", 0.01), "termination": "completed", "message": "fake"})


def lines_of(path: Path) -> list[dict]:
    """runs.jsonl read strictly: every line a complete JSON object ending in a newline."""
    data = path.read_bytes()
    assert data == b"" or data.endswith(b"\n"), data[-80:]
    return [json.loads(line) for line in data.decode().splitlines()]


def damaged_files(out: Path) -> list[Path]:
    return sorted(out.glob(f"{RECORDS}.damaged-*"))


def warnings_of(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("warning: ")]


# ----------------------------------------------------------------------------- torn last line

@pytest.mark.parametrize("tear", ["half", "nul", "not_utf8", "glued"])
def test_a_damaged_last_line_is_set_aside_and_the_rerun_appends_cleanly(tmp_path, tear):
    suite, out = suite_file(tmp_path, TWO), tmp_path / "out"
    assert run_cli("bench", "--suite", suite, "--out", out).returncode == 0
    records = out / RECORDS
    first, second = records.read_bytes().splitlines(keepends=True)
    damaged = {"half": second[: len(second) // 2], "nul": b"\0" * 40, "not_utf8": b'{"system": "\xff\xfe',
               "glued": second[:30] + second}[tear]        # "glued": what the old bench left
    records.write_bytes(first + damaged)

    rerun = run_cli("bench", "--suite", suite, "--out", out)
    assert rerun.returncode == 0, rerun.stderr
    warned = warnings_of(rerun.stderr)
    assert len(warned) == 1 and f"{records}: line 2: set aside {len(damaged)} damaged bytes" in warned[0]
    [aside] = damaged_files(out)
    assert str(aside) in warned[0] and aside.read_bytes() == damaged
    kept = lines_of(records)
    assert kept[0] == json.loads(first) and len(kept) == 2
    assert {r["solver"] for r in kept} == {"single", "heft"}
    assert "(1 already recorded, 1 run now)" in rerun.stdout

    again = run_cli("bench", "--suite", suite, "--out", out)     # the one after: clean, nothing to do
    assert again.returncode == 0 and warnings_of(again.stderr) == [], again.stderr
    assert "(2 already recorded, 0 run now)" in again.stdout
    assert damaged_files(out) == [aside] and len(lines_of(records)) == 2


def test_set_aside_bytes_are_appended_never_overwritten(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "run_local", fake_engine)
    suite, out = suite_file(tmp_path, ONE), tmp_path / "out"
    run_suite(suite, out)
    stamp = "runs.jsonl.damaged-20240101T000000Z"
    (out / stamp).write_bytes(b"earlier")

    class NewYear(datetime):        # every repair in the same second: one file, appended to
        @classmethod
        def now(cls, tz=None):
            return datetime(2024, 1, 1, tzinfo=timezone.utc)

    monkeypatch.setattr(bench, "datetime", NewYear)
    for tail in (b'{"sys', b"\0\0\0"):
        with (out / RECORDS).open("ab") as fh:
            fh.write(tail)
        run_suite(suite, out)
    assert (out / stamp).read_bytes() == b'earlier{"sys\0\0\0'
    assert len(lines_of(out / RECORDS)) == 1



def test_a_fifo_under_the_set_aside_name_is_refused_not_waited_on(tmp_path, monkeypatch):
    """The set-aside file is opened without blocking: a FIFO planted under its time-stamped
    name had hung the bench (no reader ever comes)."""
    monkeypatch.setattr(bench, "run_local", fake_engine)
    suite, out = suite_file(tmp_path, ONE), tmp_path / "out"
    run_suite(suite, out)
    os.mkfifo(out / "runs.jsonl.damaged-20240101T000000Z")

    class NewYear(datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime(2024, 1, 1, tzinfo=timezone.utc)

    monkeypatch.setattr(bench, "datetime", NewYear)
    with (out / RECORDS).open("ab") as fh:
        fh.write(b'{"sys')
    before = (out / RECORDS).read_bytes()
    with pytest.raises(InputError, match="cannot set the damaged last line aside"):
        run_suite(suite, out)
    assert (out / RECORDS).read_bytes() == before

record = st.fixed_dictionaries({
    "system": st.just("mapping"),
    "instance": st.text(st.characters(categories=("L", "M", "N", "P", "S")), max_size=12).map(lambda s: f"rand/{s}"),
    "solver": st.sampled_from(["single", "heft", "cpsat"]), "seed": st.integers(-5, 2**40),
    "termination": st.sampled_from(["completed", "optimal", "error", "time_limit"]),
    "objectives": st.dictionaries(st.text(max_size=5), st.floats(-MAX_RECORD_MAGNITUDE, MAX_RECORD_MAGNITUDE),
                                  max_size=3),
    "message": st.text(max_size=20)})


@settings(max_examples=40, deadline=None)
@given(records=st.lists(record, max_size=6, unique_by=record_key), last=record, cut=st.floats(0, 1))
def test_property_a_rerun_after_a_torn_write_keeps_every_complete_record(tmp_path_factory, records, last, cut):
    """Random records (each run once), the last one's line cut anywhere (a torn write): a rerun
    keeps every complete record, sets aside exactly the torn bytes (none if the cut kept the whole
    JSON), appends its own record on a line of its own, and the file then parses line by line.
    (Folders are kept to the session's end: pipeplan.core.io knows this process's inputs by inode,
    and a deleted folder's inode comes back.)"""
    assume(record_key(last) not in {record_key(r) for r in records})
    line = (json.dumps(last) + "\n").encode()
    torn = line[: round(cut * len(line))]
    whole = torn.rstrip(b"\n") == line.rstrip(b"\n")          # only the newline, if anything, is lost
    tmp = tmp_path_factory.mktemp("torn")
    with mock.patch.object(bench, "run_local", fake_engine):
        out = Path(tmp) / "out"
        out.mkdir()
        (out / OUT_MARKER).write_text("")           # as a bench marks its folder before its first run
        (out / RECORDS).write_bytes(b"".join((json.dumps(r) + "\n").encode() for r in records) + torn)
        assert run_suite(suite_file(Path(tmp), ONE), out)["ran"] == 1
        kept = lines_of(out / RECORDS)
        expected = records + ([last] if whole else [])
        assert kept[:-1] == expected and kept[-1]["instance"] == "khadas-vim3/SqueezeV1"
        aside = damaged_files(out)
        assert [p.read_bytes() for p in aside] == ([] if whole or not torn else [torn])


@pytest.mark.parametrize("middle,why", [(b'{"system": "\xff"}', "not UTF-8 text"),
                                        (b'{"seed": ' + b"9" * 5000 + b"}", "invalid JSON (Exceeds the limit"),
                                        (b'{"system": "mapping", "instance": "x", "solver": "cpsat", "seed": 1, '
                                         b'"seed": 0, "termination": "completed"}', "seed: given twice in one object")])
def test_a_damaged_line_before_the_last_is_an_error_naming_it(tmp_path, middle, why):
    out = tmp_path / "out"
    out.mkdir()
    good = json.dumps({"system": "mapping", "instance": "x", "solver": "heft", "seed": 0, "termination": "completed"})
    body = f"{good}\n".encode() + middle + f"\n{good}\n".encode()
    (out / RECORDS).write_bytes(body)
    proc = run_cli("bench", "--suite", suite_file(tmp_path, ONE), "--out", out)
    assert_input_error(proc, f"{out / RECORDS}: line 2: {why}")
    assert (out / RECORDS).read_bytes() == body and damaged_files(out) == []
    assert sorted(p.name for p in out.iterdir()) == [RECORDS]          # no suite.json, lock removed


def test_a_last_line_naming_a_key_twice_is_damaged_set_aside_and_its_run_redone(tmp_path, monkeypatch, capsys):
    """Python's reader keeps a key's last value: a last record naming "seed" twice had been read
    as heft's seed-0 run, already done (resume skipped it). It is a damaged line like a torn one:
    the report ignores it with a warning, the next bench sets it aside and redoes the run."""
    monkeypatch.setattr(bench, "run_local", fake_engine)
    out = tmp_path / "out"
    run_suite(suite_file(tmp_path, ONE), out)
    first = (out / RECORDS).read_bytes()
    good = {"system": "mapping", "instance": "khadas-vim3/SqueezeV1", "solver": "heft", "seed": 0,
            "termination": "completed", "objectives": {}}
    twice = json.dumps(good).replace('"seed": 0', '"seed": 7, "seed": 0').encode() + b"\n"
    assert json.loads(twice) == good
    (out / RECORDS).write_bytes(first + twice)
    capsys.readouterr()

    assert [r["solver"] for r in bench.read_records(out / RECORDS)] == ["single"]      # the report's reader
    [warned] = warnings_of(capsys.readouterr().err)
    assert f"{out / RECORDS}: line 2: damaged last line ignored ({len(twice)} bytes" in warned

    assert run_suite(suite_file(tmp_path, TWO), out)["ran"] == 1                        # heft redone
    [warned] = warnings_of(capsys.readouterr().err)
    assert f"{out / RECORDS}: line 2: set aside {len(twice)} damaged bytes" in warned
    [aside] = damaged_files(out)
    assert aside.read_bytes() == twice
    kept = lines_of(out / RECORDS)
    assert [r["solver"] for r in kept] == ["single", "heft"] and kept[0] == json.loads(first)


def test_report_ignores_a_torn_last_line_with_one_warning(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "run_local", fake_engine)
    out = tmp_path / "out"
    run_suite(suite_file(tmp_path, TWO), out)
    data = (out / RECORDS).read_bytes()
    (out / RECORDS).write_bytes(data[:-20])
    proc = run_cli("report", out)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [line for line in proc.stderr.splitlines() if line.startswith("warning: ")]
    [warned] = warnings_of(proc.stderr)
    assert f"{out / RECORDS}: line 2: damaged last line ignored" in warned and "pipeplan bench" in warned
    assert (out / RECORDS).read_bytes() == data[:-20]                 # the report repairs nothing
    assert "1 runs: completed 1." in (out / "report.md").read_text()


def test_records_are_appended_with_one_write_each_on_an_append_descriptor(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "run_local", fake_engine)
    writes, real_write = [], os.write

    def spy(fd, data):
        assert fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_APPEND or os.fstat(fd).st_ino != records_ino()
        writes.append((os.fstat(fd).st_ino, bytes(data)))
        return real_write(fd, data)

    def records_ino():
        return (out / RECORDS).stat().st_ino if (out / RECORDS).exists() else -1

    monkeypatch.setattr(bench.os, "write", spy)
    out = tmp_path / "out"
    run_suite(suite_file(tmp_path, TWO), out)
    ino = records_ino()
    assert sorted(json.loads(d)["solver"] for i, d in writes if i == ino) == ["heft", "single"]
    assert all(d.endswith(b"\n") and d.count(b"\n") == 1 for i, d in writes if i == ino)


# ----------------------------------------------------------------------------- the lock

def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_second_bench_on_the_folder_is_refused_at_once(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with bench_lock(out):
        owner = json.loads((out / LOCK).read_text())
        assert owner["pid"] == os.getpid() and owner["host"] == socket.gethostname()
        proc = run_cli("bench", "--suite", suite_file(tmp_path, ONE), "--out", out)
        assert_input_error(proc, f"{out / LOCK}: another bench (pid {os.getpid()} on {socket.gethostname()}")
        assert sorted(p.name for p in out.iterdir()) == [LOCK]          # nothing run, nothing written
        with pytest.raises(InputError, match="another bench"):
            run_suite(suite_file(tmp_path, ONE), out)
    assert not (out / LOCK).exists()


@pytest.mark.parametrize("lock", [
    {"pid": os.getpid(), "host": "some-other-host"},      # liveness unknowable: refused
    "",                                                   # being written, or unreadable: refused
])
def test_locks_that_cannot_be_judged_stale_are_respected(tmp_path, lock):
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK).write_text(json.dumps(lock) if lock else "")
    proc = run_cli("bench", "--suite", suite_file(tmp_path, ONE), "--out", out)
    assert_input_error(proc, str(out / LOCK))
    assert sorted(p.name for p in out.iterdir()) == [LOCK]


@pytest.mark.parametrize("kind", ["link to a FIFO", "link to a file", "FIFO"])
def test_a_lock_that_is_a_link_or_fifo_is_refused_unread(tmp_path, kind):
    """A bench folder from someone else: its bench.lock linked out (or a FIFO) is neither read
    nor waited on (a link to a FIFO had hung the bench until killed)."""
    out, target = tmp_path / "out", tmp_path / "target"
    out.mkdir()
    (out / RECORDS).write_text(json.dumps(RECORD) + "\n")       # a bench folder from before the marker
    if kind == "link to a file":
        target.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
    else:
        os.mkfifo(target if kind != "FIFO" else out / LOCK)
    if kind != "FIFO":
        (out / LOCK).symlink_to(target)
    proc = run_cli("bench", "--suite", suite_file(tmp_path, ONE), "--out", out)
    why = "is not a regular file" if kind == "FIFO" else "is a symbolic link"
    assert_input_error(proc, f"{out / LOCK}: {why}, not a bench's lock")
    assert sorted(p.name for p in out.iterdir()) == [LOCK, RECORDS]


@pytest.mark.parametrize("owner", ["dead", "other_boot"])
def test_a_stale_lock_is_reported_and_taken_over(tmp_path, owner):
    out = tmp_path / "out"
    out.mkdir()
    stale = {"pid": dead_pid(), "host": socket.gethostname()} if owner == "dead" else \
        {"pid": os.getpid(), "host": socket.gethostname(), "boot": "an-earlier-boot"}
    (out / LOCK).write_text(json.dumps(stale))
    proc = run_cli("bench", "--suite", suite_file(tmp_path, ONE), "--out", out)
    assert proc.returncode == 0, proc.stderr
    [warned] = warnings_of(proc.stderr)
    assert f"{out / LOCK}: stale lock of pid {stale['pid']}" in warned and "taken over" in warned
    assert len(lines_of(out / RECORDS)) == 1
    assert not (out / LOCK).exists()


@pytest.mark.parametrize("fault", [RuntimeError("solver farm on fire"), KeyboardInterrupt()])
def test_the_lock_is_held_during_the_runs_and_removed_however_the_bench_ends(tmp_path, monkeypatch, fault):
    seen = []

    def engine(runs, jobs, on_record, grace_s):
        seen.append(json.loads((out / LOCK).read_text())["pid"])
        fake_engine(runs[:1], jobs, on_record, grace_s)
        raise fault

    monkeypatch.setattr(bench, "run_local", engine)
    out = tmp_path / "out"
    with pytest.raises(type(fault)):
        run_suite(suite_file(tmp_path, TWO), out)
    assert seen == [os.getpid()]
    assert not (out / LOCK).exists()
    assert len(lines_of(out / RECORDS)) == 1                          # the finished record stays


def test_fresh_forgets_the_records_under_the_lock(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "run_local", fake_engine)
    out = tmp_path / "out"
    run_suite(suite_file(tmp_path, TWO), out)
    assert run_suite(suite_file(tmp_path, TWO), out, fresh=True)["ran"] == 2
    assert len(lines_of(out / RECORDS)) == 2
    with bench_lock(out), pytest.raises(InputError, match="another bench"):
        run_suite(suite_file(tmp_path, TWO), out, fresh=True)
    assert len(lines_of(out / RECORDS)) == 2                          # a refused --fresh deletes nothing


# ----------------------------------------------------------------------------- refused before writing

def test_duplicate_seeds_are_refused_before_anything_runs(tmp_path):
    out = tmp_path / "out"
    suite = suite_file(tmp_path, ONE + "seeds = [0, 1, 0]\n")
    with pytest.raises(InputError, match=r"mapping\[0\]\.seeds: seed 0 is listed twice"):
        run_suite(suite, out)
    assert not out.exists()


def test_engine_ray_without_ray_writes_nothing(tmp_path):
    out = tmp_path / "deep" / "out"
    block_ray = "import sys; sys.modules['ray'] = None; from pipeplan.app.cli import main; main(sys.argv[1:])"
    proc = subprocess.run([sys.executable, "-c", block_ray, "bench", "--suite", suite_file(tmp_path, ONE),
                           "--out", str(out), "--engine", "ray"], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    assert_input_error(proc, "--engine: ray: Ray is not installed")
    assert not (tmp_path / "deep").exists()


def test_suite_that_is_a_folder_is_one_line(tmp_path):
    (tmp_path / "suites").mkdir()
    proc = run_cli("bench", "--suite", tmp_path / "suites", "--out", tmp_path / "out")
    assert_input_error(proc, f"{tmp_path / 'suites'}: is a folder, expected a TOML file")
    assert not (tmp_path / "out").exists()


def test_unwritable_results_folder_is_one_line(tmp_path):
    """As root, where permissions do not bind, sysfs stands in: no file can be created there."""
    if os.geteuid() == 0:
        if not Path("/sys/kernel").is_dir():
            pytest.skip("root without sysfs: no folder that root cannot write")
        folder = Path("/sys")
    else:
        folder = tmp_path / "read-only"
        folder.mkdir(mode=0o555)
    # /sys is not empty and holds no marker: refused as a folder pipeplan did not write, before any write
    first = "--out: not a folder pipeplan wrote" if folder == Path("/sys") else "cannot write ("
    for out, why in ((folder, first), (folder / "pipeplan-bench", "cannot create the results folder (")):
        proc = run_cli("bench", "--suite", suite_file(tmp_path, ONE), "--out", out)
        assert_input_error(proc, f"{out}: {why}")
    assert not (folder / "pipeplan-bench").exists() and not (folder / LOCK).exists()


def test_scan_keeps_a_last_record_cut_just_before_its_newline(tmp_path):
    rec = {"system": "mapping", "instance": "x", "solver": "heft", "seed": 0, "termination": "completed"}
    other = {**rec, "seed": 1}
    path = tmp_path / RECORDS
    path.write_text(json.dumps(rec) + "\n\n" + json.dumps(other))
    assert scan_records(path) == ([rec, other], None)


def test_a_linked_runs_jsonl_is_refused_neither_read_nor_deleted(tmp_path):
    """runs.jsonl as a symlink (to someone's file): refused before it is read, written or, with
    --fresh, deleted."""
    out, victim = tmp_path / "out", tmp_path / "victim.txt"
    out.mkdir()
    victim.write_text("not yours\n")
    (out / "runs.jsonl").symlink_to(victim)
    for fresh in (False, True):
        with pytest.raises(InputError, match="symbolic link"):
            with open_records(out, fresh=fresh):
                pass
        assert (out / "runs.jsonl").is_symlink() and victim.read_text() == "not yours\n"


# ----------------------------------------------------------------------------- whose folder

@pytest.mark.parametrize("fresh", [False, True])
@pytest.mark.parametrize("records", ["my own notes\n", ""])
def test_a_folder_with_a_runs_jsonl_of_the_user_s_is_refused_untouched(tmp_path, records, fresh):
    """A file named runs.jsonl had made any folder a bench's: the user's report.md was replaced
    and, with --fresh, their runs.jsonl deleted (found by a hostile-input audit)."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / RECORDS).write_text(records)
    (out / "report.md").write_text("MY REPORT")
    proc = run_cli("bench", "--suite", suite_file(tmp_path, ONE), "--out", out, *(["--fresh"] if fresh else []))
    assert_input_error(proc, f"{out}: --out: not a folder pipeplan wrote")
    assert sorted(p.name for p in out.iterdir()) == ["report.md", RECORDS]
    assert (out / RECORDS).read_text() == records and (out / "report.md").read_text() == "MY REPORT"


def test_a_bench_folder_from_before_the_marker_is_still_the_bench_s(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "run_local", fake_engine)
    out = tmp_path / "out"
    run_suite(suite_file(tmp_path, ONE), out)
    (out / OUT_MARKER).unlink()
    assert run_suite(suite_file(tmp_path, TWO), out)["ran"] == 1
    assert len(lines_of(out / RECORDS)) == 2 and (out / OUT_MARKER).exists()


@pytest.mark.parametrize("name", ["summary.csv", "report.md", "suite.json", "pareto_x.png"])
def test_an_output_linked_elsewhere_is_refused_before_any_run(tmp_path, monkeypatch, name):
    """The report had refused a linked summary.csv only after the runs: runs.jsonl appended and
    suite.json rewritten, then exit 2 (found by a hostile-input audit)."""
    monkeypatch.setattr(bench, "run_local", fake_engine)
    out, outside = tmp_path / "out", tmp_path / "outside.txt"
    run_suite(suite_file(tmp_path, ONE), out)
    outside.write_text("OUTSIDE")
    (out / name).unlink(missing_ok=True)
    (out / name).symlink_to(outside)
    before = {p.name: p.read_bytes() for p in out.iterdir() if not p.is_symlink()}
    with pytest.raises(InputError, match=f"{name}: output is a symbolic link"):
        run_suite(suite_file(tmp_path, TWO), out)
    assert {p.name: p.read_bytes() for p in out.iterdir() if not p.is_symlink()} == before
    assert outside.read_text() == "OUTSIDE"

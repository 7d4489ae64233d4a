"""The shared readers and writers of pipeplan.core.io and the size checks of pipeplan.core.sizes (issue 12:
inputs and outputs that are not what they claim, sizes that would exhaust the machine).

Every case here failed before these guards (a hang, a traceback, a destroyed input or a file
written where none should be); the corpus (tests/bad_inputs/cases_io.toml) holds the cases
that can live in git as files, this module the ones that need a FIFO, a device, a symlink or an
environment variable."""
import csv
import io
import json
import math
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeplan.core.errors import InputError
from pipeplan.core.io import (
    OUT_MARKER,
    check_out_folder,
    check_output,
    load_json,
    load_toml,
    parse_number,
    read_csv,
    read_input,
    staged_folder,
    write_atomic,
)
from pipeplan.core.sizes import check_memory
from tests.cli_helpers import ROOT, assert_input_error, run_cli

GOOD = ROOT / "tests" / "bad_inputs" / "good"


# --- properties of the readers -------------------------------------------------------------

cells = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n\x00"), max_size=12)


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.lists(cells, min_size=1, max_size=4), min_size=1, max_size=6), bom=st.booleans())
def test_read_csv_returns_what_csv_writer_wrote_with_or_without_a_bom(tmp_path_factory, rows, bom):
    buf = io.StringIO()
    csv.writer(buf).writerows(rows)
    path = tmp_path_factory.mktemp("csv") / "t.csv"
    path.write_bytes(("\ufeff" if bom else "").encode() + buf.getvalue().encode())
    expected = [r for r in rows if any(c.strip() for c in r)]
    assert [r for _, r in read_csv(path)] == expected


@settings(max_examples=100, deadline=None)
@given(x=st.floats(allow_nan=True, allow_infinity=True) | st.integers(min_value=-10**400, max_value=10**400)
       | st.sampled_from(["nan", "NaN", "inf", "-Infinity", "1e999", "", "x", " 3 "]))
def test_parse_number_accepts_exactly_the_finite_numbers(x):
    text = str(x) if not isinstance(x, str) else x
    try:
        expected = float(text)
    except (ValueError, OverflowError):
        expected = None
    if expected is not None and math.isfinite(expected):
        assert parse_number(text, "f.csv", "line 1: a") == expected
    else:
        with pytest.raises(InputError) as exc:
            parse_number(text, "f.csv", "line 1: a")
        assert exc.value.field == "line 1: a"


@settings(max_examples=25, deadline=None)
@given(depth=st.integers(min_value=1, max_value=60_000), kind=st.sampled_from(["json", "toml"]))
def test_nesting_at_any_depth_is_data_or_a_clear_error_never_a_recursion_error(tmp_path_factory, depth, kind):
    path = tmp_path_factory.mktemp("deep") / f"d.{kind}"
    nested = "[" * depth + "]" * depth
    path.write_text(nested if kind == "json" else f"a = {nested}\n")
    try:
        doc = load_json(path) if kind == "json" else load_toml(path)["a"]
    except InputError as exc:
        assert "nested too deeply" in str(exc)
        return
    for _ in range(depth - 1):      # what was read is the whole structure
        (doc,) = doc
    assert doc == []


@pytest.mark.parametrize("kind", ["json", "toml"])
def test_an_integer_past_the_digit_limit_is_a_clear_error_naming_its_line(tmp_path, kind):
    digits = "1" * 5000                 # Python refuses to convert more than 4300 digits to an int
    path = tmp_path / f"n.{kind}"
    path.write_text('{\n"a": 1,\n"b": ' + digits + "\n}" if kind == "json" else f"a = 1\nb = {digits}\n")
    with pytest.raises(InputError) as exc:
        load_json(path) if kind == "json" else load_toml(path)
    assert exc.value.source == str(path) and exc.value.field == ("line 3" if kind == "json" else "line 2")
    assert "digits" in exc.value.message


def test_the_cli_names_the_line_of_an_integer_past_the_digit_limit(tmp_path):
    doc = json.loads((GOOD / "rollout_problem.json").read_text())
    problem = tmp_path / "p.json"
    problem.write_text(json.dumps(doc).replace('"max_response_tokens": 0', '"max_response_tokens": 1' + "0" * 5000))
    assert_input_error(run_cli("rollout", "simulate", problem), "p.json: line 1: invalid number")
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"prompt_id": 0, "sample_id": 0, "response_tokens": 5}\n'
                     '{"prompt_id": 0, "sample_id": 1, "response_tokens": 1' + "0" * 5000 + "}\n")
    assert_input_error(run_cli("rollout", "simulate", "--trace", trace), "t.jsonl: line 2: invalid number")


# --- inputs that are not regular files or are too large --------------------------------------

def test_a_fifo_device_or_folder_is_refused_without_opening_it_for_reading(tmp_path):
    fifo = tmp_path / "instance.json"
    os.mkfifo(fifo)                 # a blocking open would hang here: nobody writes to it
    for path, kind in ((fifo, "a FIFO"), ("/dev/zero", "a device"), (tmp_path, "a folder")):
        with pytest.raises(InputError, match=kind):
            read_input(path)


def test_the_cli_refuses_a_fifo_and_a_folder_as_input(tmp_path):
    fifo = tmp_path / "problem.json"
    os.mkfifo(fifo)
    assert_input_error(run_cli("solve", fifo, "--solver", "heft"), "problem.json", "FIFO")
    assert_input_error(run_cli("gradcode", "verify", "--code", tmp_path), str(tmp_path), "folder")
    assert_input_error(run_cli("gradcode", "verify", "--code", "/dev/zero"), "/dev/zero", "device")
    trace = tmp_path / "trace.csv"
    os.mkfifo(trace)
    assert_input_error(run_cli("rollout", "simulate", trace, "--policy", "cgp"), "trace.csv", "FIFO")


def test_the_input_size_cap_is_documented_overridable_and_names_the_variable(tmp_path, monkeypatch):
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"pad": "x" * 300_000}))
    monkeypatch.setenv("PIPEPLAN_MAX_INPUT_MB", "0.25")
    with pytest.raises(InputError, match="PIPEPLAN_MAX_INPUT_MB"):
        load_json(path)
    monkeypatch.setenv("PIPEPLAN_MAX_INPUT_MB", "1")
    assert len(load_json(path)["pad"]) == 300_000
    monkeypatch.setenv("PIPEPLAN_MAX_INPUT_MB", "-3")
    with pytest.raises(InputError, match="PIPEPLAN_MAX_INPUT_MB"):
        load_json(path)


def test_cli_size_cap(tmp_path):
    big = tmp_path / "instance.json"
    big.write_text(" " * 400_000 + (GOOD / "diamond.json").read_text())
    proc = run_cli("solve", big, "--solver", "heft", cwd=tmp_path, env={"PIPEPLAN_MAX_INPUT_MB": "0.1"})
    assert_input_error(proc, "instance.json", "size cap")


# --- outputs ---------------------------------------------------------------------------------

def _instance(tmp_path):
    for name in ("diamond.json", "profile.json"):
        (tmp_path / name).write_bytes((GOOD / name).read_bytes())
    return tmp_path / "diamond.json"


def test_out_equal_to_an_input_is_refused_and_the_input_survives(tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes((GOOD / "tiny.onnx").read_bytes())
    before = model.read_bytes()
    assert_input_error(run_cli("profile", model, "--out", model, "--runs", "1", "--warmup", "0", cwd=tmp_path),
                       "m.onnx", "input")
    assert model.read_bytes() == before
    inst = _instance(tmp_path)
    for target in (inst, tmp_path / "profile.json"):    # the instance, and the profile it reads
        text = target.read_text()
        assert_input_error(run_cli("solve", inst, "--solver", "heft", "--out", target, cwd=tmp_path),
                           target.name, "input")
        assert target.read_text() == text


@pytest.mark.parametrize("make, needle", [
    (lambda p: p.mkdir(), "folder"),
    (lambda p: p.symlink_to(p.parent / "elsewhere.json"), "symbolic link"),
    (lambda p: os.mkfifo(p), "FIFO"),
])
def test_out_of_the_wrong_kind_is_refused_before_anything_is_written(tmp_path, make, needle):
    inst = _instance(tmp_path)
    out = tmp_path / "result.json"
    make(out)
    before = sorted(tmp_path.iterdir())
    assert_input_error(run_cli("solve", inst, "--solver", "heft", "--out", out, cwd=tmp_path), "result.json", needle)
    assert sorted(tmp_path.iterdir()) == before
    assert not (tmp_path / "elsewhere.json").exists()


def test_a_device_stays_a_device():
    with pytest.raises(InputError, match="device"):
        write_atomic("/dev/null", "x")
    assert not os.path.isfile("/dev/null")


def test_any_name_the_file_system_takes_can_be_written_and_longer_ones_fail_cleanly(tmp_path):
    inst = _instance(tmp_path)
    longest = tmp_path / ("r" * (os.pathconf(tmp_path, "PC_NAME_MAX") - 5) + ".json")
    assert run_cli("solve", inst, "--solver", "heft", "--out", longest, cwd=tmp_path).returncode == 0
    assert json.loads(longest.read_text())["solver"] == "heft"
    too_long = tmp_path / ("r" * 300 + ".json")
    assert_input_error(run_cli("solve", inst, "--solver", "heft", "--out", too_long, cwd=tmp_path), "cannot write")
    assert {p.name for p in tmp_path.iterdir()} == {"diamond.json", "profile.json", longest.name}


def test_an_unwritable_place_is_one_line_and_leaves_nothing(tmp_path):
    inst = _instance(tmp_path)
    for out in ("/proc/pipeplan/result.json", "/proc/version/result.json"):
        assert_input_error(run_cli("solve", inst, "--solver", "heft", "--out", out, cwd=tmp_path), "cannot write")
        assert_input_error(run_cli("compare", inst, "--solvers", "heft", "--out", out, cwd=tmp_path), "cannot write")
    assert {p.name for p in tmp_path.iterdir()} == {"diamond.json", "profile.json"}


def test_staged_folder_never_writes_through_a_linked_subfolder(tmp_path):
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / "plots").symlink_to(elsewhere)
    (out / OUT_MARKER).write_text("")        # pipeplan's folder: the link inside it is what is refused
    with pytest.raises(InputError, match="symbolic link"):
        with staged_folder(out) as stage:
            (stage / "plots").mkdir()
            (stage / "plots" / "a.png").write_bytes(b"png")
    assert list(elsewhere.iterdir()) == []
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []   # stage removed


def test_the_files_a_command_will_write_are_checked_before_its_work(tmp_path):
    """Found by a hostile-input audit: the studies checked a linked output inside their marked
    folder, and a place where no stage can be made, only when they committed, after their
    work (8-36 s). ``check_out_folder(writes=...)`` checks both up front."""
    out, theirs = tmp_path / "out", tmp_path / "theirs.md"
    out.mkdir()
    (out / OUT_MARKER).write_text("")
    theirs.write_text("theirs")
    (out / "sweep.md").symlink_to(theirs)
    assert check_out_folder(out) == out            # without the names, the link is found at the commit
    with pytest.raises(InputError, match="symbolic link") as info:
        check_out_folder(out, writes=("sweep.csv", "sweep.md"))
    assert info.value.source == str(out / "sweep.md")
    with pytest.raises(InputError, match="cannot write"):
        check_out_folder("/proc/pipeplan/out", writes=("sweep.md",))
    assert theirs.read_text() == "theirs"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "theirs.md"]     # the probe left nothing


def test_a_study_refuses_its_outputs_before_it_runs(tmp_path, monkeypatch):
    """`rollout sweep` into a marked folder whose sweep.md is a link: refused before the sweep
    runs (it had run it first, then refused at the commit)."""
    from typer.testing import CliRunner

    from pipeplan.app.cli.main import app
    from pipeplan.app.studies import rollout as studies

    def must_not_run(**_):
        raise AssertionError("the sweep ran before its outputs were checked")
    monkeypatch.setattr(studies, "sweep", must_not_run)
    out, theirs = tmp_path / "out", tmp_path / "theirs.md"
    out.mkdir()
    (out / OUT_MARKER).write_text("")
    theirs.write_text("theirs")
    (out / "sweep.md").symlink_to(theirs)
    result = CliRunner().invoke(app, ["rollout", "sweep", "--R", "4", "--rhos", "1", "--engines", "linear",
                                      "--out", str(out)])
    assert isinstance(result.exception, InputError), result.exception
    assert "symbolic link" in str(result.exception) and theirs.read_text() == "theirs"


def test_check_output_accepts_new_and_regular_files(tmp_path):
    assert check_output(tmp_path / "new.json") == tmp_path / "new.json"
    (tmp_path / "old.json").write_text("{}")
    assert check_output(tmp_path / "old.json") == tmp_path / "old.json"
    assert check_output(tmp_path, folder=True) == tmp_path


# --- sizes that would exhaust the machine ------------------------------------------------------

def test_check_memory_names_the_option_the_estimate_and_the_largest_value(monkeypatch):
    monkeypatch.setenv("PIPEPLAN_MAX_MEMORY_MB", "1")
    check_memory("--steps", 1000, 1000)                      # 1 MB minus change: fits
    with pytest.raises(InputError) as exc:
        check_memory("--steps", 2000, 1000)
    assert exc.value.source == "--steps" and "largest that fits: 1048" in exc.value.message


@pytest.mark.parametrize("args, option", [
    (["gradcode", "simulate", "--scheme", "fr", "--n", "4", "--s", "1", "--steps", str(10**12)], "--steps"),
    (["gradcode", "train", "--scheme", "fr", "--n", "4", "--s", "1", "--steps", str(10**11)], "--steps"),
    (["gradcode", "verify", "--scheme", "fr", "--n", "40", "--s", "1", "--samples", str(10**11)], "--samples"),
    (["rollout", "simulate", "--workload", "lsat-ar", "--R", str(10**7), "--K", "1000", "--policy", "cgp"], "--R"),
    (["run", GOOD / "manifest", "--frames", str(10**14)], "--frames"),
    (["profile", GOOD / "tiny.onnx", "--runs", str(10**13), "--out", "p.json"], "--runs"),
    (["bench", "--suite", "quick", "--jobs", str(10**6), "--out", "bench"], "--jobs"),
])
def test_sizes_past_the_memory_cap_are_refused_before_allocating(tmp_path, args, option):
    proc = run_cli(*args, cwd=tmp_path)
    assert_input_error(proc, option, "PIPEPLAN_MAX_MEMORY_MB")
    assert list(tmp_path.iterdir()) == []


def test_an_instance_reads_its_profile_only_inside_its_own_folder(tmp_path):
    """'..', an absolute path or a link out of the instance's folder is refused before the profile
    is opened; a profile beside the instance, and the shipped catalogue, still load."""
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "p.json").write_text((GOOD / "profile.json").read_text())
    inst = tmp_path / "inst"
    inst.mkdir()
    (inst / "link.json").symlink_to(tmp_path / "elsewhere" / "p.json")
    (inst / "p.json").write_text((GOOD / "profile.json").read_text())
    doc = json.loads((GOOD / "diamond.json").read_text())
    for name in ("../elsewhere/p.json", str(tmp_path / "elsewhere" / "p.json"), "link.json"):
        (inst / "i.json").write_text(json.dumps({**doc, "profile": name}))
        assert_input_error(run_cli("evaluate", inst / "i.json", "--mapping", "ABAB"), "i.json: profile", "inside")
    (inst / "i.json").write_text(json.dumps({**doc, "profile": "p.json"}))
    assert run_cli("evaluate", inst / "i.json", "--mapping", "ABAB").returncode == 0
    for shipped in ("khadas-vim3/Alex", ROOT / "instances" / "khadas-vim3" / "Alex.json"):   # ../../profiles/
        assert run_cli("solve", shipped, "--solver", "heft").returncode == 0


def test_a_link_to_a_shipped_instance_reads_the_shipped_profile_not_one_beside_the_link(tmp_path):
    """A trusted (shipped) instance reached through a link in someone's folder: its
    ../../profiles/... is resolved beside the real file. It had been resolved beside the link,
    reading (here, through a further link) a file outside that folder."""
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "inst.json").symlink_to(ROOT / "instances" / "khadas-vim3" / "Alex.json")
    (tmp_path / "profiles" / "data" / "khadas-vim3").mkdir(parents=True)
    (tmp_path / "secret.json").write_text('{"not": "a profile"}')
    (tmp_path / "profiles" / "data" / "khadas-vim3" / "Alex.json").symlink_to(tmp_path / "secret.json")
    proc = run_cli("solve", tmp_path / "a" / "b" / "inst.json", "--solver", "heft")
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("fault", [OSError(28, "No space left on device"), KeyboardInterrupt()])
def test_a_failed_write_leaves_no_folder_it_made(tmp_path, monkeypatch, fault):
    """The folders write_atomic creates for its file go with a failed write (they had stayed,
    empty); folders that were there stay."""
    from pipeplan.core import io

    def fail(*_):
        raise fault

    monkeypatch.setattr(io.os, "replace", fail)
    (tmp_path / "kept").mkdir()
    with pytest.raises(InputError if isinstance(fault, OSError) else KeyboardInterrupt):
        write_atomic(tmp_path / "kept" / "new" / "deeper" / "file.txt", "x")
    assert [p.name for p in tmp_path.rglob("*")] == ["kept"]


def test_a_json_file_that_would_parse_past_the_memory_cap_is_refused_unparsed(tmp_path, monkeypatch):
    """Parsed, a list of empty objects takes about 24 bytes per character: under the input size
    cap such a file could have parsed past the memory cap. The same file loads under a cap that
    holds it."""
    from pipeplan.core.io import JSON_BYTES_PER_CHAR, load_json

    path = tmp_path / "plan.json"
    path.write_text("[" + ",".join(["{}"] * 200_000) + "]")           # 600 KB
    monkeypatch.setenv("PIPEPLAN_MAX_MEMORY_MB", "10")
    with pytest.raises(InputError, match=r"600,001 characters of JSON needs about 14.3 MiB of memory, above"):
        load_json(path)
    assert 600_001 * JSON_BYTES_PER_CHAR < 20 << 20
    monkeypatch.setenv("PIPEPLAN_MAX_MEMORY_MB", "20")
    assert len(load_json(path)) == 200_000

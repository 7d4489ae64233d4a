"""The CLI's surface, run as a user does (subprocesses): help on every option with its allowed
values, --version, groups without a command, progress when stderr is not a terminal, the
NSGA-II front of `pareto`, and `energy n/a` for a profile without power."""
from __future__ import annotations

import contextlib
import csv
import json
import re
import shutil

import pytest

import pipeplan
from pipeplan.app.cli.common import _PLACEHOLDER
from tests.cli_helpers import ROOT, assert_input_error, run_cli

WIDE = {"COLUMNS": "1000"}   # one help row per line, so that a row can be read whole
GOOD = ROOT / "tests" / "bad_inputs" / "good"


def _tree():
    """(command path, click command) for every command, groups included."""
    import typer.main

    from pipeplan.app.cli.main import app
    out, todo = [], [((), typer.main.get_command(app))]
    while todo:
        path, cmd = todo.pop()
        out.append((path, cmd))
        todo.extend((path + (name,), sub) for name, sub in getattr(cmd, "commands", {}).items())
    return out


def _row(text: str, name: str) -> str:
    """The help row of option or argument ``name``."""
    rows = [line for line in text.splitlines() if re.match(rf"│\s+(\*\s+)?{re.escape(name)}\s", line)]
    assert rows, f"no help row for {name}:\n{text}"
    return rows[0]


def test_every_option_and_argument_has_help():
    missing = [(" ".join(path), p.opts or p.name) for path, cmd in _tree() for p in cmd.params if not p.help]
    assert not missing


def test_help_pages_show_every_option_and_no_bool_type(capsys, monkeypatch):
    """Every command's --help page: exit 0, each option on it, no `<bool>` for a flag (in this
    process: the CLI's own ``main``, as the console script calls it; the subprocess path is
    covered by the tests of --version and of the groups without a command)."""
    from pipeplan.app.cli.main import main

    monkeypatch.setenv("COLUMNS", WIDE["COLUMNS"])
    for path, cmd in _tree():
        try:
            main([*path, "--help"])
        except SystemExit as stop:      # main exits only with a non-zero status
            raise AssertionError((path, stop.code)) from None
        out = capsys.readouterr().out
        assert "<bool>" not in out, path
        for p in cmd.params:
            for opt in p.opts if p.param_type_name == "option" else []:
                assert opt in out, (path, opt)
        assert not _PLACEHOLDER.search(out), path   # placeholders are filled in


def test_allowed_values_come_from_the_vocabulary_and_the_registry():
    from pipeplan.core.registry import solvers
    from pipeplan.core.vocabulary import MAPPING_AXES

    axes = ", ".join(MAPPING_AXES)
    pareto = run_cli("pareto", "--help", env=WIDE).stdout
    assert axes in _row(pareto, "--x") and axes in _row(pareto, "--y")
    assert "exact" in _row(pareto, "--solver") and "nsga2" in _row(pareto, "--solver")
    for command in ("pareto", "compare", "solve"):
        row = _row(run_cli(command, "--help", env=WIDE).stdout, "instance")
        assert "khadas-vim3/" in row and "squeezenet" in row and "host" in row and "JSON file" in row, command
    solve_row = _row(run_cli("solve", "--help", env=WIDE).stdout, "--solver")
    assert all(s.name in solve_row for s in solvers("mapping"))
    policy = _row(run_cli("rollout", "simulate", "--help", env=WIDE).stdout, "--policy")
    from pipeplan.solvers.rollout import OFFLINE
    online = [s.name for s in solvers("rollout") if s.name not in OFFLINE]
    assert ", ".join(online) in policy and not any(name in policy for name in OFFLINE)
    train = run_cli("gradcode", "train", "--help", env=WIDE).stdout
    assert "learning rate" in _row(train, "--lr") and "softmax" in _row(train, "--lr")
    assert "loss" in _row(train, "--target-loss")


def test_version():
    proc = run_cli("--version")
    assert proc.returncode == 0 and proc.stdout == f"pipeplan {pipeplan.__version__}\n", proc.stderr


@pytest.mark.parametrize("args", [[], ["gradcode"], ["rollout"]])
def test_group_without_a_command_prints_help_and_no_error_line(args):
    proc = run_cli(*args)
    assert proc.returncode in (0, 2)
    assert "Usage:" in proc.stdout and "Commands" in proc.stdout
    assert "error" not in proc.stderr, proc.stderr


def test_plain_progress_lines_are_rate_limited(monkeypatch, capsys):
    """Off a terminal: nothing in the first interval from the first step, then at most one line
    per interval, and the last step."""
    from pipeplan.app.cli import common

    clock = iter(i * 0.5 for i in range(100))
    monkeypatch.setattr(common.time, "monotonic", lambda: next(clock))
    with common.progress("bench quick") as progress:
        for i in range(1, 11):                # t = 0, 0.5, ..., 4.5 s
            progress(i, None, f"mapping khadas-vim3/Alex run{i}")
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["bench quick: 5 mapping khadas-vim3/Alex run5", "bench quick: 9 mapping khadas-vim3/Alex run9",
                     "bench quick: 10 mapping khadas-vim3/Alex run10"]


@pytest.mark.parametrize("fails", [False, True], ids=["ends", "fails"])
def test_a_run_shorter_than_the_interval_writes_no_progress_line(monkeypatch, capsys, fails):
    """A plain line had been written at the first step, so a command that failed a moment
    later had it above its error line (``gradcode train --lr 1e308``): stderr was two lines."""
    from pipeplan.app.cli import common

    clock = iter(i * 0.5 for i in range(100))
    monkeypatch.setattr(common.time, "monotonic", lambda: next(clock))
    with pytest.raises(RuntimeError) if fails else contextlib.nullcontext():
        with common.progress("train fr") as progress:
            for i in range(1, 4):             # t = 0, 0.5, 1.0 s: within the first interval
                progress(i, 3)
            if fails:
                raise RuntimeError("diverged")
    assert capsys.readouterr().err == ""


def test_bench_piped_keeps_progress_off_stdout(tmp_path):
    """Piped, stdout is the result only; stderr holds progress lines alone, ending with the last
    step (none at all when the bench ends within the first interval: see the tests above)."""
    suite = tmp_path / "mini.toml"
    suite.write_text('[[mapping]]\ninstances = ["khadas-vim3/SqueezeV1"]\nsolvers = ["single", "heft"]\n')
    proc = run_cli("bench", "--suite", suite, "--out", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert all(re.fullmatch(rf"bench {re.escape(str(suite))}: \d/2( .*)?", line) for line in lines), lines
    assert not lines or re.fullmatch(rf"bench {re.escape(str(suite))}: 2/2 mapping khadas-vim3/SqueezeV1 \S+", lines[-1])
    assert "2/2" not in proc.stdout and "runs" in proc.stdout      # stdout: the result only


def test_pareto_nsga2_front_is_marked_not_proven(tmp_path):
    out = tmp_path / "front"
    proc = run_cli("pareto", "host/squeezenet", "--solver", "nsga2", "--time-limit", "5", "--out", out)
    assert proc.returncode == 0, proc.stderr
    points = [line for line in proc.stdout.splitlines() if line.startswith("period_ms=")]
    assert points and all(line.endswith("proven=False") for line in points)
    assert "NSGA-II front (not proven)" in proc.stdout
    rows = list(csv.DictReader((out / "front_period_latency.csv").open()))
    assert len(rows) == len(points) and {r["proven"] for r in rows} == {"False"}
    assert json.loads((out / "front_period_latency.json").read_text())["solver"] == "nsga2"
    assert (out / "front_period_latency.png").stat().st_size > 0
    assert_input_error(run_cli("pareto", "host/squeezenet", "--solver", "greedy", "--out", tmp_path / "x"), "--solver")


def test_pareto_nsga2_figure_title_says_not_proven(tmp_path, monkeypatch):
    from pipeplan.app.studies import mapping
    from pipeplan.instances.catalog import load_mapping

    titles = []
    monkeypatch.setattr(mapping, "pareto_plot", lambda path, title, *a, **k: titles.append(title))
    mapping.pareto(load_mapping("khadas-vim3/Alex"), "period", "latency", tmp_path, time_limit=2, threads=1, seed=0,
                   solver="nsga2")
    assert titles and "NSGA-II front (not proven)" in titles[0]


def test_solve_out_says_energy_na_without_power_data(tmp_path):
    shutil.copy(GOOD / "diamond.json", tmp_path / "diamond.json")
    prof = json.loads((GOOD / "profile.json").read_text())
    del prof["power_mw"]
    for pu in prof["pus"].values():
        pu["idle_power_mw"] = 0.0
    for phase in ("input_stage", "output_stage"):
        for by_level in prof[phase].values():
            for entry in by_level.values():
                entry["power_mw"] = 0.0
    prof["transfers"]["power_mw"] = 0.0
    (tmp_path / "profile.json").write_text(json.dumps(prof))
    proc = run_cli("solve", tmp_path / "diamond.json", "--solver", "heft", "--out", tmp_path / "r.json")
    assert proc.returncode == 0, proc.stderr
    assert "energy n/a" in proc.stdout and "mJ" not in proc.stdout
    assert "energy_mj" in json.loads((tmp_path / "r.json").read_text())["objectives"]   # the JSON is unchanged
    with_power = run_cli("solve", GOOD / "diamond.json", "--solver", "heft", "--out", tmp_path / "r2.json")
    assert with_power.returncode == 0 and re.search(r"energy/frame \d+\.\d mJ, steady-state \d+\.\d mJ",
                                                    with_power.stdout), with_power.stdout


@pytest.mark.parametrize("name", ["", ".", "..", "x" * 300, "é" * 100])
def test_an_instance_name_makes_one_plain_folder_name(name):
    """compare/pareto name their default folder after the instance's name, which its file sets:
    '..' had written into results/ itself, a long name failed after the whole solve."""
    from pipeplan.app.studies.mapping import slug

    s = slug(name)
    assert s.strip(".") and "/" not in s and len(s.encode()) <= 120
    assert slug("a311d/squeezenet@raw") == "a311d__squeezenet@raw"


def test_pareto_default_folder_stays_under_results_pareto(tmp_path):
    doc = json.loads((ROOT / "tests" / "bad_inputs" / "good" / "diamond.json").read_text())
    shutil.copy(ROOT / "tests" / "bad_inputs" / "good" / "profile.json", tmp_path)
    doc["name"] = ".."
    (tmp_path / "dots.json").write_text(json.dumps(doc))
    proc = run_cli("pareto", tmp_path / "dots.json", "--time-limit", "5", "--threads", "1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (folder,) = (tmp_path / "results" / "pareto").iterdir()
    assert (folder / "front_period_latency.csv").is_file()


def test_an_empty_pareto_figure_says_so_without_a_warning(tmp_path):
    """Nothing to draw (every solve cut by its limit) had left matplotlib's "No artists with
    labels found" UserWarning on stderr; the figure now says no plan was found."""
    import warnings

    from pipeplan.app.figures import pareto_plot
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        path = pareto_plot(tmp_path / "front.png", "empty", "period_ms", "latency_ms", exact=[], approx={}, points={})
    assert path.stat().st_size > 0


LONG = "x" * 300      # past the 255 bytes a file name may hold


@pytest.mark.parametrize("args", [
    ["rollout", "simulate", f"{LONG}.json"], ["multi", "solve", f"{LONG}.json"], ["multi", "solve", f"multi/{LONG}"],
    ["bench", "--suite", LONG, "--out", "{tmp}/b"], ["instance", f"{LONG}.onnx", "--out", "{tmp}/i.json"],
    ["instance", "squeezenet", "--platform", LONG, "--out", "{tmp}/i.json"],
    ["multi", "solve", "multi/../khadas-vim3/InceptionV3"]], ids=lambda a: " ".join(a[:2]))
def test_a_name_too_long_for_the_file_system_is_one_line(tmp_path, args):
    """pathlib raises ENAMETOOLONG where it meets such a name: it had been an OSError traceback.
    (And a multi catalogue name is a name: multi/../x had read another folder's file.)"""
    from tests.cli_helpers import assert_input_error, run_cli
    proc = run_cli(*[a.format(tmp=tmp_path) for a in args], cwd=tmp_path)
    assert_input_error(proc, "xxxx" if LONG in " ".join(args) else "unknown multi-network")
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("args,field", [
    (["rollout", "simulate", "rollout/tiny-1", "--policy", "cgp", "--engine", "c0_s=1_0"], "c0_s"),   # had been 10
    (["rollout", "simulate", "rollout/tiny-1", "--policy", "cgp", "--engine", "max_num_seqs=\uff12"], "max_num_seqs"),
    (["rollout", "simulate", "rollout/tiny-1", "--policy", "cgp", "--engine", "replicas=1", "--engine", "replicas=2"],
     "replicas"),                                                                            # the last had won
    (["gradcode", "simulate", "--scheme", "fr", "--instance", "gradcode/synthetic-n\uff11\uff12", "--steps", "5"],
     "instance")])                                                                           # had been n = 12
def test_numbers_in_options_and_names_are_ascii_decimal(tmp_path, args, field):
    from tests.cli_helpers import assert_input_error, run_cli
    assert_input_error(run_cli(*args, cwd=tmp_path), field)

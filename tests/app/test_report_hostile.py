"""`pipeplan report` on a bench folder from someone else: its files may not lead out of it
(links, suite.json's `source`), and odd but valid records (a long instance name, a front point
without the plotted objectives, missing times, a zero step time) give a report, not a crash."""
import json
import os

import pytest

from pipeplan.app import report
from pipeplan.app.report import PLOT_NAME_MAX, write_report
from pipeplan.core.errors import InputError
from tests.cli_helpers import assert_input_error, run_cli


def rec(instance="khadas-vim3/Alex", solver="heft", **extra):
    return {"system": "mapping", "instance": instance, "solver": solver, "seed": 0, "time_limit": 10.0,
            "termination": "completed", "quality": "feasible", "objectives": {"period_ms": 30.0, "latency_ms": 40.0},
            "wall_time_s": 0.01, "message": "", "front": [], **extra}


def folder(tmp_path, *records):
    out = tmp_path / "bench"
    out.mkdir(parents=True)
    (out / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return out


def test_files_that_are_links_out_of_the_folder_are_refused(tmp_path):
    outside = tmp_path / "outside.jsonl"
    outside.write_text(json.dumps(rec()) + "\n")
    for name in ("runs.jsonl", "suite.json", "reference_optima.csv"):
        out = folder(tmp_path / name, rec())
        (out / name).unlink(missing_ok=True)
        os.symlink(outside, out / name)
        proc = run_cli("report", out)
        assert_input_error(proc, name, "is not a file inside")
        assert {p.name for p in out.iterdir()} == {name, "runs.jsonl"}      # nothing written


def test_the_suite_file_that_suite_json_names_is_never_read(tmp_path):
    """`source` pointing at a FIFO would hang the report if it were opened; a plan of the runs
    comes from suite.json's own `planned` list."""
    fifo = tmp_path / "suite.toml"
    os.mkfifo(fifo)
    out = folder(tmp_path, rec(), rec(solver="single"))
    (out / "suite.json").write_text(json.dumps({"suite": str(fifo), "source": str(fifo),
                                                "planned": ["mapping|khadas-vim3/Alex|single|0",
                                                            "mapping|khadas-vim3/Alex|heft|0",
                                                            "mapping|khadas-vim3/Alex|cpsat|0"]}))
    md = write_report(out)
    assert "PARTIAL: 2 of the suite's 3 runs are recorded" in md


@pytest.mark.filterwarnings("error::UserWarning")     # an empty chart once made matplotlib warn on stderr
def test_odd_but_valid_records_make_a_report(tmp_path):
    long_name = "x/" + "a" * 400
    out = folder(tmp_path,
                 rec(long_name, front=[{"period_ms": 30.0, "latency_ms": 40.0}, {"period_ms": 31.0}]),
                 rec(long_name.replace("a", "b"), front=[{"period_ms": 30.0, "latency_ms": 40.0}]),
                 {**rec(solver="cpsat"), "wall_time_s": None, "system": "multi"},
                 {**rec(solver="fr"), "system": "gradcode", "objectives": {"expected_step_s": 0.0}})
    write_report(out)
    plots = sorted(p.name for p in out.glob("pareto_*.png"))
    assert len(plots) == 2 and all(len(p) <= PLOT_NAME_MAX + 30 for p in plots)


def test_pareto_plots_are_capped_and_the_report_says_so(tmp_path, monkeypatch):
    """A folder of tens of thousands of instances with a front would draw one PNG each for hours:
    the first MAX_PARETO_PLOTS in the table's order are drawn, and the report names the rest."""
    monkeypatch.setattr(report, "MAX_PARETO_PLOTS", 2)
    front = [{"period_ms": 30.0, "latency_ms": 40.0}]
    out = folder(tmp_path, *(rec(f"x/i{i}", front=front) for i in range(5)))
    md = write_report(out)
    assert sorted(p.name for p in out.glob("pareto_*.png")) == ["pareto_x__i0.png", "pareto_x__i1.png"]
    assert "Only the first 2 of the 5 instances with a front" in md
    assert "x/i4" in md                                    # the tables still list every instance


def test_records_the_report_cannot_read_are_refused_naming_the_field(tmp_path):
    """Each had passed the field types and crashed the report (AttributeError, TypeError, KeyError):
    objectives null, a rollout round's waiting ratio null or missing beside its trainer finish, a
    proven optimum without objectives."""
    sync = {**rec("rollout/tiny-0", "sync"), "system": "rollout",
            "objectives": {"train_end_s": 5.0, "waiting_ratio": 0.5}}
    cases = [({**sync, "solver": "fifo", "objectives": None}, "line 2: objectives: expected an object"),
             ({**sync, "solver": "cgp", "objectives": {"train_end_s": 4.0}}, "line 2: objectives.waiting_ratio"),
             ({**sync, "solver": "cgp", "objectives": {"train_end_s": 4.0, "waiting_ratio": None}},
              "line 2: objectives.waiting_ratio"),
             ({k: v for k, v in sync.items() if k != "objectives"} | {"solver": "cpsat", "quality": "proven_optimal"},
              "line 2: objectives: missing")]
    for i, (bad, field) in enumerate(cases):
        out = folder(tmp_path / str(i), sync, bad)
        proc = run_cli("report", out)
        assert_input_error(proc, f"{out / 'runs.jsonl'}: {field}")
        assert sorted(p.name for p in out.iterdir()) == ["runs.jsonl"]


def test_numbers_past_the_record_magnitude_are_refused_and_those_at_it_plotted(tmp_path):
    """A front point at -1e308 beside one at 1e308 had crashed matplotlib's tick locator with a
    traceback (after three overflow warnings); 1e308 as a wall time or objective is no run."""
    from pipeplan.app.bench import MAX_RECORD_MAGNITUDE as M
    cases = [(rec(front=[{"period_ms": 1e308, "latency_ms": -1e308}]), "line 1: front[0].period_ms"),
             (rec(objectives={"period_ms": 30.0, "latency_ms": -1e101}), "line 1: objectives.latency_ms"),
             ({**rec(), "wall_time_s": 1e308}, "line 1: wall_time_s: expected a finite positive number of seconds")]
    for i, (bad, field) in enumerate(cases):
        out = folder(tmp_path / str(i), bad)
        proc = run_cli("report", out)
        assert_input_error(proc, f"{out / 'runs.jsonl'}: {field}")
        assert sorted(p.name for p in out.iterdir()) == ["runs.jsonl"]
    extreme = [{"period_ms": M, "latency_ms": -M}, {"period_ms": 1e-308, "latency_ms": M}]
    out = folder(tmp_path / "at", rec(front=extreme, wall_time_s=M), rec(solver="single", objectives={
        "period_ms": 1e-308, "latency_ms": M}))
    proc = run_cli("report", out)
    assert proc.returncode == 0 and "Warning" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert (out / "pareto_khadas-vim3__Alex.png").stat().st_size > 0


def test_a_failed_run_without_a_message_is_listed(tmp_path):
    """`message` may be missing (it is optional); the list of failed runs had raised a KeyError."""
    out = folder(tmp_path, rec(), {**rec(solver="cpsat"), "termination": "error", "quality": "none",
                                   "objectives": {}} | {"message": None},
                 {k: v for k, v in rec(solver="single").items() if k != "message"} | {"termination": "error"})
    md = write_report(out)
    assert "khadas-vim3/Alex cpsat seed 0: error: (no message)" in md
    assert "khadas-vim3/Alex single seed 0: error: (no message)" in md


def test_a_failed_run_s_message_is_one_line_of_the_report(tmp_path):
    """A message from someone else's folder stays on its run's line: "boom\n\n# Injected" had
    added a heading (and could add any section) to report.md."""
    out = folder(tmp_path, rec(), {**rec(solver="cpsat"), "termination": "error", "quality": "none",
                                   "objectives": {}, "message": "boom\n\n# Injected\r\n| x |"})
    md = write_report(out)
    assert "khadas-vim3/Alex cpsat seed 0: error: boom  # Injected | x |" in md
    assert not any(line.startswith("# Injected") for line in md.splitlines())


def test_the_gradcode_chart_is_capped_and_the_report_says_so(tmp_path, monkeypatch):
    """One bar group per instance: 10,000 instances had taken 70 s and 2.7 GB in matplotlib. The
    first MAX_BAR_GROUPS in the table's order are drawn; the table keeps every instance."""
    from pipeplan.app import figures

    drawn = []
    monkeypatch.setattr(report, "MAX_BAR_GROUPS", 2)
    monkeypatch.setattr(figures, "bar_chart", lambda path, title, groups, **kw: drawn.append(list(groups)))
    out = folder(tmp_path, *({**rec(f"gradcode/i{i}", "fr"), "system": "gradcode",
                              "objectives": {"expected_step_s": 1.0 + i}} for i in range(5)))
    md = write_report(out)
    assert drawn == [["i0", "i1"]]
    assert "Only the first 2 of the 5 instances (in the table's order) are in the chart" in md
    assert all(f"| gradcode/i{i} |" in md for i in range(5))


def test_plots_draw_at_most_max_plot_series_solvers_and_say_so(tmp_path, monkeypatch):
    """A legend entry per solver: 3,000 solvers on one instance took 12 s per plot. The plots draw
    the table's first MAX_PLOT_SERIES solvers; the tables keep every solver."""
    from pipeplan.app import figures

    bars, plotted = [], []
    monkeypatch.setattr(report, "MAX_PLOT_SERIES", 2)
    monkeypatch.setattr(figures, "bar_chart", lambda path, title, groups, **kw: bars.append(groups))
    monkeypatch.setattr(report, "pareto_plot", lambda path, *a, points, **kw: plotted.append(list(points)))
    gc = [{**rec("gradcode/i0", s), "system": "gradcode", "objectives": {"expected_step_s": 1.0}} for s in "cab"]
    mapping = [rec(solver="nsga2", front=[{"period_ms": 30.0, "latency_ms": 40.0}]),
               *(rec(solver=s) for s in ("single", "heft", "cpsat"))]
    md = write_report(folder(tmp_path, *gc, *mapping))
    assert bars == [{"i0": {"a": 1.0, "b": 1.0}}]
    assert plotted == [["cpsat", "heft"]]         # nsga2 (its front) and single are past the first two
    assert "The chart's bars show only the first 2 of the 3 solvers" in md
    assert "The plots show only the first 2 of the 4 solvers" in md
    assert "| instance | a | b | c |" in md and "| instance | reference | cpsat | heft | nsga2 | single |" in md


def test_a_table_past_max_table_cells_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    """Another solver name in every record makes an instances x solvers table quadratic in the
    records (3,000 records: a 72 MB report.md): refused naming the system and its sizes."""
    monkeypatch.setattr(report, "MAX_TABLE_CELLS", 8)
    out = folder(tmp_path, *(rec(f"x/i{i}", f"s{i}") for i in range(3)))
    with pytest.raises(InputError, match=r"runs.jsonl: solver: 3 mapping solvers over 3 instances make a table "
                                         r"of 9 cells, above the report's 8"):
        write_report(out)
    assert sorted(p.name for p in out.iterdir()) == ["runs.jsonl"]
    monkeypatch.setattr(report, "MAX_TABLE_CELLS", 9)
    write_report(out)


def test_records_past_the_memory_cap_are_refused_before_they_are_parsed(tmp_path):
    """runs.jsonl is JSON too: held to JSON_BYTES_PER_CHAR per byte, as load_json holds a file
    (53 MB of valid records had peaked at 472 MB in report under a 128 MB cap). 400 KB of
    records under an 8 MiB cap: one line, nothing written."""
    out = folder(tmp_path, *(rec(f"x/i{i}") for i in range(2000)))
    proc = run_cli("report", out, env={"PIPEPLAN_MAX_MEMORY_MB": "8"})
    assert_input_error(proc, "runs.jsonl", "bytes of JSON records", "above the limit")
    assert sorted(p.name for p in out.iterdir()) == ["runs.jsonl"]

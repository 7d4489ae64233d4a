"""Both energy objectives and ``--dvfs`` on the command line (in process, for speed): solve,
compare and pareto take ``energy_ss`` and ``--dvfs`` where a solver can honour them and refuse
them in one line (exit 2) where none can; evaluate prints both energies; the energy-efficiency
comparison writes both definitions with the paper's figures beside ours."""
import csv
import json

import pytest

from pipeplan.app.cli.main import main
from pipeplan.app.studies.mapping import compare
from pipeplan.formulations.mapping.evaluator import evaluate
from pipeplan.formulations.mapping.plan import plan_from_dict
from pipeplan.instances.catalog import load_mapping


def cli(capsys, *args):
    """(exit status, stdout, stderr) of ``pipeplan ARGS`` run in this process."""
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as stop:
        code = stop.code
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("args,needle", [
    (["solve", "khadas-vim3/Alex", "--solver", "heft", "--dvfs"], "--dvfs: solver heft does not search DVFS levels"),
    (["solve", "khadas-vim3/Alex", "--solver", "nsga2", "--objective", "energy-ss"], "unknown objective 'energy-ss'"),
    (["compare", "khadas-vim3/Alex", "--solvers", "single,heft", "--dvfs"], "none of single, heft searches"),
    (["compare", "khadas-vim3/Alex", "--solvers", "pipeline-dp", "--objective", "energy_ss"],
     "pipeline-dp minimises only period"),
    (["pareto", "khadas-vim3/Alex", "--x", "period", "--y", "energy_ss", "--dvfs"], "use --solver nsga2"),
    (["energy-efficiency", "--instances", "khadas-vim3/Nope"], "khadas-vim3/Nope"),
])
def test_bad_objective_or_dvfs_is_one_line_exit_2(capsys, tmp_path, args, needle):
    code, out, err = cli(capsys, *args, *(["--out", tmp_path / "o"] if args[0] != "solve" else []))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], err
    assert not (tmp_path / "o").exists()


def test_solve_steady_state_energy_with_dvfs(capsys, tmp_path):
    code, out, err = cli(capsys, "solve", "khadas-vim3/Alex", "--solver", "nsga2", "--objective", "energy_ss",
                         "--dvfs", "--out", tmp_path / "r.json")
    assert code == 0, err
    assert "energy/frame" in out and "steady-state" in out
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["params"]["objective"] == "energy_ss" and result["params"]["dvfs"] is True
    problem = load_mapping("khadas-vim3/Alex")
    plan = plan_from_dict(result["plan"])
    assert evaluate(problem, plan).objectives() == result["objectives"]
    assert plan.levels            # some unit below its top level (what the levels buy: test_nsga2_dvfs.py)


def test_evaluate_prints_both_energies(capsys):
    code, out, _ = cli(capsys, "evaluate", "khadas-vim3/Google-parapipe", "--mapping", "GGGGBBBBBBG")
    doc = json.loads(out)
    assert code == 0 and 0 < doc["energy_ss_mj"] < doc["energy_mj"]   # two stages at once: static power shared


def test_compare_shows_both_energies_and_marks_the_dvfs_run(tmp_path):
    """What ``compare --dvfs --objective energy`` runs (in process, a small NSGA-II for speed)."""
    problem = load_mapping("khadas-vim3/Alex")
    md, _ = compare(problem, ["single", "nsga2"], tmp_path, time_limit=10, threads=1, seed=0, objective="energy",
                 params={"nsga2": {"dvfs": True, "pop_size": 24, "generations": 30}})
    assert "| energy/frame (mJ) | steady-state energy (mJ) |" in md and "| nsga2 (dvfs) |" in md
    assert "--objective energy --dvfs" in md
    rows = list(csv.DictReader((tmp_path / "compare.csv").open()))
    assert {"energy_mj", "energy_ss_mj"} <= rows[0].keys()
    by = {r["solver"]: r for r in rows}
    assert float(by["nsga2 (dvfs)"]["energy_mj"]) < float(by["single"]["energy_mj"])
    assert by["nsga2 (dvfs)"]["gap"] == ""        # a DVFS plan has no gap to a top-level bound


def test_energy_efficiency_both_definitions_with_the_papers_figures(capsys, tmp_path):
    code, out, err = cli(capsys, "energy-efficiency", "--instances", "khadas-vim3/Google-parapipe",
                         "--time-limit", "20", "--out", tmp_path)
    assert code == 0, err
    assert "+11.0%" in out and "+23.3%" in out
    gains = {(g["source"], g["definition"]): g for g in csv.DictReader((tmp_path / "energy_efficiency.csv").open())}
    assert set(gains) == {(s, d) for s in ("model", "measured", "model, measured plans")
                          for d in ("per_frame", "steady_state")}
    for source in ("model", "measured"):   # the paper's sign in steady state, not per frame
        assert float(gains[source, "steady_state"]["gain_vs_non_pipelined"]) > 0
        assert float(gains[source, "per_frame"]["gain_vs_non_pipelined"]) < 0
    assert float(gains["model", "steady_state"]["paper_gain_vs_pipelined"]) == pytest.approx(0.11)
    plans = list(csv.DictReader((tmp_path / "energy_efficiency_plans.csv").open()))
    problem = load_mapping("khadas-vim3/Google-parapipe")
    measured = next(p for p in plans if p["source"] == "measured" and p["plan"] == "hierarchical")
    assert measured["mapping"] == "GGGGBBBBBBG (pipelined)"
    for p in plans:
        assert float(p["inf_per_j_steady_state"]) == pytest.approx(1000 / float(p["energy_ss_mj"]), rel=1e-5)
    md = (tmp_path / "energy_efficiency.md").read_text()
    assert "Which definition reproduces the paper's sign" in md and "reported by the paper" in md
    assert problem.name in md


def test_bench_summary_holds_every_mapping_objective():
    from pipeplan.app.report import summary_csv

    record = {"system": "mapping", "instance": "khadas-vim3/Alex", "solver": "heft", "seed": 0,
              "termination": "completed", "quality": "feasible", "gap": None, "wall_time_s": 0.1, "message": "",
              "objectives": {"period_ms": 1.0, "latency_ms": 2.0, "energy_mj": 3.0, "energy_ss_mj": 4.0}}
    row = next(csv.DictReader(summary_csv([record]).splitlines()))
    assert {row[f"objective_{i}"]: float(row[f"value_{i}"]) for i in range(1, 5)} == record["objectives"]


def test_the_board_s_runs_on_a_pu_an_instance_lacks_are_left_out():
    """Alex's and GoogLeNet's fastest board runs are all on the NPU, which neither profile has:
    `pipeplan study` (every study instance) had stopped there with exit 2 after all its solves."""
    from pipeplan.app.studies.energy_efficiency import measured_rows
    from pipeplan.app.studies.mapping import STUDY_INSTANCES
    for name in STUDY_INSTANCES:
        problem = load_mapping(name)
        for row in measured_rows(problem):
            assert set(row["mapping"].split(" ")[0]) <= set(problem.profile.pus), (name, row["mapping"])
    assert measured_rows(load_mapping("khadas-vim3/Google"))      # its other runs are still there


def test_the_energy_page_is_written_when_a_solver_found_no_plan():
    """On an operator graph CP-SAT with shared PUs may find no plan within its limit (a311d
    graphs, 30 s): the page's period ratio had divided None and `pipeplan study` ended with a
    traceback after all its solves."""
    from pipeplan.app.studies.energy_efficiency import energy_efficiency_markdown, gains, plan_row
    rows = [plan_row("khadas-vim3/Google", "measured", "hierarchical", mapping="GGGGBBBBBBG (pipelined)",
                     status="measured", period_ms=30.0, energy_mj=500.0, energy_ss_mj=150.0),
            plan_row("a311d/squeezenet", "model", "hierarchical", mapping="-", status="time_limit/none",
                     period_ms=None, energy_mj=None, energy_ss_mj=None),
            plan_row("a311d/squeezenet", "model", "non_pipelined", mapping="-", status="optimal/proven_optimal",
                     period_ms=5.0, energy_mj=20.0, energy_ss_mj=20.0)]
    md = energy_efficiency_markdown(rows, gains(rows), command="pipeplan study", static_mw=2365.0)
    assert "a311d/squeezenet" in md and "time_limit/none" in md


def test_energy_efficiency_writes_its_three_files_together(tmp_path, monkeypatch):
    """Written one by one, a full disk had left the new CSVs beside the old report: a failure on
    the third file now leaves the folder as it was."""
    import errno

    from pipeplan.app.studies import energy_efficiency as study
    from pipeplan.core import io
    (tmp_path / "energy_efficiency.md").write_text("the user's report\n")
    io.mark_out_folder(tmp_path)
    real = study.write_atomic

    def full_disk(path, data, **kw):
        if path.name == "energy_efficiency.md":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, data, **kw)
    monkeypatch.setattr(study, "write_atomic", full_disk)
    with pytest.raises(OSError):
        study.energy_efficiency(["khadas-vim3/Google-parapipe"], tmp_path, time_limit=20, threads=1, seed=0,
                                command="test")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".pipeplan-out", "energy_efficiency.md"]
    assert (tmp_path / "energy_efficiency.md").read_text() == "the user's report\n"

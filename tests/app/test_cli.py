"""The command line, run as a user runs it (a subprocess): outputs and bad-input handling."""
import copy
import json
import math
from pathlib import Path

import pytest

from pipeplan.instances.catalog import load_mapping
from tests.cli_helpers import assert_input_error, run_cli

ROOT = Path(__file__).resolve().parents[2]


def cli(*args, cwd=None):
    return run_cli(*args, cwd=cwd)


def test_evaluate_measured_googlenet_pipeline():
    proc = cli("evaluate", "khadas-vim3/Google-parapipe", "--mapping", "GGGGBBBBBBG")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["period_ms"] == pytest.approx(58.0, rel=0.03)
    assert out["latency_ms"] == pytest.approx(113.2, rel=0.03)
    assert {"period_ms", "latency_ms", "energy_mj"} <= out.keys()


def test_evaluate_freq_levels_change_the_result():
    fast = json.loads(cli("evaluate", "khadas-vim3/Alex", "--mapping", "BBBBBBBB", "--mode", "serial").stdout)
    slow = json.loads(cli("evaluate", "khadas-vim3/Alex", "--mapping", "BBBBBBBB", "--mode", "serial",
                          "--freq", "min").stdout)
    mixed = json.loads(cli("evaluate", "khadas-vim3/Alex", "--mapping", "BBBBBBBB", "--mode", "serial",
                           "--freq", "0,0,0,0,7,7,7,7").stdout)
    assert slow["latency_ms"] > mixed["latency_ms"] > fast["latency_ms"]


def test_evaluate_batch_prints_json_lines_in_order(tmp_path):
    csv = tmp_path / "batch.csv"
    csv.write_text("mapping,mode,freq\nGGGGBBBBBBG,pipelined,max\nBBBBBBBBBBB,serial,max\nGGGGGGGGGGG,serial,min\n")
    proc = cli("evaluate", "khadas-vim3/Google", "--batch", csv)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["mapping"] for r in rows] == ["GGGGBBBBBBG", "BBBBBBBBBBB", "GGGGGGGGGGG"]
    single = json.loads(cli("evaluate", "khadas-vim3/Google", "--mapping", "BBBBBBBBBBB", "--mode", "serial").stdout)
    assert rows[1]["latency_ms"] == single["latency_ms"]


def test_solve_writes_result_that_evaluate_reads_back(tmp_path):
    out = tmp_path / "plan.json"
    proc = cli("solve", "khadas-vim3/Google", "--solver", "pipeline-dp", "--out", out)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    for key in ("termination", "quality", "objectives", "bound", "gap", "wall_time_s", "solver", "plan"):
        assert key in result
    again = json.loads(cli("evaluate", "khadas-vim3/Google", "--plan", out).stdout)
    assert again["period_ms"] == pytest.approx(result["objectives"]["period_ms"])


def test_solvers_and_instances_list():
    assert {"single", "heft", "pipeline-dp"} <= {line.split()[1] for line in cli("solvers").stdout.splitlines()}
    names = cli("instances").stdout
    assert "khadas-vim3/InceptionResnetV2" in names and "a311d/inception_v1" in names
    line = next(x for x in names.splitlines() if x.split()[0] == "a311d/inception_v1")
    assert "fused (also @raw, @modules)" in line        # the other granularities of each


# ------------------------------------------------------------------------------ bad input

def instance_file(tmp_path, mutate, name="bad.json"):
    doc = copy.deepcopy(load_mapping("khadas-vim3/SqueezeV1").to_dict())
    mutate(doc)
    path = tmp_path / name
    path.write_text(json.dumps(doc, allow_nan=True))
    return path


@pytest.mark.parametrize("mutate,needles", [
    (lambda d: d["profile"]["time_ms"].pop("G"), ["time_ms.G", "missing PU"]),
    (lambda d: d["profile"]["time_ms"]["B"]["7"].pop(), ["time_ms.B.7", "one per unit"]),
    (lambda d: d["profile"]["time_ms"]["B"]["7"].__setitem__(2, -1.0), ["time_ms.B.7[2]", "negative"]),
    (lambda d: d["profile"]["time_ms"]["L"]["5"].__setitem__(0, math.nan), ["time_ms.L.5[0]", "finite"]),
    (lambda d: d["graph"]["edges"].append({"src": "b3", "dst": "b1", "bytes": None}), ["graph.edges", "cycle"]),
    (lambda d: d["graph"]["units"].pop(), ["graph.edges[", "unknown unit"]),
    (lambda d: d["profile"]["units"].reverse(), ["profile.units", "another order"]),
    (lambda d: d.__setitem__("schema", "nope/9"), ["schema"]),
])
def test_bad_instance_files(tmp_path, mutate, needles):
    path = instance_file(tmp_path, mutate)
    out = tmp_path / "result.json"
    proc = cli("solve", path, "--solver", "heft", "--out", out)
    assert_input_error(proc, "bad.json", *needles)
    assert not out.exists()


@pytest.mark.parametrize("args,needles", [
    (["solve", "khadas-vim3/Google", "--solver", "magic"], ["unknown mapping solver 'magic'"]),
    (["solve", "khadas-vim3/Nope", "--solver", "heft"], ["khadas-vim3/Nope", "unknown instance"]),
    (["evaluate", "khadas-vim3/Google", "--mapping", "GGG"], ["--mapping", "3 letters"]),
    (["evaluate", "khadas-vim3/Google", "--mapping", "GGGGBBBBBBX"], ["letter 11", "unknown PU 'X'"]),
    (["evaluate", "khadas-vim3/Google", "--mapping", "GGGGBBBBBBG", "--freq", "9"], ["--freq", "no DVFS level"]),
    (["evaluate", "khadas-vim3/Google", "--mapping", "GGGGBBBBBBG", "--mode", "warp"], ["--mode"]),
])
def test_bad_arguments(tmp_path, args, needles):
    out = tmp_path / "r.json"
    proc = cli(*args, *(["--out", out] if args[0] == "solve" else []))
    assert_input_error(proc, *needles)
    assert not out.exists()


def test_bad_batch_row_prints_nothing(tmp_path):
    csv = tmp_path / "b.csv"
    csv.write_text("mapping,mode,freq\nGGGGBBBBBBG,pipelined,max\nGGGG,serial,max\n")
    proc = cli("evaluate", "khadas-vim3/Google", "--batch", csv)
    assert_input_error(proc, "b.csv:3", "mapping")
    assert proc.stdout == ""


def test_truncated_and_garbage_onnx(tmp_path):
    import onnx

    from pipeplan.formulations.mapping.onnx_graph import light_model_path
    data = light_model_path("squeezenet").read_bytes()
    truncated = tmp_path / "trunc.onnx"
    truncated.write_bytes(data[: len(data) // 3])
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x00not an onnx model at all\xff" * 10)
    for f in (truncated, garbage):
        out = tmp_path / "p.json"
        proc = cli("profile", f, "--out", out, "--runs", "1", "--warmup", "0")
        assert_input_error(proc, f.name)
        assert not out.exists()
    assert onnx  # the model file itself is intact


def test_cyclic_onnx(tmp_path):
    from onnx import TensorProto, helper
    a = helper.make_node("Relu", ["x2"], ["x1"], name="a")
    b = helper.make_node("Relu", ["x1"], ["x2"], name="b")
    g = helper.make_graph([a, b], "cyc", [helper.make_tensor_value_info("x0", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("x2", TensorProto.FLOAT, [1])])
    path = tmp_path / "cyc.onnx"
    path.write_bytes(helper.make_model(g).SerializeToString())
    out = tmp_path / "p.json"
    proc = cli("profile", path, "--out", out, "--runs", "1", "--warmup", "0")
    assert_input_error(proc, "cyc.onnx")
    assert not out.exists()


# ------------------------------------------------------------------ exact solvers on the CLI

def test_compare_writes_table_and_plot(tmp_path):
    proc = cli("compare", "khadas-vim3/SqueezeV1", "--solvers", "single,pipeline-dp,nsga2,cpsat",
               "--time-limit", "10", "--threads", "1", "--out", tmp_path / "cmp")
    assert proc.returncode == 0, proc.stderr
    for name in ("compare.csv", "compare.md", "pareto.png", "front_period_latency.csv", "hypervolume.json"):
        assert (tmp_path / "cmp" / name).exists(), name
    assert "| cpsat | optimal/proven_optimal |" in proc.stdout


def test_pareto_writes_front(tmp_path):
    proc = cli("pareto", "khadas-vim3/InceptionV3", "--x", "period", "--y", "latency", "--out", tmp_path / "pf")
    assert proc.returncode == 0, proc.stderr
    rows = (tmp_path / "pf" / "front_period_latency.csv").read_text().splitlines()
    assert len(rows) >= 3 and "6 points, complete" in proc.stdout
    periods = [float(r.split(",")[0]) for r in rows[1:]]
    latencies = [float(r.split(",")[1]) for r in rows[1:]]
    assert periods == sorted(periods) and latencies == sorted(latencies, reverse=True)


@pytest.mark.parametrize("args,needles", [
    (["--bound", "latency_ms=50"], ["khadas-vim3/Google", "infeasible"]),
    (["--bound", "latency_ms=abc"], ["--bound", "not a number"]),
    (["--pus", "Q"], ["--pus", "unknown PU"]),
])
def test_infeasible_or_bad_exact_requests(tmp_path, args, needles):
    out = tmp_path / "r.json"
    proc = cli("solve", "khadas-vim3/Google", "--solver", "cpsat", *args, "--out", out)
    assert_input_error(proc, *needles)
    assert not out.exists()


def test_pu_set_that_cannot_run_a_unit(tmp_path):
    out = tmp_path / "r.json"
    proc = cli("solve", "a311d/inception_v1", "--solver", "cpsat", "--pus", "N", "--out", out)
    assert_input_error(proc, "--pus", "infeasible", "cannot run on any of N")
    assert not out.exists()


@pytest.mark.parametrize("content, field", [
    (b"instance,solver\n\xff\xfe,heft\n", "not a UTF-8 text file"),
    (b"instance,solver\nkhadas-vim3/Google,bogus\n", "line 2: solver"),
    (b"instance,period_ms\nkhadas-vim3/Google,1\n", "solver"),
])
def test_optima_checks_the_heuristics_table_it_merges_into_before_solving(tmp_path, content, field):
    """optima_heuristics.csv in --out is read and rewritten: a byte that is not UTF-8 or an
    unknown solver had been a traceback after the solve, with optima.csv already rewritten."""
    (tmp_path / "optima_heuristics.csv").write_bytes(content)
    (tmp_path / ".pipeplan-out").write_text("")     # pipeplan's folder (a folder of the user's own is refused)
    proc = run_cli("optima", "--instances", "khadas-vim3/Alex", "--time-limit", "3", "--threads", "1",
                   "--out", tmp_path)
    assert_input_error(proc, str(tmp_path / "optima_heuristics.csv"), field)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".pipeplan-out", "optima_heuristics.csv"]
    assert (tmp_path / "optima_heuristics.csv").read_bytes() == content


def test_optima_moves_an_instances_three_files_in_together(tmp_path, monkeypatch):
    """optima.csv, optima_heuristics.csv and optima.md of one instance move in together (found by
    a hostile-input audit: they were written one after another, so a failure between them, a
    full disk, left a new optima.csv beside the old report). Here the report fails after both
    tables are made: the folder is as it was."""
    from pipeplan.app.studies import optima
    optima.run_optima(["khadas-vim3/Alex"], tmp_path, time_limit=10, threads=1)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert set(before) == {".pipeplan-out", *optima.FILES}

    def disk_full(*_):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(optima, "optima_markdown", disk_full)
    with pytest.raises(OSError):       # a new row (the latency optimum) was merged before the failure
        optima.run_optima(["khadas-vim3/Alex"], tmp_path, objective="latency", time_limit=10, threads=1)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_the_mapping_study_writes_its_folder(tmp_path):
    """`pipeplan study` (README) had failed with exit 2 after all its solves, for any --out:
    energy-efficiency, which it runs into its own stage folder, staged that folder again and
    found it not pipeplan's (found by a documentation audit; regression of the staged
    energy-efficiency files). A rerun into the folder it wrote replaces its files."""
    out = tmp_path / "study"
    for _ in range(2):
        proc = run_cli("study", "--instances", "khadas-vim3/SqueezeV1", "--solvers", "single", "--time-limit", "2",
                       "--threads", "1", "--out", out)
        assert proc.returncode == 0, proc.stderr
    names = {p.relative_to(out).as_posix() for p in out.rglob("*")}
    assert {"README.md", "summary.csv", "energy_efficiency.md", "energy_efficiency.csv",
            "energy_efficiency_plans.csv", "khadas-vim3__SqueezeV1/compare.md"} <= names
    assert not [n for n in names if ".pp-" in n]
    assert "SqueezeV1" in (out / "energy_efficiency.csv").read_text()


def _diamond(tmp_path, edit_profile=None, edge_bytes=None):
    good = Path(__file__).resolve().parents[1] / "bad_inputs" / "good"
    profile = json.loads((good / "profile.json").read_text())
    if edit_profile:
        edit_profile(profile)
    (tmp_path / "profile.json").write_text(json.dumps(profile))
    doc = json.loads((good / "diamond.json").read_text())
    if edge_bytes is not None:
        doc["graph"]["edges"][0]["bytes"] = edge_bytes
    (tmp_path / "d.json").write_text(json.dumps(doc))
    return tmp_path / "d.json"


@pytest.mark.parametrize("edit, edge_bytes, field", [
    (lambda p: p["transfers"]["default"].update(ms_per_mb=1.0), 1e300, "graph.edges[0].bytes"),
    (lambda p: p["transfers"].update(switch={"A->B": {"fixed_ms": 0, "per_size": 1, "exponent": 1e300}},
                                     size_ms={"u0": 2.0}), None, "transfers.switch.A->B.exponent"),
    (lambda p: p["transfers"].update(level_scaling={"A->B": {"max": [1e300, 1.0]}}), None,
     "transfers.level_scaling.A->B.max"),
])
def test_transfer_times_past_the_limit_are_refused_before_a_solver_sees_them(tmp_path, edit, edge_bytes, field):
    """1e300 bytes at 1 ms/MB had made CP-SAT fail on an infinite coefficient (exit 1); a switch
    cost's exponent and a level's factor could overflow the same way."""
    proc = run_cli("solve", _diamond(tmp_path, edit, edge_bytes), "--solver", "cpsat", "--time-limit", "5",
                   "--out", tmp_path / "r.json")
    assert_input_error(proc, field)
    assert not (tmp_path / "r.json").exists()

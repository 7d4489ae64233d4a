"""Export a plan into sub-models, run them as a pipeline, and check they compute the whole
network; bad plans, folders and manifests fail with one line and exit status 2."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import pipeplan
from pipeplan.app.studies.deploy_loop import deploy_loop
from pipeplan.core.errors import InputError
from pipeplan.deploy.executor import run_export
from pipeplan.deploy.export import REFERENCE_FILE, export_plan
from pipeplan.deploy.runtime import AFFINITY_KEY, pu_runtime
from pipeplan.deploy.weights import with_random_weights
from pipeplan.formulations.mapping.onnx_graph import light_model_path, load_onnx, read_model
from pipeplan.formulations.mapping.plan import plan_from_assignment
from pipeplan.instances.catalog import load_mapping
from pipeplan.profiles.roofline import load_platform, platform_from_dict
from tests.cli_helpers import assert_input_error, run_cli

ROOT = Path(__file__).resolve().parents[2]
PLATFORMS = ROOT / "profiles" / "platforms"
RUN_KEYS = {"outputs_match", "throughput_fps", "latency_ms_median", "latency_ms_p90", "predicted_period_ms",
            "predicted_latency_ms", "measured_period_ms", "pu_busy_share"}


def solved_plan(folder: Path, model: str, solver: str, granularity: str = "") -> Path:
    """A plan of ``solver`` for host/<model> (the fused graph) or host/<model>@<granularity>."""
    result = pipeplan.solve(load_mapping(f"host/{model}{granularity}"), solver)
    path = folder / f"{model}{granularity}-{solver}.json"
    path.write_text(result.to_json())
    return path


def staged_branches_plan(folder: Path, model: str) -> Path:
    """Two stages on shared PUs: the first half on C0, the second half spread over C0 and C1
    (every third unit on C1), so stage 1 runs branch groups on two PUs."""
    units = tuple(u.name for u in load_mapping(f"host/{model}").units)
    half = len(units) // 2
    stage = {u: int(i >= half) for i, u in enumerate(units)}
    pu = {u: "C1" if i >= half and i % 3 == 0 else "C0" for i, u in enumerate(units)}
    plan = plan_from_assignment(units, stage, pu, shared_pus=True, instance=f"host/{model}")
    path = folder / f"{model}-staged-branches.json"
    path.write_text(json.dumps(plan.to_dict()))
    return path


PLANS = {"pipeline-dp": lambda d, m: solved_plan(d, m, "pipeline-dp"),
         "pipeline-dp@raw": lambda d, m: solved_plan(d, m, "pipeline-dp", "@raw"),   # units = ONNX nodes
         "heft": lambda d, m: solved_plan(d, m, "heft"),
         "staged-branches": staged_branches_plan}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(model, plan kind) -> (plan file, export folder, manifest), exported once per module."""
    root = tmp_path_factory.mktemp("exports")
    cache = {}

    def get(model: str, kind: str):
        if (model, kind) not in cache:
            plan = PLANS[kind](root, model)
            out = root / f"{model}-{kind}"
            cache[(model, kind)] = plan, out, export_plan(plan, light_model_path(model), out)
        return cache[(model, kind)]
    return get


@pytest.mark.parametrize("model, kind", [("squeezenet", "pipeline-dp"), ("squeezenet", "pipeline-dp@raw"),
                                         ("squeezenet", "heft"),
                                         ("inception_v1", "pipeline-dp"), ("inception_v1", "heft"),
                                         ("inception_v1", "staged-branches")])
def test_sub_models_compose_to_the_whole_network(exported, model, kind):
    _, out, manifest = exported(model, kind)
    g = load_onnx(light_model_path(model))
    groups = [grp for stage in manifest["stages"] for grp in stage["groups"]]
    if kind.startswith("pipeline-dp"):
        assert len(manifest["stages"]) == 2 and all(len(s["pus"]) == 1 for s in manifest["stages"])
    else:
        assert any(len({grp["pu"] for grp in s["groups"]}) == 2 for s in manifest["stages"])
    # every operator in exactly one group, and each sub-model holds exactly its group's operators
    assert sorted(u for grp in groups for u in grp["nodes"]) == sorted(g.nodes)
    for grp in groups:
        sub = onnx.load(str(out / grp["file"]))
        assert [n.name for n in sub.graph.node if n.op_type != "Constant"] == grp["nodes"]
        assert [v.name for v in sub.graph.input] == [t["name"] for t in grp["inputs"]]
    report = run_export(out, frames=3)
    assert report["outputs_match"] and report["frames"] == 3
    assert RUN_KEYS <= report.keys()
    assert report["predicted_period_ms"] == pytest.approx(manifest["predicted"]["period_ms"])
    assert set(report["pu_busy_share"]) == {grp["pu"] for grp in groups}


def test_manifest_fields(exported):
    plan, out, m = exported("inception_v1", "heft")
    assert m["schema"] == "pipeplan.manifest/1"
    assert m["model"]["file"] == "light_inception_v1.onnx" and len(m["model"]["sha256"]) == 64
    assert m["instance"] == "host/inception_v1" and m["plan"]["source"] == str(plan)
    assert m["platform"]["name"] == "host" and m["reference"]["file"] == REFERENCE_FILE
    assert m["inputs"] == [{"name": "data_0", "shape": [1, 3, 224, 224], "dtype": "float32"}]
    assert m["outputs"][0]["name"] == "prob_1"
    assert {"period_ms", "latency_ms", "energy_mj"} <= m["predicted"].keys()
    assert m["pus"]["C1"]["providers"] == ["CPUExecutionProvider"] and m["pus"]["C1"]["cores"] == [1]
    ids = set()
    for s, stage in enumerate(m["stages"]):
        assert stage["index"] == s and stage["pus"] and stage["receives"] and stage["sends"]
        for grp in stage["groups"]:
            assert {"id", "pu", "file", "sha256", "inputs", "outputs", "depends_on", "nodes"} <= grp.keys()
            assert set(grp["depends_on"]) <= ids  # dependencies come earlier in the stage
            assert all({"name", "shape", "dtype"} <= t.keys() for t in grp["inputs"] + grp["outputs"])
            ids.add(grp["id"])
    handed = {t["name"]: t for t in m["transfers"]}
    assert handed["data_0"]["from"] == "input" and "output" in handed["prob_1"]["to"]
    assert all(t["bytes"] > 0 for t in m["transfers"])
    assert (out / REFERENCE_FILE).is_file()


def test_cli_export_and_run_json(tmp_path):
    plan = solved_plan(tmp_path, "squeezenet", "pipeline-dp")
    out = tmp_path / "export"
    proc = run_cli("export", plan, "--model", "squeezenet", "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert "2 stages" in proc.stdout
    proc = run_cli("run", out, "--frames", 3, "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert RUN_KEYS <= report.keys() and report["outputs_match"] is True
    assert report["pus"]["C0"]["providers_used"] == ["CPUExecutionProvider"]
    # exporting again replaces the earlier export
    assert run_cli("export", plan, "--model", "squeezenet", "--out", out).returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export", plan.name]


def _edit_plan(plan_file: Path, tmp_path: Path, edit) -> Path:
    doc = json.loads(plan_file.read_text())
    edit(doc["plan"]["stages"])
    path = tmp_path / "bad-plan.json"
    path.write_text(json.dumps(doc))
    return path


def _unknown_node(stages):
    stages[1]["order"]["C0"][5] = "NoSuchNode"


def _missing_node(stages):
    del stages[1]["order"]["C0"][-1]


def _input_never_produced(stages):  # the network's last operator moved into the first stage
    stages[0]["order"]["C1"].append(stages[1]["order"]["C0"].pop())


@pytest.mark.parametrize("kind, edit, needles", [
    # a plan of ONNX nodes (@raw) ...
    ("pipeline-dp@raw", _unknown_node, ["bad-plan.json", "stages[1].order.C0[5]", "unknown node 'NoSuchNode'"]),
    ("pipeline-dp@raw", _missing_node, ["bad-plan.json", "stages", "in no stage"]),
    ("pipeline-dp@raw", _input_never_produced, ["bad-plan.json", "stages[0].order.C1[", "produces only in stage 1"]),
    # ... and of fused units: the fields are the plan's own, before expansion
    ("pipeline-dp", _unknown_node, ["bad-plan.json", "stages[1].order.C0[5]", "unknown unit 'NoSuchNode'",
                                    "instance host/squeezenet"]),
    ("pipeline-dp", _missing_node, ["bad-plan.json", "stages", "unit 'n65' of instance host/squeezenet in no stage"]),
    ("pipeline-dp", _input_never_produced, ["bad-plan.json", "stages[0].order.C1[", "produces only in stage 1"]),
])
def test_bad_plans_exit_2_and_leave_nothing(exported, tmp_path, kind, edit, needles):
    plan, _, _ = exported("squeezenet", kind)
    bad = _edit_plan(plan, tmp_path, edit)
    out = tmp_path / "export"
    assert_input_error(run_cli("export", bad, "--model", "squeezenet", "--out", out), *needles)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad-plan.json"]


def test_unwritable_output_folder(exported, tmp_path):
    plan, _, _ = exported("squeezenet", "pipeline-dp")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    assert_input_error(run_cli("export", plan, "--model", "squeezenet", "--out", blocker / "export"),
                          "a-file", "not a folder")
    stray = tmp_path / "stray"
    stray.mkdir()
    (stray / "notes.txt").write_text("mine")
    assert_input_error(run_cli("export", plan, "--model", "squeezenet", "--out", stray), "not an earlier export")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "stray"]
    assert [p.name for p in stray.iterdir()] == ["notes.txt"]


def _truncate_sub_model(folder: Path):
    manifest = json.loads((folder / "manifest.json").read_text())
    sub = folder / manifest["stages"][1]["groups"][0]["file"]
    sub.write_bytes(sub.read_bytes()[:100])


@pytest.mark.parametrize("damage, needles", [
    (lambda d: (d / "manifest.json").write_text('{"schema": "pipeplan.manifest/1", '),
     ["manifest.json", "invalid JSON"]),
    (lambda d: (d / "manifest.json").unlink(), ["manifest.json", "cannot read"]),
    (lambda d: (d / REFERENCE_FILE).unlink(), ["reference.file", "missing file"]),
    (_truncate_sub_model, ["stages[1].groups[0].sha256", "differs"]),
])
def test_corrupt_export_exit_2(exported, tmp_path, damage, needles):
    _, out, _ = exported("squeezenet", "pipeline-dp")
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    damage(copy)
    assert_input_error(run_cli("run", copy, "--frames", 2), *needles)


def test_random_weights_are_deterministic_and_lively():
    import onnxruntime as ort
    model = read_model(light_model_path("shufflenet"))  # batch-norms and residual sums

    def weights(seed):
        full, n = with_random_weights(model, seed)
        return full, n, {t.name: numpy_helper.to_array(t) for t in full.graph.initializer}

    full, n, a = weights(7)
    _, _, b = weights(7)
    _, _, c = weights(8)
    assert n == 243 and a.keys() == b.keys() == c.keys()
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert any(not np.array_equal(a[k], c[k]) for k in a)
    assert not any(n.op_type == "ConstantOfShape" for n in full.graph.node)
    assert [v.name for v in full.graph.input] == ["gpu_0/data_0"]
    variances = [a[node.input[4]] for node in full.graph.node if node.op_type == "BatchNormalization"]
    assert len(variances) == 49 and all((v > 0).all() for v in variances)
    sess = ort.InferenceSession(full.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    y = [sess.run(None, {"gpu_0/data_0": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)})[0]
         for _ in range(2)]
    assert all(np.isfinite(v).all() for v in y)
    assert y[0].std() > 1e-4 and not np.allclose(y[0], y[1], rtol=1e-4, atol=1e-5)


def test_pu_runtime_from_the_platform():
    a311d = load_platform(PLATFORMS / "a311d.json")
    big = pu_runtime(a311d, "B", "a311d.json")
    assert big["intra_op_threads"] == 4 and big["cores"] == [2, 3, 4, 5]
    assert big["session_config"] == {AFFINITY_KEY: "4;5;6"}  # 3 extra threads, ORT counts CPUs from 1
    gpu = pu_runtime(a311d, "G", "a311d.json")
    assert gpu["providers"] == ["WebGpuExecutionProvider", "CPUExecutionProvider"]
    assert gpu["providers_available_at_export"][-1] == "CPUExecutionProvider"
    assert gpu["session_config"] == {} and gpu["cores"] is None
    doc = json.loads((PLATFORMS / "host.json").read_text())
    doc["pus"]["C0"]["runtime"]["provider"] = "NoSuchExecutionProvider"
    with pytest.raises(InputError) as info:
        pu_runtime(platform_from_dict(doc, "odd.json"), "C0", "odd.json")
    assert info.value.field == "pus.C0.runtime.provider"
    with pytest.raises(InputError, match="does not declare"):
        pu_runtime(a311d, "C0", "a311d.json")


def test_deploy_loop_writes_the_table(tmp_path):
    md = deploy_loop(["squeezenet"], tmp_path, solvers=("pipeline-dp", "heft"), frames=3, runs=1, warmup=0)
    rows = (tmp_path / "deploy.csv").read_text().splitlines()
    assert rows[0].startswith("model,solver") and len(rows) == 3
    assert all(",True" in r for r in rows[1:])
    assert "What the cost model does not capture" in md and (tmp_path / "deploy.md").read_text() == md
    plan = json.loads((tmp_path / "squeezenet" / "heft.result.json").read_text())["plan"]
    assert plan["instance"] == str(tmp_path / "squeezenet" / "instance.json")
    assert (tmp_path / "squeezenet" / "heft" / "manifest.json").is_file()
    # the input frames reserved beside ONNX Runtime's arena before profiling cover what each run holds
    from pipeplan.app.studies.deploy_loop import most_frames_held
    from pipeplan.deploy.executor import input_frames_held
    from pipeplan.deploy.manifest import load_manifest
    for solver in ("pipeline-dp", "heft"):
        m = load_manifest(tmp_path / "squeezenet" / solver)
        assert input_frames_held(m, 10**6) <= most_frames_held(10**6)


def test_deploy_loop_refuses_a_model_folder_linked_out_of_out(tmp_path):
    """--out is pipeplan's (its marker) but its squeezenet/ links elsewhere: refused before the
    first profile; the loop had written the profile, instance, plans and exports there."""
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / ".pipeplan-out").write_text("")
    (out / "squeezenet").symlink_to(elsewhere)
    proc = run_cli("deploy-loop", "--models", "squeezenet", "--out", out, "--solvers", "heft", "--frames", 2,
                   "--runs", 1)
    assert_input_error(proc, f"{out / 'squeezenet'}: output is a symbolic link")
    assert not any(elsewhere.iterdir()) and sorted(p.name for p in out.iterdir()) == [".pipeplan-out", "squeezenet"]


def _solved_for(folder: Path, instance: str) -> Path:
    path = folder / f"{instance.replace('/', '_')}.json"
    path.write_text(pipeplan.solve(load_mapping(instance), "pipeline-dp").to_json())
    return path


def test_run_of_an_export_for_another_platform_warns_once(tmp_path):
    """a311d's PUs (GPU, NPU, 4-thread big cluster) run here as ORT threads on this host's CPUs:
    one stderr line says so and names what each PU ran on."""
    out = tmp_path / "a311d"
    assert run_cli("export", _solved_for(tmp_path, "a311d/squeezenet"), "--model", "squeezenet", "--out", out).returncode == 0
    proc = run_cli("run", out, "--frames", 3, "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1, proc.stderr
    assert "made for platform a311d" in warnings[0] and "CPU thread" in warnings[0]
    for pu, rt in report["pus"].items():
        threads = f"{rt['intra_op_threads']} thread"
        assert f"{pu} on {'+'.join(rt['providers_used'])}, {threads}" in warnings[0]
    assert report["platform"] == "a311d" and report["planned_for_this_host"] is False


def test_run_reports_service_and_queueing_apart(tmp_path):
    out = tmp_path / "host"
    assert run_cli("export", _solved_for(tmp_path, "host/squeezenet"), "--model", "squeezenet", "--out", out).returncode == 0
    proc = run_cli("run", out, "--frames", 4, "--json")
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr     # planned for this host: nothing to warn about
    report = json.loads(proc.stdout)
    assert RUN_KEYS <= report.keys()        # the keys there were stay
    for key in ("service_ms_median", "service_ms_p90", "queueing_ms_median", "queueing_ms_p90"):
        assert report[key] >= 0, key
    assert report["service_ms_median"] <= report["latency_ms_p90"] + 1e-9
    text = run_cli("run", out, "--frames", 4)
    assert text.returncode == 0, text.stderr
    assert "service" in text.stdout and "queueing" in text.stdout
    assert "the measured latency includes queueing" in text.stdout

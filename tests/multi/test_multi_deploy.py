"""Export a joint plan of two networks (one folder each plus joint.json), run both pipelines at
the same time and check each computes its whole network; bad instances, plans, folders and
joint.json files fail with one line and exit status 2, writing nothing."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import pipeplan.deploy.multi as multi
from pipeplan.app.cli.main import app
from pipeplan.formulations.mapping.multi.evaluator import evaluate_joint
from pipeplan.formulations.mapping.multi.plan import JointPlan
from pipeplan.formulations.mapping.multi.problem import single_pu_plans
from pipeplan.formulations.mapping.plan import plan_from_assignment
from pipeplan.instances.multi import load_multi
from tests.cli_helpers import assert_input_error, run_cli

INSTANCE = "multi/host-squeeze+shuffle"      # two small networks: the exports stay light
FRAMES = 4


def split(net, first: str, second: str):
    """The network's chain in two stages: the first half of its units on ``first``, the rest on ``second``."""
    units = tuple(u.name for u in net.problem.units)
    half = len(units) // 2
    return plan_from_assignment(units, {u: int(i >= half) for i, u in enumerate(units)},
                                {u: second if i >= half else first for i, u in enumerate(units)},
                                instance=net.problem.name)


def joint_plans(problem) -> dict[str, JointPlan]:
    """"part": squeeze alone on C0, shuffle alone on C1; "split": both across C0 and C1 (time-shared)."""
    squeeze, shuffle = problem.networks
    return {"part": JointPlan({"squeeze": single_pu_plans(squeeze)["C0"], "shuffle": single_pu_plans(shuffle)["C1"]},
                              problem.name),
            "split": JointPlan({"squeeze": split(squeeze, "C0", "C1"), "shuffle": split(shuffle, "C1", "C0")},
                               problem.name)}


def save(path: Path, plan: JointPlan) -> Path:
    path.write_text(json.dumps(plan.to_dict()))
    return path


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """plan kind -> (plan file, export folder, its joint.json, the stdout of the export), one
    export per kind for the whole module."""
    root = tmp_path_factory.mktemp("joint")
    problem = load_multi(INSTANCE)
    out = {}
    for kind, plan in joint_plans(problem).items():
        plan_file = save(root / f"{kind}.json", plan)
        folder = root / f"export-{kind}"
        proc = run_cli("multi", "export", INSTANCE, "--plan", plan_file, "--out", folder)
        assert proc.returncode == 0, proc.stderr
        out[kind] = plan_file, folder, json.loads((folder / "joint.json").read_text()), proc.stdout
    return out


def test_export_writes_one_folder_per_network_and_joint_json(exported):
    problem = load_multi(INSTANCE)
    for kind, plan in joint_plans(problem).items():
        plan_file, folder, doc, stdout = exported[kind]
        ev = evaluate_joint(problem, plan)
        assert sorted(p.name for p in folder.iterdir()) == ["joint.json", "shuffle", "squeeze"]
        assert doc["schema"] == "pipeplan.multi-export/1" and doc["instance"] == INSTANCE
        assert doc["sharing"] == "time_shared" and doc["plan"]["source"] == str(plan_file)
        assert doc["predicted"]["sustained_fps"] == pytest.approx(ev.sustained_fps)
        assert list(doc["networks"]) == ["squeeze", "shuffle"]
        for name, model in (("squeeze", "squeezenet"), ("shuffle", "shufflenet")):
            net = doc["networks"][name]
            assert net["folder"] == name and net["model"] == model and net["instance"] == f"host/{model}"
            alone, joint = net["predicted"]["alone"], net["predicted"]["joint"]
            assert alone["period_ms"] == pytest.approx(ev.networks[name].period_ms)
            assert alone["fps"] == pytest.approx(1000.0 / alone["period_ms"])
            assert joint["fair_fps"] == pytest.approx(ev.fair_fps[name])
            assert joint["total_fps"] == pytest.approx(ev.total_fps[name])
            assert joint["worst_latency_ms"] == pytest.approx(ev.networks[name].worst_latency_ms)
            assert joint["busy_ms"] == pytest.approx(ev.networks[name].busy_ms)
            manifest = json.loads((folder / name / "manifest.json").read_text())
            assert manifest["instance"] == f"host/{model}" and manifest["plan"]["network"] == name
            assert manifest["plan"]["source"] == str(plan_file)
            assert len(manifest["stages"]) == (1 if kind == "part" else 2)
            assert f"{name} ({model}) -> " in stdout
        # no temporary folder or per-network plan file is left beside or inside the export
        assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")]
        assert not [p for p in folder.rglob(".*")]
    multi._check_target(exported["part"][1])   # an earlier joint export may be replaced


def test_run_both_pipelines_at_once_json(exported):
    _, folder, joint, _ = exported["part"]
    proc = run_cli("run", folder, "--frames", FRAMES, "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["outputs_match"] and report["instance"] == INSTANCE and report["frames"] == FRAMES
    assert set(report["networks"]) == {"squeeze", "shuffle"}
    for name, net in report["networks"].items():
        assert net["outputs_match"], name
        assert net["run"]["frames"] == FRAMES and net["measured"]["throughput_fps"] > 0
        assert 0 <= net["measured"]["concurrent_frames"] <= FRAMES
        assert set(net["ratios"]) == {"fps_vs_alone", "fps_vs_fair", "fps_vs_total", "fps_vs_sustained",
                                      "latency_vs_alone", "latency_vs_worst"}
        # the predictions are the export's (the evaluator's, test above), and each ratio is the
        # concurrent measured rate over the prediction it names
        written = joint["networks"][name]["predicted"]
        assert net["predicted"]["alone"] == written["alone"]
        assert net["predicted"]["joint"] == {k: written["joint"][k] for k in net["predicted"]["joint"]}
        assert {"fair_fps", "total_fps", "sustained_fps"} <= set(net["predicted"]["joint"])
        fps = net["measured"]["concurrent_fps"]
        predicted = {"alone": net["predicted"]["alone"]["fps"],
                     **{k.removesuffix("_fps"): v for k, v in net["predicted"]["joint"].items() if k.endswith("_fps")}}
        for key, value in predicted.items():
            want = None if fps is None else fps / value
            assert net["ratios"][f"fps_vs_{key}"] == pytest.approx(want), key
    # concurrency ends when the first network is done: all of its frames lie inside; the other's
    # may not reach one in 4 frames on a busy machine (it failed 3 runs of 4 under load)
    assert max(net["measured"]["concurrent_frames"] for net in report["networks"].values()) == FRAMES
    assert set(report["predicted_pu_utilisation_at_measured_rates"]) == {"C0", "C1"}


def test_run_both_pipelines_at_once_lines(exported):
    _, folder, _, _ = exported["split"]
    proc = run_cli("run", folder, "--frames", FRAMES)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == ["squeeze", "shuffle"]
    assert all("fps measured together" in line and line.endswith("outputs match the unsplit model: yes")
               for line in lines)


def test_outputs_that_differ_exit_1(monkeypatch, tmp_path):
    folder = tmp_path / "export"
    folder.mkdir()
    (folder / "joint.json").write_text("{}")   # only its presence matters: run_joint is replaced
    fake = {"outputs_match": False, "networks": {}}
    monkeypatch.setattr(multi, "run_joint", lambda *a, **k: fake)
    assert CliRunner().invoke(app, ["run", str(folder), "--json"]).exit_code == 1


def test_network_without_onnx_model_refused(tmp_path):
    problem = load_multi("multi/yolo+mobile")     # measured Khadas VIM3 blocks: no model to cut
    plan = JointPlan({n.name: next(iter(single_pu_plans(n).values())) for n in problem.networks}, problem.name)
    out = tmp_path / "out"
    proc = run_cli("multi", "export", "multi/yolo+mobile", "--plan", save(tmp_path / "plan.json", plan), "--out", out)
    assert_input_error(proc, "yolo+mobile.json", "networks[0].instance", "network yolo", "no ONNX model")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]


def test_infeasible_joint_plan_refused(tmp_path):
    problem = load_multi(INSTANCE)
    plan = JointPlan({"squeeze": joint_plans(problem)["part"].plans["squeeze"]}, problem.name)   # no shuffle plan
    plan_file = save(tmp_path / "plan.json", plan)
    proc = run_cli("multi", "export", INSTANCE, "--plan", plan_file, "--out", tmp_path / "out")
    assert_input_error(proc, str(plan_file), "plans", "no plan for network shuffle")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]


def test_out_folder_not_written_by_export_refused_and_left_intact(tmp_path, exported):
    problem = load_multi(INSTANCE)
    plan_file = save(tmp_path / "plan.json", joint_plans(problem)["part"])
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    proc = run_cli("multi", "export", INSTANCE, "--plan", plan_file, "--out", out)
    assert_input_error(proc, str(out), "notes.txt")
    assert [p.name for p in out.iterdir()] == ["notes.txt"] and (out / "notes.txt").read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine", "plan.json"]
    # an earlier joint export with a file of someone else's inside is not replaced either
    _, folder, _, _ = exported["part"]
    foreign = folder / "shuffle" / "notes.txt"
    foreign.write_text("keep me")
    try:
        proc = run_cli("multi", "export", INSTANCE, "--plan", plan_file, "--out", folder)
        assert_input_error(proc, "notes.txt")
        assert foreign.read_text() == "keep me"
    finally:
        foreign.unlink()


def joint_doc(folder: str) -> dict:
    predicted = {"alone": {"period_ms": 10.0, "latency_ms": 10.0, "fps": 100.0},
                 "joint": {"worst_latency_ms": 20.0, "fair_fps": 50.0, "total_fps": 50.0, "sustained_fps": 50.0,
                           "busy_ms": {"C0": 10.0}}}
    return {"schema": "pipeplan.multi-export/1", "instance": INSTANCE, "sharing": "time_shared",
            "networks": {"squeeze": {"folder": folder, "predicted": predicted}}}


@pytest.mark.parametrize("how", ["dotdot", "absolute", "link"])
def test_joint_json_pointing_outside_its_folder_refused(tmp_path, how):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    folder = tmp_path / "export"
    folder.mkdir()
    if how == "link":
        (folder / "squeeze").symlink_to(elsewhere, target_is_directory=True)
    name = {"dotdot": "../elsewhere", "absolute": str(elsewhere), "link": "squeeze"}[how]
    (folder / "joint.json").write_text(json.dumps(joint_doc(name)))
    proc = run_cli("run", folder, "--frames", FRAMES)
    assert_input_error(proc, str(folder / "joint.json"), "networks.squeeze.folder", "not a file inside")


@pytest.mark.parametrize("field", ["networks", "instance"])
def test_joint_json_names_run_prints_are_names(tmp_path, field):
    """A network named "sq\\nwarning: ..." or an instance with a right-to-left override: refused
    (run had printed them raw, forging a warning line)."""
    doc = joint_doc("squeeze")
    if field == "networks":
        doc["networks"] = {"sq\nwarning: forged": doc["networks"]["squeeze"]}
    else:
        doc["instance"] = "inst\u202eevil"
    (tmp_path / "joint.json").write_text(json.dumps(doc))
    proc = run_cli("run", tmp_path, "--frames", FRAMES)
    assert_input_error(proc, str(tmp_path / "joint.json"), field, "without control characters")


def test_frames_are_checked_against_the_memory_cap_for_all_networks_together(exported):
    """Each network keeps 2 x 1000 floats per frame and 1.5 KiB of its own (``FRAME_BYTES``,
    ``OUTPUT_BYTES``) and holds 4 input frames of 3 x 224 x 224 floats at once (with the draw's
    float64 chunk of one: 3.45 MiB) and its one group's session (32 KiB): 100 frames fit the cap
    for one network (4.39 MiB) but not for both (8.77 MiB), which run at the same time."""
    folder = exported["part"][1]
    proc = run_cli("run", folder, "--frames", 100, env={"PIPEPLAN_MAX_MEMORY_MB": "8"})
    assert_input_error(proc, "--frames", "100 needs about 8.77 MiB", "largest that fits: 57")
    assert proc.stdout == ""


def test_more_networks_than_the_host_runs_at_once_refused(tmp_path):
    """Every network is a pipeline of its own streaming at the same time: more than 4 per host
    CPU are refused before any folder is read."""
    import os

    count = 4 * (os.cpu_count() or 1) + 1
    doc = joint_doc("squeeze")
    doc["networks"] = {f"n{i}": {**doc["networks"]["squeeze"], "folder": f"n{i}"} for i in range(count)}
    (tmp_path / "joint.json").write_text(json.dumps(doc))
    proc = run_cli("run", tmp_path, "--frames", FRAMES)
    assert_input_error(proc, str(tmp_path / "joint.json"), "networks", f"{count} networks to run at once")


def test_networks_within_the_thread_rule_alone_but_not_together_are_refused(tmp_path):
    """Each network's run within 4 threads per host CPU, the two together beyond it: they run at
    once, so the rule holds for their sum (each had been checked alone)."""
    import os

    from tests.mapping.test_run_limits import export

    cpus = os.cpu_count() or 1
    threads = 2 * cpus + 1          # one PU, one group: 2 cpus intra-op pool threads and one caller
    doc = joint_doc("a")
    doc["networks"] = {name: {**doc["networks"]["squeeze"], "folder": name} for name in ("a", "b")}
    for name in ("a", "b"):
        export(tmp_path / name, threads=threads)
    (tmp_path / "joint.json").write_text(json.dumps(doc))
    proc = run_cli("run", tmp_path, "--frames", FRAMES)
    assert_input_error(proc, str(tmp_path / "joint.json"), "networks",
                       f"{2 * threads} threads to run its 2 networks at once on a host with {cpus} CPUs")
    assert run_cli("run", tmp_path / "a", "--frames", FRAMES).returncode == 0     # each alone runs


def test_an_instance_file_network_exports_with_its_named_model(tmp_path):
    """A network from an instance file (a profile measured on this host) names its ONNX model;
    a model outside the instance file's folder is refused."""
    from pipeplan.instances.catalog import load_mapping

    (tmp_path / "sq.json").write_text(json.dumps(load_mapping("host/squeezenet").to_dict()))
    pair = {"schema": "pipeplan.multi-instance/1", "name": "pair", "networks": [
        {"name": "squeeze", "instance": "sq.json", "model": "squeezenet"}]}
    (tmp_path / "pair.json").write_text(json.dumps(pair))
    problem = load_multi(str(tmp_path / "pair.json"))
    plan = save(tmp_path / "p.json", JointPlan({"squeeze": single_pu_plans(problem.networks[0])["C0"]}, "pair"))
    proc = run_cli("multi", "export", tmp_path / "pair.json", "--plan", plan, "--out", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "out" / "joint.json").read_text())
    assert doc["networks"]["squeeze"]["model"] == "squeezenet"
    pair["networks"][0]["model"] = "../elsewhere.onnx"
    (tmp_path / "pair.json").write_text(json.dumps(pair))
    proc = run_cli("multi", "export", tmp_path / "pair.json", "--plan", plan, "--out", tmp_path / "out2")
    assert_input_error(proc, "pair.json", "networks[0].model", "not a file inside")
    assert not (tmp_path / "out2").exists()


def test_a_long_network_name_makes_a_short_folder_name():
    """A network's folder keeps at most FOLDER_NAME_MAX characters of its name (numbered when two
    cut names collide): a 300-character name had been an OSError traceback (File name too long)
    from `multi export`."""
    names = ["s" * 300, "s" * 300 + "x", "a/b"]
    folders = multi._folder_names(names)
    assert folders["a/b"] == "a_b"
    assert folders["s" * 300] == "s" * multi.FOLDER_NAME_MAX
    assert folders["s" * 300 + "x"] == "s" * multi.FOLDER_NAME_MAX + "-2"
    assert all(len(f".plan-{f}.json".encode()) <= 255 for f in folders.values())


def test_run_on_a_link_loop_is_one_error(tmp_path):
    """`run a` where a -> b -> a: one line naming the folder (it had been a RuntimeError traceback)."""
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    assert_input_error(run_cli("run", tmp_path / "a", "--frames", FRAMES), str(tmp_path / "a"), "cannot resolve")

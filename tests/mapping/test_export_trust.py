"""An export folder, and the model given to ``export``, are untrusted input (issue 12): nothing
they name makes pipeplan read or write a file outside them, ``export --out`` replaces only an
earlier export, and models with external weights export and run self-contained.

Cases that need symbolic links, FIFOs or devices are built here in tmp_path (the corpus in
tests/bad_inputs/ holds the ones git can store)."""
from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from pipeplan.core.errors import InputError
from pipeplan.core.io import folder_mode, inside_folder
from pipeplan.deploy.executor import frame_inputs, run_export
from pipeplan.deploy.export import REFERENCE_FILE, export_plan
from pipeplan.deploy.manifest import MANIFEST_FILE, load_manifest
from pipeplan.deploy.runtime import SESSION_CONFIG, check_session_config, pu_runtime
from pipeplan.deploy.weights import with_random_weights
from pipeplan.formulations.mapping.onnx_graph import light_model_path, read_model
from pipeplan.profiles.roofline import load_platform
from tests.cli_helpers import ROOT, assert_input_error, run_cli

GOOD = ROOT / "tests" / "bad_inputs" / "good"
PLAN = GOOD / "host_squeezenet_plan.json"
EXPORT_ARGS = ["--platform", GOOD / "host_platform.json"]


def good_export(folder: Path) -> Path:
    """A copy of the corpus' valid export (one Relu stage) at ``folder``."""
    shutil.copytree(GOOD / "manifest", folder)
    return folder


def edit_manifest(folder: Path, edit) -> None:
    doc = json.loads((folder / MANIFEST_FILE).read_text())
    edit(doc)
    (folder / MANIFEST_FILE).write_text(json.dumps(doc))


# ----------------------------------------------------------------- 1. names inside the folder

TREE_LINKS = {   # link (path under the test root) -> its target, as the resolver below follows them
    ("export", "link_in"): ("export", "sub"),
    ("export", "link_out"): ("outside",),
    ("export", "sub", "up"): ("export",),
    ("export", "secret_link"): ("outside", "secret.onnx"),
}


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """root/export/{a.onnx, sub/b.onnx, the links of TREE_LINKS} and root/outside/secret.onnx."""
    root = tmp_path_factory.mktemp("tree").resolve()
    (root / "export" / "sub").mkdir(parents=True)
    (root / "outside").mkdir()
    for f in ("export/a.onnx", "export/sub/b.onnx", "outside/secret.onnx"):
        (root / f).write_bytes(b"x")
    for link, target in TREE_LINKS.items():
        os.symlink(os.path.relpath(root.joinpath(*target), root.joinpath(*link[:-1])), root.joinpath(*link))
    return root


def expected_inside(parts: list[str], start: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """Where a name resolves under the test root (``start``: the folder it is relative to;
    None for the file system root), or None when it leaves the root: an independent model of
    following links and '..' component by component."""
    if start is None:
        return None          # only the test root's own path could lead back, and names here lack it
    cur = list(start)
    for p in parts:
        if p in ("", "."):
            continue
        if p == "..":
            if not cur:
                return None
            cur.pop()
            continue
        cur.append(p)
        while tuple(cur) in TREE_LINKS:
            cur = list(TREE_LINKS[tuple(cur)])
    return tuple(cur)


COMPONENTS = st.sampled_from(["a.onnx", "sub", "b.onnx", "..", ".", "", "link_in", "link_out", "up",
                              "secret_link", "secret.onnx", "outside", "export", "missing.onnx"])


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(COMPONENTS, min_size=1, max_size=6), anchor=st.sampled_from(["relative", "root", "/"]))
def test_a_name_is_accepted_iff_it_resolves_inside_the_folder(tree, parts, anchor):
    prefix = {"relative": "", "root": f"{tree}/", "/": "/"}[anchor]
    name = prefix + "/".join(parts)
    start = None if name.startswith("/") and anchor != "root" else {"relative": ("export",), "root": ()}[anchor]
    where = expected_inside(parts, start)
    inside = where is not None and len(where) > 1 and where[0] == "export"
    if not inside or not name:
        with pytest.raises(InputError) as info:
            inside_folder(tree / "export", name, "m.json", "stages[0].groups[0].file")
        assert info.value.field == "stages[0].groups[0].file"
    else:
        assert inside_folder(tree / "export", name, "m.json", "f") == tree.joinpath(*where)


@pytest.mark.parametrize("name", ["../outside/secret.onnx", "link_out/secret.onnx", "secret_link",
                                  "sub/up/../../outside/secret.onnx", "/etc/passwd", ".", "sub/..", "a\0b", ""])
def test_names_that_leave_the_folder_are_refused(tree, name):
    with pytest.raises(InputError, match="file|resolve|name"):
        inside_folder(tree / "export", name, "m.json", "reference.file")


@pytest.mark.parametrize("outside_bytes", ["same", "changed"])
def test_a_sub_model_linked_from_outside_is_refused_before_it_is_hashed(tmp_path, outside_bytes):
    """The same error whether or not the outside file matches the recorded sha256: nothing is
    learnt about a file outside the folder."""
    export = good_export(tmp_path / "export")
    outside = tmp_path / "elsewhere.onnx"
    shutil.copy(export / "stage0.onnx", outside)
    if outside_bytes == "changed":
        outside.write_bytes(outside.read_bytes() + b"\0")
    (export / "stage0.onnx").unlink()
    (export / "stage0.onnx").symlink_to(outside)
    proc = run_cli("run", export, "--frames", 2, cwd=tmp_path)
    assert_input_error(proc, "manifest.json", "stages[0].groups[0].file: 'stage0.onnx' is not a file inside")
    assert "sha256" not in proc.stderr


def test_a_manifest_linked_from_outside_is_refused(tmp_path):
    export = good_export(tmp_path / "export")
    real = good_export(tmp_path / "real")
    (export / MANIFEST_FILE).unlink()
    (export / MANIFEST_FILE).symlink_to(real / MANIFEST_FILE)
    assert_input_error(run_cli("run", export, "--frames", 2, cwd=tmp_path), "manifest.json", "not a file inside")


def test_links_inside_the_folder_are_followed(tmp_path):
    export = good_export(tmp_path / "export")
    (export / "models").mkdir()
    (export / "stage0.onnx").rename(export / "models" / "stage0.onnx")
    (export / "stage0.onnx").symlink_to(Path("models") / "stage0.onnx")
    assert run_export(export, frames=2)["outputs_match"]


def test_a_config_entry_that_writes_a_file_is_refused_and_writes_nothing(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    export = good_export(tmp_path / "export")
    edit_manifest(export, lambda d: d["pus"]["C0"].update(
        session_config={"session.collect_node_memory_stats_to_file": str(victim)}))
    proc = run_cli("run", export, "--frames", 2, cwd=tmp_path)
    assert_input_error(proc, "pus.C0.session_config.session.collect_node_memory_stats_to_file", "not an allowed")
    assert victim.read_text() == "precious"


@settings(max_examples=100, deadline=None)
@given(key=st.text(min_size=1, max_size=60))
def test_only_allow_listed_config_keys_are_accepted(key):
    config = {key: "1"}
    if key in SESSION_CONFIG:
        return
    with pytest.raises(InputError) as info:
        check_session_config(config, 1, "m.json", "pus.G.session_config")
    assert info.value.field == f"pus.G.session_config.{key}"


@pytest.mark.parametrize("key, value, threads, ok", [
    ("session.intra_op.allow_spinning", "0", 1, True),
    ("session.inter_op.allow_spinning", "1", 1, True),
    ("session.set_denormal_as_zero", "1", 1, True),
    ("session.set_denormal_as_zero", "true", 1, False),
    ("session.intra_op.allow_spinning", 1, 1, False),
    ("session.dynamic_block_base", "4", 1, True),
    ("session.dynamic_block_base", "-4", 1, False),
    ("session.dynamic_block_base", "\u0663", 1, False),          # a non-ASCII digit
    ("session.intra_op_thread_affinities", "3;4;5", 4, True),
    ("session.intra_op_thread_affinities", "1,2;3-4", 3, True),
    ("session.intra_op_thread_affinities", "3;4", 4, False),     # one entry per extra thread
    ("session.intra_op_thread_affinities", "0", 2, False),       # ORT counts processors from 1
    ("session.intra_op_thread_affinities", "4-3", 2, False),
    ("session.intra_op_thread_affinities", "1-2,3", 2, False),
    ("session.intra_op_thread_affinities", "9999", 2, False),
    ("session.intra_op_thread_affinities", ";".join(["1"] * 600), 601, False),   # over ORT's 1024 characters
])
def test_config_values_are_checked(key, value, threads, ok):
    if ok:
        assert check_session_config({key: value}, threads, "m.json", "pus.G.session_config") == {key: value}
    else:
        with pytest.raises(InputError) as info:
            check_session_config({key: value}, threads, "m.json", "pus.G.session_config")
        assert info.value.field == f"pus.G.session_config.{key}"


@pytest.mark.parametrize("platform", sorted((ROOT / "profiles" / "platforms").glob("*.json")), ids=lambda p: p.stem)
def test_every_config_entry_export_writes_is_allowed(platform):
    plat = load_platform(platform)
    for pu in plat.pus:
        entry = pu_runtime(plat, pu, str(platform))
        check_session_config(entry["session_config"], entry["intra_op_threads"], str(platform), pu)


# ----------------------------------------------------------------- 2. export --out


def export_cli(out: Path, cwd: Path, model="squeezenet"):
    return run_cli("export", PLAN, "--model", model, *EXPORT_ARGS, "--out", out, cwd=cwd)


def listing(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def junk_manifest(out: Path) -> None:
    out.mkdir()
    (out / MANIFEST_FILE).write_text('{"mine": true}')


def export_with_notes(out: Path) -> None:
    good_export(out)
    (out / "notes.txt").write_text("mine")


def export_with_changed_stage(out: Path) -> None:
    good_export(out)
    (out / "stage0.onnx").write_bytes((out / "stage0.onnx").read_bytes() + b"\0")


@pytest.mark.parametrize("make, needle", [
    (junk_manifest, "not an earlier export"),
    (export_with_notes, "holds 'notes.txt'"),
    (export_with_changed_stage, "not an earlier export"),
])
def test_out_is_replaced_only_when_it_is_an_earlier_export(tmp_path, make, needle):
    out = tmp_path / "out"
    make(out)
    before = listing(out)
    assert_input_error(export_cli(out, tmp_path), str(out), needle)
    assert listing(out) == before
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_an_earlier_export_is_replaced(tmp_path):
    out = good_export(tmp_path / "out")
    proc = export_cli(out, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((out / MANIFEST_FILE).read_text())["instance"] == "host/squeezenet@raw"
    assert "stage0.onnx" not in listing(out)
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_any_folder_name_the_file_system_takes_is_exported_and_replaced(tmp_path):
    """The temporary folders beside --out have short fixed names: a 250-character --out had
    been `cannot write (File name too long)`, new or an earlier export alike; the export gets
    the mode `mkdir` gives."""
    out = tmp_path / ("e" * (os.pathconf(tmp_path, "PC_NAME_MAX") - 5))
    for _ in range(2):                               # new, then replacing the earlier export
        proc = export_cli(out, tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert stat.S_IMODE(out.stat().st_mode) == folder_mode()   # mkdtemp's 0700 had stayed
    assert json.loads((out / MANIFEST_FILE).read_text())["instance"] == "host/squeezenet@raw"
    assert [p.name for p in tmp_path.iterdir()] == [out.name]


def test_an_interrupted_export_leaves_nothing_not_even_the_folders_made_for_it(tmp_path, monkeypatch):
    """Stopped while it writes (here: Ctrl-C in the reference model's save), the export removes
    its temporary folder and the parents of --out it made (they had stayed, empty)."""
    from pipeplan.deploy import export as export_module

    def interrupted(*_, **__):
        raise KeyboardInterrupt

    monkeypatch.setattr(export_module.onnx, "save", interrupted)
    with pytest.raises(KeyboardInterrupt):
        export_plan(PLAN, light_model_path("squeezenet"), tmp_path / "new" / "deeper" / "out",
                    platform_file=EXPORT_ARGS[1])
    assert list(tmp_path.iterdir()) == []

@pytest.mark.parametrize("target", ["empty folder", "earlier export", "missing"])
def test_a_symlink_as_out_is_refused(tmp_path, target):
    real = tmp_path / "real"
    if target == "empty folder":
        real.mkdir()
    elif target == "earlier export":
        good_export(real)
    before = listing(real) if real.exists() else None
    out = tmp_path / "out"
    out.symlink_to(real)
    assert_input_error(export_cli(out, tmp_path), str(out), "symbolic link")
    assert out.is_symlink() and (listing(real) if real.exists() else None) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["out"] + (["real"] if before is not None else []))


def test_a_fifo_file_or_device_as_out_is_refused_and_left_as_it_is(tmp_path):
    fifo, file = tmp_path / "fifo", tmp_path / "file"
    os.mkfifo(fifo)
    file.write_text("mine")
    for out, kind in ((fifo, stat.S_ISFIFO), (file, stat.S_ISREG), (Path(os.devnull), stat.S_ISCHR)):
        assert_input_error(export_cli(out, tmp_path), str(out), "output folder is")
        assert kind(os.lstat(out).st_mode)
    assert file.read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "file"]


# ----------------------------------------------------------------- 3. models with external data


def save_external(model: onnx.ModelProto, folder: Path) -> Path:
    """``model`` saved as folder/model.onnx with every weight in folder/weights.bin."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    copy = onnx.ModelProto()
    copy.CopyFrom(model)     # save_model moves the weights of the proto it is given out
    onnx.save_model(copy, str(path), save_as_external_data=True, location="weights.bin", size_threshold=0)
    return path


def tiny_weighted_model() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.arange(4, dtype=np.float32).reshape(1, 4), "W")
    graph = helper.make_graph([helper.make_node("Add", ["X", "W"], ["Y"], name="add")], "g",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 4])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_model_with_external_weights_exports_self_contained_and_runs(tmp_path):
    full, _ = with_random_weights(read_model(light_model_path("squeezenet")), 0)
    model = save_external(full, tmp_path / "model")
    out = tmp_path / "export"
    export_plan(PLAN, model, out, platform_file=GOOD / "host_platform.json")
    shutil.rmtree(tmp_path / "model")           # the export needs nothing from the model's folder
    assert {p.suffix for p in out.iterdir()} == {".json", ".onnx"}
    report = run_export(out, frames=2)
    assert report["outputs_match"]
    # the reference holds the model's own weights, not new random ones
    m = load_manifest(out)
    feeds = frame_inputs(m.inputs, 0, 0)
    want = ort.InferenceSession(full.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = ort.InferenceSession(str(out / REFERENCE_FILE), providers=["CPUExecutionProvider"]).run(None, feeds)
    assert np.array_equal(want[0], got[0])


def _point_weights_at(model: Path, location: str) -> None:
    proto = onnx.load(str(model), load_external_data=False)
    for entry in proto.graph.initializer[0].external_data:
        if entry.key == "location":
            entry.value = location
    onnx.save(proto, str(model))


def _link_out(model: Path) -> None:
    outside = model.parent.parent / "outside.bin"
    (model.parent / "weights.bin").rename(outside)
    (model.parent / "weights.bin").symlink_to(outside)


@pytest.mark.parametrize("damage", [
    lambda m: _point_weights_at(m, "../outside.bin"),
    lambda m: _point_weights_at(m, str(m.parent.parent / "outside.bin")),
    _link_out,
], ids=["parent", "absolute", "symlink"])
def test_external_weights_outside_the_model_folder_are_refused(tmp_path, damage):
    model = save_external(tiny_weighted_model(), tmp_path / "model")
    shutil.copy(model.parent / "weights.bin", tmp_path / "outside.bin")
    damage(model)
    out = tmp_path / "export"
    proc = export_cli(out, tmp_path, model=model)
    assert_input_error(proc, str(model), "external_data[W].location", "not a file inside")
    assert not out.exists()


def test_external_weights_past_the_end_of_their_file_are_refused(tmp_path):
    model = save_external(tiny_weighted_model(), tmp_path / "model")
    (model.parent / "weights.bin").write_bytes(b"\0" * 8)
    assert_input_error(export_cli(tmp_path / "export", tmp_path, model=model), str(model), "external_data[W]")


def test_profile_reads_external_weights_from_the_model_folder_not_the_working_directory(tmp_path):
    """ONNX Runtime resolves external files against the working directory when given bytes: a
    decoy weights.bin there must not be read, and the model's own folder must be enough."""
    model = save_external(tiny_weighted_model(), tmp_path / "model")
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    (cwd / "weights.bin").write_bytes(b"decoy")         # 5 bytes: would fail the 16-byte extent
    out = tmp_path / "profile.json"
    proc = run_cli("profile", model, "--out", out, "--runs", "1", "--warmup", "0", cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())["units"]
    _point_weights_at(model, "../elsewhere/weights.bin")
    assert_input_error(run_cli("profile", model, "--out", tmp_path / "p2.json", "--runs", "1", "--warmup", "0",
                               cwd=cwd), "external_data[W].location", "not a file inside")


def function_constant_model(location: str) -> onnx.ModelProto:
    """X + c, where c is a Constant inside a model-local function whose value lies in the
    external file ``location`` (16 bytes). ONNX Runtime inlines the function and loads c like
    an initializer: from the working directory, for a model given as bytes."""
    c = TensorProto(name="c", data_type=TensorProto.FLOAT, dims=[4], data_location=TensorProto.EXTERNAL)
    for key, value in (("location", location), ("offset", "0"), ("length", "16")):
        c.external_data.add(key=key, value=value)
    fn = helper.make_function("local", "F", ["x"], ["y"],
                              [helper.make_node("Constant", [], ["c"], value=c), helper.make_node("Add", ["x", "c"], ["y"])],
                              [helper.make_opsetid("", 17)])
    graph = helper.make_graph([helper.make_node("F", ["X"], ["Y"], domain="local", name="f"),
                               helper.make_node("Relu", ["Y"], ["Z"], name="r")], "g",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("Z", TensorProto.FLOAT, [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
                              functions=[fn])
    model.ir_version = 8
    return model


def test_external_data_of_a_function_constant_is_checked_like_any_weight(tmp_path):
    """A Constant inside a model-local function had escaped the check: ONNX Runtime read its
    external file from the working directory (any file there, or its error named it)."""
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    (cwd / "secret.bin").write_bytes(b"S" * 16)
    folder = tmp_path / "model"
    folder.mkdir()
    for location in ("secret.bin", "../elsewhere/secret.bin", str(cwd / "secret.bin")):
        model = folder / "model.onnx"
        onnx.save(function_constant_model(location), str(model))
        proc = run_cli("profile", model, "--out", tmp_path / "p.json", "--runs", "1", "--warmup", "0", cwd=cwd)
        assert proc.returncode == 2 and "secret.bin" in proc.stderr, proc.stderr
        assert "ONNX Runtime" not in proc.stderr and not (tmp_path / "p.json").exists()
    (folder / "secret.bin").write_bytes(b"\0" * 16)     # inside the model's folder: read from there
    onnx.save(function_constant_model("secret.bin"), str(folder / "model.onnx"))
    proc = run_cli("profile", folder / "model.onnx", "--out", tmp_path / "p.json", "--runs", "1", "--warmup", "0",
                   cwd=cwd)
    assert proc.returncode == 0, proc.stderr


# ----------------------------------------------------------------- 4. Ray


def test_training_on_ray_starts_it_without_the_dashboard(monkeypatch):
    ray = pytest.importorskip("ray")
    from pipeplan.deploy.gradcode.ray_backend import train_ray
    from pipeplan.formulations.gradcode.problem import homogeneous_problem
    from pipeplan.solvers.gradcode.schemes import build

    asked = {}

    class Started(Exception):
        pass

    def init(**kwargs):
        asked.update(kwargs)
        raise Started

    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    with pytest.raises(Started):
        train_ray(homogeneous_problem(4, 1, prob=0.5), build("pgc-fr", 4, 1))
    assert asked["include_dashboard"] is False


def test_an_instance_file_a_plan_names_is_read_only_inside_the_plans_folder(tmp_path):
    """A plan from someone else naming '/x/secret.json' or '../secret.json' made `export` open that
    file (and its error told what it held); the plan's own folder, or --instance, still work."""
    from pipeplan.instances.catalog import load_mapping
    (tmp_path / "outside").mkdir()
    secret = tmp_path / "outside" / "secret.json"
    secret.write_text(json.dumps(load_mapping("host/squeezenet@raw").to_dict()))
    plans = tmp_path / "plans"
    plans.mkdir()
    shutil.copyfile(secret, plans / "inst.json")
    doc = json.loads(PLAN.read_text())
    for named in (str(secret), "outside/secret.json", "plans/../outside/secret.json"):   # from tmp_path
        (plans / "p.json").write_text(json.dumps({**doc, "instance": named}))
        proc = run_cli("export", plans / "p.json", "--model", "squeezenet", *EXPORT_ARGS, "--out", tmp_path / "o",
                       cwd=tmp_path)
        assert_input_error(proc, "p.json: instance", "outside the plan's folder")
        assert not (tmp_path / "o").exists()
    proc = run_cli("export", plans / "p.json", "--model", "squeezenet", *EXPORT_ARGS, "--out", tmp_path / "o",
                   "--instance", str(secret), cwd=tmp_path)                  # the user's own choice
    assert proc.returncode == 0, proc.stderr
    (plans / "p.json").write_text(json.dumps({**doc, "instance": "plans/inst.json"}))
    proc = run_cli("export", plans / "p.json", "--model", "squeezenet", *EXPORT_ARGS, "--out", tmp_path / "o2",
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr


def test_stand_in_weights_beyond_one_model_or_memory_are_refused_before_they_are_drawn():
    """A 200-byte model whose ConstantOfShape asks for 3e9 floats had made export draw 22 GiB."""
    def model(n: int) -> onnx.ModelProto:
        nodes = [helper.make_node("ConstantOfShape", ["s"], ["W"], name="cos",
                                  value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.0])),
                 helper.make_node("ReduceSum", ["W"], ["r"], keepdims=0, name="rs"),
                 helper.make_node("Add", ["X", "r"], ["Y"], name="add")]
        graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 4])],
                                  [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 4])],
                                  [helper.make_tensor("s", TensorProto.INT64, [1], [n])])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    with pytest.raises(InputError) as err:
        with_random_weights(model(3_000_000_000), 0, "big.onnx")
    assert err.value.source == "big.onnx" and err.value.field == "graph.node[cos]"
    assert with_random_weights(model(1000), 0, "small.onnx")[1] == 1

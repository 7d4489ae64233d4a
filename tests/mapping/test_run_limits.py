"""`pipeplan run` on hostile manifests keeps its limits: dtypes are plain numbers, the input frames
are counted in the memory estimate before one is drawn (and drawn without a float64 copy), what a
model makes must be what the manifest declares, the time limit covers loading the manifest and
creating the sessions, each model file is checked once, and the run's threads together stay
within what the host's CPUs take. The corpus (tests/bad_inputs/manifest/, cases_run.toml) holds
the cases git can store; the ones built to the host's size or measured are here."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from pipeplan.core.errors import InputError
from pipeplan.deploy import executor as executor_module
from pipeplan.deploy import manifest as manifest_module
from pipeplan.deploy.executor import OVERSUBSCRIPTION, frame_inputs, run_export
from pipeplan.deploy.manifest import DTYPES, MANIFEST_FILE, TensorSpec, load_manifest
from pipeplan.profiles.random_feeds import DRAW_BYTES, DRAW_CHUNK
from tests.cli_helpers import ROOT, assert_input_error

GOOD = ROOT / "tests" / "bad_inputs" / "good" / "manifest"
CORPUS = ROOT / "tests" / "bad_inputs" / "manifest"
MB = 1 << 20


def run_measured(*args, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, int]:
    """``pipeplan args`` in a fresh interpreter, and the most memory it held (max RSS, bytes),
    from the kernel's account of that one child (os.wait4)."""
    proc = subprocess.Popen([sys.executable, "-m", "pipeplan.app.cli", *map(str, args)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})
    _, status, usage = os.wait4(proc.pid, 0)     # the outputs are a few lines: the pipes do not fill
    proc.returncode = os.waitstatus_to_exitcode(status)
    out, err = proc.stdout.read(), proc.stderr.read()
    proc.stdout.close()
    proc.stderr.close()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), usage.ru_maxrss * 1024


def relu(path: Path, dims: list, name: str = "relu") -> None:
    """X -> Relu -> Y with ``dims`` for both (a string is a symbolic dimension)."""
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, dims)
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, dims)
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["X"], ["Y"], name=name)], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def export(folder: Path, *, x_shape=(1, 4), y_shape=(1, 4), groups: int = 1, threads: int = 1, pus: int = 1,
           distinct_files: bool = False, symbolic: bool = False) -> Path:
    """The corpus' valid export (one Relu stage on C0) reshaped: ``groups`` groups in the stage,
    spread over ``pus`` PUs of ``threads`` threads, each on its own copy of the model
    (``distinct_files``) or all on stage0.onnx; ``symbolic``: a Relu of symbolic length,
    X and Y declared ``x_shape`` and ``y_shape``."""
    shutil.copytree(GOOD, folder)
    if symbolic:
        for f in ("model_full.onnx", "stage0.onnx"):
            relu(folder / f, [1, "N"])
    doc = json.loads((folder / MANIFEST_FILE).read_text())
    doc["reference"]["sha256"] = sha(folder / "model_full.onnx")
    doc["pus"] = {f"P{i}": {**doc["pus"]["C0"], "intra_op_threads": threads} for i in range(pus)}
    template = doc["stages"][0]["groups"][0]
    made = []
    for i in range(groups):
        file = "stage0.onnx"
        if distinct_files:
            file = f"g{i}.onnx"
            relu(folder / file, [1, 4], name=f"relu{i}")
        made.append({**template, "id": f"g{i}", "pu": f"P{i % pus}", "file": file, "sha256": sha(folder / file)})
    doc["stages"][0]["groups"] = made
    doc["stages"][0]["pus"] = list(doc["pus"])
    for t in doc["inputs"] + [t for g in made for t in g["inputs"]]:
        t["shape"] = list(x_shape)
    for t in doc["outputs"] + [t for g in made for t in g["outputs"]]:
        t["shape"] = list(y_shape)
    (folder / MANIFEST_FILE).write_text(json.dumps(doc))
    return folder


def edit(folder: Path, change) -> None:
    doc = json.loads((folder / MANIFEST_FILE).read_text())
    change(doc)
    (folder / MANIFEST_FILE).write_text(json.dumps(doc))


# ------------------------------------------------------------------------------------ dtypes

@pytest.mark.parametrize("text", [d.name for d in DTYPES] + ["f4", "float", "i8", "?", "<f4" if sys.byteorder == "little" else ">f4"])
def test_plain_numeric_dtypes_load(tmp_path, text):
    folder = shutil.copytree(GOOD, tmp_path / "export")
    edit(folder, lambda doc: doc["inputs"][0].update(dtype=text))
    assert load_manifest(folder).inputs[0].dtype in DTYPES


@pytest.mark.parametrize("text, why", [
    ("i4,(", "unknown dtype"), ("10000000000000i4", "unknown dtype"), ("(" * 5000, "unknown dtype"),
    ("(15000,15000)f4", "plain numeric or bool"), ("i4,i4", "plain numeric or bool"),
    ("O", "plain numeric or bool"), ("U8", "plain numeric or bool"), ("V16", "plain numeric or bool"),
    ("M8[s]", "plain numeric or bool"), ("f16", "dtype"),   # float128, where numpy has it
    (">f4" if sys.byteorder == "little" else "<f4", "plain numeric or bool")])
def test_other_dtypes_are_the_fields_error(tmp_path, text, why):
    """numpy's parser raises SyntaxError, ValueError or TypeError; a subarray, structured,
    object, string, void, datetime, 128-bit float or byte-swapped dtype parses but is no tensor
    ONNX Runtime takes, and a subarray's elements are not counted by the shape."""
    folder = shutil.copytree(GOOD, tmp_path / "export")
    edit(folder, lambda doc: doc["stages"][0]["groups"][0]["outputs"][0].update(dtype=text))
    with pytest.raises(InputError) as info:
        load_manifest(folder)
    assert info.value.field == "stages[0].groups[0].outputs[0].dtype" and why in info.value.message


# ------------------------------------------------------------------------------------ memory

@pytest.fixture(scope="module")
def baseline_bytes() -> int:
    """The max RSS of a run of the corpus' valid export: the interpreter and its libraries,
    which no memory cap counts."""
    proc, peak = run_measured("run", GOOD, "--frames", 2)
    assert proc.returncode == 0, proc.stderr
    return peak


def _traced_peak(frames: int) -> int:
    """The most memory Python and numpy held (tracemalloc) while ``frames`` frames ran."""
    tracemalloc.start()
    try:
        run_export(GOOD, frames=frames)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_the_frames_estimate_covers_what_a_kept_frame_costs():
    """``--frames`` is checked at ``kept_bytes_per_frame`` a frame: it had counted the outputs'
    data alone (32 bytes for this manifest) while a kept frame costs about 1.4 KB of the
    process's memory, so a run under a 100 MiB cap reached 373 MiB at a frame count the check
    let through (hostile-input audit). Here the Python and numpy side of it, traced in process."""
    frames = 5_000
    per_frame = (_traced_peak(frames) - _traced_peak(2)) / (frames - 2)
    assert per_frame <= executor_module.kept_bytes_per_frame(load_manifest(GOOD).outputs), per_frame
    assert per_frame > 200      # what the old estimate (32 bytes) left out


def test_input_frames_past_the_cap_are_refused_before_one_is_drawn(baseline_bytes):
    """A 71-byte Relu of symbolic length whose manifest declares its input [1, 2e8] float32 had
    reached 3.2 GB under a 512 MiB cap (each 763 MiB frame drawn as float64 first)."""
    proc, peak = run_measured("run", CORPUS / "input_frames_past_memory_cap", "--frames", 2,
                              env={"PIPEPLAN_MAX_MEMORY_MB": "512"})
    assert_input_error(proc, "input_frames_past_memory_cap/manifest.json", "inputs[0].shape",
                       "holding 2 frames", "above the limit of 512 MiB")
    assert proc.stdout == ""
    assert peak - baseline_bytes < 100 * MB, (peak, baseline_bytes)   # not one frame (763 MiB) was drawn


def test_a_model_making_more_than_declared_stops_at_its_first_frame_within_the_cap(tmp_path, baseline_bytes):
    """Y declared [1, 1] but the Relu makes [1, 2e7] (76 MiB a frame): the estimate counts the
    declared size, so the run stops at the first frame that differs, and ONNX Runtime's arena
    leaves the input frames their part of the cap."""
    folder = export(tmp_path / "export", x_shape=(1, 20_000_000), y_shape=(1, 1), symbolic=True)
    proc, peak = run_measured("run", folder, "--frames", 2, env={"PIPEPLAN_MAX_MEMORY_MB": "512"})
    assert_input_error(proc, "manifest.json", "stages[0].groups[0].outputs[0]",
                       "makes Y of shape [1, 20000000] float32, the manifest declares [1, 1] float32")
    assert peak - baseline_bytes < 512 * MB, (peak, baseline_bytes)


def test_the_arena_leaves_the_input_frames_their_part_of_the_cap(tmp_path, baseline_bytes):
    """Two 76 MiB input frames held at once under a 200 MiB cap: ONNX Runtime may allocate only
    the rest (it had the whole cap beside them), so the Relu's 76 MiB output is refused there."""
    folder = export(tmp_path / "export", x_shape=(1, 20_000_000), y_shape=(1, 1), symbolic=True)
    cap = 200 * MB
    proc, peak = run_measured("run", folder, "--frames", 2, env={"PIPEPLAN_MAX_MEMORY_MB": "200"})
    assert_input_error(proc, "manifest.json", "stages[0].groups[0]", "ONNX Runtime failed on stage0.onnx")
    available = int(re.search(r"Available memory of (\d+)", proc.stderr).group(1))
    assert available <= cap - 2 * 80_000_000
    assert peak - baseline_bytes < cap, (peak, baseline_bytes)


def test_input_frames_are_the_frames_drawn_whole_without_a_float64_copy():
    """Drawn a piece at a time into their own dtype, the frames are those drawn whole (as float64
    or int64, then cast) before; a float32 frame costs its own size, not three times it."""
    specs = tuple(TensorSpec(f"t{i}", shape, np.dtype(d)) for i, (shape, d) in enumerate([
        ((1, 3, 224, 224), "float32"), (("N", DRAW_CHUNK + 3), "float16"), ((5,), "float64"), ((DRAW_CHUNK * 2 + 1,), "bool"),
        ((7, 3), "int64"), ((DRAW_CHUNK + 5,), "int8"), ((0, 4), "float32"), ((), "uint8")]))
    got = frame_inputs(specs, 3, 11)
    rng = np.random.default_rng([3, 11])
    for t in specs:
        shape = t.concrete_shape()
        if np.issubdtype(t.dtype, np.floating):
            want = rng.standard_normal(shape).astype(t.dtype)
        elif t.dtype == np.bool_:
            want = rng.random(shape) < 0.5
        else:
            want = rng.integers(0, 2, size=shape).astype(t.dtype)
        assert got[t.name].dtype == t.dtype and np.array_equal(got[t.name], want), t.name
    big = (TensorSpec("X", (1, 4_000_000), np.dtype("float32")),)
    tracemalloc.start()
    try:
        frame_inputs(big, 0, 0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16_000_000 + DRAW_BYTES * DRAW_CHUNK + MB, peak


# ------------------------------------------------------------------------------------ time

def test_each_model_file_is_checked_once(tmp_path, monkeypatch):
    """1001 stages naming two files (and the reference) had run 1001 forked shape inferences
    (24 s); each file is checked once, and a later reference's sha256 is still compared."""
    folder = shutil.copytree(GOOD, tmp_path / "export")
    relu(folder / "a.onnx", [1, 4], name="a")
    relu(folder / "b.onnx", [1, 4], name="b")

    def stages(doc):
        template = doc["stages"][0]
        doc["stages"] = [{**template, "index": s, "sends": ["X", "Y"], "groups": [   # X rides along
            {**template["groups"][0], "file": f, "sha256": sha(folder / f)}]}
            for s, f in enumerate(["a.onnx", "b.onnx"] * 500 + ["a.onnx"])]
    edit(folder, stages)
    checked = []
    real = manifest_module.check_model_bounds
    monkeypatch.setattr(manifest_module, "check_model_bounds",
                        lambda model, source, **kw: (checked.append(Path(source).name), real(model, source, **kw)))
    m = load_manifest(folder)
    assert len(m.stages) == 1001 and sorted(checked) == ["a.onnx", "b.onnx", "model_full.onnx"]
    edit(folder, lambda doc: doc["stages"][1000]["groups"][0].update(sha256="0" * 64))
    with pytest.raises(InputError) as info:
        load_manifest(folder)
    assert info.value.field == "stages[1000].groups[0].sha256"


@pytest.mark.parametrize("module, name, delay, shape, stage", [
    (manifest_module, "check_model_bounds", 0.1, dict(groups=40, distinct_files=True), "still loading the export"),
    (executor_module, "make_session", 0.05, dict(groups=200), "still creating the ONNX Runtime sessions of")])
def test_the_time_limit_covers_loading_and_creating_the_sessions(tmp_path, monkeypatch, module, name, delay, shape,
                                                                  stage):
    """The clock is checked before each model file is checked (a forked shape inference each:
    600 files had taken about 15 s, and `run --time-limit 1` had not looked at its clock before
    the frames) and before each session (30,000 groups' sessions had taken over 15 s). Here the
    real check or session is slowed by ``delay`` each: the run stops at its 1 s limit there."""
    folder = export(tmp_path / "export", **shape)
    real = getattr(module, name)

    def slow(*args, **kw):
        time.sleep(delay)
        return real(*args, **kw)

    monkeypatch.setattr(module, name, slow)
    began = time.monotonic()
    with pytest.raises(InputError) as info:
        run_export(folder, frames=2, time_limit_s=1)
    assert info.value.source == "--time-limit" and stage in info.value.message
    assert time.monotonic() - began < 4


# ------------------------------------------------------------------------------------ threads

def test_more_threads_than_the_host_takes_are_refused_before_any_session(tmp_path, monkeypatch):
    """100 PUs of 8 threads (each within the 4-per-CPU rule on two CPUs) had run 800 threads,
    whose sessions took over 60 s to create: the whole run is held to the rule, before any
    session is made (making one fails the test)."""
    cpus = os.cpu_count() or 1
    threads = min(8, OVERSUBSCRIPTION * cpus)
    pus = max(100, OVERSUBSCRIPTION * cpus // threads + 1)
    folder = export(tmp_path / "export", groups=pus, pus=pus, threads=threads)

    def session(*a, **k):
        raise AssertionError("a session was made before the thread count was refused")

    with monkeypatch.context() as m:
        m.setattr(executor_module, "make_session", session)
        with pytest.raises(InputError) as info:
            run_export(folder, frames=2)
    err = info.value
    assert err.source.endswith("manifest.json") and err.field == "pus", err.one_line()
    assert f"{pus * threads} threads to run it" in err.message and f"host with {cpus} CPUs" in err.message


def test_an_export_within_the_host_runs_as_before(tmp_path):
    """The rule counts what an export makes: each PU its threads, once per group."""
    cpus = os.cpu_count() or 1
    folder = export(tmp_path / "export", groups=2, pus=2, threads=max(1, OVERSUBSCRIPTION * cpus // 2))
    report = run_export(folder, frames=3)
    assert report["outputs_match"] and report["frames"] == 3


# ------------------------------------------------------------------------------------ sessions

def test_more_groups_than_the_largest_graph_has_units_are_refused_before_they_are_read(tmp_path):
    """200,000 groups had been bounded by `run --time-limit` alone (each a session to create):
    a group runs at least one unit of a graph, and pipeplan plans at most MAX_UNITS of them."""
    from pipeplan.formulations.mapping.graph_limits import MAX_UNITS
    folder = export(tmp_path / "export")
    edit(folder, lambda doc: doc["stages"][0].update(groups=doc["stages"][0]["groups"] * (MAX_UNITS + 1)))
    with pytest.raises(InputError) as info:
        load_manifest(folder)
    assert info.value.field == "stages[0].groups" and f"{MAX_UNITS + 1} groups" in info.value.message


def test_the_sessions_memory_is_counted_before_the_first_is_made(tmp_path, monkeypatch):
    """Each group's session holds memory of its own outside the capped arena (SESSION_BYTES,
    measured): 400 groups under a 12 MiB cap are refused before any session is created, and
    the same export runs under the default cap."""
    folder = export(tmp_path / "export", groups=400)
    made = []
    real = executor_module.make_session
    monkeypatch.setattr(executor_module, "make_session", lambda *a, **kw: (made.append(1), real(*a, **kw))[1])
    monkeypatch.setenv("PIPEPLAN_MAX_MEMORY_MB", "12")
    with pytest.raises(InputError) as info:
        run_export(folder, frames=2)
    assert info.value.field == "stages" and "400 ONNX Runtime sessions" in info.value.message and not made
    assert 400 * executor_module.SESSION_BYTES > 12 * MB
    monkeypatch.delenv("PIPEPLAN_MAX_MEMORY_MB")
    report = run_export(folder, frames=2)
    assert report["outputs_match"] and len(made) == 400 + 1    # and the reference model's session

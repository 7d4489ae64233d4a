"""Host profiling with ONNX Runtime's per-node profiler (a real, short run on squeezenet)."""
from __future__ import annotations

import math
import tempfile

import pytest

from pipeplan.core.errors import InputError
from pipeplan.formulations.mapping.onnx_graph import light_model_path, load_onnx
from pipeplan.formulations.mapping.profile import profile_from_dict
from pipeplan.profiles.ort_profiler import profile_host


@pytest.fixture(scope="module")
def squeezenet(tmp_path_factory):
    """One profiling run, with the temp folder and working folder redirected to an empty
    folder so the test can check that no ORT trace file is left behind."""
    scratch = tmp_path_factory.mktemp("scratch")
    calls = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tempfile, "tempdir", str(scratch))
        mp.chdir(scratch)
        profile = profile_host(light_model_path("squeezenet"), runs=3, warmup=1,
                               progress=lambda done, total: calls.append((done, total)))
    return profile, calls, scratch


def test_times_are_finite_and_positive_in_total(squeezenet):
    profile, _, _ = squeezenet
    times = profile.time_ms["C0"]["max"]
    assert all(math.isfinite(t) and t >= 0 for t in times)
    assert sum(times) > 0
    assert profile.time_ms["C1"] == profile.time_ms["C0"]


def test_units_are_the_dag_nodes(squeezenet):
    profile, _, _ = squeezenet
    g = load_onnx(light_model_path("squeezenet"))
    assert profile.units == tuple(g.nodes)
    conv_times = [t for u, t in zip(profile.units, profile.time_ms["C0"]["max"])
                  if g.nodes[u]["op"] == "Conv"]
    assert all(t > 0 for t in conv_times)  # every convolution was found in the trace


def test_profile_validates(squeezenet):
    profile, _, _ = squeezenet
    doc = profile.to_dict()
    assert profile_from_dict(doc, "host").to_dict() == doc
    assert profile.power_model == "per_pu" and profile.host_pu == "C0"
    assert profile.transfers.default.fixed_ms == 0.01
    assert 0 < profile.transfers.default.ms_per_mb < 10


def test_progress_and_no_leftover_files(squeezenet):
    _, calls, scratch = squeezenet
    assert calls == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert list(scratch.iterdir()) == []


def test_bad_model_is_an_input_error(tmp_path):
    path = tmp_path / "bad.onnx"
    path.write_bytes(b"garbage")
    with pytest.raises(InputError, match="bad.onnx"):
        profile_host(path, runs=1, warmup=0)

"""Platform files, roofline profiles and per-PU calibration."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import networkx as nx
import pytest

from pipeplan.core.errors import InputError
from pipeplan.formulations.mapping.coarsen import coarsen
from pipeplan.formulations.mapping.onnx_graph import light_model_path, load_onnx
from pipeplan.formulations.mapping.profile import profile_from_dict
from pipeplan.profiles.roofline import calibrate, load_platform, platform_from_dict, roofline_profile

PLATFORMS = Path(__file__).parents[2] / "profiles" / "platforms"


@pytest.fixture(scope="module")
def a311d():
    return load_platform(PLATFORMS / "a311d.json")


@pytest.fixture(scope="module")
def inception():
    g = load_onnx(light_model_path("inception_v1"))
    return g, coarsen(g, "modules")


@pytest.mark.parametrize("name", ["a311d", "bst", "host"])
def test_platform_files_load(name):
    platform = load_platform(PLATFORMS / f"{name}.json")
    assert platform.name == name
    assert platform.pus[platform.host_pu].supported_ops is None
    assert len(platform.assumptions) > 200
    assert {p.kind for p in platform.pus.values()} >= {"cpu"}


def test_a311d_pus(a311d):
    assert set(a311d.pus) == {"B", "L", "G", "N"} and a311d.host_pu == "B"
    assert not a311d.pus["N"].supports("LRN") and a311d.pus["N"].supports("Conv")


def valid_doc() -> dict:
    return json.loads((PLATFORMS / "a311d.json").read_text())


def mutate(path: str, value) -> dict:
    """A copy of the A311D document with ``path`` (dot-separated) set, or deleted for None."""
    doc = copy.deepcopy(valid_doc())
    *parents, last = path.split(".")
    target = doc
    for key in parents:
        target = target[key]
    if value is None:
        del target[last]
    else:
        target[last] = value
    return doc


@pytest.mark.parametrize("path, value, field", [
    ("schema", "pipeplan.platform/0", "schema"),
    ("host_pu", None, "host_pu"),
    ("host_pu", "X", "host_pu"),
    ("pus", {}, "pus"),
    ("pus.G.efficiency", 1.5, "pus.G.efficiency"),
    ("pus.G.efficiency", 0, "pus.G.efficiency"),
    ("pus.G.peak_gflops", 0, "pus.G.peak_gflops"),
    ("pus.G.peak_gflops", None, "pus.G.peak_gflops"),
    ("pus.G.mem_bandwidth_gbs", "fast", "pus.G.mem_bandwidth_gbs"),
    ("pus.G.active_power_mw", -1, "pus.G.active_power_mw"),
    ("pus.G.peak_gflop", 10, "pus.G.peak_gflop"),
    ("pus.N.supported_ops", [], "pus.N.supported_ops"),
    ("pus.B.supported_ops", ["Conv"], "pus.B.supported_ops"),
    ("links.B->X", {"fixed_ms": 0, "gb_per_s": 1}, "links.B->X"),
    ("links.B->G.gb_per_s", 0, "links.B->G.gb_per_s"),
    ("default_link", None, "links"),
    ("colour", "red", "colour"),
    ("pus.G.runtime", [], "pus.G.runtime"),
    ("pus.G.runtime", {"provider": ""}, "pus.G.runtime.provider"),
    ("pus.G.runtime", {"threads": 0}, "pus.G.runtime.threads"),
    ("pus.G.runtime", {"threads": 1.5}, "pus.G.runtime.threads"),
    ("pus.G.runtime", {"cores": []}, "pus.G.runtime.cores"),
    ("pus.G.runtime", {"cores": [-1]}, "pus.G.runtime.cores"),
    ("pus.G.runtime", {"cores": [1, 1]}, "pus.G.runtime.cores"),
    ("pus.G.runtime", {"core": [1]}, "pus.G.runtime.core"),
])
def test_bad_platform_fields(path, value, field):
    with pytest.raises(InputError) as info:
        platform_from_dict(mutate(path, value), "bad.json")
    assert info.value.source == "bad.json" and info.value.field == field


def test_runtime_is_optional_per_pu_and_per_field():
    host = load_platform(PLATFORMS / "host.json")
    assert set(host.pus) == {"C0", "C1"} and host.pus["C1"].runtime.cores == (1,)
    assert host.pus["C0"].runtime.provider == "CPUExecutionProvider" and host.pus["C0"].runtime.threads == 1
    bst = load_platform(PLATFORMS / "bst.json")
    assert bst.pus["D"].runtime.provider is None and bst.pus["D"].runtime.cores is None
    partial = platform_from_dict(mutate("pus.G.runtime", {"threads": 2}), "partial.json")
    assert partial.pus["G"].runtime.threads == 2 and partial.pus["G"].runtime.provider is None


def test_bad_platform_file_is_named(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text("{not json")
    with pytest.raises(InputError, match="broken.json"):
        load_platform(path)


@pytest.mark.parametrize("name", ["a311d", "bst"])
def test_profiles_round_trip_through_the_profile_format(name, inception):
    platform = load_platform(PLATFORMS / f"{name}.json")
    for g in inception:
        profile = roofline_profile(g, platform)
        doc = profile.to_dict()
        assert profile_from_dict(doc, "roundtrip").to_dict() == doc
        assert profile.units == tuple(g.nodes)
        assert profile.power_model == "per_pu" and profile.host_pu == platform.host_pu
        assert all(t is not None and t > 0 for t in profile.time_ms[platform.host_pu]["max"])


def test_npu_unsupported_operators_get_none(a311d, inception):
    g, blocks = inception
    unsupported = {"LRN", "Softmax", "Gemm"}  # the ops of inception_v1 the NPU lacks
    profile = roofline_profile(g, a311d)
    npu = profile.time_ms["N"]["max"]
    for i, unit in enumerate(profile.units):
        assert (npu[i] is None) == (g.nodes[unit]["op"] in unsupported), unit
        assert (profile.power_mw["N"]["max"][i] is None) == (npu[i] is None)
    block_profile = roofline_profile(blocks, a311d)
    partly_unsupported = {b for b, d in blocks.nodes(data=True)
                          if any(g.nodes[m]["op"] in unsupported for m in d["members"])}
    assert partly_unsupported == {"b0", "b2", "b12"}  # conv1 and conv2 (LRN), classifier
    for i, b in enumerate(block_profile.units):
        assert (block_profile.time_ms["N"]["max"][i] is None) == (b in partly_unsupported)


def test_roofline_arithmetic():
    """A compute-bound and a memory-bound operator on a one-PU platform, by hand."""
    doc = {"schema": "pipeplan.platform/1", "name": "toy", "host_pu": "C",
           "pus": {"C": {"kind": "cpu", "peak_gflops": 10, "mem_bandwidth_gbs": 2,
                         "efficiency": 0.5, "active_power_mw": 1000, "launch_overhead_ms": 0.1}}}
    g = nx.DiGraph(name="toy")
    g.add_node("mm", op="MatMul", flops=1e9, param_bytes=0.0, out_bytes=1e6, in_bytes=1e6)
    g.add_node("add", op="Add", flops=1e6, param_bytes=0.0, out_bytes=4e6)
    g.add_edge("mm", "add", bytes=1e6)  # "add" has no in_bytes: its in-edges count
    profile = roofline_profile(g, platform_from_dict(doc))
    compute_mm = 1e9 / (10e9 * 0.5) * 1e3  # 200 ms, above 2e6 bytes / 2 GB/s = 1 ms
    memory_add = (4e6 + 1e6) / 2e9 * 1e3  # 2.5 ms, above 1e6 / 5e9 s = 0.2 ms
    assert profile.time_ms["C"]["max"] == pytest.approx((compute_mm + 0.1, memory_add + 0.1))


def test_a_fused_unit_is_one_operator_a_block_the_sum_of_its_operators(a311d, inception):
    """The same operators cost differently as a fused unit (one kernel: intermediates stay in
    registers, one launch) and inside a block (executed operator by operator)."""
    from pipeplan.formulations.mapping.fuse import fuse

    g, blocks = inception
    fused = fuse(g)
    big = a311d.pus["B"]
    unit = fused.nodes["n0"]                                   # conv1: Conv + Relu
    assert unit["fused"] and unit["members"] == ["n0", "n1"]
    by_hand = big.op_time_ms(unit["flops"], unit["param_bytes"] + unit["in_bytes"] + unit["out_bytes"])
    members = [big.op_time_ms(g.nodes[m]["flops"], g.nodes[m]["param_bytes"] + g.nodes[m]["in_bytes"]
                              + g.nodes[m]["out_bytes"]) for m in unit["members"]]
    fused_profile = roofline_profile(fused, a311d)
    assert fused_profile.time_ms["B"]["max"][0] == pytest.approx(by_hand)
    assert by_hand < sum(members) - big.launch_overhead_ms + 1e-12   # one launch, no intermediate
    block_profile = roofline_profile(blocks, a311d)
    b0 = blocks.nodes["b0"]["members"]
    raw = roofline_profile(g, a311d).time_ms["B"]["max"]
    index = {n: i for i, n in enumerate(g.nodes)}
    assert block_profile.time_ms["B"]["max"][0] == pytest.approx(sum(raw[index[m]] for m in b0))
    assert "a fused unit counts as one operator" in fused_profile.notes


def test_transfers_come_from_links(a311d, inception):
    profile = roofline_profile(inception[1], a311d)
    one_and_a_half_mb = 1.5e6
    assert profile.transfers.time_ms("b3", "B", "N", one_and_a_half_mb) == pytest.approx(0.4 + 1.0)
    assert profile.transfers.time_ms("b3", "B", "L", 5e6) == pytest.approx(0.02 + 1.0)
    assert profile.transfers.time_ms("b3", "G", "G", 5e6) == 0.0


def test_calibrate_hits_measured_totals(a311d, inception):
    profile = roofline_profile(inception[1], a311d)
    targets = {"B": 133.4, "N": 20.0}
    calibrated = calibrate(profile, targets)
    for pu, target in targets.items():
        times = calibrated.time_ms[pu]["max"]
        assert sum(t for t in times if t is not None) == pytest.approx(target, rel=1e-12)
        assert [t is None for t in times] == [t is None for t in profile.time_ms[pu]["max"]]
    assert calibrated.time_ms["L"] == profile.time_ms["L"]
    assert calibrated.power_mw == profile.power_mw
    ratio = calibrated.time_ms["B"]["max"][0] / profile.time_ms["B"]["max"][0]
    assert all(c == pytest.approx(p * ratio)
               for c, p in zip(calibrated.time_ms["B"]["max"], profile.time_ms["B"]["max"]))
    assert "calibrated" in calibrated.notes
    profile_from_dict(calibrated.to_dict())


@pytest.mark.parametrize("targets, field", [({"X": 1.0}, "measured_total_ms.X"),
                                            ({"B": 0.0}, "measured_total_ms.B"),
                                            ({"B": float("nan")}, "measured_total_ms.B")])
def test_calibrate_rejects_bad_targets(a311d, inception, targets, field):
    with pytest.raises(InputError) as info:
        calibrate(roofline_profile(inception[1], a311d), targets)
    assert info.value.field == field

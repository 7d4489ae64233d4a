"""Per-block calibration (pipeplan.profiles.block_calibration): the measured blocks <-> ONNX
operators correspondence, the calibrated a311d/inception_v1 at every granularity, residuals."""
import math

import pytest

from pipeplan.core.errors import InputError
from pipeplan.formulations.mapping.onnx_graph import light_model_path, load_onnx
from pipeplan.instances.catalog import load_mapping
from pipeplan.instances.paths import PLATFORMS_DIR
from pipeplan.profiles.block_calibration import (
    DIAGNOSTICS,
    MATCHES,
    block_partition,
    calibrate_blocks,
    check_partition,
    fit_model,
    main,
    measured_block_times,
    unit_blocks,
)
from pipeplan.profiles.roofline import load_platform, roofline_profile

ALL = {**MATCHES, **DIAGNOSTICS}
GRAPHS = {m: load_onnx(light_model_path(m)) for m in ALL}
GRANULARITIES = ("", "@raw", "@modules")
MEASURED_PUS = ("L", "B", "G")


@pytest.mark.parametrize("model", ALL)
def test_correspondence_is_a_partition_in_consecutive_cuts(model):
    g, match = GRAPHS[model], ALL[model]
    blocks = block_partition(g, match)
    assert len(blocks) == len(match.spans) == len(measured_block_times(match.measured)["B"])
    covered = [n for b in blocks for n in b]
    assert sorted(covered) == sorted(g.nodes) and len(covered) == len(set(covered))
    block_of = {n: k for k, b in enumerate(blocks) for n in b}
    assert all(block_of[u] <= block_of[v] for u, v in g.edges)            # no edge goes back
    # consecutive cuts: some topological order visits the blocks one after the other
    order = sorted(g.nodes, key=lambda n: (block_of[n], blocks[block_of[n]].index(n)))
    position = {n: i for i, n in enumerate(order)}
    assert all(position[u] < position[v] for u, v in g.edges)
    # the graph's inputs feed block 0, its output leaves the last block
    assert all(block_of[n] == 0 for n in g.nodes if g.in_degree(n) == 0 and g.nodes[n]["op"] == "Conv")
    assert all(block_of[n] == len(blocks) - 1 for n in g.nodes if g.out_degree(n) == 0)


def test_googlenet_blocks_are_stem_conv2_nine_modules():
    g = GRAPHS["inception_v1"]
    blocks = block_partition(g, MATCHES["inception_v1"])
    ops = [[g.nodes[n]["op"] for n in b] for b in blocks]
    assert ops[0][0] == "Conv" and ops[0].count("Conv") == 1 and "LRN" in ops[0]     # conv1 + pool1 + norm1
    assert ops[1].count("Conv") == 2 and ops[1][-1] == "MaxPool"                     # conv2 + pool2
    assert all(o.count("Concat") == 1 and o.count("Conv") == 6 for o in ops[2:])      # 3a .. 5b
    assert [o[-1] for o in ops[2:10]].count("MaxPool") == 2                           # pool3, pool4
    assert "Gemm" in ops[10] and "Softmax" in ops[10]                                 # 5b + classifier


def test_a_graph_that_does_not_line_up_is_refused():
    with pytest.raises(InputError, match="does not line up|modules blocks"):
        block_partition(GRAPHS["resnet50"], MATCHES["inception_v1"])
    g = GRAPHS["inception_v1"]
    blocks = [list(b) for b in block_partition(g, MATCHES["inception_v1"])]
    blocks[0], blocks[1] = blocks[1], blocks[0]
    with pytest.raises(InputError, match="goes back"):
        check_partition(g, blocks)
    with pytest.raises(InputError, match="not a partition"):
        check_partition(g, blocks[1:])


@pytest.fixture(scope="module")
def instances():
    return {s: load_mapping(f"a311d/inception_v1{s}") for s in GRANULARITIES}


@pytest.mark.parametrize("granularity", GRANULARITIES)
def test_each_measured_block_sums_to_its_measurement(instances, granularity):
    p = instances[granularity]
    block_of = {n: k for k, b in enumerate(block_partition(GRAPHS["inception_v1"], MATCHES["inception_v1"]))
                for n in b}
    measured = measured_block_times("khadas-vim3/Google-parapipe")
    assert set(measured) == set(MEASURED_PUS)
    for pu in MEASURED_PUS:
        sums = [0.0] * len(measured[pu])
        for u, t in zip(p.units, p.profile.time_ms[pu]["max"]):
            blocks = {block_of[n] for n in u.nodes}
            assert len(blocks) == 1, u.name                      # a unit lies inside one block
            sums[blocks.pop()] += t
        for k, (got, want) in enumerate(zip(sums, measured[pu])):
            assert got == pytest.approx(want, rel=1e-9), (pu, k)


@pytest.mark.parametrize("granularity", GRANULARITIES)
def test_the_npu_keeps_the_roofline(instances, granularity):
    from pipeplan.formulations.mapping.coarsen import coarsen
    from pipeplan.formulations.mapping.fuse import fuse

    g = GRAPHS["inception_v1"]
    units = {"": fuse, "@raw": lambda x: x, "@modules": lambda x: coarsen(x, "modules")}[granularity](g)
    roof = roofline_profile(units, load_platform(PLATFORMS_DIR / "a311d.json"))
    p = instances[granularity].profile
    assert p.time_ms["N"] == roof.time_ms["N"] and p.power_mw == roof.power_mw
    assert "calibrated per measured block" in p.notes and "N: roofline" in p.notes


def test_a_unit_straddling_two_blocks_is_refused():
    g = GRAPHS["inception_v1"]
    blocks = block_partition(g, MATCHES["inception_v1"])
    block_of = check_partition(g, blocks)
    with pytest.raises(InputError, match="straddles measured blocks"):
        unit_blocks({"u": (blocks[0][-1], blocks[1][0])}, block_of)
    with pytest.raises(InputError, match="outside the graph"):
        unit_blocks({"u": ("no-such-node",)}, block_of)


def test_calibrate_blocks_scales_each_block_to_its_measurement():
    p = load_mapping("a311d/squeezenet@modules")        # any profile: two made-up blocks
    half = len(p.units) // 2
    unit_block = {u: int(i >= half) for i, u in enumerate(p.profile.units)}
    cal, fit = calibrate_blocks(p.profile, unit_block, {"B": (10.0, 30.0)})
    times = cal.time_ms["B"]["max"]
    assert sum(times[:half]) == pytest.approx(10.0, rel=1e-12) and sum(times[half:]) == pytest.approx(30.0, rel=1e-12)
    assert cal.time_ms["L"] == p.profile.time_ms["L"]
    assert fit.whole("B") == pytest.approx(40.0 / sum(p.profile.time_ms["B"]["max"]), rel=1e-12)
    with pytest.raises(InputError, match="positive block times"):
        calibrate_blocks(p.profile, unit_block, {"B": (10.0, -1.0)})


@pytest.mark.parametrize("model", ALL)
def test_residuals_are_sane(model):
    fit = fit_model(model)
    assert set(fit.pus) == set(MEASURED_PUS)
    for pu in fit.pus:
        f, big = fit.factors(pu), fit.whole(pu)
        assert all(math.isfinite(x) and x > 0 for x in f) and math.isfinite(big) and big > 0
        assert min(f) <= big <= max(f)                    # the whole factor is a weighted mean of the blocks'
        for k, (m, r) in enumerate(zip(fit.measured[pu], fit.roofline[pu])):
            assert fit.deviation(pu)[k] == pytest.approx(f[k] / big - 1)
            assert fit.single_factor_error(pu)[k] == pytest.approx(big * r / m - 1)
        res = fit.residuals(pu)
        assert 0 <= res["median_dev"] <= res["max_dev"] and 0 <= res["median_err"] <= res["max_err"]
    # the roofline does misplace time between GoogLeNet's blocks: the single factor was off by
    # more than 10% on some block of every PU
    if model == "inception_v1":
        assert all(fit.residuals(pu)["max_err"] > 0.1 for pu in fit.pus)


def test_report_is_written(tmp_path, capsys):
    out = tmp_path / "costmodel" / "block_calibration.md"
    assert main(["--write", str(out)]) == 0
    text = out.read_text()
    for needle in ("## inception_v1 <-> khadas-vim3/Google-parapipe", "## bvlc_alexnet <-> khadas-vim3/Alex",
                   "diagnostic only", "khadas-vim3/SqueezeV1", "22005a9d8742a71fb9e03e6e1484359984084a12",
                   "| fused | G |", "Cross-check"):
        assert needle in text, needle

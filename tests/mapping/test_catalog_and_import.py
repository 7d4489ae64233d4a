"""The instance catalogue, the Khadas importer's derived files, and the quick bench."""
import filecmp
from pathlib import Path

import pytest

from pipeplan.formulations.mapping.onnx_graph import LIGHT_MODELS
from pipeplan.instances.catalog import load_mapping, measured_names, operator_granularity_names, operator_names
from pipeplan.profiles.khadas_import import import_khadas

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data" / "khadas-vim3"
GRAPHS = ["Alex", "Google", "MobileV1", "ResV1_50", "SqueezeV1", "YOLOv3", "InceptionV3", "InceptionV4",
          "InceptionResnetV2"]


def test_every_measured_graph_is_an_instance():
    names = measured_names()
    for g in GRAPHS:
        assert f"khadas-vim3/{g}" in names
    assert "khadas-vim3/Google-parapipe" in names


def test_measured_instances_carry_dvfs_levels_and_citations():
    google = load_mapping("khadas-vim3/Google").profile
    assert google.pus["L"].levels == tuple(str(i) for i in range(6))
    assert google.pus["B"].levels == tuple(str(i) for i in range(8))
    assert google.pus["G"].levels[0] == "0.0" and google.pus["G"].levels[-1] == "4.7"
    assert "CO-UP-Profiling" in google.source and "22005a9d" in google.source
    mobile = load_mapping("khadas-vim3/MobileV1").profile
    assert "N" in mobile.pus and len(mobile.pus["N"].levels) == 8
    # measured transfers per block output and PU pair
    assert mobile.transfers.time_ms("b3", "G", "B", None) > 0


def test_operator_level_instances_cover_both_platforms():
    names = operator_names()
    granular = operator_granularity_names()
    for platform in ("a311d", "bst"):
        for model in LIGHT_MODELS:
            assert f"{platform}/{model}" in names
            assert {f"{platform}/{model}", f"{platform}/{model}@raw", f"{platform}/{model}@modules"} <= set(granular)


@pytest.mark.parametrize("granularity", ["", "@raw", "@modules"])
def test_googlenet_operator_level_is_calibrated_to_the_board(granularity):
    op = load_mapping(f"a311d/inception_v1{granularity}").profile
    blocks = load_mapping("khadas-vim3/Google-parapipe").profile
    for pu in ("L", "B", "G"):
        op_total = sum(t for t in op.time_ms[pu]["max"] if t is not None)
        assert op_total == pytest.approx(sum(blocks.time_ms[pu]["max"]), rel=1e-9)


@pytest.mark.skipif(not SHARED.exists(), reason="../shared/data/khadas-vim3 not beside the checkout")
def test_importer_reproduces_the_committed_files(tmp_path):
    written = import_khadas(SHARED, tmp_path)
    assert len(written) == 2 * 10 + 2      # profiles and instances, evaluations.csv, switching_runs.csv
    for path in written:
        rel = path.relative_to(tmp_path)
        assert filecmp.cmp(path, ROOT / rel, shallow=False), f"{rel} differs from the committed copy"

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


DERIVED = ("instances/khadas-vim3", "profiles/data/khadas-vim3")   # the folders import-khadas writes in


def _old_repo(repo: Path) -> dict[str, bytes]:
    """A --repo holding an older version of every derived file and a file the import does not
    write; its files' bytes by path."""
    for folder in DERIVED:
        for committed in (ROOT / folder).glob("*"):
            (repo / folder).mkdir(parents=True, exist_ok=True)
            (repo / folder / committed.name).write_bytes(b"old " + committed.name.encode())
    (repo / DERIVED[0] / "notes.txt").write_text("mine, not the importer's\n")
    return _files(repo)


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.skipif(not SHARED.exists(), reason="../shared/data/khadas-vim3 not beside the checkout")
@pytest.mark.parametrize("fresh", [True, False], ids=["new-repo", "over-old-files"])
def test_importer_reproduces_the_committed_files(tmp_path, fresh):
    repo = tmp_path / "repo"
    before = {} if fresh else _old_repo(repo)
    written = import_khadas(SHARED, repo)
    assert len(written) == 2 * 10 + 2      # profiles and instances, evaluations.csv, switching_runs.csv
    for path in written:
        rel = path.relative_to(repo)
        assert filecmp.cmp(path, ROOT / rel, shallow=False), f"{rel} differs from the committed copy"
    after = _files(repo)
    assert set(after) == set(before) | {str(p.relative_to(repo)) for p in written}   # nothing else removed
    assert after.get("instances/khadas-vim3/notes.txt") == before.get("instances/khadas-vim3/notes.txt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["repo"]       # no stage or backup folder left


def _fail_third_move_into(repo: Path, monkeypatch) -> None:
    """os.replace fails (disk full) on the third file moved into ``repo`` itself: two derived
    files are already in place when it does."""
    import errno
    import os
    replace, moved = os.replace, []

    def flaky(src, dst, **kw):
        if Path(dst).resolve().is_relative_to(repo.resolve()) and ".pp-" not in str(dst):
            moved.append(dst)
            if len(moved) == 3:
                raise OSError(errno.ENOSPC, "No space left on device")
        return replace(src, dst, **kw)
    monkeypatch.setattr(os, "replace", flaky)


def _fail_after_the_run_tables(repo: Path, monkeypatch) -> None:
    """A fault found late: the fit, which runs after evaluations.csv and switching_runs.csv are
    written, refuses a measurement."""
    from pipeplan.core.errors import InputError
    from pipeplan.profiles import khadas_import

    def refuse(docs, runs):
        raise InputError("evaluations/serial_YOLOv3.csv", "line 2: total_time", "found late")
    monkeypatch.setattr(khadas_import, "fitted_documents", refuse)


@pytest.mark.skipif(not SHARED.exists(), reason="../shared/data/khadas-vim3 not beside the checkout")
@pytest.mark.parametrize("fault", [_fail_third_move_into, _fail_after_the_run_tables])
def test_a_failed_import_leaves_the_repo_byte_for_byte(tmp_path, monkeypatch, capsys, fault):
    """The files had been copied into --repo one at a time: a failure after the first left a mix
    of new and old files. Now one error line, exit 2, and --repo exactly as it was."""
    from pipeplan.app.cli.main import main
    repo = tmp_path / "repo"
    before = _old_repo(repo)
    fault(repo, monkeypatch)
    with pytest.raises(SystemExit) as stop:
        main(["import-khadas", "--src", str(SHARED), "--repo", str(repo)])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and err[0].startswith("error: "), err
    assert _files(repo) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["repo"]       # no stage or backup folder left


def _damage(folder: Path, file: str, line: int, column: str, value: str) -> None:
    """Set one cell of a measurement CSV (line 1 is the header)."""
    import csv
    path = folder / file
    rows = list(csv.reader(path.read_text().splitlines()))
    rows[line - 1][rows[0].index(column)] = value
    with path.open("w", newline="") as f:
        csv.writer(f).writerows(rows)


def _cell(folder: Path, file: str, line: int, column: str) -> str:
    import csv
    rows = list(csv.reader((folder / file).read_text().splitlines()))
    return rows[line - 1][rows[0].index(column)]


SWITCHING = "evaluations/serial_YOLOv3_switching.csv"
# the first block's level of its first run, (7,), written another way (a whole number or not)
FIRST_LEVEL_AS = {value: _cell(SHARED, SWITCHING, 2, "freq").replace("((7,),", f"(({value},),", 1)
                  for value in ("7.0", "7.5")} if SHARED.exists() else {}

# the measurement folder may come from anyone: each damage is one line naming the file and field
DAMAGES = [
    ("layers_dvfs.csv", 2, "Layer", "nan", "line 2: Layer"),
    ("layers_dvfs.csv", 3, "Time", "1e999", "line 3: Time"),
    ("layers_dvfs.csv", 2, "Freq", "fast", "line 2: Freq"),
    ("inception_blocks.csv", 2, "Power", "watts", "line 2: Power"),
    ("transfers.csv", 2, "Layer", "-", "line 2: Layer"),
    ("transfer_freq.csv", 2, "RecFreq", "((((", "line 2: RecFreq"),
    ("transfer_freq.csv", 3, "transfer_power", "", "line 3: transfer_power"),
    ("evaluations/serial_Alex.csv", 2, "freq", "[1, 2", "line 2: freq"),
    ("evaluations/serial_Alex.csv", 2, "total_time", "inf", "line 2: total_time"),
    # a level is a whole number: 1e0 on line 3 (block 0 of B) is level 1, whose block 0 line 12
    # measures again (int("1e0") had been a traceback)
    ("layers_dvfs.csv", 3, "Freq", "1e0", "line 12: Freq"),
    ("layers_dvfs.csv", 3, "Freq", "0.5", "line 3: Freq"),
    ("layers_dvfs.csv", 182, "Freq_Host", "max", "line 182: Freq_Host"),     # GPU level 1 with host max
    ("layers_dvfs.csv", 8011, "Freq_Host", "2.5", "line 8011: Freq_Host"),  # an NPU row's host level
    ("transfer_freq.csv", 3, "RecFreq", "(0, 1.5)", "line 3: RecFreq"),     # int() had cut it to 1
    (SWITCHING, 2, "freq", FIRST_LEVEL_AS.get("7.5"), "line 2: freq"),    # a level "7.5" no profile has
]


@pytest.mark.skipif(not SHARED.exists(), reason="../shared/data/khadas-vim3 not beside the checkout")
@pytest.mark.parametrize("file,line,column,value,field", DAMAGES, ids=[f"{d[0]}:{d[2]}" for d in DAMAGES])
def test_a_damaged_measurement_is_one_line_and_writes_nothing(tmp_path, file, line, column, value, field):
    import shutil

    from tests.cli_helpers import assert_input_error, run_cli
    src = tmp_path / "src"
    shutil.copytree(SHARED, src)
    _damage(src, file, line, column, value)
    proc = run_cli("import-khadas", "--src", src, "--repo", tmp_path / "repo")
    assert_input_error(proc, Path(file).name, field)
    assert not (tmp_path / "repo").exists()


@pytest.mark.skipif(not SHARED.exists(), reason="../shared/data/khadas-vim3 not beside the checkout")
def test_a_level_written_another_way_is_the_same_level(tmp_path):
    """A level cell is its whole number: 0.0, 1e0, " 3" and 2.0 are levels 0, 1, 3 and 2, not
    levels of their own (a cell 0.0 had made a level "0.0" beside "0"); the import is unchanged."""
    import shutil
    src = tmp_path / "src"
    shutil.copytree(SHARED, src)
    for file, line, column, value in [("layers_dvfs.csv", 483, "Freq", "0.0"), ("layers_dvfs.csv", 12, "Freq", "1e0"),
                                      ("layers_dvfs.csv", 182, "Freq_Host", " 3"),
                                      ("layers_dvfs.csv", 8011, "Freq_Host", "2.0"),
                                      ("transfer_freq.csv", 3, "RecFreq", "(0, 1.0)"),
                                      (SWITCHING, 2, "freq", FIRST_LEVEL_AS["7.0"])]:     # had been a level "7.0"
        _damage(src, file, line, column, value)
    written = import_khadas(src, tmp_path / "repo")
    assert len(written) == 2 * 10 + 2
    for path in written:
        rel = path.relative_to(tmp_path / "repo")
        assert filecmp.cmp(path, ROOT / rel, shallow=False), f"{rel} differs from the committed copy"


@pytest.mark.skipif(not SHARED.exists(), reason="../shared/data/khadas-vim3 not beside the checkout")
@pytest.mark.parametrize("file,needle", [("transfers.csv", "no measured transfers"),
                                         ("layers_dvfs.csv", "Graph: no rows of Alex"),
                                         (SWITCHING, "no measured layer-switching runs")])
def test_an_emptied_measurement_file_is_refused(tmp_path, file, needle):
    import shutil

    from tests.cli_helpers import assert_input_error, run_cli
    src = tmp_path / "src"
    shutil.copytree(SHARED, src)
    header = (src / file).read_text().splitlines()[0]
    (src / file).write_text(header + "\n" if file != "transfers.csv" else "")
    proc = run_cli("import-khadas", "--src", src, "--repo", tmp_path / "repo")
    assert_input_error(proc, file, needle)
    assert not (tmp_path / "repo").exists()


@pytest.mark.skipif(not SHARED.exists(), reason="../shared/data/khadas-vim3 not beside the checkout")
@pytest.mark.parametrize("file", ["transfers.csv", "evaluations"])
def test_a_measurement_linked_from_outside_the_folder_is_not_read(tmp_path, file):
    """A link in --src to a file elsewhere had been read and its cells quoted in the error."""
    import shutil

    from tests.cli_helpers import assert_input_error, run_cli
    src = tmp_path / "src"
    shutil.copytree(SHARED, src)
    outside = tmp_path / "outside"
    shutil.move(src / file, outside)
    if outside.is_file():
        outside.write_text("Graph,Layer,Src,Dest,Time\nG,1,A,B,TOPSECRET\n")
    (src / file).symlink_to(outside)
    proc = run_cli("import-khadas", "--src", src, "--repo", tmp_path / "repo")
    assert_input_error(proc, "not a file inside")
    assert "TOPSECRET" not in proc.stderr
    assert not (tmp_path / "repo").exists()

"""The bad-input corpus (tests/bad_inputs/): every file of every input format, run through the CLI
as a user would, must give exit status 2, a one-line message naming the file and the field, no
traceback, and leave nothing behind where output was asked for."""
import json
import shutil
import tomllib
from pathlib import Path

import pytest

from tests.cli_helpers import assert_input_error, run_cli

CORPUS = Path(__file__).parents[1] / "bad_inputs"
# cases.toml and any cases_<topic>.toml beside it
CASES = [c for f in sorted(CORPUS.glob("cases*.toml")) for c in tomllib.loads(f.read_text())["case"]]


def test_corpus_is_large_and_covers_every_format():
    files = {c["file"] for c in CASES}
    assert len(files) >= 40
    formats = {f.split("/")[0] for f in files}
    assert formats >= {"onnx", "profile", "instance", "plan", "manifest", "suite", "gradcode_problem",
                       "gradcode_code", "gradcode_trace", "rollout_problem", "rollout_trace", "platform", "batch",
                       "bench_records", "multi_instance", "khadas"}
    for f in files:
        assert (CORPUS / f).exists(), f


def _profile_wrapper(profile: Path, folder: Path) -> Path:
    """A valid instance whose profile is the (bad) corpus file, copied beside it (an instance
    reads profiles inside its own folder only)."""
    doc = json.loads((CORPUS / "good" / "diamond.json").read_text())
    shutil.copyfile(profile, folder / profile.name)
    doc["profile"] = profile.name
    path = folder / "diamond_with_bad_profile.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("case", CASES, ids=[c["file"] for c in CASES])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(case, tmp_path):
    file = CORPUS / case["file"]
    out = tmp_path / "out"
    instance = _profile_wrapper(file, tmp_path) if case.get("wrap_profile") else None
    args = [a.format(file=file, out=out, good=CORPUS / "good", instance=instance) for a in case["args"]]
    before = sorted(CORPUS.rglob("*"))
    proc = run_cli(*args, cwd=tmp_path, env=case.get("env"))
    assert_input_error(proc, case["names"], case["field"])
    assert proc.stdout == "", proc.stdout
    assert not out.exists() or not any(out.rglob("*")), sorted(out.rglob("*"))
    assert sorted(CORPUS.rglob("*")) == before          # nothing written beside the input either
    assert {p.name for p in tmp_path.iterdir()} <= {"diamond_with_bad_profile.json", file.name}


GOOD = CORPUS / "good"
CONTROLS = {   # the valid input each family of cases breaks, through the same command
    "instance": ["solve", GOOD / "diamond.json", "--solver", "heft", "--out", "{out}/result.json"],
    "plan": ["evaluate", GOOD / "diamond.json", "--plan", GOOD / "diamond_plan.json"],
    "profile": ["evaluate", "{instance}", "--mapping", "ABAB"],
    "onnx": ["profile", GOOD / "tiny.onnx", "--out", "{out}/profile.json", "--runs", "1", "--warmup", "0"],
    "manifest": ["run", GOOD / "manifest", "--frames", "2"],
    "gradcode_problem": ["gradcode", "place", "--scheme", "fr", "--instance", GOOD / "gradcode_problem.json",
                         "--out", "{out}/code.json"],
    "gradcode_code": ["gradcode", "verify", "--code", GOOD / "gradcode_code.json"],
    "rollout_problem": ["rollout", "simulate", GOOD / "rollout_problem.json", "--policy", "cgp",
                        "--out", "{out}/schedule.json"],
    "platform": ["export", GOOD / "host_squeezenet_plan.json", "--model", "squeezenet",
                 "--platform", GOOD / "host_platform.json", "--out", "{out}/export"],
    "multi_instance": ["multi", "solve", GOOD / "multi_instance.json", "--solver", "greedy-partition",
                       "--objective", "total", "--out", "{out}/result.json"],
    "multi_plan": ["multi", "evaluate", GOOD / "multi_instance.json", "--plan", GOOD / "multi_plan.json"],
    "khadas": ["import-khadas", "--src", GOOD / "khadas", "--repo", "{out}/repo"],
}


@pytest.mark.parametrize("family", sorted(CONTROLS))
def test_the_valid_originals_are_accepted(family, tmp_path):
    """So each bad case fails for its own fault, not for something broken in what it leans on."""
    out = tmp_path / "out"
    instance = _profile_wrapper(GOOD / "profile.json", tmp_path)
    args = [str(a).format(out=out, instance=instance) for a in CONTROLS[family]]
    proc = run_cli(*args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr

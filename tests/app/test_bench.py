"""The bench harness: records as runs finish, resume, crashes and time limits, the report."""
import json
import time

import pytest

from pipeplan.app.bench import read_records, run_suite
from pipeplan.app.report import write_report
from pipeplan.core import registry
from pipeplan.core.registry import register


def suite_file(tmp_path, body):
    path = tmp_path / "suite.toml"
    path.write_text(body)
    return str(path)


MINI = '''
[[mapping]]
instances = ["khadas-vim3/SqueezeV1", "tiny-never-matches-*", "bst/squeezenet"]
solvers = ["single", "pipeline-dp", "cpsat"]
time_limit = 5
seeds = [0, 1]
'''


def test_bench_records_resume_and_report(tmp_path):
    out = tmp_path / "out"
    counts = run_suite(suite_file(tmp_path, MINI), out, jobs=2)
    assert counts == {**counts, "runs": 2 * 3 * 2, "ran": 12, "skipped": 0}
    records = read_records(out / "runs.jsonl")
    assert len(records) == 12
    assert {r["solver"] for r in records} == {"single", "pipeline-dp", "cpsat"}
    squeeze = [r for r in records if r["instance"] == "khadas-vim3/SqueezeV1" and r["solver"] == "cpsat"]
    assert all(r["termination"] == "optimal" for r in squeeze)
    assert all("ortools" in r["versions"] for r in records)
    # a rerun skips every recorded run
    again = run_suite(suite_file(tmp_path, MINI), out)
    assert again["ran"] == 0 and again["skipped"] == 12
    assert len(read_records(out / "runs.jsonl")) == 12
    md = write_report(out)
    assert "| khadas-vim3/SqueezeV1 | 40.72 opt |" in md
    assert (out / "summary.csv").read_text().count("\n") == 13


def test_torn_last_line_is_ignored_and_rerun(tmp_path):
    out = tmp_path / "out"
    body = '[[mapping]]\ninstances = ["khadas-vim3/SqueezeV1"]\nsolvers = ["single", "heft"]\ntime_limit = 5\n'
    run_suite(suite_file(tmp_path, body), out)
    lines = (out / "runs.jsonl").read_text().splitlines()
    (out / "runs.jsonl").write_text(lines[0] + "\n" + lines[1][: len(lines[1]) // 2])  # killed mid-write
    assert len(read_records(out / "runs.jsonl")) == 1
    assert run_suite(suite_file(tmp_path, body), out)["ran"] == 1


@pytest.fixture
def scratch_registry(monkeypatch):
    """Solvers registered inside a test disappear after it."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    # the systems loaded during the test are forgotten with what they registered: otherwise a
    # system first loaded here would look loaded, with no solvers, to every later test
    monkeypatch.setattr(registry, "_loaded", set(registry._loaded))


def test_crash_and_overrun_are_recorded_and_the_suite_goes_on(tmp_path, scratch_registry):
    @register("mapping", "test-crash")
    def crash(problem):
        raise RuntimeError("boom")

    @register("mapping", "test-sleep")
    def sleep(problem):
        time.sleep(60)

    body = ('[[mapping]]\ninstances = ["khadas-vim3/SqueezeV1"]\n'
            'solvers = ["test-crash", "test-sleep", "single"]\ntime_limit = 0.5\n')
    out = tmp_path / "out"
    began = time.perf_counter()
    run_suite(suite_file(tmp_path, body), out, grace_s=1.0)
    assert time.perf_counter() - began < 30
    by = {r["solver"]: r for r in read_records(out / "runs.jsonl")}
    assert by["test-crash"]["termination"] == "error" and "boom" in by["test-crash"]["message"]
    assert by["test-sleep"]["termination"] == "time_limit" and by["test-sleep"]["message"].startswith("killed")
    assert by["single"]["termination"] == "completed"
    assert "test-crash" in write_report(out)


@pytest.mark.parametrize("body,field", [
    ("[[mapping]]\nsolvers = ['single']\n", "mapping[0].instances"),
    ("[[mapping]]\ninstances = ['khadas-vim3/*']\ntime_limit = -1\n", "mapping[0].time_limit"),
    ("[[mapping]]\ninstances = ['khadas-vim3/*']\nseeds = ['a']\n", "mapping[0].seeds"),
    ("[[mapping]]\ninstances = ['khadas-vim3/*']\ntime_limit = inf\n", "mapping[0].time_limit"),
    ("[[mapping]]\ninstances = ['khadas-vim3/*']\nseeds = [-1]\n", "mapping[0].seeds"),
    ("[[mapping]]\ninstances = ['khadas-vim3/*']\nseeds = [2147483648]\n", "mapping[0].seeds"),
    ("[[mapping]]\ninstances = ['nothing/*']\n", "mapping[0].instances"),
    ("[nonsense]\nx = 1\n", ""),
    ("[[mapping]\n", ""),
])
def test_bad_suite_files(tmp_path, body, field):
    from pipeplan.core.errors import InputError
    with pytest.raises(InputError) as err:
        run_suite(suite_file(tmp_path, body), tmp_path / "out")
    assert field in str(err.value)
    assert not (tmp_path / "out").exists()


def test_ray_engine_streams_the_same_records(tmp_path):
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'pipeplan[ray]')")
    body = '[[mapping]]\ninstances = ["khadas-vim3/SqueezeV1"]\nsolvers = ["single", "pipeline-dp"]\ntime_limit = 10\n'
    out = tmp_path / "out"
    counts = run_suite(suite_file(tmp_path, body), out, engine="ray", jobs=2)
    assert counts["ran"] == 2 and not ray.is_initialized()
    assert json.loads((out / "suite.json").read_text())["engine"] == "ray"
    run_suite(suite_file(tmp_path, body), tmp_path / "local", engine="local", jobs=1)

    def same(path):       # what a run found, without where and how long it ran
        return {r["solver"]: (r["termination"], r["quality"], r["objectives"], r["front"], r["gap"])
                for r in read_records(path)}
    remote = same(out / "runs.jsonl")
    assert remote == same(tmp_path / "local" / "runs.jsonl")
    assert {s: v[0] for s, v in remote.items()} == {"single": "completed", "pipeline-dp": "completed"}


def test_report_sections_for_gradcode_and_rollout(tmp_path):
    body = ('[[gradcode]]\ninstances = ["gradcode/homog-n12-s1"]\nsolvers = ["fr", "cr", "pgc-fr", "cpsat"]\n'
            'time_limit = 10\n'
            '[[rollout]]\ninstances = ["rollout/tiny-1"]\nsolvers = ["sync", "cgp", "fgd-soft", "cpsat"]\n'
            'time_limit = 10\n')
    out = tmp_path / "out"
    run_suite(suite_file(tmp_path, body), out, jobs=2)
    md = write_report(out)
    assert "## Gradient coding" in md and "## Rollout admission" in md
    assert (out / "gradcode_step_time.png").exists() and not list(out.glob("gradcode_loss_*.png"))
    # the offline optimum of the tiny round is proven and is the reference of the table
    assert "| rollout/tiny-1 | 18.12 opt |" in md
    assert "### Reproduction" in md


def test_cli_bench_resumes_unless_fresh(tmp_path):
    from tests.cli_helpers import run_cli
    suite = suite_file(tmp_path, '[[mapping]]\ninstances = ["khadas-vim3/SqueezeV1"]\nsolvers = ["single"]\n')
    out = tmp_path / "out"
    first = run_cli("bench", "--suite", suite, "--out", out)
    again = run_cli("bench", "--suite", suite, "--out", out)
    fresh = run_cli("bench", "--suite", suite, "--out", out, "--fresh")
    assert first.returncode == again.returncode == fresh.returncode == 0, fresh.stderr
    assert "(0 already recorded, 1 run now)" in first.stdout
    assert "(1 already recorded, 0 run now)" in again.stdout
    assert "(0 already recorded, 1 run now)" in fresh.stdout


def test_a_resumed_bench_report_says_its_start_is_not_every_run_s(tmp_path):
    """The report's start had been the last invocation's alone, with most runs older."""
    from tests.cli_helpers import run_cli
    suite = suite_file(tmp_path, '[[mapping]]\ninstances = ["khadas-vim3/SqueezeV1"]\nsolvers = ["single", "heft"]\n')
    out = tmp_path / "out"
    assert run_cli("bench", "--suite", suite, "--out", out).returncode == 0
    assert "(resumed:" not in (out / "report.md").read_text()
    lines = (out / "runs.jsonl").read_text().splitlines(keepends=True)
    (out / "runs.jsonl").write_text(lines[0])               # the second run is redone
    assert run_cli("bench", "--suite", suite, "--out", out).returncode == 0
    assert "(resumed: 1 of its runs were recorded before that)." in (out / "report.md").read_text()

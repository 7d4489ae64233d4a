"""An --out folder that a command writes fixed file names into must be new, empty or pipeplan's
own (its .pipeplan-out marker, or a bench folder's runs.jsonl): a folder of the user's own files
is refused in one line and left byte for byte as it was; reruns into the tool's own folders work."""
import pytest

from pipeplan.core.errors import InputError
from pipeplan.core.io import OUT_MARKER, check_out_folder, staged_folder, write_atomic
from tests.cli_helpers import assert_input_error, run_cli

TINY = '[[rollout]]\ninstances = ["rollout/tiny-0"]\nsolvers = ["fifo"]\ntime_limit = 5\n'
USERS = {"report.md": "# my own report\n", "suite.json": '{"mine": true}\n', "summary.csv": "a,b\n1,2\n",
         "compare.md": "# my comparison\n"}


def users_folder(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    for name, text in USERS.items():
        (out / name).write_text(text)
    return out


def unchanged(out) -> bool:
    return {p.name: p.read_text() for p in out.iterdir()} == USERS


# every command that writes fixed file names into --out, each refused before any work
COMMANDS = [("bench", "--suite", "SUITE"), ("compare", "khadas-vim3/Alex", "--solvers", "heft"),
            ("pareto", "khadas-vim3/Alex"), ("study",), ("energy-efficiency",),
            ("optima", "--instances", "khadas-vim3/Alex"), ("costmodel",), ("deploy-loop",), ("gradcode", "study"),
            ("multi", "study"), ("rollout", "compare", "rollout/tiny-0"), ("rollout", "sweep"),
            ("rollout", "reproduce"), ("rollout", "frontier"), ("rollout", "async"), ("rollout", "explain-r32"),
            ("rollout", "regimes"), ("rollout", "optimum-gaps")]


@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c[:2]) for c in COMMANDS])
def test_a_folder_of_the_users_own_is_refused_and_left_as_it_was(tmp_path, command):
    """bench had replaced the user's report.md, suite.json and summary.csv (exit 0), rollout
    compare their compare.md."""
    (tmp_path / "tiny.toml").write_text(TINY)
    out = users_folder(tmp_path)
    args = [str(tmp_path / "tiny.toml") if a == "SUITE" else a for a in command]
    proc = run_cli(*args, "--out", out)
    assert_input_error(proc, f"{out}: --out: not a folder pipeplan wrote", OUT_MARKER)
    assert unchanged(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine", "tiny.toml"]      # no stage left beside it


def test_reruns_into_the_tools_own_folders_work(tmp_path):
    """A new folder gets the marker; the next run replaces its files; an empty folder, a folder
    with a marker made by hand (a user's files beside it stay) and a bench folder of an older
    pipeplan (runs.jsonl, no marker) are pipeplan's too."""
    out = tmp_path / "cmp"
    for _ in range(2):
        proc = run_cli("rollout", "compare", "rollout/tiny-0", "--out", out)
        assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == [OUT_MARKER, "compare.csv", "compare.md"]
    out = users_folder(tmp_path)
    (out / OUT_MARKER).write_text("")
    proc = run_cli("rollout", "compare", "rollout/tiny-0", "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert (out / "compare.md").read_text() != USERS["compare.md"] and (out / "report.md").read_text() == USERS["report.md"]
    (tmp_path / "empty").mkdir()
    assert check_out_folder(tmp_path / "empty") == tmp_path / "empty"
    (tmp_path / "old-bench").mkdir()
    (tmp_path / "old-bench" / "runs.jsonl").write_text("")
    assert check_out_folder(tmp_path / "old-bench", ours=("runs.jsonl",)) == tmp_path / "old-bench"
    with pytest.raises(InputError, match="not a folder pipeplan wrote"):
        check_out_folder(tmp_path / "old-bench")


def test_bench_resumes_in_its_folder_and_refuses_a_foreign_one(tmp_path):
    """The bench's own folder (the marker it leaves, or runs.jsonl) resumes; a user's folder with
    the same file names is refused before the folder is touched (no lock, no suite.json)."""
    (tmp_path / "tiny.toml").write_text(TINY)
    out = tmp_path / "bench"
    first = run_cli("bench", "--suite", tmp_path / "tiny.toml", "--out", out)
    again = run_cli("bench", "--suite", tmp_path / "tiny.toml", "--out", out)
    assert first.returncode == again.returncode == 0, again.stderr
    assert "(1 already recorded, 0 run now)" in again.stdout and (out / OUT_MARKER).is_file()
    (out / OUT_MARKER).unlink()                     # a bench folder from before the marker: runs.jsonl
    assert run_cli("bench", "--suite", tmp_path / "tiny.toml", "--out", out).returncode == 0
    mine = users_folder(tmp_path)
    assert_input_error(run_cli("bench", "--suite", tmp_path / "tiny.toml", "--out", mine), "not a folder pipeplan wrote")
    assert unchanged(mine)


@pytest.mark.parametrize("kind", ["link", "folder"])
def test_a_link_or_folder_as_the_marker_does_not_count(tmp_path, kind):
    """Refused with what the marker is (the message had read "it holds .pipeplan-out and no
    .pipeplan-out")."""
    out = users_folder(tmp_path)
    if kind == "link":
        (out / OUT_MARKER).symlink_to(tmp_path / "elsewhere")
    else:
        (out / OUT_MARKER).mkdir()
    why = "a symbolic link" if kind == "link" else "a folder"
    with pytest.raises(InputError, match=f"{OUT_MARKER}: --out: is {why}, not pipeplan's marker file"):
        with staged_folder(out) as stage:
            write_atomic(stage / "report.md", "x")
    (out / OUT_MARKER).rmdir() if kind == "folder" else (out / OUT_MARKER).unlink()
    assert unchanged(out)


def test_deploy_loop_refuses_a_linked_table_before_any_model_runs(tmp_path):
    """deploy.md linked out of a marked --out: refused before profiling (the loop had profiled,
    solved, exported and run every model first); the linked file is untouched."""
    out = tmp_path / "dl"
    out.mkdir()
    (out / OUT_MARKER).write_text("")
    (tmp_path / "victim.md").write_text("precious")
    (out / "deploy.md").symlink_to(tmp_path / "victim.md")
    proc = run_cli("deploy-loop", "--models", "squeezenet", "--solvers", "single", "--runs", "1", "--frames", "2",
                   "--out", out)
    assert_input_error(proc, str(out / "deploy.md"), "symbolic link")
    assert sorted(p.name for p in out.iterdir()) == [OUT_MARKER, "deploy.md"]
    assert (tmp_path / "victim.md").read_text() == "precious"


@pytest.mark.parametrize("command", [("instance", "squeezenet", "--platform", "a311d", "--out", "{deep}/x.json"),
                                     ("deploy-loop", "--models", "squeezenet", "--solvers", "single", "--runs", "1",
                                      "--frames", "2", "--out", "{deep}/dl")])
def test_an_instance_path_the_loader_would_refuse_is_refused_first(tmp_path, command):
    """An instance made from a model is named by its file's path: one over 255 bytes had been
    written (exit 0) and then refused by solve; deploy-loop had profiled before failing."""
    deep = tmp_path.joinpath(*["e" * 60] * 5)
    deep.mkdir(parents=True)
    proc = run_cli(*(a.replace("{deep}", str(deep)) for a in command))
    assert_input_error(proc, "--out", "at most 255 bytes")
    assert list(deep.iterdir()) == []

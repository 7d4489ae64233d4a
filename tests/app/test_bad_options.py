"""Bad option values on every command that takes them: one line naming the option, exit 2."""
from pathlib import Path

import pytest

from tests.cli_helpers import assert_input_error, run_cli

CASES = [
    (["solve", "khadas-vim3/Alex", "--solver", "heft", "--time-limit", "-1"], "--time-limit"),
    (["solve", "khadas-vim3/Alex", "--solver", "heft", "--time-limit", "nan"], "--time-limit"),
    (["solve", "khadas-vim3/Alex", "--solver", "cpsat", "--threads", "0"], "--threads"),
    (["solve", "khadas-vim3/Alex", "--solver", "cpsat", "--threads", "99999999999"], "--threads"),
    (["solve", "khadas-vim3/Alex", "--solver", "nsga2", "--time-limit", "2", "--seed", "-5"], "--seed"),
    (["solve", "khadas-vim3/Alex", "--solver", "cpsat", "--seed", "2147483648"], "--seed"),
    (["multi", "solve", "multi/alex+mobile", "--solver", "nsga2", "--seed", "-1"], "--seed"),
    (["compare", "khadas-vim3/Alex", "--seed", "-1"], "--seed"),
    (["solve", "khadas-vim3/Alex", "--solver", "heft", "--pus", "B,G,B"], "--pus: B: listed twice"),
    (["profile", "squeezenet", "--pus", "C0,C1,C0"], "--pus"),
    (["solve", "khadas-vim3/Alex", "--solver", "cpsat", "--bound", "latency_ms=1e999"], "--bound"),
    (["solve", "khadas-vim3/Alex", "--solver", "cpsat", "--bound", "latency_ms=inf"], "--bound"),
    (["compare", "khadas-vim3/Alex", "--time-limit", "0"], "--time-limit"),
    (["pareto", "khadas-vim3/Alex", "--time-limit", "-5"], "--time-limit"),
    (["study", "--time-limit", "inf"], "--time-limit"),
    (["bench", "--suite", "quick", "--time-limit", "-1"], "--time-limit"),
    (["rollout", "optimum", "--workload", "lsat-ar", "--R", "32", "--time-limit", "-1"], "--time-limit"),
    (["rollout", "sweep", "--time-limit", "0"], "--time-limit"),
    (["rollout", "optimum-gaps", "--engines", "gpu"], "--engines"),
    (["rollout", "optimum-gaps", "--rs", "32.5"], "--rs"),
    (["rollout", "optimum-gaps", "--rs", "1"], "R"),
    (["rollout", "optimum-gaps", "--bound-time", "0"], "--bound-time"),
    (["rollout", "optimum-gaps", "--branch-time", "-1"], "--branch-time"),
    (["rollout", "optimum-gaps", "--branch-time", "nan"], "--branch-time"),
    (["rollout", "optimum-gaps", "--lns-time", "-1"], "--lns-time"),
    (["rollout", "optimum-gaps", "--bound-rs", "0"], "--bound-rs"),
    (["rollout", "optimum-gaps", "--rhos", "0.5,x"], "--rhos"),
    (["rollout", "simulate", "--workload", "lsat-ar", "--R", "32", "--jitter", "-1"], "--jitter"),
    (["rollout", "simulate", "--workload", "lsat-ar", "--R", "32", "--rounds", "10000000000"],
     "--R x --rounds x --K: 2560000000000 needs"),
    (["rollout", "reproduce", "--seeds", "1001"], "--seeds"),
    (["rollout", "regimes", "--seeds", "1000000000000"], "--seeds"),
    (["gradcode", "study", "--time-limit", "-2"], "--time-limit"),
    (["gradcode", "place", "--scheme", "solver", "--n", "6", "--s", "1", "--time-limit", "-1"], "--time-limit"),
    (["gradcode", "simulate", "--scheme", "fr", "--n", "6", "--s", "1", "--delay", "gamma"], "--delay"),
    (["gradcode", "simulate", "--scheme", "fr", "--n", "6", "--s", "1", "--mean", "-1"], "--mean"),
    (["study", "--instances", ","], "--instances: no names"),
    (["study", "--instances", "a311d/squeezenet,a311d/squeezenet"], "--instances: a311d/squeezenet: listed twice"),
    (["compare", "khadas-vim3/Alex", "--solvers", "heft,single,heft"], "--solvers: heft: listed twice"),
    (["energy-efficiency", "--instances", ",,,"], "--instances: no names"),
    (["deploy-loop", "--models", "squeezenet,squeezenet"], "--models: squeezenet: listed twice"),
    (["run", "tests/bad_inputs/good/manifest", "--frames", "3", "--seed", "-1"], "--seed: must be"),
    (["export", "tests/bad_inputs/good/host_squeezenet_plan.json", "--model", "squeezenet", "--seed", "-1"],
     "--seed: must be"),
    (["multi", "export", "multi/host-squeeze+shuffle", "--plan", "tests/bad_inputs/good/host_squeezenet_plan.json",
      "--seed", "2147483648"], "--seed: must be"),
    (["deploy-loop", "--models", "squeezenet", "--solvers", "single", "--seed", "-1"], "--seed: must be"),
    (["deploy-loop", "--models", "squeezenet", "--cpsat-time-limit", "-1"], "--cpsat-time-limit"),
    (["multi", "study", "--rays", "1000000000000"], "--rays"),
]


@pytest.mark.parametrize("args,option", CASES, ids=[" ".join(a[:2]) + " " + o for a, o in CASES])
def test_bad_option_is_one_line_exit_2(args, option, tmp_path):
    with_out = ("study", "pareto", "compare", "energy-efficiency", "deploy-loop", "export", "multi")
    proc = run_cli(*args, "--out", tmp_path / "out") if args[0] in with_out else run_cli(*args)
    assert_input_error(proc, option)
    assert not (tmp_path / "out").exists()


# a comma list naming a value twice would run it twice (or hide one result behind another)
LISTED_TWICE = [
    (["rollout", "compare", "rollout/tiny-1", "--policies", "cgp,fifo,cgp"], "--policies: cgp: listed twice"),
    (["rollout", "optimum-gaps", "--workloads", "lsat-ar,lsat-ar", "--rs", "2", "--rhos", "none"],
     "--workloads: lsat-ar: listed twice"),
    (["rollout", "optimum-gaps", "--workloads", "lsat-ar", "--rs", "2,4,2", "--rhos", "none"], "--rs: 2: listed twice"),
    (["rollout", "optimum-gaps", "--workloads", "lsat-ar", "--rs", "2", "--rhos", "0.5,0.50"],
     "--rhos: 0.5: listed twice"),
    (["rollout", "sweep", "--engines", "real,real"], "--engines: real: listed twice"),
    (["rollout", "async", "--workloads", "lsat-ar", "--staleness", "1,1"], "--staleness: 1: listed twice"),
    # beyond the counts every solver takes: named as the option, not as a solver's parameter
    (["rollout", "async", "--workloads", "lsat-ar", "--staleness", "0,1" + "0" * 26], "--staleness: expected whole"),
    (["gradcode", "place", "--scheme", "cr", "--n", "12", "--s", "2", "--tries", "1" + "0" * 23],
     "--tries: must be a whole number from 1 to 1,000,000"),
    # an option of the other backend is refused, not ignored
    (["gradcode", "train", "--scheme", "fr", "--n", "4", "--s", "1", "--steps", "3", "--time-scale", "1"],
     "--time-scale: is for --backend ray"),
    (["gradcode", "study", "--models", "mlp,mlp"], "--models: mlp: listed twice"),
    (["limits", "--systems", "rollout,rollout"], "--systems: rollout: listed twice"),
    (["limits", "--limits", "1,1.0"], "--limits: 1.0: listed twice"),
]


@pytest.mark.parametrize("args,needle", LISTED_TWICE, ids=[n for _, n in LISTED_TWICE])
def test_a_comma_list_naming_a_value_twice_is_refused(args, needle, tmp_path):
    assert_input_error(run_cli(*args, "--out", tmp_path / "out"), needle)
    assert not (tmp_path / "out").exists()


DEPLOY_LOOP = [
    (["--frames", "1000000000000"], "--frames"),
    (["--runs", "1000000000000"], "--runs"),
    (["--models", "squeezenet,{tmp}/squeezenet.onnx"], "same folder name 'squeezenet'"),
    (["--out", "{tmp}/link"], "symbolic link"),
]


@pytest.mark.parametrize("extra,needle", DEPLOY_LOOP, ids=[n for _, n in DEPLOY_LOOP])
def test_deploy_loop_refuses_before_profiling(extra, needle, tmp_path):
    """deploy-loop profiles, solves and exports before it runs an export: what `run` or a
    second model would refuse is refused first, with one line and nothing written."""
    (tmp_path / "squeezenet.onnx").write_bytes((Path(__file__).parents[1] / "bad_inputs/good/tiny.onnx").read_bytes())
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    args = ["--models", "squeezenet", "--solvers", "single", "--frames", "2", "--runs", "1", "--out", tmp_path / "out"]
    args += [a.format(tmp=tmp_path) for a in extra]
    before = sorted(tmp_path.rglob("*"))
    assert_input_error(run_cli("deploy-loop", *args), needle)
    assert sorted(tmp_path.rglob("*")) == before


def test_deploy_loop_refuses_a_model_whose_random_inputs_pass_the_cap_before_profiling(tmp_path):
    """Four float inputs of [5e8] (the corpus' big_inputs.onnx): the input frames profile and run
    would draw are refused before the first model is profiled, naming the model."""
    model = tmp_path / "big.onnx"
    model.write_bytes((Path(__file__).parents[1] / "bad_inputs/onnx/big_inputs.onnx").read_bytes())
    proc = run_cli("deploy-loop", "--models", f"squeezenet,{model}", "--solvers", "single", "--frames", "2",
                   "--runs", "1", "--out", tmp_path / "out", env={"PIPEPLAN_MAX_MEMORY_MB": "256"})
    assert_input_error(proc, f"{model}: graph.input: 4 frames held at once of random inputs (X0 [500000000] float32")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.onnx"]


def test_a_batch_of_more_rows_than_fit_in_memory_is_refused_before_scoring(tmp_path):
    """Every row's result is held until all are scored: the count is checked against the cap."""
    batch = tmp_path / "batch.csv"
    batch.write_text("mapping\n" + "ABAB\n" * 2000)
    good = Path(__file__).parents[1] / "bad_inputs" / "good" / "diamond.json"
    proc = run_cli("evaluate", good, "--batch", batch, env={"PIPEPLAN_MAX_MEMORY_MB": "1"})
    assert_input_error(proc, "batch.csv: rows: 2000 needs about")
    assert proc.stdout == ""


def test_costmodel_writes_all_its_files_or_none(tmp_path):
    """A README.md folder in --out was found after runs.csv and the plots were written."""
    out = tmp_path / "out"
    (out / "README.md").mkdir(parents=True)
    (out / ".pipeplan-out").write_text("")          # pipeplan's folder: the README.md folder is what is refused
    assert_input_error(run_cli("costmodel", "--out", out), "README.md", "is a folder")
    assert sorted(p.name for p in out.iterdir()) == [".pipeplan-out", "README.md"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]          # no staging folder left


# A limit whose kill timer (10x) passes the platform's clock had crashed the timer's thread
# (traceback; the run went on unwatched), and an empty list had named --time-limit and -1
# (found by a hostile-input audit).
LIMITS = [("1e10", "--limits: at most 1,000,000 s a run"), ("1e308", "--limits: at most 1,000,000 s a run"),
          ("1000001", "got 1000001.0"),         # had read "at most 1e+06, got 1e+06"
          ("", "--limits: no time limit given"), ("0", "--limits: must be a positive number")]


@pytest.mark.parametrize("limits,needle", LIMITS, ids=[n for n, _ in LIMITS])
def test_limits_refuses_limits_it_cannot_watch(limits, needle, tmp_path):
    assert_input_error(run_cli("limits", "--systems", "mapping", "--limits", limits, "--out", tmp_path / "l.md"),
                       needle)
    assert not (tmp_path / "l.md").exists()


@pytest.mark.parametrize("pus", ["C0,C\n1", "C0,C\x1b[2J1", "C0,a->b", "C0," + "x" * 65])
def test_profile_refuses_pu_names_that_cannot_be_printed_or_keyed(pus, tmp_path):
    """A PU name from --pus had been written into the profile with its line break or escape
    sequence, printed raw by `instance` (found by a hostile-input audit)."""
    good = Path(__file__).resolve().parents[1] / "bad_inputs" / "good"
    out = tmp_path / "profile.json"
    proc = run_cli("profile", good / "tiny.onnx", "--runs", 1, "--warmup", 0, "--pus", pus, "--out", out)
    assert_input_error(proc, "--pus: a PU name")
    assert not out.exists()


@pytest.mark.parametrize("command", [["rollout", "sweep"], ["rollout", "optimum-gaps"]])
def test_a_rho_that_scales_the_trainer_past_its_limits_names_rhos(command, tmp_path):
    """1e308 had been refused as `trainer.s_per_token: ... inf`, a field the user never gave,
    after the smaller rhos had run (found by a hostile-input audit)."""
    proc = run_cli(*command, "--rhos", "1,1e308", "--out", tmp_path / "out")
    assert_input_error(proc, "--rhos: 1e+308: scales rollout/lsat-ar-R32's trainer past its limits")
    assert not (tmp_path / "out").exists()


def test_regimes_refuses_a_frontier_its_policies_cannot_take_before_any_work(tmp_path):
    proc = run_cli("rollout", "regimes", "--frontier", 10**12, "--seeds", 1, "--out", tmp_path / "out")
    assert_input_error(proc, "--frontier: frontier: fgd-soft takes a whole number from 1 to 1,000,000,000")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("param", ["threads = 99999", "seed = -5", "time_limit = 1e-9", 'warm_start = "x"'])
def test_a_suite_giving_a_common_option_as_a_parameter_is_refused_before_any_run(param, tmp_path):
    """These had passed the suite's check and made every run an error record, the folder written
    (exit 0; found by a hostile-input audit)."""
    suite = tmp_path / "s.toml"
    suite.write_text(f'[[mapping]]\ninstances = ["khadas-vim3/Alex"]\nsolvers = ["heft"]\ntime_limit = 2\n'
                     f"params = {{{param}}}\n")
    proc = run_cli("bench", "--suite", suite, "--out", tmp_path / "out")
    assert_input_error(proc, f"mapping[0].params.{param.split(' ')[0]}: set by the suite")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("var", ["PIPEPLAN_MAX_MEMORY_MB", "PIPEPLAN_MAX_INPUT_MB"])
@pytest.mark.parametrize("value", ["1e308", "1e13"])
def test_a_cap_past_what_the_machine_can_name_is_refused(var, value, tmp_path):
    """1e308 MiB had overflowed to infinite bytes (OverflowError traceback, any command) and
    1e13 MiB passed 64 bits where the shape inference's guard hands the cap to C (found by a
    hostile-input audit)."""
    good = Path(__file__).resolve().parents[1] / "bad_inputs" / "good"
    proc = run_cli("instance", good / "tiny.onnx", "--out", tmp_path / "i.json", env={var: value})
    assert_input_error(proc, f"{var}: must be a positive number of MiB, at most 1e+09")
    assert not (tmp_path / "i.json").exists()

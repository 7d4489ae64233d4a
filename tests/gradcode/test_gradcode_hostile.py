"""Hostile gradient-coding inputs: problem and code files, instance names and options that had
read files outside the input's folder, crashed with a traceback, exhausted memory or were
silently accepted. Each must be one line naming the file (or option) and the field, exit 2."""
import json
from pathlib import Path

import pytest

from tests.cli_helpers import assert_input_error, run_cli

GOOD = Path(__file__).resolve().parents[1] / "bad_inputs" / "good"
PROBLEM = json.loads((GOOD / "gradcode_problem.json").read_text())
SECRET = "not-a-delay-secret-line"


def cli(*args, cwd=None):
    return run_cli("gradcode", *args, cwd=cwd)


def _problem(folder: Path, name: str = "p.json", **changes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps({**PROBLEM, **changes}))
    return path


def _trace_problem(folder: Path, trace_file) -> Path:
    return _problem(folder, straggler={"kind": "trace", "trace_file": trace_file})


COMMANDS = {
    "place": ("place", "--scheme", "fr"),
    "simulate": ("simulate", "--scheme", "fr", "--steps", 10),
    "train": ("train", "--scheme", "pgc-fr", "--steps", 3),
    "verify": ("verify", "--scheme", "fr"),
}


# every command reads the problem through one loader: each command with an absolute path, each
# way out (absolute, ../, a link) with one command
@pytest.mark.parametrize("command, how", [(c, "absolute") for c in sorted(COMMANDS)]
                         + [("simulate", "parent"), ("simulate", "link")])
def test_a_trace_outside_the_problem_folder_is_refused_unread(command, how, tmp_path):
    """A numeric trace outside had been used silently, a text file's line quoted in the error."""
    outside = tmp_path / "outside.csv"
    outside.write_text(f"{SECRET}\n" + "0,0,0,0,0,0\n" * 3)
    inst = tmp_path / "inst"
    inst.mkdir()
    if how == "link":
        (inst / "d.csv").symlink_to(outside)
    trace_file = {"absolute": str(outside), "parent": "../outside.csv", "link": "d.csv"}[how]
    path = _trace_problem(inst, trace_file)
    proc = cli(*COMMANDS[command], "--instance", path, cwd=tmp_path)
    assert_input_error(proc, "p.json", "straggler.trace_file", "not a file inside")
    assert SECRET not in proc.stderr and proc.stdout == ""
    outside.write_text("0,0,0,0,0,0\n" * 3)          # a valid trace is refused all the same
    assert_input_error(cli(*COMMANDS[command], "--instance", path, cwd=tmp_path), "straggler.trace_file")


def test_a_trace_inside_the_problem_folder_is_read(tmp_path):
    inst = tmp_path / "inst"
    (inst / "traces").mkdir(parents=True)
    (inst / "traces" / "d.csv").write_text("1,0,0,0,0,0\n0,0,0,0,0,2\n")
    path = _trace_problem(inst, "traces/d.csv")
    proc = cli("simulate", "--scheme", "fr", "--instance", path, "--steps", 4, "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["straggler"]["trace_file"] == str((inst / "traces" / "d.csv").resolve())


@pytest.mark.parametrize("how", ["--trace", "trace_file"])
def test_a_trace_the_memory_cap_cannot_hold_is_refused_before_it_is_parsed(how, tmp_path):
    """A delay trace was read whole into Python objects (about 170 bytes a cell) whatever the
    cap: 50 MB peaked at 2.1 GB under a 1 GiB cap (found by a hostile-input audit)."""
    inst = tmp_path / "inst"
    inst.mkdir()
    (inst / "d.csv").write_text("0.1,0.2,0.3,0.4,0.5,0.6\n" * 30_000)     # 180,000 cells: about 34 MiB
    args = (("--trace", inst / "d.csv", "--n", 6, "--s", 1) if how == "--trace"
            else ("--instance", _trace_problem(inst, "d.csv")))
    out = tmp_path / "hist.csv"
    proc = run_cli("gradcode", "simulate", "--scheme", "fr", "--steps", 10, *args, "--out", out,
                   env={"PIPEPLAN_MAX_MEMORY_MB": "16"})
    assert_input_error(proc, "d.csv: cells: 180001 needs about", "above the limit of 16 MiB")
    assert not out.exists()
    proc = run_cli("gradcode", "simulate", "--scheme", "fr", "--steps", 10, *args, "--out", out,
                   env={"PIPEPLAN_MAX_MEMORY_MB": "64"})
    assert proc.returncode == 0 and out.exists(), proc.stderr


@pytest.mark.parametrize("field,value,named", [
    ("n", True, "n"), ("s", "1", "s"), ("k", True, "k"), ("k", 6.0, "k"),
    ("speeds", [True] * 6, "speeds[0]"), ("straggle_prob", [True] * 6, "straggle_prob[0]"),
    ("straggle_prob", ["0.1"] * 6, "straggle_prob[0]"), ("capacity", [True] * 6, "capacity[0]"),
    ("partition_time_s", True, "partition_time_s"), ("pipelined", "false", "pipelined"), ("pipelined", 1, "pipelined"),
    ("carry_over", "no", "carry_over"), ("link_mb_per_s", True, "link_mb_per_s"), ("gradient_mb", "1", "gradient_mb"),
    ("decode_s_per_reply", False, "decode_s_per_reply"), ("name", {"a": 1}, "name"), ("name", "a\nb", "name"),
    ("straggler", {"kind": "exponential", "mean_s": True}, "straggler.mean_s"),
    ("straggler", {"kind": "pareto", "alpha": "2"}, "straggler.alpha"),
    ("straggler", {"kind": "markov", "stay": "0.5"}, "straggler.stay"),
    ("straggler", {"kind": "markov", "stay": True}, "straggler.stay"),
    ("straggler", {"kind": ["trace"]}, "straggler.kind"),
])
def test_every_problem_field_refuses_the_wrong_type(field, value, named):
    """A boolean is no number, text no boolean: "false" had been taken as true, true as 1.0 and
    markov's stay "0.5" had been a TypeError traceback."""
    from pipeplan.core.errors import InputError
    from pipeplan.formulations.gradcode.problem import problem_from_dict
    with pytest.raises(InputError) as err:
        problem_from_dict({**PROBLEM, field: value}, "p.json")
    assert err.value.source == "p.json" and err.value.field == named


CODE = json.loads((GOOD / "gradcode_code.json").read_text())


def test_a_code_of_more_workers_than_a_problem_may_have_is_refused(tmp_path):
    """The problem's limit (10,000 workers or partitions): a code of 20,001 workers was verified."""
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"schema": CODE["schema"], "s": 1, "support": [[1]] * 10_001}))
    assert_input_error(cli("verify", "--code", big), "big.json", "support", "10,001 rows, more than 10,000")


@pytest.mark.parametrize("args", [("place", "--scheme", "cr"), ("place", "--scheme", "cyclic-mds"),
                                  ("place", "--scheme", "approx"), ("verify", "--scheme", "pgc-cr")])
def test_a_least_squares_code_past_its_size_is_refused_before_it_is_built(args, tmp_path):
    """One least-squares decode is cubic in n: `place --scheme cr --n 10000 --time-limit 2` had run
    past 449 s (3.4 GB) on its first verified set, n = 4,000 for 50 s. (Just past the limit here:
    at n = 10,000 place refuses the code's file first, larger than pipeplan reads back.)"""
    out = tmp_path / "code.json"
    proc = cli(*args, "--n", 2_100, "--s", 2, "--time-limit", 2, "--out", out) if args[0] == "place" else \
        cli(*args, "--n", 2_100, "--s", 2)
    assert_input_error(proc, "--scheme", "at most 2,048 workers, got n = 2,100")
    assert not out.exists()


def test_place_refuses_a_code_whose_json_exceeds_the_memory_cap_before_building_it(tmp_path):
    """The code's JSON is dense n x k lists (about 83 bytes an entry): FR at n = 9,999 had died of
    a MemoryError traceback at 3.7 GB under a cap of 3,000 MiB."""
    out = tmp_path / "code.json"
    proc = run_cli("gradcode", "place", "--scheme", "fr", "--n", 999, "--s", 2, "--out", out,
                   env={"PIPEPLAN_MAX_MEMORY_MB": "64"})
    assert_input_error(proc, "--n", "the code's JSON (999 x 999 entries of support and B) needs about",
                       "above the limit of 64 MiB")
    assert not out.exists()
    proc = run_cli("gradcode", "place", "--scheme", "fr", "--n", 99, "--s", 2, "--out", out,
                   env={"PIPEPLAN_MAX_MEMORY_MB": "64"})
    assert proc.returncode == 0 and out.exists(), proc.stderr


def test_place_refuses_a_code_file_larger_than_pipeplan_reads_back(tmp_path):
    """About 8 bytes an entry once written: FR at n = 10,000 (800 MB) had spent minutes and 5.9 GB
    writing a file that no pipeplan command could read again; the same code fits a larger input cap."""
    out = tmp_path / "code.json"
    proc = run_cli("gradcode", "place", "--scheme", "fr", "--n", 999, "--s", 2, "--out", out,
                   env={"PIPEPLAN_MAX_INPUT_MB": "4"})
    assert_input_error(proc, "--n", "the code's JSON would hold about 7.61 MiB, above the 4 MiB pipeplan reads back")
    assert not out.exists()
    proc = run_cli("gradcode", "place", "--scheme", "fr", "--n", 999, "--s", 2, "--out", out,
                   env={"PIPEPLAN_MAX_INPUT_MB": "8"})
    assert proc.returncode == 0 and out.stat().st_size < 8 << 20, proc.stderr

def test_a_least_squares_code_file_past_its_size_is_refused():
    from pipeplan.core.errors import InputError
    from pipeplan.formulations.gradcode.gradient_code import MAX_LSTSQ_N, code_from_dict
    n = MAX_LSTSQ_N + 1
    rows = [[1] + [0] * (n - 1)] * n
    with pytest.raises(InputError) as err:
        code_from_dict({"schema": CODE["schema"], "s": 0, "support": rows, "decoder": "lstsq"}, "c.json")
    assert (err.value.source, err.value.field) == ("c.json", "decoder") and "2,048" in str(err.value)
    code_from_dict({"schema": CODE["schema"], "s": 0, "support": rows, "decoder": "linear"}, "c.json")


@pytest.mark.parametrize("changes,named", [
    ({"n": 7}, "n"), ({"k": 5}, "k"), ({"n": True}, "n"), ({"linear_weight": 1e200}, "linear_weight"),
    ({"linear_weight": 0}, "linear_weight"), ({"linear_weight": "1"}, "linear_weight"), ({"meta": "ab"}, "meta"),
    ({"scheme": "a\nb"}, "scheme"),
])
def test_code_fields_of_the_wrong_type_or_size_are_refused(changes, named):
    from pipeplan.core.errors import InputError
    from pipeplan.formulations.gradcode.gradient_code import code_from_dict
    with pytest.raises(InputError) as err:
        code_from_dict({**CODE, **changes}, "c.json")
    assert err.value.source == "c.json" and err.value.field == named


def _with_b_entry(value) -> dict:
    B = [list(row) for row in CODE["B"]]
    B[1][0] = value
    return {**CODE, "B": B}


def test_a_b_entry_past_float_range_squared_is_refused_and_one_within_kept():
    from pipeplan.core.errors import InputError
    from pipeplan.formulations.gradcode.gradient_code import MAX_B_ENTRY, code_from_dict
    with pytest.raises(InputError) as err:        # had verified with residual 1e300, trained to a loss of 501
        code_from_dict(_with_b_entry(-1e300), "c.json")
    assert (err.value.source, err.value.field) == ("c.json", "B[1][0]") and "-1e+300" in str(err.value)
    assert code_from_dict(_with_b_entry(MAX_B_ENTRY), "c.json").B[1, 0] == MAX_B_ENTRY


def test_training_refuses_a_code_file_that_does_not_decode(tmp_path):
    # worker 1's coded gradient misses partition 0: the straggler sets that decode group 0
    # through worker 1 get a wrong gradient; verify says so, and train had trained on it
    code = tmp_path / "c.json"
    code.write_text(json.dumps(_with_b_entry(1e-300)))
    checked = cli("verify", "--code", code)
    assert "NOT decodable" in checked.stdout, checked.stdout + checked.stderr
    proc = cli("train", "--code", code, "--steps", 3, "--out", tmp_path / "run.json")
    assert_input_error(proc, "c.json: B: not decodable: straggler set [")
    assert not (tmp_path / "run.json").exists()


def test_a_linear_weight_within_range_is_kept():
    from pipeplan.formulations.gradcode.gradient_code import MAX_LINEAR_WEIGHT, code_from_dict
    doc = {k: v for k, v in CODE.items() if k != "groups"}
    code = code_from_dict({**doc, "decoder": "linear", "linear_weight": MAX_LINEAR_WEIGHT}, "c.json")
    assert code.linear_weight == MAX_LINEAR_WEIGHT
    assert code_from_dict(code.to_dict()).same_as(code)


@pytest.mark.parametrize("name,field,needle", [
    ("gradcode/synthetic-n20000000", "n", "20000000 is above 10,000"),
    ("gradcode/synthetic-n100000000", "n", "100000000 is above 10,000"),
    ("gradcode/synthetic-n" + "1" * 5000, "n", "a 5,000-digit number is above 10,000"),
    ("gradcode/synthetic-n12-s" + "9" * 5000, "s", "a 5,000-digit number"),
    ("gradcode/synthetic-n12-s2-seed" + "7" * 5000, "seed", "a 5,000-digit number is above 2,147,483,647"),
    ("gradcode/synthetic-n12-s2-seed2147483648", "seed", "2147483648 is above 2,147,483,647"),
    ("gradcode/synthetic-n0", "n", "need at least one worker"),
    ("gradcode/synthetic-n6-s6", "s", "s = 6 must be below n = 6"),
])
def test_synthetic_names_are_checked_before_anything_is_drawn(name, field, needle):
    """n = 2e7 had drawn 2.5 GB of tiers before its refusal, 1e8 died of a MemoryError, and 5,000
    digits were a ValueError traceback from int(); the error is short whatever the name's length."""
    proc = cli("place", "--scheme", "fr", "--instance", name)
    assert_input_error(proc, f": {field}: ", needle)
    assert len(proc.stderr) < 300 and proc.stdout == ""


def test_synthetic_gradcode_refuses_more_workers_than_the_limit_first():
    from pipeplan.core.errors import InputError
    from pipeplan.instances.synthetic_gradcode import synthetic_by_name, synthetic_gradcode
    with pytest.raises(InputError, match="need 1 to 10,000 workers"):
        synthetic_gradcode(10 ** 12)          # no 10^12-element draw
    p = synthetic_by_name("gradcode/synthetic-n0012-s1-pipe-seed3")
    assert (p.n, p.s, p.pipelined, p.name) == (12, 1, True, "gradcode/synthetic-n12-s1-pipe-seed3")


@pytest.mark.parametrize("command", sorted(COMMANDS) + ["verify --code"])
@pytest.mark.parametrize("seed", [2 ** 31, 99999999999999999999])
def test_the_seed_is_checked_by_every_gradcode_command(command, seed):
    """The documented range 0..2^31-1 had been checked only on the paths through pipeplan.solve."""
    args = ("verify", "--code", GOOD / "gradcode_code.json") if command == "verify --code" else (
        *COMMANDS[command], "--n", 6, "--s", 1)
    proc = cli(*args, "--seed", seed)
    assert_input_error(proc, "--seed", "must be an integer from 0 to 2147483647")
    assert proc.stdout == ""


def test_the_largest_seed_is_taken():
    proc = cli("simulate", "--scheme", "fr", "--n", 6, "--s", 1, "--steps", 10, "--seed", 2 ** 31 - 1)
    assert proc.returncode == 0, proc.stderr


BAD = Path(__file__).resolve().parents[1] / "bad_inputs" / "gradcode_code"


@pytest.mark.parametrize("command", ["simulate", "train", "verify"])
@pytest.mark.parametrize("code,needle", [
    ("s_not_the_instances.json", ": s: code has s = 4, problem has s = 1 (the instance corpus/hetero-n6-s1)"),
    ("k_not_the_instances.json", ": k: code has k = 2, problem has k = 6"),
    ("above_capacity.json", ": support[1]: worker 1 stores 3 partitions, capacity 2"),
])
def test_a_code_must_fit_the_instance_given_with_it(command, code, needle, tmp_path):
    steps = () if command == "verify" else ("--steps", 5)
    out = () if command == "verify" else ("--out", tmp_path / "out.json")
    proc = cli(command, "--code", BAD / code, "--instance", GOOD / "gradcode_problem.json", *steps, *out)
    assert_input_error(proc, code + needle)
    assert proc.stdout == "" and not (tmp_path / "out.json").exists()
    alone = cli(command, "--code", BAD / code, *steps)        # each is a valid code on its own
    assert alone.returncode == 0, alone.stderr


def test_a_code_must_have_the_s_given_with_it():
    proc = cli("simulate", "--code", GOOD / "gradcode_code.json", "--s", 1, "--steps", 10)
    assert_input_error(proc, "gradcode_code.json: s: code has s = 2, problem has s = 1 (--n/--s)")
    proc = cli("verify", "--code", GOOD / "gradcode_code.json", "--n", 7)
    assert_input_error(proc, "gradcode_code.json: n: code has n = 6, problem has n = 7 (--n/--s)")


def test_a_code_placed_for_an_instance_runs_on_it(tmp_path):
    code = tmp_path / "fr.json"
    assert cli("place", "--scheme", "fr", "--instance", GOOD / "gradcode_problem.json", "--out", code).returncode == 0
    for command in (("simulate", "--steps", 10), ("train", "--steps", 3), ("verify",)):
        proc = cli(command[0], "--code", code, "--instance", GOOD / "gradcode_problem.json", *command[1:])
        assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("steps,env,needle", [
    (10 ** 12, None, "needs about"),                        # had died allocating 87.3 TiB
    (100_001, None, "at most 100,000 training steps per run"),   # 4e7 had run for days
    (100_000, {"PIPEPLAN_MAX_MEMORY_MB": "64"}, "100000 needs about 269 MiB of memory, above the limit of 64 MiB"),
])
def test_study_steps_are_refused_from_an_estimate_before_any_work(steps, env, needle, tmp_path):
    out = tmp_path / "study"
    proc = run_cli("gradcode", "study", "--quick", "--steps", steps, "--out", out, env=env)
    assert_input_error(proc, "--steps", needle)
    assert not out.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("solver, params", [("cr", {}), ("pgc-cr", {}), ("cyclic-mds", {}), ("approx", {}),
                                            ("hetero-aware", {})])
def test_registry_solvers_of_least_squares_codes_refuse_past_the_size_at_once(solver, params, monkeypatch):
    """What `gradcode place` refuses, `bench` and the Python API refuse too: the run ends at once
    as an error naming the limit, where it had decoded for minutes past its time limit (bench
    kills a run only at limit x 1.1 + 10 s). "At once": no least-squares solve, SVD or
    pseudo-inverse runs before the refusal (each is made to fail here, which would change the
    message), rather than a wall-time threshold."""
    import numpy as np

    import pipeplan
    from pipeplan.core.result import Termination
    from pipeplan.formulations.gradcode.problem import homogeneous_problem

    def decoded(*a, **k):
        raise AssertionError("decoded before the size was refused")

    with monkeypatch.context() as m:
        for name in ("lstsq", "svd", "pinv"):
            m.setattr(np.linalg, name, decoded)
        r = pipeplan.solve(homogeneous_problem(2_100, 2), solver, time_limit=2, **params)
    assert r.termination == Termination.ERROR and r.plan is None
    assert "at most 2,048 workers, got n = 2,100" in r.message, r.message
    fits = pipeplan.solve(homogeneous_problem(12, 2), solver, time_limit=2, **params)
    assert fits.termination != Termination.ERROR and fits.plan is not None, fits.message


def test_the_general_solver_leaves_out_the_random_codes_past_the_size():
    import pipeplan
    from pipeplan.formulations.gradcode.gradient_code import code_from_dict
    from pipeplan.instances.synthetic_gradcode import synthetic_gradcode

    problem = synthetic_gradcode(2_100, s=2)
    r = pipeplan.solve(problem, "general", time_limit=3)
    assert r.plan is not None and "random codes skipped: least squares above 2,048 workers" in r.message
    assert code_from_dict(r.plan).decoder != "lstsq"


@pytest.mark.parametrize("command, n", [("train", 1000), ("simulate", 2000)])
def test_train_and_simulate_refuse_a_code_the_memory_cap_cannot_hold(command, n, tmp_path):
    """Neither had a size check (place had): train at n = 3,000 held 1.07 GB under a 300 MiB cap,
    at n = 10,000 6.5 GB before it was killed (found by a hostile-input audit)."""
    out = tmp_path / "out.json"
    args = ["--steps", 3, "--scheme", "fr", "--out", out]
    proc = run_cli("gradcode", command, "--n", n, "--s", n - 1, *args, env={"PIPEPLAN_MAX_MEMORY_MB": "64"})
    assert_input_error(proc, "--n", f"{command} on a code of {n:,} x {n:,} entries", "above the limit of 64 MiB")
    assert not out.exists()
    proc = run_cli("gradcode", command, "--n", 12, "--s", 2, *args, env={"PIPEPLAN_MAX_MEMORY_MB": "64"})
    assert proc.returncode == 0, proc.stderr


def test_a_schedule_of_more_rows_than_a_code_may_hold_is_refused_before_its_entries():
    """A 2.1 M-row schedule had been checked entry by entry (9 s, 540 MB) and accepted."""

    from pipeplan.core.errors import InputError
    from pipeplan.formulations.gradcode.gradient_code import code_from_dict
    from pipeplan.formulations.gradcode.problem import MAX_SIZE
    from pipeplan.solvers.gradcode.schemes import build
    doc = json.loads(json.dumps(build("pgc-fr", 6, 1).to_dict()))
    doc["schedule"] = doc["schedule"] * (MAX_SIZE // len(doc["schedule"]) + 1)
    with pytest.raises(InputError, match="rows, more than") as info:
        code_from_dict(doc, "big.json")
    assert info.value.field == "schedule"

"""``pipeplan gradcode`` run as a user runs it: outputs, and one-line errors with exit 2 and no
output file on bad input."""
import json
import math
from pathlib import Path

import pytest

from tests.cli_helpers import assert_input_error, run_cli

ROOT = Path(__file__).resolve().parents[2]


def cli(*args, cwd=None):
    return run_cli("gradcode", *args, cwd=cwd)


def test_place_writes_support_b_and_schedule_and_verify_reads_it(tmp_path):
    out = tmp_path / "pgc.json"
    proc = cli("place", "--scheme", "pgc-cr", "--n", 6, "--s", 2, "--out", out)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert len(doc["support"]) == 6 and len(doc["B"][0]) == 6
    assert len(doc["schedule"]) == 3 and all(len(row) == 6 for row in doc["schedule"])
    v = cli("verify", "--code", out, "--json")
    assert v.returncode == 0, v.stderr
    got = json.loads(v.stdout)
    assert got["decodable"] is True and got["sets_checked"] == 15
    assert got["worst_residual"] < 1e-9 and got["worst_condition"] >= 1


def test_place_solver_and_verify_scheme_exit_status(tmp_path):
    out = tmp_path / "solver.json"
    proc = cli("place", "--scheme", "solver", "--instance", "gradcode/hetero-n12-s1", "--objective", "worst",
               "--out", out)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["solve"]["termination"] == "optimal" and doc["decoder"] == "groups"
    linear = cli("verify", "--scheme", "pgc-cr", "--decoder", "linear", "--n", 12, "--s", 2, "--json")
    assert linear.returncode == 1 and json.loads(linear.stdout)["decodable"] is False


def test_simulate_and_train_print_json(tmp_path):
    hist = tmp_path / "hist.csv"
    sim = cli("simulate", "--scheme", "pgc-fr", "--n", 12, "--s", 2, "--steps", 5000, "--mean", 2, "--json", "--out", hist)
    assert sim.returncode == 0, sim.stderr
    doc = json.loads(sim.stdout)
    assert doc["steps"] == 5000 and doc["p50_step_s"] >= 0.5 and doc["straggler"]["mean_s"] == 2.0
    rows = hist.read_text().splitlines()
    assert rows[0] == "step_s_from,step_s_to,steps" and sum(int(r.split(",")[2]) for r in rows[1:]) == 5000
    tr = cli("train", "--scheme", "pgc-fr", "--n", 12, "--s", 1, "--steps", 30, "--target-loss", 0.5)
    assert tr.returncode == 0, tr.stderr
    doc = json.loads(tr.stdout)
    assert doc["backend"] == "sim" and doc["steps_to_target"] is not None and doc["final_loss"] < 0.5


@pytest.mark.parametrize("args,needles", [
    (("place", "--scheme", "fr", "--n", 4, "--s", 4), ("--s", "s = 4")),
    (("place", "--scheme", "fr", "--n", 10, "--s", 2), ("FR needs (s+1) | n",)),
    (("simulate", "--scheme", "fr", "--n", 4, "--s", 1, "--trace", "no/such.csv"), ("cannot read delay trace",)),
    (("place", "--scheme", "nope", "--n", 4, "--s", 1), ("unknown scheme",)),
    (("place", "--scheme", "cr", "--n", 4, "--s", 1, "--seed", -1), ("--seed",)),
    (("simulate", "--scheme", "fr", "--n", 4, "--s", 1, "--steps", 10, "--seed", -1), ("--seed",)),
    (("place", "--scheme", "cr", "--n", 10 ** 20, "--s", 1), ("--n", "need 1 to 10000 workers")),   # was a traceback
    (("train", "--scheme", "fr", "--n", 4, "--s", 1, "--steps", 5, "--lr", "inf"), ("--lr", "finite")),  # NaN loss
    (("train", "--scheme", "fr", "--n", 4, "--s", 1, "--steps", 5, "--target-loss", "nan"), ("--target-loss",)),
    # time and rate ranges (inf/NaN statistics with exit 0 before), checked with the problem
    (("simulate", "--scheme", "fr", "--n", 4, "--s", 1, "--steps", 10, "--mean", "1e308",
      "--partition-time", "1e308"), ("--mean", "1e+06")),
    (("simulate", "--scheme", "fr", "--n", 4, "--s", 1, "--steps", 10, "--partition-time", "1e308"),
     ("--partition-time", "1e+06")),
    (("simulate", "--scheme", "fr", "--n", 4, "--s", 1, "--steps", 10, "--gradient-mb", "1e308",
      "--link-mb-per-s", "1e-300"), ("--gradient-mb",)),
    (("simulate", "--scheme", "fr", "--n", 4, "--s", 1, "--steps", 10, "--gradient-mb", "1e6",
      "--link-mb-per-s", "1e-3"), ("--link-mb-per-s", "more than 1e+06 s")),
    (("simulate", "--scheme", "fr", "--n", 4, "--s", 1, "--steps", 10, "--delay", "pareto", "--alpha", "1e-300"),
     ("--alpha", "0.5")),
    (("simulate", "--scheme", "fr", "--n", 4, "--s", 1, "--steps", 10, "--decode-s-per-reply", "1e300"),
     ("--decode-s-per-reply",)),
])
def test_bad_options(args, needles, tmp_path):
    out = tmp_path / "never.json"
    proc = cli(*args, *(["--out", out] if args[0] in ("place", "train", "simulate") else []))
    assert_input_error(proc, *needles)
    assert "Warning" not in proc.stderr
    assert not out.exists()


@pytest.mark.parametrize("scheme", ["cr", "fr"])
def test_place_takes_a_time_limit_of_1e308_seconds(scheme, tmp_path):
    """The verifier sized its chunks by int(time left / pace): infinity past about 1e306 s
    (OverflowError traceback, exit 1; found by a hostile-input audit)."""
    out = tmp_path / "code.json"
    proc = cli("place", "--scheme", scheme, "--n", 6, "--s", 1, "--time-limit", "1e308", "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())["n"] == 6


@pytest.mark.parametrize("model", ["softmax", "mlp"])
def test_a_diverging_training_run_is_an_error_naming_the_learning_rate(model, tmp_path):
    """--lr 1e308 trained to a NaN loss and printed it with exit 0; the run now stops at the
    first step whose loss is not finite, and stderr (piped) is the error line alone: the
    progress line of the first step had stayed above it."""
    out = tmp_path / "run.json"
    proc = cli("train", "--scheme", "fr", "--n", 4, "--s", 1, "--steps", 20, "--model", model, "--lr", "1e308",
               "--out", out)
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: --lr: training diverged at step") and "lower --lr" in lines[0]
    assert proc.stdout == "" and not out.exists()


def test_time_values_at_their_limits_give_finite_statistics():
    """Every time and rate field at the end of its range: finite statistics, no warning."""
    sim = cli("simulate", "--scheme", "fr", "--n", 4, "--s", 1, "--steps", 2000, "--mean", "1e6",
              "--partition-time", "1e6", "--gradient-mb", "1e9", "--link-mb-per-s", "1e3",
              "--decode-s-per-reply", "1e6", "--carry-over", "--json")
    assert sim.returncode == 0 and not sim.stderr, sim.stderr
    doc = json.loads(sim.stdout)
    assert all(math.isfinite(doc[k]) for k in ("mean_step_s", "p99_step_s", "max_step_s", "total_s"))
    pareto = cli("simulate", "--scheme", "fr", "--n", 4, "--s", 1, "--steps", 20000, "--delay", "pareto",
                 "--alpha", "0.5", "--scale", "1e6", "--json")
    assert pareto.returncode == 0 and not pareto.stderr, pareto.stderr
    assert math.isfinite(json.loads(pareto.stdout)["total_s"])


def test_bad_files(tmp_path):
    thin = tmp_path / "thin.json"
    thin.write_text(json.dumps({"support": [[1, 1, 0], [0, 1, 1], [0, 0, 1]], "s": 1}))
    assert_input_error(cli("verify", "--code", thin), "partition 0 is stored on 1 worker(s), fewer than s+1 = 2")
    neg = tmp_path / "neg.json"
    neg.write_text(json.dumps({"n": 4, "s": 1, "speeds": [1, -1, 1, 1]}))
    assert_input_error(cli("simulate", "--scheme", "fr", "--instance", neg), "speeds[1]", "positive")
    trace = tmp_path / "trace.csv"
    trace.write_text("0.1,zz\n")
    out = tmp_path / "run.json"
    assert_input_error(cli("train", "--scheme", "fr", "--n", 2, "--s", 1, "--trace", trace, "--out", out), "not a number")
    assert not out.exists()

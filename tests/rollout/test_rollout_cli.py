"""``pipeplan rollout`` as a user runs it: outputs, files, and one-line errors on bad input."""
import json
from pathlib import Path

import pytest

from pipeplan.app.cli.rollout import ASYNC_FILES, COMPARE_FILES, SWEEP_FILES
from pipeplan.core.io import OUT_MARKER
from tests.cli_helpers import assert_input_error, run_cli

ROOT = Path(__file__).resolve().parents[2]


def cli(*args, cwd=None):
    return run_cli("rollout", *args, cwd=cwd)


def test_simulate_prints_checked_metrics_and_writes_schedule_and_gantt(tmp_path):
    proc = cli("simulate", "rollout/lsat-ar-R32", "--policy", "fgd-soft", "--out", tmp_path / "s.json",
               "--gantt", tmp_path / "g.png")
    assert proc.returncode == 0, proc.stderr
    assert "checker: ok" in proc.stdout and "train end" in proc.stdout
    doc = json.loads((tmp_path / "s.json").read_text())
    assert len(doc["requests"]) == 256 and doc["violations"] == [] and len(doc["updates"]) == 16
    assert (tmp_path / "g.png").read_bytes()[:4] == b"\x89PNG"


def test_reproduce_json_prints_one_record_per_setting(tmp_path):
    proc = cli("reproduce", "--json", "--seeds", "1", "--no-sensitivity", "--out", tmp_path)
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(records) == 12
    assert {(r["workload"], r["R"]) for r in records} == {(w, R) for w in ("lsat-ar", "sci-xw", "sci-jl", "olyphys")
                                                         for R in (32, 64, 96)}
    for r in records:
        assert {"workload", "R", "end_time_reduction", "waiting_ratio_reduction", "baseline_waiting_ratio"} <= r.keys()
        assert 0 < r["end_time_reduction"] < 1 and 0 < r["waiting_ratio_reduction"] < 1
    assert {p.name for p in tmp_path.iterdir()} >= {"reproduction.md", "reproduction.csv", "gantt_sync.png",
                                                     "gantt_cgp-fgd.png"}


def test_compare_and_optimum_on_a_tiny_round(tmp_path):
    proc = cli("optimum", "rollout/tiny-1", "--time-limit", "10", "--threads", "1", "--out", tmp_path / "opt.json")
    assert proc.returncode == 0, proc.stderr
    assert "cpsat: optimal/proven_optimal train end 18.125 s" in proc.stdout and "ratio to optimum" in proc.stdout
    assert json.loads((tmp_path / "opt.json").read_text())["schema"] == "pipeplan.result/1"
    proc = cli("compare", "rollout/tiny-1", "--policies", "sync,cgp", "--out", tmp_path / "cmp")   # a folder of its own
    assert proc.returncode == 0 and "ratio to lower bound (bound, not optimum)" in proc.stdout
    assert (tmp_path / "cmp" / "compare.csv").exists()


@pytest.mark.parametrize("args, needles", [
    (("simulate", "--workload", "lsat-ar", "--R", "1"), ("R = 1 groups is fewer than U = 2",)),
    (("simulate", "--workload", "lsat-ar", "--K", "0"), ("K", "at least 1")),
    (("simulate", "--workload", "gsm8k"), ("unknown workload preset",)),
    (("simulate", "--workload", "lsat-ar", "--kv-capacity", "5000"), ("cannot hold one request",)),
    (("simulate", "--workload", "lsat-ar", "--policy", "magic"), ("unknown rollout solver",)),
    (("reproduce", "--jitter", "1", "--max-response", "0"), ("max_response_tokens",)),
    (("sweep", "--workload", "gsm8k"), ("unknown workload preset",)),
    (("sweep", "--rhos", "1,-2"), ("--rhos",)),
    (("simulate", "--workload", "lsat-ar", "--engine", "replicas=0"), ("engine.replicas", "positive")),
    (("simulate", "--workload", "lsat-ar", "--engine", "router=random"), ("engine.router", "group_affinity")),
    (("simulate", "--workload", "lsat-ar", "--engine", "turbo=1"), ("--engine", "turbo")),
    (("simulate", "--workload", "lsat-ar", "--engine", "prefix_sharing=maybe"), ("prefix_sharing", "bool")),
    (("simulate", "--workload", "lsat-ar", "--engine", "kv_capacity_tokens=600"), ("cannot hold one request",)),
    (("simulate", "--workload", "lsat-ar", "--staleness", "-1"), ("--staleness",)),
    (("simulate", "--workload", "lsat-ar", "--rounds", "0"), ("--rounds",)),
    (("simulate", "rollout/tiny-2", "--rounds", "3"), ("rounds", "3 equal rounds")),
    (("simulate", "--workload", "lsat-ar", "--tail", "fat"), ("unknown length tail",)),
    (("async", "--staleness", "0,-1"), ("--staleness",)),
    (("async", "--rounds", "0"), ("--rounds",)),
    (("compare", "--workload", "lsat-ar", "--R", "4", "--rounds", "2", "--offline"), ("--offline", "one round")),
    (("simulate", "--workload", "lsat-ar", "--R", "4", "--seed", "-1"), ("--seed", "from 0 to 2147483647")),
    (("sweep", "--R", "4", "--seed", "-1"), ("lsat-ar: seed", "from 0 to 2147483647")),
    # the docs' --seed range: a seed past it had been drawn from (numpy takes any)
    (("simulate", "--workload", "lsat-ar", "--R", "4", "--seed", "9" * 20), ("--seed", "from 0 to 2147483647")),
    (("simulate", "rollout/lsat-ar-R4-s2147483648"), ("rollout/lsat-ar-R4-s2147483648: seed", "2,147,483,647")),
    # catalogue names with numbers past int()'s 4,300 digits had crashed with a ValueError
    (("simulate", "rollout/lsat-ar-R" + "9" * 5000), ("rollout/lsat-ar-R<5000 digits>: R", "whole number")),
    (("simulate", "rollout/lsat-ar-R32-s" + "9" * 5000), ("rollout/lsat-ar-R32-s<5000 digits>: seed", "whole number")),
    (("simulate", "rollout/tiny-" + "9" * 5000), ("rollout/tiny-<5000 digits>: instance", "unknown rollout instance")),
    (("compare", "rollout/tiny-" + "9" * 5000), ("rollout/tiny-<5000 digits>: instance", "unknown rollout instance")),
    (("simulate", "rollout/tiny-²"), ("rollout/tiny-²: instance", "unknown rollout instance")),
    # F_w past the groups and a staleness past the rounds had been accepted (1e23 as well)
    (("simulate", "rollout/tiny-0", "--frontier", "1" + "0" * 23), ("--frontier", "has 2")),
    (("compare", "--workload", "lsat-ar", "--R", "4", "--frontier", "5"), ("--frontier", "has 4")),
    (("simulate", "--workload", "lsat-ar", "--R", "4", "--rounds", "2", "--staleness", "1" + "0" * 23),
     ("--staleness", "at most --rounds - 1 = 1")),
    (("compare", "rollout/tiny-0", "--staleness", "1"), ("--staleness", "at most --rounds - 1 = 0")),
    # the same in the studies, which had run them (found by a hostile-input audit)
    (("sweep", "--R", "32", "--frontier", "33"), ("--frontier", "has 32")),
    (("reproduce", "--frontier", "33"), ("--frontier", "has 32")),
    (("async", "--R", "2", "--rounds", "2", "--seeds", "1", "--workloads", "lsat-ar", "--staleness", "0,3"),
     ("--staleness", "at most --rounds - 1 = 1")),
    (("simulate", "--workload", "lsat-ar", "--R", "4", "--engine", "replicas=1000000000000"),
     ("engine.replicas", "32 requests")),
    (("sweep", "--R", "4", "--rhos", "1,inf"), ("--rhos", "finite")),
    (("optimum-gaps", "--workloads", "lsat-ar", "--rs", "2", "--rhos", "1e400"), ("--rhos", "finite")),
    (("async", "--R", "2", "--rounds", "2", "--seeds", "1", "--workloads", "lsat-ar", "--staleness", "1"),
     ("--staleness", "include 0")),
    (("async", "--R", "2", "--rounds", "2", "--seeds", "1", "--workloads", ","), ("--workloads",)),
    (("frontier", "--seeds", "1", "--workloads", ","), ("--workloads",)),
    (("optimum-gaps", "--workloads", ",", "--rs", "2", "--rhos", "none"), ("--workloads",)),
    (("regimes", "--cpsat-time-limit", "nan"), ("--cpsat-time-limit",)),
    (("regimes", "--jobs", "1000000"), ("--jobs", "memory")),
    (("reproduce", "--jitter", "nan"), ("--jitter",)),
    (("reproduce", "--jitter", "-1"), ("--jitter",)),
    (("simulate", "rollout/tiny-0", "--engine", "c0_s=1e300"), ("engine.c0_s", "at most 1e+06 s")),
    (("simulate", "rollout/tiny-0", "--R", "4"), ("--R", "--trace files only", "rollout/tiny-0")),
    (("simulate", "rollout/tiny-0", "--K", "4"), ("--K", "--workload presets only")),
    (("simulate", "rollout/tiny-0", "--max-response", "100"), ("--max-response", "--workload presets only")),
    # past int64 the offline CP-SAT failed ("Unable to cast"), exit 1
    (("optimum", "--workload", "lsat-ar", "--R", "4", "--kv-capacity", "10" * 12), ("engine.kv_capacity_tokens",
                                                                                    "at most 1,000,000,000")),
    (("simulate", "--workload", "lsat-ar", "--R", "4", "--engine", "max_num_seqs=" + "9" * 20),
     ("engine.max_num_seqs", "at most")),
    (("simulate", "--workload", "lsat-ar", "--R", "4", "--max-response", "9" * 20), ("max_response_tokens",)),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, args, needles):
    proc = cli(*args, "--out", tmp_path / "out" / "x.json" if args[0] == "simulate" else tmp_path / "out")
    assert_input_error(proc, *needles)
    assert not (tmp_path / "out").exists()


def test_huge_token_counts_in_a_problem_file_are_refused(tmp_path):
    doc = json.loads((ROOT / "tests/bad_inputs/good/rollout_problem.json").read_text())
    doc["response_tokens"][0][0] = 10 ** 23     # compare crashed: every policy's checker saw rounding
    doc["engine"]["kv_capacity_tokens"] = doc["trainer"]["token_budget"] = 10 ** 24
    f = tmp_path / "p.json"
    f.write_text(json.dumps(doc))
    assert_input_error(cli("compare", f, "--out", tmp_path / "out"), "p.json: response_tokens[0][0]", "1,000,000,000")
    assert not (tmp_path / "out").exists()


def test_compare_when_every_solver_fails_prints_the_rows_and_exits_1(tmp_path):
    """step-plan refuses a timeline past the memory cap (a round of 5e8-token responses took
    23 GB): that is its row's error; compare crashed with no schedule to compare against, then
    exited 0 with no solver's schedule. Now it prints and writes the rows and exits 1, as a failed
    `solve` does, with one line naming the first failure; one solver that succeeds is exit 0."""
    f = tmp_path / "p.json"
    doc = json.loads((ROOT / "tests/bad_inputs/good/rollout_problem.json").read_text())
    doc["response_tokens"][0][0] = 10 ** 6
    doc["engine"]["kv_capacity_tokens"] = doc["trainer"]["token_budget"] = 2 * 10 ** 6
    f.write_text(json.dumps(doc))
    proc = run_cli("rollout", "compare", f, "--policies", "step-plan", "--out", tmp_path / "out",
                   env={"PIPEPLAN_MAX_MEMORY_MB": "10"})
    assert proc.returncode == 1, proc.stderr
    assert "reference: none" in proc.stdout and "| step-plan | - |" in proc.stdout
    assert "response_tokens" in (tmp_path / "out" / "compare.csv").read_text()
    line, = proc.stderr.strip().splitlines()
    assert line.startswith("error: ") and "every solver failed (1); step-plan:" in line and "Traceback" not in line
    proc = run_cli("rollout", "compare", f, "--policies", "step-plan,fifo", env={"PIPEPLAN_MAX_MEMORY_MB": "10"})
    assert proc.returncode == 0, proc.stderr
    assert "| step-plan | - |" in proc.stdout and "| fifo |" in proc.stdout


def test_trace_with_a_negative_length_is_rejected(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("prompt_id,sample_id,response_tokens\na,0,10\na,1,-1\nb,0,3\nb,1,4\n")
    proc = cli("simulate", "--trace", f, "--out", tmp_path / "s.json")
    assert_input_error(proc, "t.csv", "line 3: response_tokens")
    assert not (tmp_path / "s.json").exists()
    f.write_text("prompt_id,sample_id,response_tokens\na,0,10\na,1,\nb,0,3\nb,1,4\n")
    assert_input_error(cli("simulate", "--trace", f), "line 3: response_tokens: missing")


def test_trace_seed_and_R_out_of_range_are_rejected(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("prompt_id,sample_id,response_tokens\na,0,10\na,1,1\nb,0,3\nb,1,4\nc,0,3\nc,1,4\n")
    for R in ("0", "-1"):               # -1 used to drop the last prompt, 0 to keep them all
        assert_input_error(cli("simulate", "--trace", f, "--R", R), "t.csv: R", "at least 1")
    assert_input_error(cli("simulate", "--trace", f, "--seed", "-1", "--jitter", "2"), "--seed", "from 0 to")
    assert cli("simulate", "--trace", f, "--R", "2").returncode == 0


def test_trace_options_of_drawn_rounds_and_clashing_prompt_lengths_are_rejected(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("prompt_id,sample_id,response_tokens,prompt_tokens\na,0,10,5\na,1,1,5\nb,0,3,7\nb,1,4,7\n")
    for option in (("--K", "4"), ("--max-response", "8"), ("--tail", "heavy")):   # used to be ignored
        assert_input_error(cli("simulate", "--trace", f, *option), option[0], "--workload presets only")
    assert cli("simulate", "--trace", f).returncode == 0
    f.write_text("prompt_id,sample_id,response_tokens,prompt_tokens\na,0,10,5\na,1,1,6\nb,0,3,7\nb,1,4,7\n")
    assert_input_error(cli("simulate", "--trace", f), "t.csv: line 3: prompt_tokens", "earlier row gave 5")


def test_simulate_checks_both_outputs_before_writing_either(tmp_path):
    (tmp_path / "file").write_text("x")
    for gantt in (tmp_path / "file" / "g.png", tmp_path, tmp_path / "s.json"):
        proc = cli("simulate", "rollout/tiny-0", "--out", tmp_path / "s.json", "--gantt", gantt)
        assert_input_error(proc, str(gantt.name))
        assert not (tmp_path / "s.json").exists()
    (tmp_path / "new").mkdir()
    proc = cli("simulate", "rollout/tiny-0", "--out", tmp_path / "new" / "s.json", "--gantt", tmp_path / "new" / "g.png")
    assert proc.returncode == 0, proc.stderr
    assert {p.name for p in (tmp_path / "new").iterdir()} == {"s.json", "g.png"}


def test_simulate_checks_its_outputs_against_its_inputs_before_writing_either(tmp_path):
    """--gantt naming the problem file was refused at write time, after --out had been written."""
    problem = tmp_path / "p.json"
    problem.write_bytes((ROOT / "tests/bad_inputs/good/rollout_problem.json").read_bytes())
    before = problem.read_bytes()
    for out, gantt in ((tmp_path / "new.json", problem), (problem, tmp_path / "g.png")):
        proc = cli("simulate", problem, "--policy", "fifo", "--out", out, "--gantt", gantt)
        assert_input_error(proc, "p.json", "overwrite an input")
        assert problem.read_bytes() == before
        assert sorted(p.name for p in tmp_path.iterdir()) == ["p.json"]
    trace = tmp_path / "t.csv"
    trace.write_text("prompt_id,sample_id,response_tokens\na,0,10\na,1,1\nb,0,3\nb,1,4\n")
    proc = cli("simulate", "--trace", trace, "--policy", "fifo", "--out", tmp_path / "new.json", "--gantt", trace)
    assert_input_error(proc, "t.csv", "overwrite an input")
    assert not (tmp_path / "new.json").exists()


def test_trace_sample_ids_sort_as_integers_then_text(tmp_path):
    """``--1``, ``²`` and a 5,000-digit id had crashed int(): they are ids like any text, and
    integers of any length sort by value."""
    from pipeplan.formulations.rollout.traces import load_trace, sample_order
    long = "9" * 5000
    ids = ["b", "--1", long, "²", "10", "-" + long, "2", "-3", "0" + long[:-1], "٣"]
    assert sorted(ids, key=sample_order) == ["-" + long, "-3", "2", "٣", "10", "0" + long[:-1], long, "--1", "b", "²"]
    f = tmp_path / "t.csv"
    f.write_text("prompt_id,sample_id,response_tokens\n" + "".join(
        f"p{g},{sid},{n}\n" for g in (1, 2) for sid, n in (("--1", 5), ("1", 6), (long, 7), ("²", 8))))
    assert load_trace(f).response_tokens == ((6, 7, 5, 8), (6, 7, 5, 8))
    proc = cli("simulate", "--trace", f, "--policy", "fifo")
    assert proc.returncode == 0 and "checker: ok" in proc.stdout, proc.stderr


def test_problem_files_and_traces_obey_the_memory_cap(tmp_path):
    """A 1.2 MB problem of 200,000 one-sample groups (or a 200,000-row trace) ran at 320 MB under
    a 100 MiB cap that --workload obeys; each is now refused, naming the file, before the round
    is built (a trace before its rows are parsed)."""
    doc = json.loads((ROOT / "tests/bad_inputs/good/rollout_problem.json").read_text())
    n = 200_000
    doc.update(prompt_tokens=[1] * n, response_tokens=[[1]] * n, arrival=[])
    doc["engine"].update(kv_capacity_tokens=10 ** 6, max_num_seqs=1000)
    problem = tmp_path / "p.json"
    problem.write_text(json.dumps(doc))
    trace = tmp_path / "t.csv"
    trace.write_text("prompt_id,sample_id,response_tokens\n" + "".join(f"p{i},0,1\n" for i in range(n)))
    env = {"PIPEPLAN_MAX_MEMORY_MB": "100"}
    for args, field in (((problem,), "p.json: response_tokens"), (("--trace", trace), "t.csv: lines")):
        for command in ("simulate", "compare", "optimum"):
            proc = run_cli("rollout", command, *args, "--out", tmp_path / "out", env=env)
            assert_input_error(proc, field, "200000" if field.endswith("tokens") else "200001", "above the limit")
    proc = run_cli("rollout", "simulate", "--workload", "lsat-ar", "--R", str(n), "--K", "1", env=env)
    assert_input_error(proc, "--R x --K", "above the limit")
    assert not (tmp_path / "out").exists()


def test_simulate_with_engine_features_rounds_and_staleness():
    proc = cli("simulate", "--workload", "lsat-ar", "--R", "8", "--rounds", "3", "--staleness", "1",
               "--engine", "replicas=2", "--engine", "router=group_affinity", "--engine", "prefix_sharing=true",
               "--json")
    assert proc.returncode == 0, proc.stderr
    m = json.loads(proc.stdout)
    assert m["violations"] == 0 and m["max_staleness"] == 1 and m["samples_per_s"] > 0


def test_async_study_writes_its_files(tmp_path):
    proc = cli("async", "--workloads", "lsat-ar", "--R", "4", "--rounds", "3", "--staleness", "0,1", "--seeds", "1",
               "--out", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert {p.name for p in tmp_path.iterdir()} == {*ASYNC_FILES, OUT_MARKER}
    rows = (tmp_path / "async.csv").read_text().splitlines()
    assert len(rows) == 1 + 2 * 2 * 4          # header + 2 KV sizes x 2 staleness bounds x 4 policies


@pytest.mark.parametrize("command,files", [(("compare", "rollout/tiny-0", "--policies", "cgp"), COMPARE_FILES),
                                           (("sweep", "--R", "4", "--rhos", "1", "--engines", "real",
                                             "--time-limit", "2"), SWEEP_FILES)])
def test_a_study_writes_the_files_it_checks_before_its_work(tmp_path, command, files):
    """The names a study checks before its work (check_out_folder's writes) are the files it
    writes, no more and no fewer: a name missing there would be checked only at the commit."""
    proc = cli(*command, "--out", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    assert {p.name for p in (tmp_path / "out").iterdir()} == {*files, OUT_MARKER}


@pytest.mark.parametrize("command", [("sweep", "--R", "4", "--rhos", "1", "--engines", "real"),
                                     ("optimum-gaps", "--workloads", "lsat-ar", "--rs", "4", "--rhos", "none"),
                                     ("compare", "rollout/tiny-0", "--policies", "cgp")])
def test_a_study_refuses_a_file_as_its_output_folder_before_any_work(tmp_path, command):
    taken = tmp_path / "taken.md"
    taken.write_text("mine")
    proc = cli(*command, "--out", taken)
    assert_input_error(proc, "taken.md", "output folder is a file")
    assert taken.read_text() == "mine"


def test_a_jsonl_trace_line_ends_at_its_newline_only(tmp_path):
    """A JSON string may hold U+2028 or U+0085 raw (json.dumps with ensure_ascii=False writes
    them so): splitlines had cut such a line in two and refused the trace as invalid JSON. An
    unread column (text, a reward) is left alone."""
    import json

    from pipeplan.formulations.rollout.traces import load_trace
    f = tmp_path / "t.jsonl"
    rows = [{"prompt_id": p, "sample_id": f"s\u2028{i}\x85", "response_tokens": 3 + i + p, "text": "a\u2029b"}
            for p in range(2) for i in range(2)]
    f.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    assert load_trace(f).response_tokens == ((3, 4), (4, 5))


def test_a_gantt_chart_past_the_memory_cap_is_refused_before_the_simulation(tmp_path):
    """32,000 requests at 2 KiB each (the simulation's and the chart's): refused under a 48 MiB
    cap before any work (the chart had drawn one bar call per request: 1.6 GB and minutes at
    160,000)."""
    args = ("simulate", "--workload", "lsat-ar", "--R", "4000", "--policy", "fifo", "--gantt", tmp_path / "g.png")
    proc = run_cli("rollout", *args, env={"PIPEPLAN_MAX_MEMORY_MB": "48"})
    assert_input_error(proc, "g.png", "--gantt", "32,000 requests")
    assert list(tmp_path.iterdir()) == []

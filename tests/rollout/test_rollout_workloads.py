"""Workloads and traces: the length model's shape, the presets' calibration against the
paper's published figures, and trace import with its errors."""
import json
import math

import numpy as np
import pytest

from pipeplan.core.errors import InputError
from pipeplan.formulations.rollout.problem import problem_from_dict
from pipeplan.formulations.rollout.simulator import simulate
from pipeplan.formulations.rollout.traces import load_trace
from pipeplan.formulations.rollout.workloads import PRESETS, Workload, preset_round, sample_lengths
from pipeplan.instances.rollout import instance_names, load_instance
from pipeplan.solvers.rollout.online import make_policy


def test_lengths_are_heavy_tailed_correlated_and_truncated():
    w = Workload("t", 2000, 0.8, 0.6, 10**9, 300, 0.3, "test")
    _, rows = sample_lengths(w, 3000, 8, seed=0)
    L = np.array(rows, dtype=float)
    ratio = np.percentile(L, 99) / np.median(L)
    assert 8 < ratio < 13                                    # p99 about 10x the median
    logs = np.log(L)
    within = np.mean([np.corrcoef(logs[:, 0], logs[:, k])[0, 1] for k in range(1, 8)])
    assert within == pytest.approx(0.64, abs=0.05)           # sigma_p^2 / (sigma_p^2 + sigma_s^2)
    _, capped = sample_lengths(Workload("t", 2000, 0.8, 0.6, 8192, 300, 0.3, "test"), 3000, 8, seed=0)
    flat = np.array(capped).ravel()
    assert flat.max() == 8192 and 0.05 < np.mean(flat == 8192) < 0.15


def test_a_small_round_is_a_prefix_of_a_large_one():
    a, b = preset_round("olyphys", 32), preset_round("olyphys", 96)
    assert a.response_tokens == b.response_tokens[:32] and a.prompt_tokens == b.prompt_tokens[:32]


def test_presets_match_the_papers_published_figures():
    """Synchronous rollout of R = 96 in 509-543 s (mean of 3 rounds, 5% slack for the draw),
    about 12.2 s per update (OlyPhys 13.3 s), Slime's waiting ratio 47-52% (+-3 points)."""
    for name in PRESETS:
        runs = [simulate(preset_round(name, 96, seed=s), make_policy("sync")).metrics() for s in range(3)]
        rollout = np.mean([m["rollout_makespan_s"] for m in runs])
        update = np.mean([m["trainer_compute_s"] for m in runs]) / 48
        waiting = np.mean([m["waiting_ratio"] for m in runs])
        assert 509 * 0.95 <= rollout <= 543 * 1.05, (name, rollout)
        assert update == pytest.approx(13.3 if name == "olyphys" else 12.2, rel=0.05), (name, update)
        assert 0.44 <= waiting <= 0.55, (name, waiting)


def test_catalogue_names_load_and_bad_names_fail():
    names = instance_names()
    assert len([n for n in names if "-R" in n]) == 12
    p = load_instance("rollout/sci-xw-R64")
    assert (p.R, p.K, p.U) == (64, 8, 2)
    with pytest.raises(InputError, match="unknown workload preset"):
        load_instance("rollout/gsm8k-R32")
    with pytest.raises(InputError, match="R = 1 groups is fewer than U = 2"):
        preset_round("lsat-ar", 1)
    with pytest.raises(InputError, match="K"):
        preset_round("lsat-ar", 32, K=0)


def test_problem_round_trips_through_json():
    p = preset_round("sci-jl", 32, seed=7)
    q = problem_from_dict(json.loads(json.dumps(p.to_dict())), "x.json")
    assert q.response_tokens == p.response_tokens and q.engine == p.engine and q.arrival == p.arrival


def test_trace_import_csv_and_jsonl(tmp_path):
    csv = tmp_path / "t.csv"
    csv.write_text("prompt_id,sample_id,response_tokens,prompt_tokens\n"
                   "b,1,40,12\nb,0,30,12\na,0,5,7\na,1,9,7\nc,0,1,3\nc,1,2,3\n")
    p = load_trace(csv)
    assert p.response_tokens == ((30, 40), (5, 9), (1, 2)) and p.prompt_tokens == (12, 7, 3)
    jl = tmp_path / "t.jsonl"
    jl.write_text("\n".join(json.dumps({"prompt_id": g, "sample_id": k, "response_tokens": n})
                            for g, k, n in [(0, 0, 3), (0, 1, 4), (1, 0, 5), (1, 1, 6)]))
    q = load_trace(jl)
    assert q.response_tokens == ((3, 4), (5, 6)) and q.R == 2 and q.K == 2
    assert simulate(q, make_policy("cgp")).metrics()["train_end_s"] > 0


@pytest.mark.parametrize("rows, needle", [
    ("a,0,\na,1,4\n", "line 2: response_tokens: missing"),
    ("a,0,-3\na,1,4\n", "line 2: response_tokens: expected a non-negative whole number"),
    ("a,0,2.5\na,1,4\n", "line 2: response_tokens: not a whole number"),
    ("a,0,x\na,1,4\n", "not a number"),
    ("a,0,3\na,1,4\nb,0,2\n", "K must be equal"),
])
def test_bad_traces_fail_with_the_line(tmp_path, rows, needle):
    f = tmp_path / "bad.csv"
    f.write_text("prompt_id,sample_id,response_tokens\n" + rows)
    with pytest.raises(InputError, match=needle.replace("(", r"\(")):
        load_trace(f)


def test_capacity_that_cannot_hold_one_request_fails():
    import dataclasses
    p = preset_round("lsat-ar", 32)
    with pytest.raises(InputError, match="cannot hold one request"):
        dataclasses.replace(p, engine=dataclasses.replace(p.engine, kv_capacity_tokens=4000))
    assert not math.isnan(p.engine.c0_s)

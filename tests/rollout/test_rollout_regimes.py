"""The FGD regime map (``pipeplan.app.studies.rollout_regimes``) on a tiny grid: its figures are
the checked results', FGD wins where retracted requests queue behind later work under SGLang's
rule, not under vLLM's, and not with every engine feature off."""
import csv

import pytest

import pipeplan
from pipeplan.app.studies.rollout_regimes import ALL_POLICIES, COLUMNS, PRIO, Regime, _key, regime_map, write_regimes
from pipeplan.core.io import OUT_MARKER

PRESSURE = Regime(64, 60_000, "paper", rounds=4, staleness=1, retract_rule="sglang")
PRESSURE_VLLM = Regime(64, 60_000, "paper", rounds=4, staleness=1, retract_rule="vllm")
PLAIN = Regime(32, 460_000, "paper")          # one round, the paper's KV, every feature off


@pytest.fixture(scope="module")
def rows():
    out = regime_map([PRESSURE, PRESSURE_VLLM, PLAIN], seeds=1, cpsat_time_limit=2.0, cpsat_threads=1)
    return {r["regime"]: r for r in out}


def test_every_train_end_is_a_checked_result(rows):
    for g in (PRESSURE, PLAIN):
        r = rows[g.label]
        p = g.problem("lsat-ar", 0)
        st = {"staleness": g.staleness} if g.staleness else {}
        for name in ("cgp", "fgd-soft", "fifo"):
            extra = {"frontier": 2} if name.startswith("fgd") else {}
            res = pipeplan.solve(p, name, **st, **extra)
            assert res.objectives["train_end_s"] == pytest.approx(r[f"train_end_{_key(name)}"], rel=1e-12)
        prio = pipeplan.solve(g.problem("lsat-ar", 0, prio=True), "fgd-soft", **st, frontier=2)
        assert prio.objectives["train_end_s"] == pytest.approx(r[f"train_end_{_key(PRIO)}"], rel=1e-12)
        ends = [r[f"train_end_{_key(n)}"] for n in ALL_POLICIES]
        assert r["best_online_s"] == pytest.approx(min(ends))
        assert r["bound_s"] <= r["best_found_s"] <= r["best_online_s"] + 1e-9
    assert rows[PLAIN.label]["reference"].startswith("cpsat")       # single round, one engine: CP-SAT ran
    assert rows[PRESSURE.label]["reference"] == "online"


def test_fgd_wins_when_retracted_requests_queue_behind_the_next_round(rows):
    r = rows[PRESSURE.label]
    assert r["fgd_soft_vs_cgp"] <= -0.05
    assert r["retractions_cgp"] > 50 and r["overtaken_later_round_cgp"] > 0.1
    assert r["retract_wait_cgp_s"] > 1.5 * r["retract_wait_fgd_s"]
    assert r["bypass_fgd"] == 0 < r["bypass_cgp"]                   # FGD never passes over its frontier
    assert r["why"].startswith("sglang re-queues")


def test_vllm_rule_closes_the_gap(rows):
    s, v = rows[PRESSURE.label], rows[PRESSURE_VLLM.label]
    assert abs(v["fgd_soft_vs_cgp"]) < 0.02
    assert v["train_end_cgp"] < s["train_end_cgp"]                  # CGP itself loses nothing under vLLM's rule
    assert v["retract_wait_cgp_s"] < 0.2 * s["retract_wait_cgp_s"]
    assert v["why"].startswith("vLLM's rule")


def test_every_feature_off_fgd_equals_cgp(rows):
    r = rows[PLAIN.label]
    # without retractions FGD-soft admits what CGP admits: the same train end, not merely a close one
    assert r["retractions_cgp"] == 0 and r["train_end_fgd_soft"] == r["train_end_cgp"]
    assert r["fgd_hard_vs_cgp"] > 0.2                                # the hard gate starves the engine
    assert r["why"].startswith("FGD-soft ends exactly")


def test_files(rows, tmp_path):
    written = write_regimes(list(rows.values()), tmp_path, "pytest")
    assert {p.name for p in written} | {OUT_MARKER} == {p.name for p in tmp_path.iterdir()}
    md = (tmp_path / "fgd_regimes.md").read_text()
    assert "FGD-soft beats CGP by >= 5% (mean over seeds) in 1 of 3 regimes" in md
    with open(tmp_path / "fgd_regimes.csv") as fh:
        table = list(csv.DictReader(fh))
    assert list(table[0]) == list(COLUMNS) and len(table) == 3
    assert (tmp_path / "fgd_regimes_heatmap.png").read_bytes()[:4] == b"\x89PNG"


def test_worker_processes_give_the_rows_of_one_process():
    """``workers`` > 1 runs the policies in a process pool (terminated when the map stops early):
    the rows are the same as in one process, the map's wall time aside."""
    small = [Regime(16, 460_000, "paper"), Regime(16, 60_000, "paper", retract_rule="vllm")]

    def strip(rows):
        return [{k: v for k, v in r.items() if k != "map_wall_s"} for r in rows]

    one = regime_map(small, seeds=2, cpsat_rules=(), workers=1)
    assert strip(regime_map(small, seeds=2, cpsat_rules=(), workers=2)) == strip(one)

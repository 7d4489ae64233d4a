"""The evaluator's rules against the measured whole-network runs on the Khadas VIM3.

Every measured run whose mapping the block profiles can express is predicted by the one
evaluator and compared with the measurement: pipelined period, latency and energy within 10%.
Runs outside the model's domain (no block profile of a PU they use) cannot be predicted and are
refused with an InputError naming the PU; the few known misses inside it are strict xfails (if
the model starts matching them, the test says so).
"""
import pytest

from pipeplan.core.errors import InputError
from pipeplan.formulations.mapping.evaluator import evaluate
from pipeplan.formulations.mapping.frequencies import plan_for
from pipeplan.instances.catalog import load_mapping
from pipeplan.instances.khadas_measured import measured_runs

RUNS = measured_runs()
TOL = 0.10

# Google/Alex were never profiled per block on the NPU.
NO_NPU_PROFILE = "no per-block NPU measurements for this network"
# The switch cost is charged to the receiving stage; in these measured pipelines the stage after
# a CPU<->CPU or GPU->CPU switch ran 4-10 ms faster than that (part of it overlaps the sender).
SWITCH_IN_PIPELINE = "switch cost charged to the receiving stage; the measured pipeline hides part of it"
# Energy of sustained whole-network runs at the top frequencies of the big cluster and of the
# Para-Pipe pipelined campaign sits 12-19% above the per-block power measurements (the
# single-stage runs of the same campaign miss by as much, so no pipelining rule can explain it).
CAMPAIGN_POWER = "whole-run board power 12-19% above the per-block power measurements"
# The same run measured twice differs by 7% (GGGGGGGGGGGGGG 'max' vs '4.7', the same top GPU level: 137.2 vs
# 147.2 ms); the model, 156.8 ms, is within 7% of the slower one.
REPEAT_SPREAD = "repeat measurement of the same run differs by 7%"
# GPU then NPU: the NPU part of the pipeline overlaps its launch with the GPU stage.
GPU_NPU_OVERLAP = "GPU->NPU pipeline overlaps the NPU launch with the GPU stage"

KNOWN = {
    ("Google", "NNNNNNNNNNN"): NO_NPU_PROFILE,
    ("Alex", "NNNNNNNN"): NO_NPU_PROFILE,
}
KNOWN_METRIC = {
    ("Google-parapipe", "GGGGBBBBBBG", "max", "energy"): CAMPAIGN_POWER,
    ("Google-parapipe", "GGGGBBBBBBB", "max", "energy"): CAMPAIGN_POWER,
    ("Google-parapipe", "BBBBBBBBBBB", "max", "energy"): CAMPAIGN_POWER,
    ("MobileV1", "BBBBBBBBBBBBBB", "max", "energy"): CAMPAIGN_POWER,
    ("MobileV1", "BBBBBBBBBBBBBB", ",".join(["6"] * 14), "energy"): CAMPAIGN_POWER,
    ("MobileV1", "BBBBBBBBBBBBBB", ",".join(["7"] * 14), "energy"): CAMPAIGN_POWER,
    ("MobileV1", "BBNNNNNNNNNNNN", "7,7,7,1,2,0,2,3,2,3,2,5,7,7", "energy"): CAMPAIGN_POWER,
    ("MobileV1", "GGGGGGGGGGGGGG", "max", "period"): REPEAT_SPREAD,
    ("MobileV1", "GGGGGGGGGGGGGG", "max", "latency"): REPEAT_SPREAD,
    ("MobileV1", "GGNNNNNNNNNNNN", "4.7,4.7,7,7,7,7,7,7,7,7,7,7,7,7", "period"): GPU_NPU_OVERLAP,
    ("MobileV1", "GGNNNNNNNNNNNN", "4.7,4.7,7,7,1,1,1,1,1,1,1,1,7,7", "period"): GPU_NPU_OVERLAP,
    ("MobileV1", "BBLLLLLNNNBNNN", "7,7,5,5,5,5,5,7,2,7,7,7,7,7", "period"): SWITCH_IN_PIPELINE,
    ("MobileV1", "GLLLLLLNNNBNNN", "4.7,5,5,5,5,5,5,7,2,7,7,7,7,7", "period"): SWITCH_IN_PIPELINE,
    ("MobileV1", "GLLLLNNNNNNNNN", "4.7,5,5,5,5,7,2,3,2,3,2,5,7,7", "period"): SWITCH_IN_PIPELINE,
}


def _params():
    out = []
    for run in RUNS:
        graph = run.instance.split("/")[-1]
        if (graph, run.mapping) in KNOWN:         # out of the domain: test_out_of_domain_runs_are_refused
            continue
        for metric in ("period", "latency", "energy"):
            miss = KNOWN_METRIC.get((graph, run.mapping, run.freq, metric))
            marks = [pytest.mark.xfail(reason=miss, strict=True)] if miss else []
            out.append(pytest.param(run, metric, id=f"{run.label}:{metric}", marks=marks))
    return out


def _predict(run):
    problem = load_mapping(run.instance)
    return evaluate(problem, plan_for(problem, run.mapping, run.mode, run.freq, source="evaluations.csv"))


@pytest.mark.parametrize("run,metric", _params())
def test_measured_run_within_10_percent(run, metric):
    ev = _predict(run)
    predicted = {"period": ev.period_ms, "latency": ev.latency_ms, "energy": ev.energy_mj}[metric]
    measured = {"period": run.period_ms, "latency": run.latency_ms, "energy": run.energy_mj}[metric]
    assert abs(predicted / measured - 1) <= TOL, f"{metric}: predicted {predicted:.1f}, measured {measured:.1f}"


@pytest.mark.parametrize("run", [r for r in RUNS if (r.instance.split("/")[-1], r.mapping) in KNOWN],
                         ids=lambda r: r.label)
def test_out_of_domain_runs_are_refused(run):
    """Google and Alex have no NPU block profile: their all-NPU runs are refused by name, not
    predicted (they had been non-strict xfails, which hid any other error and any pass)."""
    assert "N" not in load_mapping(run.instance).profile.pus
    with pytest.raises(InputError, match=r"unknown PU 'N' \(PUs: L, B, G\)"):
        _predict(run)


def test_every_known_case_is_a_measured_run():
    """A key of KNOWN or KNOWN_METRIC that names no run (a typo, a re-measured run) marks nothing."""
    runs = {(r.instance.split("/")[-1], r.mapping) for r in RUNS}
    freqs = {(r.instance.split("/")[-1], r.mapping, r.freq) for r in RUNS}
    assert set(KNOWN) <= runs
    assert {k[:3] for k in KNOWN_METRIC} <= freqs


def test_googlenet_pipelined_headline():
    """design.md: GoogLeNet GGGGBBBBBBG measured a 58.0 ms period and 113.2 ms latency."""
    run = next(r for r in RUNS if r.instance.endswith("Google-parapipe") and r.mapping == "GGGGBBBBBBG")
    ev = _predict(run)
    assert ev.period_ms == pytest.approx(58.0, rel=0.03)
    assert ev.latency_ms == pytest.approx(113.2, rel=0.03)
    # the first stage (input + blocks 0-3 on the GPU) sets the period
    assert ev.stage_times_ms.index(max(ev.stage_times_ms)) == 0


def test_in_domain_fit_summary():
    """Median error over every in-domain run and metric stays small (the model is not
    just inside 10% by luck on a few rows), and the only misses beyond 10% are the listed ones."""
    errors, misses = [], set()
    for run in RUNS:
        graph = run.instance.split("/")[-1]
        if (graph, run.mapping) in KNOWN:
            continue
        ev = _predict(run)
        for metric, pred, meas in (("period", ev.period_ms, run.period_ms), ("latency", ev.latency_ms, run.latency_ms),
                                   ("energy", ev.energy_mj, run.energy_mj)):
            errors.append(abs(pred / meas - 1))
            if errors[-1] > TOL:
                misses.add((graph, run.mapping, run.freq, metric))
    errors.sort()
    assert len(errors) >= 3 * 85
    assert errors[len(errors) // 2] < 0.04
    assert misses == set(KNOWN_METRIC)
    assert len(misses) / len(errors) < 0.06

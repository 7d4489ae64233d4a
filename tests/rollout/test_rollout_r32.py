"""The R = 32 study's mechanism, measured: with the whole round in the batch, a smaller
within-prompt spread of response lengths (same total spread, median re-calibrated) staggers
the groups' completions and lets CGP+FGD start the trainer earlier."""
from pipeplan.app.studies.rollout_r32 import BEFORE_SIGMA, _setting, _split, _sync_rollout
from pipeplan.formulations.rollout.workloads import PRESETS, QWEN3_1_7B_2xA100


def test_within_prompt_correlation_staggers_groups_at_R32():
    # the presets' measured split (0.33 within a prompt) against the unmeasured one they had (0.6)
    w = PRESETS["olyphys"]
    loose = _split(w, BEFORE_SIGMA, seeds=1)
    assert abs(_sync_rollout(loose, 1, QWEN3_1_7B_2xA100) / _sync_rollout(w, 1, QWEN3_1_7B_2xA100) - 1) < 0.02
    before, after = _setting(loose, 32, 1, QWEN3_1_7B_2xA100), _setting(w, 32, 1, QWEN3_1_7B_2xA100)
    assert after["late_groups_share"] < before["late_groups_share"]
    assert after["end_time_reduction"] > before["end_time_reduction"] + 0.02


def test_every_engine_feature_off_is_the_reproduction():
    from pipeplan.app.studies.rollout import reproduce
    rec = reproduce(seeds=1, workloads=("lsat-ar",), Rs=(32,))[0]
    mine = _setting(PRESETS["lsat-ar"], 32, 1, QWEN3_1_7B_2xA100)
    assert abs(rec["end_time_reduction"] - mine["end_time_reduction"]) < 1e-12

"""The measured within-prompt spread of response lengths (CASTILLO) and the presets that take it."""
import math

import pytest

from pipeplan.formulations.rollout.workloads import PRESETS
from pipeplan.profiles.length_spread import (
    SampledPrompts,
    castillo_files,
    log_variances,
    rl_within_prompt_sigma,
    within_prompt_sigma,
)


def test_the_pooled_spread_is_the_root_of_the_mean_log_variance():
    # log lengths (0, log 100): unbiased variance (log 100)^2 / 2; (50, 50, 50): 0; mean of the two, root
    sigma, prompts = within_prompt_sigma([SampledPrompts("d", "m", 1.0, ((1, 100), (50, 50, 50)))])
    assert prompts == 2 and sigma == pytest.approx(math.log(100) / 2)


def test_prompts_with_an_empty_response_or_a_single_sample_are_left_out():
    assert log_variances([(0, 5, 7), (9,), (3, 3)]).tolist() == [0.0]
    with pytest.raises(ValueError, match="no prompt"):
        within_prompt_sigma([SampledPrompts("d", "m", 1.0, ((0, 4),))])


def test_the_stored_castillo_records_are_whole():
    files = castillo_files()
    assert len(files) == 42 and sum(len(f.lengths) for f in files) == 204
    assert all(len(v) == 10 and min(v) >= 1 for f in files for v in f.lengths)
    assert {f.temperature for f in files} == {0.6, 0.7, 1.0}


def test_the_presets_take_the_measured_within_prompt_spread_and_keep_a_unit_log_variance():
    sigma, prompts = rl_within_prompt_sigma()
    assert prompts == 95 and 0.30 < sigma < 0.36
    for w in PRESETS.values():
        assert w.sigma_sample == round(sigma, 2)
        assert w.sigma_prompt ** 2 + w.sigma_sample ** 2 == pytest.approx(1.0, abs=1e-3)


def test_the_spread_grows_with_the_sampling_temperature():
    files = castillo_files()
    at = {t: within_prompt_sigma([f for f in files if f.temperature == t])[0] for t in (0.7, 1.0)}
    assert at[0.7] < at[1.0]

"""How much an LLM's response length varies between samples of one prompt, measured.

The rollout presets draw a prompt's K response lengths as ``exp(mu_g + sigma_sample * eps)``
(``formulations/rollout/workloads.py``); ``sigma_sample`` decides whether a group's samples end
together or one long sample holds the group back. The measurement: CASTILLO's repeated samples
(10 per prompt; ``data/castillo/README.md``), the pooled within-prompt standard deviation of the
log lengths, sqrt(mean over prompts of each prompt's unbiased variance), which is the
``sigma_sample`` of a lognormal with a per-prompt median. Only temperature-1.0 files count by
default: RL rollouts sample at temperature 1.0, and the spread grows with the temperature
(CASTILLO's Qwen2.5 at 0.7: 0.14 over 70 prompts; gemma-3, Phi-4-mini and Mistral-7B at 1.0: 0.30,
0.39 and 0.31, 0.33 pooled over 95 prompts).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

import numpy as np

RL_TEMPERATURE = 1.0


@dataclass(frozen=True)
class SampledPrompts:
    """One CASTILLO file: the response lengths of each of its prompts, and how they were sampled."""
    dataset: str
    model: str
    temperature: float
    lengths: tuple[tuple[int, ...], ...]


def castillo_files() -> list[SampledPrompts]:
    text = resources.files("pipeplan.profiles").joinpath("data/castillo/output_sizes.json").read_text()
    return [SampledPrompts(f["dataset"], f["model"], float(f["temperature"]),
                           tuple(tuple(v) for v in f["output_sizes"].values()))
            for f in json.loads(text)["files"]]


def log_variances(lengths) -> np.ndarray:
    """Each prompt's unbiased variance of the log lengths (prompts with an empty response left
    out: their log is undefined)."""
    return np.array([np.log(np.asarray(v, float)).var(ddof=1) for v in lengths if len(v) > 1 and min(v) > 0])


def within_prompt_sigma(files: list[SampledPrompts]) -> tuple[float, int]:
    """(pooled within-prompt SD of log length, prompts) over ``files``."""
    var = np.concatenate([log_variances(f.lengths) for f in files]) if files else np.empty(0)
    if not var.size:
        raise ValueError("no prompt with two or more non-empty responses")
    return float(np.sqrt(var.mean())), int(var.size)


def rl_within_prompt_sigma() -> tuple[float, int]:
    """The pooled within-prompt SD over CASTILLO's temperature-1.0 files, and their prompts."""
    return within_prompt_sigma([f for f in castillo_files() if f.temperature == RL_TEMPERATURE])

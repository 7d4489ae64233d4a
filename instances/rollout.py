"""The rollout-admission catalogue.

* ``rollout/<workload>-R<R>``: one round of a preset workload (``lsat-ar``, ``sci-xw``,
  ``sci-jl``, ``olyphys``) with R in {32, 64, 96}, K = 8, U = 2, on the paper's hardware
  models (seed 0); ``-s<seed>`` picks another draw of the lengths.
* ``rollout/tiny-<n>``: tiny rounds on a linear engine, small enough for brute force.
* a path to a ``pipeplan.rollout/1`` JSON file, or to a CSV/JSONL trace (see ``traces.py``).
"""
from __future__ import annotations

import random
import re
from pathlib import Path

from pipeplan.core.errors import InputError
from pipeplan.core.io import exists_safely, instance_name, name_number
from pipeplan.core.param_values import MAX_SEED
from pipeplan.formulations.rollout.problem import EngineModel, RolloutProblem, TrainerModel
from pipeplan.formulations.rollout.workloads import PRESETS, R_PAPER, preset_round

TINY = 4
# ASCII digits only (``\d`` takes any script's); a number is read only when it has at most
# ``_DIGITS`` digits, so a name never reaches int() with thousands of them (past Python's limit)
_NAME = re.compile(r"^rollout/(?P<w>[a-z0-9_-]+)-R(?P<R>[0-9]+)(?:-s(?P<seed>[0-9]+))?$", re.ASCII)
_TINY = re.compile(r"^rollout/tiny-(?P<k>[0-9]+)$", re.ASCII)
_DIGITS = 18
MAX_R = 10 ** _DIGITS        # far above any round that fits in memory (``preset_round`` checks that)


def instance_names() -> list[str]:
    return [f"rollout/{w}-R{R}" for w in PRESETS for R in R_PAPER] + [f"rollout/tiny-{k}" for k in range(TINY)]


def tiny_instance(k: int) -> RolloutProblem:
    """Tiny round k: 2-3 groups x 2 samples, 1-5 decode steps of 1 s each, two engine slots
    and a KV capacity that binds; trainer times in whole milliseconds."""
    rng = random.Random(1000 + k)
    R = 3 if k % 2 else 2
    U = 1 if k < 2 else 2
    prompts = [rng.randint(1, 3) for _ in range(R)]
    responses = [[rng.randint(1, 5) for _ in range(2)] for _ in range(R)]
    cap = max(p + max(r) for p, r in zip(prompts, responses)) + rng.randint(2, 6)
    engine = EngineModel(max_num_seqs=2, kv_capacity_tokens=cap, c0_s=1.0)
    trainer = TrainerModel(groups_per_update=U, token_budget=12, s_per_token=0.125, s_per_microbatch=0.5,
                           optimizer_step_s=rng.choice([1.0, 2.0, 3.0]))
    return RolloutProblem(f"rollout/tiny-{k}", tuple(prompts), tuple(map(tuple, responses)), engine, trainer,
                          source=f"rollout/tiny-{k}")


def _shown(name: str) -> str:
    """The name as an error shows it: a run of more than ``_DIGITS`` digits as its length."""
    return re.sub(rf"[0-9]{{{_DIGITS + 1},}}", lambda m: f"<{len(m[0])} digits>", name)


def load_instance(name: str) -> RolloutProblem:
    name = instance_name(name)
    path = Path(name)
    if path.suffix in (".json", ".csv", ".jsonl") and exists_safely(path):
        from pipeplan.formulations.rollout.traces import load_problem_file
        return load_problem_file(path)
    tiny = _TINY.match(name)
    if tiny and len(tiny["k"]) <= _DIGITS and int(tiny["k"]) < TINY:     # a long run of digits is no tiny round
        return tiny_instance(int(tiny["k"]))
    m = _NAME.match(name)
    if m and m["w"] in PRESETS:
        shown = _shown(name)
        return preset_round(m["w"], name_number(m["R"], MAX_R, shown, "R"),
                            seed=name_number(m["seed"] or "0", MAX_SEED, shown, "seed"))
    if m:
        preset_round(m["w"], 1)      # raises the unknown-preset error
    raise InputError(_shown(name), "instance", f"unknown rollout instance (e.g. {', '.join(instance_names()[:3])}, "
                     "rollout/tiny-0, or a .json/.csv/.jsonl file)")

"""The catalogue of named instances.

* ``khadas-vim3/<Graph>``: block-level instances imported from the Khadas VIM3 measurements
  (files under instances/khadas-vim3/);
* ``<platform>/<model>``: operator-level instances built on demand from an ONNX model shipped
  in the onnx wheel and a platform file under profiles/platforms/ (roofline estimate).

A path to an instance file works wherever a name does.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pipeplan.core.errors import InputError
from pipeplan.instances.paths import INSTANCES_DIR, PLATFORMS_DIR


def measured_names() -> list[str]:
    return sorted(f"khadas-vim3/{p.stem}" for p in (INSTANCES_DIR / "khadas-vim3").glob("*.json"))


def operator_names() -> list[str]:
    from pipeplan.formulations.mapping.onnx_graph import LIGHT_MODELS
    return [f"{p.stem}/{m}" for p in sorted(PLATFORMS_DIR.glob("*.json")) for m in LIGHT_MODELS]


def mapping_instance_names() -> list[str]:
    return measured_names() + operator_names()


@lru_cache(maxsize=64)
def load_mapping(name: str):
    """A MappingProblem from a catalogue name or an instance file path."""
    from pipeplan.formulations.mapping.instance_io import load_problem_file

    path = Path(name)
    if path.suffix == ".json" and path.exists():
        return load_problem_file(path)
    if path.suffix == ".onnx":
        raise InputError(name, "instance", f"an ONNX model needs a profile first: `pipeplan instance {name} "
                                           f"--out {path.stem}.json` (measures this host), then use {path.stem}.json")
    if name.startswith("khadas-vim3/"):
        file = INSTANCES_DIR / f"{name}.json"
        if file.exists():
            return load_problem_file(file)
    else:
        platform, _, model = name.partition("/")
        if (PLATFORMS_DIR / f"{platform}.json").exists():
            from pipeplan.formulations.mapping.onnx_graph import LIGHT_MODELS
            from pipeplan.instances.operator_level import operator_instance
            if model in LIGHT_MODELS:
                return operator_instance(platform, model)
    known = ", ".join(measured_names()[:4] + operator_names()[:2])
    raise InputError(name, "instance", f"unknown instance (try `pipeplan instances`; e.g. {known}, ...)")

"""The catalogue of named instances.

* ``khadas-vim3/<Graph>``: block-level instances imported from the Khadas VIM3 measurements
  (files under instances/khadas-vim3/);
* ``<platform>/<model>``: operator-level instances built on demand from an ONNX model shipped
  in the onnx wheel and a platform file under profiles/platforms/ (roofline estimate), as
  runtimes execute the graph (fused); ``<platform>/<model>@raw`` (one unit per ONNX operator)
  and ``<platform>/<model>@modules`` (one block per module) are the other granularities
  (instances/operator_level.py).

``operator_names`` and ``mapping_instance_names`` list the default (fused) names only, so a
suite pattern such as ``a311d/*`` selects one instance per model; the ``@raw`` and
``@modules`` names load wherever a name does (``operator_granularity_names`` lists them).
A path to an instance file works wherever a name does.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pipeplan.core.errors import InputError
from pipeplan.core.io import exists_safely, instance_name
from pipeplan.instances.paths import INSTANCES_DIR, PLATFORMS_DIR


def measured_names() -> list[str]:
    return sorted(f"khadas-vim3/{p.stem}" for p in (INSTANCES_DIR / "khadas-vim3").glob("*.json"))


def operator_names() -> list[str]:
    from pipeplan.formulations.mapping.onnx_graph import LIGHT_MODELS
    return [f"{p.stem}/{m}" for p in sorted(PLATFORMS_DIR.glob("*.json")) for m in LIGHT_MODELS]


def operator_granularity_names() -> list[str]:
    """Every operator-level name at every granularity (``a311d/squeezenet``, ``...@raw``, ...)."""
    from pipeplan.instances.operator_level import GRANULARITIES, instance_name
    return [instance_name(*name.split("/"), gran) for name in operator_names() for gran in GRANULARITIES]


def mapping_instance_names() -> list[str]:
    return measured_names() + operator_names()


def load_mapping(name: str):
    """A MappingProblem from a catalogue name or an instance file path."""
    return _load_mapping(instance_name(name))   # checked before the cache hashes it (a list had been a TypeError)


@lru_cache(maxsize=64)
def _load_mapping(name: str):
    from pipeplan.formulations.mapping.instance_io import load_problem_file

    path = Path(name)
    if path.suffix == ".json" and exists_safely(path):
        return load_problem_file(path, trusted=path.resolve().is_relative_to(INSTANCES_DIR.resolve()))
    if path.suffix == ".onnx":
        raise InputError(name, "instance", f"an ONNX model needs a profile first: `pipeplan instance {name} "
                                           f"--out {path.stem}.json` (measures this host), then use {path.stem}.json")
    if name.startswith("khadas-vim3/"):
        # a catalogue name, never a path: "khadas-vim3/../../x" (a plan may name it) had read
        # any x.json on the machine, trusted like the shipped files
        if name in measured_names():
            return load_problem_file(INSTANCES_DIR / f"{name}.json", trusted=True)
    else:
        from pipeplan.instances.operator_level import DEFAULT_GRANULARITY, check_granularity
        base, at, granularity = name.partition("@")
        platform, _, model = base.partition("/")
        if exists_safely(PLATFORMS_DIR / f"{platform}.json"):
            from pipeplan.formulations.mapping.onnx_graph import LIGHT_MODELS
            from pipeplan.instances.operator_level import operator_instance
            if model in LIGHT_MODELS:
                return operator_instance(platform, model, check_granularity(name, granularity if at else
                                                                            DEFAULT_GRANULARITY))
    known = ", ".join(measured_names()[:4] + operator_names()[:2])
    raise InputError(name, "instance", f"unknown instance (try `pipeplan instances`; e.g. {known}, ...)")


def forget_loaded_mappings() -> None:
    """Forget every problem :func:`load_mapping` holds: a file may have been rewritten since."""
    _load_mapping.cache_clear()

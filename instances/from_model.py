"""Your own model as a mapping instance (``pipeplan instance``): the operator graph of an ONNX
file (or of a model shipped in the onnx wheel) costed by a profile of the platform it is meant
to run on:

* by default, a profile measured now on this host with ONNX Runtime (PUs ``C0``, ``C1``: two
  single-threaded CPU workers, as ``pipeplan run`` deploys them);
* ``profile``: a profile file of the same model (``pipeplan profile m.onnx --out p.json``,
  possibly measured on another machine);
* ``platform``: a platform file or the name of one under profiles/platforms/ (``a311d``,
  ``bst``), costed by the roofline estimate (a rough guide, several times off on real hosts).
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pipeplan.core.errors import InputError
from pipeplan.core.io import check_name, exists_safely
from pipeplan.formulations.mapping.onnx_graph import load_onnx, model_path
from pipeplan.formulations.mapping.problem import MappingProblem, problem_from_graph
from pipeplan.formulations.mapping.profile import load_profile
from pipeplan.instances.paths import PLATFORMS_DIR
from pipeplan.profiles.ort_profiler import profile_host
from pipeplan.profiles.roofline import load_platform, roofline_profile

HOST_PUS = ("C0", "C1")


def platform_file(platform: str | Path) -> Path:
    """A platform file by path, or by name under profiles/platforms/."""
    path = Path(platform)
    if path.suffix == ".json" or exists_safely(path):
        return path
    named = PLATFORMS_DIR / f"{platform}.json"
    if not exists_safely(named, file=True):
        known = ", ".join(sorted(p.stem for p in PLATFORMS_DIR.glob("*.json")))
        raise InputError(str(platform), "--platform", f"no such platform file or name (known: {known})")
    return named


def check_instance_path(path: Path, option: str) -> None:
    """An instance made from a model is named by its file's path (plans name it, and export
    finds the file by it), so that path must be a name the loader takes back: at most 255 bytes,
    no control character. A longer ``--out`` had made a file that ``solve`` then refused."""
    try:
        check_name(str(path), str(path), option)
    except InputError as exc:
        raise InputError(exc.source, option, f"names the instance (the file's path): {exc.message}") from None


def model_instance(model: str | Path, *, name: str, profile: Path | None = None, platform: str | Path | None = None,
                   runs: int = 10, warmup: int = 3, progress: Callable[[int, int], None] | None = None,
                   time_limit_s: float | None = None) -> MappingProblem:
    """The mapping instance of ``model`` (see the module docstring for the three profiles);
    ``time_limit_s`` bounds the profiling runs on this host."""
    if profile is not None and platform is not None:
        raise InputError("--platform", "", "give a profile file or a platform, not both")
    path = model_path(model)
    g = load_onnx(path)
    if profile is not None:
        prof = load_profile(profile)
        source = f"{path} + profile {profile}"
    elif platform is not None:
        plat_file = platform_file(platform)
        prof = roofline_profile(g, load_platform(plat_file), name=name)
        source = f"{path} + roofline estimate of {plat_file}"
    else:
        prof = profile_host(path, pus=HOST_PUS, runs=runs, warmup=warmup, progress=progress, time_limit_s=time_limit_s)
        source = f"{path} + ONNX Runtime profile of this host ({runs} runs)"
    return problem_from_graph(g, prof, name, source)

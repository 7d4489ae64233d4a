"""Operator-level mapping instances ``<platform>/<model>[@granularity]``: an ONNX graph shipped
in the onnx wheel, costed by the roofline estimate of a platform file, at one of three
granularities:

* ``fused`` (the default, no suffix: ``a311d/inception_v1``): the graph as inference runtimes
  execute it, a Conv with its BatchNormalization and activation as one unit, Dropout and
  Identity gone, constant subgraphs folded (formulations/mapping/fuse.py, which cites the
  ONNX Runtime and ARM Compute Library rewrites it follows); each unit costs one operator;
* ``raw`` (``a311d/inception_v1@raw``): one unit per ONNX operator;
* ``modules`` (``a311d/inception_v1@modules``): blocks cut at the graph's cut points, one per
  Inception module or residual unit (formulations/mapping/coarsen.py, mode "modules"); a block
  costs the sum of its operators.

Units of the fused and modules graphs list their ONNX nodes in ``members``; deployment expands
them (deploy/export.py).

``a311d/inception_v1`` (GoogLeNet) is calibrated, at every granularity: each PU's times are
scaled by one factor so that the whole network's time on that PU equals the sum of the
measured Khadas VIM3 block times of GoogLeNet at the top DVFS level (instance
khadas-vim3/Google-parapipe, the Para-Pipe campaign). PUs without a measurement (the NPU) keep
the roofline estimate. The factor is fitted per granularity:

* the *fused* graph is fitted to the measured totals on its own: the board's times come from
  ARM-CL (CPU, GPU) and the NPU driver, runtimes that fuse exactly these layers, so the fused
  roofline is the model of what was measured and its factor is the efficiency correction;
* *raw* keeps the factor fitted on the raw graph (so ``@raw`` is the instance as it was before
  granularities existed, number for number), and *modules* gets the same factor: a block
  costs the sum of its operators, so the modules graph has the raw graph's total on every PU
  and fitting it on its own gives the raw factor (up to the rounding of the sums).

The fused factor is the larger one (the fused estimate is lower: no intermediates, fewer
launches), so a fused unit is not always cheaper than its operators in ``@raw`` here; on the
uncalibrated instances it always is.

All three granularities therefore total the measured block sums on L, B and G; fusion changes
how the time is distributed over units (no intermediates, fewer launches), not the total of
the calibrated network.
"""
from __future__ import annotations

from pipeplan.core.errors import InputError
from pipeplan.formulations.mapping.coarsen import coarsen
from pipeplan.formulations.mapping.fuse import fuse
from pipeplan.formulations.mapping.instance_io import load_problem_file
from pipeplan.formulations.mapping.onnx_graph import light_model_path, load_onnx
from pipeplan.formulations.mapping.problem import MappingProblem, problem_from_graph
from pipeplan.instances.paths import INSTANCES_DIR, PLATFORMS_DIR
from pipeplan.profiles.roofline import calibrate, load_platform, roofline_profile

# operator-level instance -> the measured block-level instance of the same network
CALIBRATION = {("a311d", "inception_v1"): "khadas-vim3/Google-parapipe"}
GRANULARITIES = ("fused", "raw", "modules")
DEFAULT_GRANULARITY = "fused"


def measured_totals(instance: str) -> dict[str, float]:
    """Per PU: the sum of a measured instance's block times at the PU's top DVFS level."""
    prof = load_problem_file(INSTANCES_DIR / f"{instance}.json").profile
    out = {}
    for name, pu in prof.pus.items():
        times = prof.time_ms[name].get(pu.max_level, ())
        if times and all(t is not None for t in times):
            out[name] = sum(times)
    return out


def instance_name(platform: str, model: str, granularity: str = DEFAULT_GRANULARITY) -> str:
    """``<platform>/<model>`` for the default granularity, else ``<platform>/<model>@<granularity>``."""
    base = f"{platform}/{model}"
    return base if granularity == DEFAULT_GRANULARITY else f"{base}@{granularity}"


def check_granularity(name: str, granularity: str) -> str:
    if granularity not in GRANULARITIES:
        raise InputError(name, "granularity", f"unknown granularity {granularity!r} (granularities: "
                         f"{DEFAULT_GRANULARITY} (the default, no suffix), "
                         + ", ".join(f"@{g}" for g in GRANULARITIES if g != DEFAULT_GRANULARITY) + ")")
    return granularity


def operator_instance(platform: str, model: str, granularity: str = DEFAULT_GRANULARITY) -> MappingProblem:
    name = instance_name(platform, model, granularity)
    check_granularity(name, granularity)
    plat = load_platform(PLATFORMS_DIR / f"{platform}.json")
    g = load_onnx(light_model_path(model))
    units = fuse(g) if granularity == "fused" else coarsen(g, "modules") if granularity == "modules" else g
    profile = roofline_profile(units, plat, name=name)
    if (platform, model) in CALIBRATION:       # every granularity fitted on its own, see above
        totals = measured_totals(CALIBRATION[(platform, model)])
        profile = calibrate(profile, {p: t for p, t in totals.items() if p in profile.pus})
    source = f"{light_model_path(model)} + {PLATFORMS_DIR / f'{platform}.json'}"
    if granularity != "raw":
        source += f" ({granularity} graph)"
    return problem_from_graph(units, profile, name, source)


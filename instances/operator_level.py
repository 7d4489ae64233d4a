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

``a311d/inception_v1`` (GoogLeNet) is calibrated per measured block, at every granularity
(profiles/block_calibration.py, which explains the correspondence and cites the data): the
Khadas VIM3 measured GoogLeNet as 11 blocks (instance khadas-vim3/Google-parapipe, the
Para-Pipe campaign, top DVFS level), each a run of consecutive ONNX operators (conv1 | conv2 |
Inception 3a | ... | 5b with the classifier); on L, B and G every unit is scaled by its block's
factor, measured block time / roofline sum of the block's units, so each block's units sum to
the block's measured time. The NPU has no GoogLeNet measurement and keeps the roofline.

A fused unit and a module lie inside one measured block (the correspondence raises otherwise),
and each granularity is fitted on its own: the board's times come from runtimes (ARM-CL, the
NPU driver) that fuse exactly the layers ``fused`` fuses, so the fused roofline is the model of
what was measured and its factors are the efficiency correction; ``raw`` and ``modules`` get the
same factors as each other (a module costs the sum of its operators, so both have the same sum
per block). The fused estimate is lower (no intermediates, fewer launches), so its factors are
larger and a fused unit is not always cheaper than its operators in ``@raw`` here; on the
uncalibrated instances it always is.

All three granularities therefore have the measured time of every block on L, B and G, and so
its total; fusion changes how a block's time is distributed over its units, not the block's
time. Before, one factor per PU fitted the whole network's total only, which put up to twice the
measured time on a block (results/costmodel/block_calibration.md has the factors and residuals).
"""
from __future__ import annotations

from pipeplan.core.errors import InputError
from pipeplan.formulations.mapping.coarsen import coarsen
from pipeplan.formulations.mapping.fuse import fuse
from pipeplan.formulations.mapping.onnx_graph import light_model_path, load_onnx
from pipeplan.formulations.mapping.problem import MappingProblem, problem_from_graph
from pipeplan.instances.paths import PLATFORMS_DIR
from pipeplan.profiles.block_calibration import calibrate_operator_profile
from pipeplan.profiles.roofline import load_platform, roofline_profile

# operator-level instance -> the measured block-level profile of the same network, calibrated per
# block (pipeplan.profiles.block_calibration.MATCHES has the block correspondence)
CALIBRATION = {("a311d", "inception_v1"): "khadas-vim3/Google-parapipe"}
GRANULARITIES = ("fused", "raw", "modules")
DEFAULT_GRANULARITY = "fused"


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
        profile, _ = calibrate_operator_profile(g, units, profile, model, CALIBRATION[(platform, model)])
    source = f"{light_model_path(model)} + {PLATFORMS_DIR / f'{platform}.json'}"
    if granularity != "raw":
        source += f" ({granularity} graph)"
    return problem_from_graph(units, profile, name, source)


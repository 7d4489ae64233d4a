"""Operator-level mapping instances ``<platform>/<model>``: an ONNX graph shipped in the onnx
wheel, costed by the roofline estimate of a platform file.

``a311d/inception_v1`` (GoogLeNet) is calibrated: each PU's times are scaled by one factor so
that the whole network's time on that PU equals the sum of the measured Khadas VIM3 block times
of GoogLeNet at the top DVFS level (instance khadas-vim3/Google-parapipe, the Para-Pipe
campaign). PUs without a measurement (the NPU) keep the roofline estimate.
"""
from __future__ import annotations

from pipeplan.formulations.mapping.instance_io import load_problem_file
from pipeplan.formulations.mapping.onnx_graph import light_model_path, load_onnx
from pipeplan.formulations.mapping.problem import MappingProblem, problem_from_graph
from pipeplan.instances.paths import INSTANCES_DIR, PLATFORMS_DIR
from pipeplan.profiles.roofline import calibrate, load_platform, roofline_profile

# operator-level instance -> the measured block-level instance of the same network
CALIBRATION = {("a311d", "inception_v1"): "khadas-vim3/Google-parapipe"}


def measured_totals(instance: str) -> dict[str, float]:
    """Per PU: the sum of a measured instance's block times at the PU's top DVFS level."""
    prof = load_problem_file(INSTANCES_DIR / f"{instance}.json").profile
    out = {}
    for name, pu in prof.pus.items():
        times = prof.time_ms[name].get(pu.max_level, ())
        if times and all(t is not None for t in times):
            out[name] = sum(times)
    return out


def operator_instance(platform: str, model: str) -> MappingProblem:
    plat = load_platform(PLATFORMS_DIR / f"{platform}.json")
    g = load_onnx(light_model_path(model))
    name = f"{platform}/{model}"
    profile = roofline_profile(g, plat, name=name)
    if (platform, model) in CALIBRATION:
        totals = measured_totals(CALIBRATION[(platform, model)])
        profile = calibrate(profile, {p: t for p, t in totals.items() if p in profile.pus})
    return problem_from_graph(g, profile, name, f"{light_model_path(model)} + {PLATFORMS_DIR / f'{platform}.json'}")

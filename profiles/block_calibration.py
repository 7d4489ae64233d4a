"""Per-block calibration of operator-level graphs against measured block times.

Why. A roofline (:mod:`roofline`) gets a network's time roughly right but not how the time is
spread over the network: it knows FLOPs and bytes, not how well a runtime's kernels use them
(the first block of GoogLeNet and of ResNet-50, a 7x7 stride-2 convolution over three input
channels, takes 1.5-2x its roofline share on the A311D's CPUs and GPU). One factor per PU
(:func:`roofline.calibrate`) fixes each PU's total and leaves the spread to the roofline, so a
pipeline stage can be off by half or double even though the network's total is right (figures:
results/costmodel/block_calibration.md). Where the blocks the board measured correspond to sets
of ONNX operators, each unit is scaled by the factor of the block it lies in, so that on every
measured PU each block's units sum to the block's measured time: operator-level plans then rest
on measurements wherever measurements exist.

Data: Khadas VIM3 (Amlogic A311D) block times, public repository Ehsan-aghapour/CO-UP-Profiling
at commit 22005a9d8742a71fb9e03e6e1484359984084a12, imported into ``profiles/data/khadas-vim3``
by :mod:`khadas_import`; a PU's times are those of its top DVFS level.

Correspondence. Measured block *k* is the set of ONNX nodes of a run of consecutive blocks of
``coarsen(g, "modules")`` (which cuts the graph at the nodes every input-to-output path passes
through: one block per Inception module, per residual unit, per conv layer with its light
followers), ``spans[k]`` of them, so the correspondence is derived from the graph, never a
list of node names; the count of Conv, Concat and Gemm operators of every block is checked
against the network's layers, so a graph that does not line up fails loudly instead of being
calibrated against the wrong measurements. The blocks are a partition of the graph's nodes in
consecutive cuts (no edge goes back to an earlier block); a unit of any granularity must lie
inside one block (fused units and modules do; :func:`unit_blocks` raises otherwise).

* GoogLeNet (``inception_v1`` <-> ``khadas-vim3/Google-parapipe``, 11 blocks). The measured net
  is ARM-CL's GoogLeNet split into 11 sub-graphs as in the authors' ARM-CL fork
  (Ehsan-aghapour/ARMCL-pipe-all, examples/LW/graph_googlenet_n_pipe_npu_lw.cpp at commit
  7b92a31df53295b8c8f4de1868eba63347c92956: ``n_l = 11``): conv1 + pool1 + norm1 | conv2
  reduce + conv2 3x3 + pool2 | 3a | 3b + pool3 | 4a | 4b | 4c | 4d | 4e + pool4 | 5a | 5b +
  pool5 + classifier. The modules graph has 13 blocks (it cuts after conv2 reduce, and before
  the classifier), so spans are 1, 2, 1 x 8, 2. The measured times agree and rule out the
  other natural cut (stem | 3a ... 5b | head): block 1 is the slowest block on L and B, as
  conv2 3x3 (the largest conv of the net) is, and the last block takes 8 ms on B, far more
  than a classifier alone. That fork leaves conv2/norm2 (an LRN) out of block 1; the ONNX graph
  keeps it, in block 1, where it is scaled with its block. The light ONNX graph's pools round
  down where Caffe's and ARM-CL's round up, so its maps are a pixel smaller from pool1 on (55,
  27, 13, 6 for 56, 28, 14, 7): 4-14% fewer FLOPs in blocks 1-8 and 26% fewer in 5a and 5b.
  The per-block factors absorb that too (the single factor could not), so part of a block's
  deviation below is the graph, not the runtime.
* AlexNet (``bvlc_alexnet`` <-> ``khadas-vim3/Alex``, 8 blocks: conv1..conv5 with their
  ReLU/LRN/pool, fc6, fc7, fc8 with the softmax, as the same fork cuts it in
  examples/LW/graph_alexnet_n_pipe_npu_lw.cpp at commit 1c92f3ffd0534ffb91bb9eb01e3015974d290582):
  both are the Caffe BVLC AlexNet with grouped conv2/4/5, one block per modules block. The
  ONNX graph takes a 224 input (ARM-CL 227), so its conv2 maps are 26x26 and its conv3-5 maps
  12x12, not 27x27 and 13x13 (7% and 15% fewer FLOPs); the factors absorb that. Matched, but
  not applied to ``a311d/bvlc_alexnet``: AlexNet was measured only in the CO-UP campaign, whose
  PU set-up differs from the Para-Pipe one the a311d GoogLeNet instance rests on (GoogLeNet,
  measured in both, sums to 1.8x less on L and 1.5x more on B in CO-UP), so calibrating to it
  would make the A53 pair as fast as the A73 quad in that one instance.

Not matched (see :data:`NOT_MATCHED`): ResNet-50 lines up block for block (stem, 16 residual
units, classifier) but is another network: the measured times are those of ARM-CL's TF-slim
ResNet-v1-50, which strides in the last unit of stages 2-4 (the unit before each new stage
takes half its neighbours' time, the last unit of stage 5 does not), the ONNX graph in the
first unit of stages 3-5, so three measured blocks do 43% of the work of their ONNX
counterparts (the fork also has a first-unit variant, ``add_residual_block2``; the measured
pattern rules it out). The report's diagnostic section shows it. SqueezeNet is v1.0 on the
board and v1.1 in the onnx wheel; the other measured nets have no ONNX graph in the wheel.

Factors. For block *k* and measured PU *p*: f[k, p] = measured[k, p] / sum of the roofline
times of the units in block *k* on *p*; every level of *p* is scaled (roofline profiles have
one). A PU without measurements (the A311D's NPU, measured for MobileNet and YOLOv3 only)
keeps the roofline: no GoogLeNet number exists to fit, and a factor taken from the CPUs or GPU
would say nothing about the NPU. The whole-network factor F[p] = sum_k measured / sum_k
roofline is what :func:`roofline.calibrate` applies; residuals compare the two: the spread of
f[k, p] / F[p] - 1 says how far the roofline's distribution over blocks is from the measured
one, and F[p] x roofline[k, p] / measured[k, p] - 1 is the error the single factor made on
block *k*.

``python -m pipeplan.profiles.block_calibration --write results/costmodel/block_calibration.md``
writes the report.
"""
from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import networkx as nx

from pipeplan.core.errors import InputError
from pipeplan.core.io import write_atomic
from pipeplan.core.tables import markdown_table
from pipeplan.formulations.mapping.coarsen import coarsen
from pipeplan.formulations.mapping.fuse import fuse
from pipeplan.formulations.mapping.onnx_graph import light_model_path, load_onnx
from pipeplan.formulations.mapping.profile import Profile, load_profile
from pipeplan.profiles.roofline import load_platform, roofline_profile

DATA_DIR = Path(__file__).parent / "data"
PLATFORM_FILE = Path(__file__).parent / "platforms" / "a311d.json"
DATA_SOURCE = ("Khadas VIM3 (Amlogic A311D) measurements, public repository Ehsan-aghapour/CO-UP-Profiling "
               "at commit 22005a9d8742a71fb9e03e6e1484359984084a12 (imported by pipeplan.profiles.khadas_import)")
COUNTED_OPS = ("Conv", "Concat", "Gemm")    # what a block's layout counts


@dataclass(frozen=True)
class BlockMatch:
    """How the measured blocks of one network map onto an ONNX graph of the onnx wheel."""

    model: str                                  # light model of the onnx wheel
    measured: str                               # measured profile, profiles/data/<measured>.json
    spans: tuple[int, ...]                      # modules blocks per measured block, in order
    layout: tuple[tuple[int, int, int], ...]    # per measured block: its Conv, Concat, Gemm counts
    labels: tuple[str, ...]                     # the measured block, in the network's layer names
    cut_source: str                             # where the measured cut comes from
    used_by: str = ""                           # the instances calibrated with it (for the report)
    cross_checks: tuple[str, ...] = ()          # other measurements of the same blocks


_INCEPTION = (6, 1, 0)
_BOTTLENECK, _PROJECTION = (3, 0, 0), (4, 0, 0)

MATCHES: dict[str, BlockMatch] = {
    "inception_v1": BlockMatch(
        model="inception_v1", measured="khadas-vim3/Google-parapipe",
        spans=(1, 2) + (1,) * 8 + (2,),
        layout=((1, 0, 0), (2, 0, 0)) + (_INCEPTION,) * 8 + ((6, 1, 1),),
        labels=("conv1 + pool1 + norm1", "conv2 (reduce, 3x3) + norm2 + pool2", "inception 3a",
                "inception 3b + pool3", "inception 4a", "inception 4b", "inception 4c", "inception 4d",
                "inception 4e + pool4", "inception 5a", "inception 5b + pool5 + classifier"),
        cut_source="ARM-CL GoogLeNet in 11 sub-graphs (Ehsan-aghapour/ARMCL-pipe-all, "
                   "examples/LW/graph_googlenet_n_pipe_npu_lw.cpp, commit 7b92a31d)",
        used_by="a311d/inception_v1, every granularity (instances/operator_level.py)",
        cross_checks=("khadas-vim3/Google",)),
    "bvlc_alexnet": BlockMatch(
        model="bvlc_alexnet", measured="khadas-vim3/Alex", spans=(1,) * 8,
        layout=((1, 0, 0),) * 5 + ((0, 0, 1),) * 3,
        labels=("conv1 + norm1 + pool1", "conv2 + norm2 + pool2", "conv3", "conv4", "conv5 + pool5",
                "fc6", "fc7", "fc8 + softmax"),
        cut_source="ARM-CL AlexNet in 8 sub-graphs (Ehsan-aghapour/ARMCL-pipe-all, "
                   "examples/LW/graph_alexnet_n_pipe_npu_lw.cpp, commit 1c92f3ff)",
        used_by="none: measured in the CO-UP campaign only, whose PU set-up is not the a311d "
                "instances' (see the module docstring)"),
}

# A candidate that lines up block for block but is another network: fitted for the report's
# diagnostic only, never applied.
DIAGNOSTICS: dict[str, BlockMatch] = {
    "resnet50": BlockMatch(
        model="resnet50", measured="khadas-vim3/ResV1_50", spans=(1,) * 18,
        layout=(((1, 0, 0),) + (_PROJECTION, _BOTTLENECK, _BOTTLENECK, _PROJECTION) + (_BOTTLENECK,) * 3
                + (_PROJECTION,) + (_BOTTLENECK,) * 5 + (_PROJECTION,) + (_BOTTLENECK,) * 2 + ((0, 0, 1),)),
        labels=("conv1 + pool1",) + tuple(f"stage {s} unit {u}" for s, n in ((2, 3), (3, 4), (4, 6), (5, 3))
                                          for u in range(1, n + 1)) + ("classifier",),
        cut_source="ARM-CL ResNet-v1-50 (TF-slim), one sub-graph per residual unit "
                   "(Ehsan-aghapour/ARMCL-pipe-all, examples/LW/graph_resnet50_n_pipe_npu_lw.cpp)"),
}

NOT_MATCHED: dict[str, str] = {
    "khadas-vim3/ResV1_50": "resnet50 lines up block for block (stem, 16 units, classifier) but is another "
                            "network: the measured times are those of ARM-CL's TF-slim ResNet-v1-50, which "
                            "strides in the last unit of stages 2-4 (b3, b7, b13 take half their neighbours' "
                            "time), the ONNX graph in the first unit of stages 3-5, so those three blocks do 43% "
                            "of the work of their ONNX counterparts (see its diagnostic section)",
    "khadas-vim3/SqueezeV1": "the board ran SqueezeNet v1.0 (conv1 7x7, 96 maps; ARM-CL's squeezenet_v1.0_model), "
                             "the onnx wheel ships v1.1 (conv1 3x3, 64 maps, pools moved): other FLOPs in every block",
    "khadas-vim3/MobileV1": "no MobileNet in the onnx wheel",
    "khadas-vim3/YOLOv3": "no YOLOv3 in the onnx wheel",
    "khadas-vim3/InceptionV3": "no Inception-v3 in the onnx wheel (inception_v2 is BN-Inception, another net)",
    "khadas-vim3/InceptionV4": "no Inception-v4 in the onnx wheel",
    "khadas-vim3/InceptionResnetV2": "no Inception-ResNet-v2 in the onnx wheel",
}


# ------------------------------------------------------------------------------ correspondence


def layout_of(g: nx.DiGraph, nodes: Sequence[str]) -> tuple[int, int, int]:
    """The (Conv, Concat, Gemm) counts of ``nodes``: the skeleton a block must have."""
    ops = [g.nodes[n]["op"] for n in nodes]
    return tuple(ops.count(op) for op in COUNTED_OPS)


def block_partition(g: nx.DiGraph, match: BlockMatch) -> tuple[tuple[str, ...], ...]:
    """Measured block index -> the ONNX nodes of operator graph ``g`` (``load_onnx``) it covers,
    in topological order: ``match.spans`` consecutive blocks of the modules graph each, checked
    against ``match.layout`` and :func:`check_partition`."""
    where = f"{match.model} <-> {match.measured}"
    modules = coarsen(g, "modules")
    groups = [modules.nodes[b]["members"] for b in modules.nodes]
    if sum(match.spans) != len(groups) or len(match.spans) != len(match.layout):
        raise InputError(where, "spans", f"{sum(match.spans)} modules blocks in {len(match.spans)} measured "
                         f"blocks, but the graph has {len(groups)} modules blocks and the layout "
                         f"{len(match.layout)} measured blocks")
    blocks, start = [], 0
    for span in match.spans:
        blocks.append(tuple(n for group in groups[start:start + span] for n in group))
        start += span
    for k, (nodes, want) in enumerate(zip(blocks, match.layout)):
        got = layout_of(g, nodes)
        if got != want:
            raise InputError(where, f"blocks[{k}]", f"has {dict(zip(COUNTED_OPS, got))} operators, the measured "
                             f"block {dict(zip(COUNTED_OPS, want))}: the graph does not line up")
    check_partition(g, blocks, where)
    return tuple(blocks)


def check_partition(g: nx.DiGraph, blocks: Sequence[Sequence[str]], where: str = "blocks") -> dict[str, int]:
    """Node -> block index, after checking that ``blocks`` hold every node of ``g`` exactly once
    and that no edge goes back to an earlier block (so the blocks are consecutive cuts of a
    topological order)."""
    block_of: dict[str, int] = {}
    for k, nodes in enumerate(blocks):
        for n in nodes:
            if n in block_of:
                raise InputError(where, f"blocks[{k}]", f"node {n!r} is already in block {block_of[n]}")
            block_of[n] = k
    missing = [n for n in g.nodes if n not in block_of]
    unknown = [n for n in block_of if n not in g.nodes]
    if missing or unknown:
        raise InputError(where, "blocks", f"not a partition of the graph's nodes (missing {missing[:3]}, "
                         f"unknown {unknown[:3]})")
    for u, v in g.edges:
        if block_of[u] > block_of[v]:
            raise InputError(where, "blocks", f"edge {u}->{v} goes back from block {block_of[u]} to {block_of[v]}")
    return block_of


def graph_units(units: nx.DiGraph) -> dict[str, tuple[str, ...]]:
    """Unit -> its ONNX nodes, for a raw (``load_onnx``), fused or coarsened graph."""
    return {u: tuple(d.get("members") or (u,)) for u, d in units.nodes(data=True)}


def unit_blocks(units: Mapping[str, Sequence[str]], block_of: Mapping[str, int],
                where: str = "units") -> dict[str, int]:
    """Unit -> the measured block holding all its ONNX nodes; InputError for a unit whose nodes
    lie in two blocks (it has no one measurement to be scaled to) or are not in the graph."""
    out = {}
    for u, nodes in units.items():
        found = {block_of.get(n) for n in nodes}
        if None in found:
            raise InputError(where, f"units.{u}", "holds nodes outside the graph of the block correspondence: "
                             f"{[n for n in nodes if n not in block_of][:3]}")
        if len(found) != 1:
            raise InputError(where, f"units.{u}", f"straddles measured blocks {sorted(found)}: a unit must lie "
                             "inside one measured block to be scaled to it")
        out[u] = found.pop()
    return out


# ------------------------------------------------------------------------------------- fitting


def measured_block_times(name: str) -> dict[str, tuple[float, ...]]:
    """Per PU with a complete row: the measured block times (ms) of profile ``name`` at the
    PU's top DVFS level."""
    prof = load_profile(DATA_DIR / f"{name}.json")
    out = {}
    for pu, spec in prof.pus.items():
        times = prof.time_ms[pu].get(spec.max_level, ())
        if times and all(t is not None for t in times):
            out[pu] = tuple(float(t) for t in times)
    return out


@dataclass(frozen=True)
class BlockFit:
    """Per measured PU: each block's measured time and its units' roofline sum."""

    measured: dict[str, tuple[float, ...]]
    roofline: dict[str, tuple[float, ...]]

    @property
    def pus(self) -> tuple[str, ...]:
        return tuple(self.measured)

    def factors(self, pu: str) -> tuple[float, ...]:
        """f[k] = measured / roofline: the scale applied to block k's units."""
        return tuple(m / r for m, r in zip(self.measured[pu], self.roofline[pu]))

    def whole(self, pu: str) -> float:
        """F = total measured / total roofline: the single factor of roofline.calibrate."""
        return sum(self.measured[pu]) / sum(self.roofline[pu])

    def deviation(self, pu: str) -> tuple[float, ...]:
        """f[k] / F - 1: how far block k's share of the roofline is from its measured share."""
        big = self.whole(pu)
        return tuple(f / big - 1 for f in self.factors(pu))

    def single_factor_error(self, pu: str) -> tuple[float, ...]:
        """F x roofline[k] / measured[k] - 1: the error of the whole-network calibration on block k."""
        big = self.whole(pu)
        return tuple(big * r / m - 1 for m, r in zip(self.measured[pu], self.roofline[pu]))

    def residuals(self, pu: str) -> dict[str, float | int]:
        dev = [abs(d) for d in self.deviation(pu)]
        err = [abs(e) for e in self.single_factor_error(pu)]
        return {"whole": self.whole(pu), "median_dev": statistics.median(dev), "max_dev": max(dev),
                "median_err": statistics.median(err), "max_err": max(err), "worst_block": err.index(max(err))}


def fit_blocks(profile: Profile, unit_block: Mapping[str, int], measured: Mapping[str, Sequence[float]]) -> BlockFit:
    """Sum the roofline times of each block's units on every measured PU of ``profile``."""
    n = len(next(iter(measured.values()), ()))
    missing = [u for u in profile.units if u not in unit_block]
    if missing:
        raise InputError(profile.name, "units", f"units without a measured block: {missing[:3]}")
    sums: dict[str, tuple[float, ...]] = {}
    for pu, times in measured.items():
        if pu not in profile.pus:
            raise InputError(profile.name, f"measured.{pu}", f"unknown PU (PUs: {', '.join(profile.pus)})")
        if len(times) != n or not all(isinstance(t, (int, float)) and math.isfinite(t) and t > 0 for t in times):
            raise InputError(profile.name, f"measured.{pu}", f"expected {n} positive block times, got {list(times)}")
        acc = [0.0] * n
        for u, t in zip(profile.units, profile.time_ms[pu][profile.pus[pu].max_level]):
            if t is not None:
                if not 0 <= unit_block[u] < n:
                    raise InputError(profile.name, f"units.{u}", f"block {unit_block[u]} outside 0..{n - 1}")
                acc[unit_block[u]] += t
        empty = [k for k, s in enumerate(acc) if s <= 0]
        if empty:
            raise InputError(profile.name, f"measured.{pu}", f"blocks {empty} have no roofline time to scale")
        sums[pu] = tuple(acc)
    return BlockFit(measured={p: tuple(float(t) for t in measured[p]) for p in sums}, roofline=sums)


def calibrate_blocks(profile: Profile, unit_block: Mapping[str, int],
                     measured: Mapping[str, Sequence[float]]) -> tuple[Profile, BlockFit]:
    """Scale every unit's time on each measured PU (every level) by its block's factor, so each
    block's units sum to the measurement; other PUs keep their times (see the module docstring)."""
    fit = fit_blocks(profile, unit_block, measured)
    factors = {pu: fit.factors(pu) for pu in fit.pus}
    time_ms = {pu: {lv: tuple(None if t is None else t * factors[pu][unit_block[u]] if pu in factors else t
                              for u, t in zip(profile.units, ts))
                    for lv, ts in by_level.items()}
               for pu, by_level in profile.time_ms.items()}
    kept = [p for p in profile.pus if p not in factors]
    note = (f"calibrated per measured block ({len(next(iter(fit.measured.values())))} blocks) on "
            + ", ".join(f"{p} x{min(factors[p]):.3g}..{max(factors[p]):.3g}" for p in fit.pus)
            + (f"; {', '.join(kept)}: roofline (no measurement)" if kept else ""))
    return replace(profile, time_ms=time_ms, notes=f"{profile.notes} {note}".strip()), fit


def calibrate_operator_profile(g: nx.DiGraph, units: nx.DiGraph, profile: Profile, model: str,
                               measured: str | None = None, *, match: BlockMatch | None = None
                               ) -> tuple[Profile, BlockFit]:
    """Per-block calibration of ``profile``, the roofline profile of ``units`` (``g`` itself,
    ``fuse(g)`` or ``coarsen(g, "modules")``), against the measured blocks of ``model``
    (:data:`MATCHES`, or ``match``; ``measured`` overrides its profile, e.g. another campaign)."""
    match = match or MATCHES.get(model)
    if match is None:
        raise InputError(model, "model", f"no measured blocks matched (matched: {', '.join(MATCHES)})")
    blocks = block_partition(g, match)
    block_of = {n: k for k, nodes in enumerate(blocks) for n in nodes}
    name = measured or match.measured
    times = {p: t for p, t in measured_block_times(name).items() if p in profile.pus}
    wrong = {p: len(t) for p, t in times.items() if len(t) != len(blocks)}
    if not times or wrong:
        raise InputError(name, "time_ms", f"expected {len(blocks)} measured blocks on a PU of {profile.name}, "
                         f"got {wrong or 'no complete row'}")
    return calibrate_blocks(profile, unit_blocks(graph_units(units), block_of, profile.name), times)


# ------------------------------------------------------------------------------------- report

GRANULARITY_GRAPHS = {"fused": fuse, "raw": lambda g: g, "modules": lambda g: coarsen(g, "modules")}


def fit_model(model: str, granularity: str = "fused", measured: str | None = None,
              platform: Path = PLATFORM_FILE) -> BlockFit:
    """The block fit of an onnx-wheel model's roofline on ``platform`` at ``granularity`` (a
    model of :data:`MATCHES` or, for the report's diagnostic, of :data:`DIAGNOSTICS`)."""
    g = load_onnx(light_model_path(model))
    units = GRANULARITY_GRAPHS[granularity](g)
    profile = roofline_profile(units, load_platform(platform))
    match = MATCHES.get(model) or DIAGNOSTICS.get(model)
    return calibrate_operator_profile(g, units, profile, model, measured, match=match)[1]


def _pct(x: float) -> str:
    return f"{100 * x:+.0f}%"


def report_markdown() -> str:
    """results/costmodel/block_calibration.md: factors, residuals, matches and non-matches."""
    out = ["# Per-block calibration of operator-level graphs", "",
           "Written by `python -m pipeplan.profiles.block_calibration --write "
           "results/costmodel/block_calibration.md`; the module (profiles/block_calibration.py) explains "
           "every decision. Measured: " + DATA_SOURCE + "; top DVFS level of each PU. Roofline: "
           "profiles/platforms/a311d.json.", "",
           "f = measured block time / roofline sum of the block's units (the factor each unit is scaled by); "
           "F = the whole-network factor (one per PU, what the calibration applied before); "
           "dev = f / F - 1 (how far the roofline's share of a block is from the measured share); "
           "err = F x roofline / measured - 1 (the error the single factor made on that block's time). "
           "After per-block calibration every block's units sum to its measured time on L, B and G "
           "(to rounding); the NPU (N) keeps the roofline: it has no measurement of these networks. "
           "Part of a deviation can be the ONNX graph rather than the runtime (GoogLeNet's light graph has "
           "smaller maps from pool1 on, 26% fewer FLOPs in 5a and 5b; see the module docstring).", "",
           "## Matched networks", ""]
    out += markdown_table(["ONNX model", "measured", "blocks", "cut", "calibrates"],
                          [[m.model, m.measured, len(m.spans), m.cut_source, m.used_by] for m in MATCHES.values()])
    for m in list(MATCHES.values()) + list(DIAGNOSTICS.values()):
        out += _model_section(m, m.model in DIAGNOSTICS)
    out += ["", "## Not matched", ""]
    out += markdown_table(["measured", "why"], [[k, v] for k, v in NOT_MATCHED.items()])
    return "\n".join(out) + "\n"


def _model_section(m: BlockMatch, diagnostic: bool) -> list[str]:
    g = load_onnx(light_model_path(m.model))
    blocks = block_partition(g, m)
    fits = {gran: fit_model(m.model, gran) for gran in GRANULARITY_GRAPHS}
    fused = fits["fused"]
    title = f"{m.model} <-> {m.measured}" + (" (diagnostic only: not the same network)" if diagnostic else "")
    out = ["", f"## {title}", ""]
    if not diagnostic:
        out += [f"Block correspondence ({m.cut_source}): measured block k = these consecutive ONNX operators "
                "of the modules graph.", ""]
        out += markdown_table(["block", "layers", "ONNX nodes", "Conv/Concat/Gemm"],
                              [[f"b{k}", m.labels[k], f"{nodes[0]}..{nodes[-1]} ({len(nodes)})",
                                "/".join(map(str, layout_of(g, nodes)))] for k, nodes in enumerate(blocks)])
        out += [""]
    out += ["Per-block factors, fused graph (the default granularity): f, and dev in brackets.", ""]
    header = ["block", "layers"] + [f"{p} f (dev)" for p in fused.pus] + [f"{p} err" for p in fused.pus]
    body = [[f"b{k}", m.labels[k]]
            + [f"{fused.factors(p)[k]:.3f} ({_pct(fused.deviation(p)[k])})" for p in fused.pus]
            + [_pct(fused.single_factor_error(p)[k]) for p in fused.pus] for k in range(len(blocks))]
    body.append(["all", "whole network (F)"] + [f"{fused.whole(p):.3f}" for p in fused.pus] + ["" for _ in fused.pus])
    out += markdown_table(header, body, "ll" + "r" * 2 * len(fused.pus))
    out += ["", "Residuals per PU: median and max over blocks of |dev| and of |err|, and the block of the "
            "worst err.", ""]
    rows = []
    for gran, fit in fits.items():
        for p in fit.pus:
            r = fit.residuals(p)
            rows.append([gran, p, f"{r['whole']:.3f}", f"{100 * r['median_dev']:.1f}%", f"{100 * r['max_dev']:.1f}%",
                         f"{100 * r['median_err']:.1f}%", f"{100 * r['max_err']:.1f}%", f"b{r['worst_block']}"])
    out += markdown_table(["granularity", "PU", "F", "median dev", "max dev", "median err", "max err", "worst"],
                          rows, "llrrrrrl")
    for other in m.cross_checks:
        cross = fit_model(m.model, "fused", measured=other)
        out += ["", f"Cross-check: the same blocks measured in another campaign ({other}, top level). "
                "If the roofline's misallocation is systematic, the per-block deviations agree across campaigns; "
                "correlation of dev between the two, per PU:", ""]
        out += markdown_table(["PU", "correlation", "dev here", f"dev in {other}"],
                              [[p, f"{statistics.correlation(fused.deviation(p), cross.deviation(p)):.2f}",
                                " ".join(_pct(d) for d in fused.deviation(p)),
                                " ".join(_pct(d) for d in cross.deviation(p))]
                               for p in fused.pus if p in cross.pus], "lrll")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeplan.profiles.block_calibration",
                                     description="Per-block calibration report (markdown).")
    parser.add_argument("--write", type=Path, help="write the report to this file (atomically); "
                                                   "without it, print it")
    args = parser.parse_args(argv)
    text = report_markdown()
    if args.write:
        write_atomic(args.write, text)
        print(f"wrote {args.write}")
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

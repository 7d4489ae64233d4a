"""Synthetic operator-mapping instances of any size, for scaling runs and time-limit checks.

``synthetic_mapping(n_units, seed)``: a layered random DAG of exactly ``n_units`` operators on
the A311D platform file (4 PUs: big and little CPU clusters, GPU, and an NPU that runs only
part of the operator set). The graph is a chain of modules, each either a short chain of
operators or an inception-like fork: 2-4 parallel branches of 1-3 operators leaving the
previous module's last operator and joined by a Concat or Add. One source (the unit reading
the input) and one sink (a Softmax, the last unit). Same ``n_units`` and ``seed``, same
instance.

Costs are the roofline estimate of ``profiles/roofline.py`` (per operator
``max(flops / (peak x efficiency), bytes / bandwidth) + launch overhead``, bytes = parameters +
inputs + outputs, ``per_pu`` power), computed here with numpy over all operators at once so
that a 20,000-unit instance builds in a fraction of a second.
"""
from __future__ import annotations

import numpy as np

from pipeplan.core.errors import InputError, brief_value
from pipeplan.core.param_values import check_seed
from pipeplan.formulations.mapping.graph_limits import MAX_UNITS
from pipeplan.formulations.mapping.problem import Edge, MappingProblem, Unit
from pipeplan.formulations.mapping.profile import PU, AffineTransfer, Profile, Transfers
from pipeplan.instances.paths import PLATFORMS_DIR
from pipeplan.profiles.roofline import LEVEL, load_platform

PLATFORM = "a311d"
# op type -> draw weight inside branches and chains, FLOPs range, output bytes range
OPS = {"Conv": (0.45, (5e6, 2e8), (5e4, 8e5)), "Relu": (0.2, (1e4, 4e5), (5e4, 8e5)),
       "MaxPool": (0.1, (1e4, 3e5), (2e4, 4e5)), "BatchNormalization": (0.1, (2e4, 6e5), (5e4, 8e5)),
       "LRN": (0.1, (5e4, 1e6), (5e4, 8e5)), "Gemm": (0.05, (1e6, 5e7), (4e3, 4e4)),
       "Concat": (0.0, (1e4, 1e5), (5e4, 8e5)), "Add": (0.0, (1e4, 1e5), (5e4, 8e5)),
       "Softmax": (0.0, (1e3, 1e4), (4e3, 4e3))}
BODY = [op for op, (w, _, _) in OPS.items() if w > 0]
WEIGHTS = np.array([OPS[op][0] for op in BODY])


def _structure(n_units: int, rng: np.random.Generator) -> tuple[list[str], list[tuple[int, int]]]:
    """Op types of units 0..n-1 (a topological order) and the edges as index pairs."""
    body = iter(np.array(BODY)[rng.choice(len(BODY), size=n_units, p=WEIGHTS / WEIGHTS.sum())])
    ops, edges = ["Conv"], []
    tail = 0
    while (left := n_units - len(ops)) > 1:          # one place stays for the final Softmax
        widths = rng.integers(1, 4, size=rng.integers(2, 5))
        if rng.random() < 0.4 and widths.sum() + 1 <= left - 1:    # a fork: branches, then a join
            ends = []
            for width in widths:
                prev = tail
                for _ in range(width):
                    ops.append(str(next(body)))
                    edges.append((prev, len(ops) - 1))
                    prev = len(ops) - 1
                ends.append(prev)
            ops.append(("Concat", "Add")[int(rng.integers(2))])
            tail = len(ops) - 1
            edges += [(end, tail) for end in ends]
        else:                                                       # a short chain
            for _ in range(int(min(rng.integers(1, 4), left - 1))):
                ops.append(str(next(body)))
                edges.append((tail, len(ops) - 1))
                tail = len(ops) - 1
    ops.append("Softmax")
    edges.append((tail, len(ops) - 1))
    return ops, edges


def synthetic_mapping(n_units: int, seed: int = 0) -> MappingProblem:
    if isinstance(n_units, bool) or not isinstance(n_units, int) or not 2 <= n_units <= MAX_UNITS:
        # before the graph is drawn: 2 M units had taken 20 s and 2.2 GB before the problem's
        # own check refused them, 10**12 a MemoryError
        raise InputError("n_units", "", f"need 2 to {MAX_UNITS:,} units, got {brief_value(n_units)}")
    check_seed(seed)
    rng = np.random.default_rng(seed)
    ops, edges = _structure(n_units, rng)
    kind = np.array(ops)
    flops, out_bytes = np.empty(n_units), np.empty(n_units)
    for op, (_, flop_range, out_range) in OPS.items():
        mask = kind == op
        flops[mask] = rng.uniform(*flop_range, size=mask.sum())
        out_bytes[mask] = rng.uniform(*out_range, size=mask.sum())
    param_bytes = rng.uniform(0, 2e5, size=n_units)
    src, dst = np.array(edges).T
    in_bytes = np.bincount(dst, weights=out_bytes[src], minlength=n_units)
    moved = param_bytes + in_bytes + out_bytes

    platform = load_platform(PLATFORMS_DIR / f"{PLATFORM}.json")
    name = f"synthetic/mapping-n{n_units}" + (f"-seed{seed}" if seed else "")
    names = tuple(f"u{i}" for i in range(n_units))
    time_ms, power_mw = {}, {}
    for pu in platform.pus.values():
        t = (np.maximum(flops / (pu.peak_gflops * pu.efficiency * 1e9), moved / (pu.mem_bandwidth_gbs * 1e9)) * 1e3
             + pu.launch_overhead_ms)
        runs = np.array([pu.supports(op) for op in ops])
        time_ms[pu.name] = {LEVEL: tuple(float(x) if ok else None for x, ok in zip(t, runs))}
        power_mw[pu.name] = {LEVEL: tuple(pu.active_power_mw if ok else None for ok in runs)}
    profile = Profile(
        name=name, source=f"roofline estimate on platform {platform.name} ({platform.source})",
        power_model="per_pu",
        pus={p.name: PU(p.name, p.kind, (LEVEL,), p.idle_power_mw, p.description) for p in platform.pus.values()},
        units=names, time_ms=time_ms, power_mw=power_mw,
        transfers=Transfers(pairs={k: link.affine() for k, link in platform.links.items()},
                            default=platform.default_link.affine() if platform.default_link else AffineTransfer(),
                            power_mw=platform.transfer_power_mw),
        host_pu=platform.host_pu, notes="synthetic operator graph; roofline estimate per operator")
    units = tuple(Unit(name=names[i], op=ops[i], flops=float(flops[i]), param_bytes=float(param_bytes[i]),
                       out_bytes=float(out_bytes[i])) for i in range(n_units))
    return MappingProblem(name=name, units=units,
                          edges=tuple(Edge(names[a], names[b], float(out_bytes[a])) for a, b in edges),
                          profile=profile, source=f"pipeplan.instances.synthetic_mapping (seed {seed}, {PLATFORM})")

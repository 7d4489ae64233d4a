"""Roofline profiles: estimate what each unit of a DAG costs on each PU of a platform file.

A platform file is JSON with ``"schema": "pipeplan.platform/1"``::

    {
      "schema": "pipeplan.platform/1",
      "name": "a311d",
      "source": "...", "assumptions": "where each number comes from",
      "host_pu": "B",                                  # must support every operator
      "pus": {"N": {"kind": "npu", "peak_gflops": 5000, "mem_bandwidth_gbs": 12,
                    "efficiency": 0.12,                # fraction of peak on conv-like ops
                    "active_power_mw": 1500, "idle_power_mw": 100,
                    "launch_overhead_ms": 0.03,        # per operator
                    "supported_ops": ["Conv", ...],    # optional; absent: all operators
                    "description": "...",
                    "runtime": {"provider": "VSINPUExecutionProvider",   # optional, and
                                "threads": 1, "cores": [2, 3]}}, ...},   # so is each field
      "links": {"B->N": {"fixed_ms": 0.4, "gb_per_s": 1.5}, ...},
      "default_link": {"fixed_ms": 0.02, "gb_per_s": 5},   # for pairs not in links
      "transfer_power_mw": 0                              # optional
    }

Every ordered pair of distinct PUs needs a link, or a ``default_link``.

``runtime`` says how a deployed stage runs on the PU (``pipeplan export``/``run``): the ONNX
Runtime execution provider, the intra-op thread count, and the logical CPU ids (as Linux numbers
them, from 0) its threads are pinned to. The roofline ignores it.

The time of an operator on a PU is ``max(flops / (peak x efficiency), bytes / bandwidth)``
plus the launch overhead, where bytes = parameters + inputs + outputs. Two kinds of unit
hold several operators, and they cost differently:

* a *fused* unit (``fused=True``, from :mod:`fuse`: a Conv with its BatchNormalization and
  ReLU, ...) is ONE operator to the runtime, one kernel whose intermediates stay in registers
  or cache: it costs one operator with the members' summed FLOPs, the bytes of its parameters
  and of the activations entering and leaving the unit (not its intermediates), and one
  launch overhead;
* a *block* (a node with an ``inner`` operator graph and no ``fused`` flag, from
  :mod:`coarsen`: an Inception module) is executed operator by operator, so it costs the sum
  over its operators, intermediates and launches included.

Either runs on a PU only if every operator in its ``inner`` graph does (a fused unit's
``inner`` leaves out the constant operators folded at load time).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import networkx as nx

from pipeplan.core.errors import InputError
from pipeplan.core.io import check_fields, key_as_field, load_json
from pipeplan.formulations.mapping.profile import PU, AffineTransfer, Profile, Reader, Transfers, pu_name_fault

PLATFORM_SCHEMA = "pipeplan.platform/1"
LEVEL = "max"  # roofline profiles have one DVFS level: the top one
_PU_FIELDS = ("kind", "peak_gflops", "mem_bandwidth_gbs", "efficiency", "active_power_mw",
              "idle_power_mw", "launch_overhead_ms", "supported_ops", "description", "runtime")
_RUNTIME_FIELDS = ("provider", "threads", "cores")
MAX_THREADS = 4096      # intra-op threads of one ORT session, and CPU ids: beyond any real machine
_TOP_FIELDS = ("schema", "name", "source", "assumptions", "host_pu", "pus", "links",
               "default_link", "transfer_power_mw")


@dataclass(frozen=True)
class Runtime:
    """How to run a deployed stage on a PU; ``None`` fields fall back to the deploy defaults."""

    provider: str | None = None
    threads: int | None = None
    cores: tuple[int, ...] | None = None


@dataclass(frozen=True)
class PlatformPU:
    name: str
    kind: str
    peak_gflops: float
    mem_bandwidth_gbs: float
    efficiency: float
    active_power_mw: float
    idle_power_mw: float = 0.0
    launch_overhead_ms: float = 0.0
    supported_ops: frozenset[str] | None = None  # None: every operator
    description: str = ""
    runtime: Runtime = Runtime()

    def supports(self, op: str) -> bool:
        return self.supported_ops is None or op in self.supported_ops

    def op_time_ms(self, flops: float, nbytes: float) -> float:
        compute_s = flops / (self.peak_gflops * self.efficiency * 1e9)
        memory_s = nbytes / (self.mem_bandwidth_gbs * 1e9)
        return max(compute_s, memory_s) * 1e3 + self.launch_overhead_ms


@dataclass(frozen=True)
class Link:
    fixed_ms: float
    gb_per_s: float

    def affine(self) -> AffineTransfer:
        # 1 MB (1e6 bytes) at gb_per_s x 1e9 bytes/s takes 1e6 / (gb_per_s x 1e9) s.
        return AffineTransfer(fixed_ms=self.fixed_ms, ms_per_mb=1.0 / self.gb_per_s)


@dataclass(frozen=True)
class Platform:
    name: str
    source: str
    assumptions: str
    host_pu: str
    pus: dict[str, PlatformPU]
    links: dict[str, Link]
    default_link: Link | None = None
    transfer_power_mw: float = 0.0


# ---------------------------------------------------------------------------------- loading


def load_platform(path: str | Path) -> Platform:
    return platform_from_dict(load_json(path), str(path))


def platform_from_dict(doc: Any, source: str = "<platform>") -> Platform:
    r = Reader(source)
    doc = r.obj(doc, "")
    if doc.get("schema") != PLATFORM_SCHEMA:
        raise r.fail("schema", f"expected {PLATFORM_SCHEMA!r}, got {doc.get('schema')!r}")
    check_fields(doc, _TOP_FIELDS, r.source)
    pus = {name: _pu(r, name, spec) for name, spec in r.obj(r.get(doc, "pus", ""), "pus").items()}
    if not pus:
        raise r.fail("pus", "no processing units")
    host = r.string(r.get(doc, "host_pu", ""), "host_pu")
    if host not in pus:
        raise r.fail("host_pu", f"unknown PU {host!r}")
    if pus[host].supported_ops is not None:
        raise r.fail(f"pus.{host}.supported_ops", "the host PU must run every operator")

    links: dict[str, Link] = {}
    for key, spec in r.obj(doc.get("links", {}), "links").items():
        a, sep, b = key.partition("->")
        if not sep or a not in pus or b not in pus or a == b:
            raise r.fail(f"links.{key}", "expected 'SRC->DST' with two different declared PUs")
        links[key] = _link(r, spec, f"links.{key}")
    default = _link(r, doc["default_link"], "default_link") if "default_link" in doc else None
    if default is None:
        for a in pus:
            for b in pus:
                if a != b and f"{a}->{b}" not in links:
                    raise r.fail("links", f"no link {a}->{b} and no default_link")
    return Platform(name=r.name(doc["name"], "name") if "name" in doc else Path(source).stem,
                    source=str(doc.get("source", "")), assumptions=str(doc.get("assumptions", "")),
                    host_pu=host, pus=pus, links=links, default_link=default,
                    transfer_power_mw=r.number(doc.get("transfer_power_mw", 0.0),
                                               "transfer_power_mw"))


def _positive(r: Reader, spec: dict, key: str, fld: str) -> float:
    value = r.number(r.get(spec, key, fld), f"{fld}.{key}")
    if value <= 0:
        raise r.fail(f"{fld}.{key}", f"must be positive, got {value!r}")
    return value


def _pu(r: Reader, name: str, spec: Any) -> PlatformPU:
    fault = pu_name_fault(name)
    if fault:
        raise r.fail(f"pus.{key_as_field(name)}", fault)
    fld = f"pus.{name}"
    spec = r.obj(spec, fld)
    check_fields(spec, _PU_FIELDS, r.source, fld)
    efficiency = _positive(r, spec, "efficiency", fld)
    if efficiency > 1:
        raise r.fail(f"{fld}.efficiency", f"a fraction of peak must be at most 1, got {efficiency}")
    ops = spec.get("supported_ops")
    if ops is not None and (not isinstance(ops, list) or not ops
                            or not all(isinstance(o, str) and o for o in ops)):
        raise r.fail(f"{fld}.supported_ops", "expected a non-empty list of ONNX op types")
    return PlatformPU(
        name=name, kind=r.name(r.get(spec, "kind", fld), f"{fld}.kind"),
        peak_gflops=_positive(r, spec, "peak_gflops", fld),
        mem_bandwidth_gbs=_positive(r, spec, "mem_bandwidth_gbs", fld), efficiency=efficiency,
        active_power_mw=r.number(r.get(spec, "active_power_mw", fld), f"{fld}.active_power_mw"),
        idle_power_mw=r.number(spec.get("idle_power_mw", 0.0), f"{fld}.idle_power_mw"),
        launch_overhead_ms=r.number(spec.get("launch_overhead_ms", 0.0),
                                    f"{fld}.launch_overhead_ms"),
        supported_ops=frozenset(ops) if ops is not None else None,
        description=str(spec.get("description", "")),
        runtime=_runtime(r, spec.get("runtime", {}), f"{fld}.runtime"))


def _runtime(r: Reader, spec: Any, fld: str) -> Runtime:
    spec = r.obj(spec, fld)
    check_fields(spec, _RUNTIME_FIELDS, r.source, fld)
    provider = r.name(spec["provider"], f"{fld}.provider") if "provider" in spec else None
    threads = spec.get("threads")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                or not 1 <= threads <= MAX_THREADS):
        raise r.fail(f"{fld}.threads", f"expected an integer from 1 to {MAX_THREADS}, got {threads!r}")
    cores = spec.get("cores")
    if cores is not None:
        if (not isinstance(cores, list) or not cores
                or not all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c < MAX_THREADS for c in cores)):
            raise r.fail(f"{fld}.cores", "expected a non-empty list of CPU ids (integers from 0)")
        if len(set(cores)) != len(cores):
            raise r.fail(f"{fld}.cores", "a CPU id is listed twice")
        cores = tuple(cores)
    return Runtime(provider=provider, threads=threads, cores=cores)


def _link(r: Reader, spec: Any, fld: str) -> Link:
    spec = r.obj(spec, fld)
    check_fields(spec, ("fixed_ms", "gb_per_s"), r.source, fld)
    return Link(fixed_ms=r.number(spec.get("fixed_ms", 0.0), f"{fld}.fixed_ms"),
                gb_per_s=_positive(r, spec, "gb_per_s", fld))


# --------------------------------------------------------------------------------- profiles


def roofline_profile(g: nx.DiGraph, platform: Platform, name: str | None = None) -> Profile:
    """A one-level, ``per_pu`` power profile of the nodes of ``g`` (operators or blocks)."""
    index = {n: i for i, n in enumerate(g.nodes)}
    units = tuple(nx.lexicographical_topological_sort(g, key=index.__getitem__))
    time_ms: dict[str, dict[str, tuple]] = {}
    power_mw: dict[str, dict[str, tuple]] = {}
    for pu in platform.pus.values():
        times = tuple(_unit_time(g, u, pu) for u in units)
        time_ms[pu.name] = {LEVEL: times}
        power_mw[pu.name] = {LEVEL: tuple(None if t is None else pu.active_power_mw for t in times)}
    return Profile(
        name=name or f"{platform.name}/{g.graph.get('name', 'graph')}",
        source=f"roofline estimate on platform {platform.name} ({platform.source})",
        power_model="per_pu",
        pus={p.name: PU(p.name, p.kind, (LEVEL,), p.idle_power_mw, p.description)
             for p in platform.pus.values()},
        units=units, time_ms=time_ms, power_mw=power_mw,
        transfers=Transfers(
            pairs={k: link.affine() for k, link in platform.links.items()},
            default=platform.default_link.affine() if platform.default_link else AffineTransfer(),
            power_mw=platform.transfer_power_mw),
        host_pu=platform.host_pu,
        notes="time = max(flops / (peak x efficiency), bytes / bandwidth) + launch overhead, "
              "per operator (a fused unit counts as one operator, a block as the sum of its "
              f"operators). Platform assumptions: {platform.assumptions}")


def _unit_time(g: nx.DiGraph, unit: str, pu: PlatformPU) -> float | None:
    """One operator, a fused unit (one operator, see the module docstring) or a block (the sum
    of its operators); None where the PU cannot run one of its operators."""
    d = g.nodes[unit]
    inner = d.get("inner")
    host, ops = (inner, list(inner)) if inner is not None else (g, [unit])
    if not all(pu.supports(host.nodes[n]["op"]) for n in ops):
        return None
    if d.get("fused"):
        return pu.op_time_ms(d["flops"], d["param_bytes"] + _in_bytes(g, unit) + d["out_bytes"])
    return sum(pu.op_time_ms(host.nodes[n]["flops"], host.nodes[n]["param_bytes"]
                             + host.nodes[n]["out_bytes"] + _in_bytes(host, n)) for n in ops)


def _in_bytes(g: nx.DiGraph, n: str) -> float:
    """Input activation bytes of ``n``; graphs not from load_onnx fall back to in-edges."""
    d = g.nodes[n]
    return d["in_bytes"] if "in_bytes" in d else sum(e["bytes"] for *_, e in g.in_edges(n, data=True))


def calibrate(profile: Profile, measured_total_ms: dict[str, float]) -> Profile:
    """Scale each listed PU's times (every level) by one factor so that its total over the
    units it can run, at its top level, equals ``measured_total_ms[pu]``: a per-PU
    efficiency correction fitted to measurements (e.g. the Khadas block sums of GoogLeNet)."""
    factors: dict[str, float] = {}
    for pu, target in measured_total_ms.items():
        fld = f"measured_total_ms.{pu}"
        if pu not in profile.pus:
            raise InputError(profile.name, fld, f"unknown PU (PUs: {', '.join(profile.pus)})")
        if isinstance(target, bool) or not isinstance(target, (int, float)) \
                or not math.isfinite(target) or target <= 0:
            raise InputError(profile.name, fld, f"expected a positive time in ms, got {target!r}")
        current = sum(t for t in profile.time_ms[pu][profile.pus[pu].max_level] if t is not None)
        if current <= 0:
            raise InputError(profile.name, fld, "the PU has no positive time to scale")
        factors[pu] = target / current
    time_ms = {pu: {lv: tuple(None if t is None else t * factors.get(pu, 1.0) for t in ts)
                    for lv, ts in by_level.items()}
               for pu, by_level in profile.time_ms.items()}
    note = "calibrated per PU: " + ", ".join(f"{pu} x{f:.4g}" for pu, f in factors.items())
    return replace(profile, time_ms=time_ms,
                   notes=f"{profile.notes} {note}".strip() if factors else profile.notes)

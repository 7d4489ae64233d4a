"""Operator-mapping problem data (Para-Pipe): a DAG of units and a profile of their costs.

Plain frozen data; no solver code. Units are ONNX operators or groups of them (a fused unit,
fuse.py; a block, coarsen.py); the profile (``pipeplan.formulations.mapping.profile.Profile``)
says what each unit costs on each processing unit.

``Unit.members`` names the ONNX nodes a unit stands for, in topological order; empty means
the unit is itself one ONNX operator of that name (or a block with no ONNX model behind it,
as the measured Khadas blocks). Deployment expands a unit into its members. No node may be
in two units.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import networkx as nx

from pipeplan.core.errors import InputError
from pipeplan.formulations.mapping.graph_limits import check_graph_size
from pipeplan.formulations.mapping.profile import Profile, Reader, check_magnitudes, check_transfer_bytes


@dataclass(frozen=True)
class Unit:
    name: str
    op: str = "block"
    flops: float = 0.0
    param_bytes: float = 0.0
    out_bytes: float = 0.0
    members: tuple[str, ...] = ()   # ONNX node names, topological order; () = the unit itself

    @property
    def nodes(self) -> tuple[str, ...]:
        """The ONNX nodes this unit stands for: its members, or its own name."""
        return self.members or (self.name,)

    def to_dict(self) -> dict[str, Any]:
        """JSON form; ``members`` only when there are any (files of plain units stay as they were)."""
        out: dict[str, Any] = {"name": self.name, "op": self.op, "flops": self.flops,
                               "param_bytes": self.param_bytes, "out_bytes": self.out_bytes}
        if self.members:
            out["members"] = list(self.members)
        return out


@dataclass(frozen=True)
class Edge:
    src: str
    dst: str
    bytes: float | None = None


@dataclass(frozen=True)
class MappingProblem:
    """``units`` are listed in a topological order; the profile lists the same units in the
    same order, so unit *i* of the graph is column *i* of every profile table."""

    name: str
    units: tuple[Unit, ...]
    edges: tuple[Edge, ...]
    profile: Profile
    source: str = ""
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    kind = "mapping"

    def __post_init__(self):
        where = self.source or self.name
        check_graph_size(len(self.units), len(self.edges), where)
        sizes = Reader(where)      # flop counts and byte sizes: finite numbers >= 0
        names = [u.name for u in self.units]
        seen: set[str] = set()
        for i, u in enumerate(self.units):
            if u.name in seen:
                raise InputError(where, f"graph.units[{i}].name", f"duplicate unit name {u.name!r}")
            seen.add(u.name)
            for attr in ("flops", "param_bytes", "out_bytes"):
                sizes.number(getattr(u, attr), f"graph.units[{i}].{attr}")
        covered: dict[str, str] = {}     # ONNX node -> the unit that holds it
        for i, u in enumerate(self.units):
            if not isinstance(u.members, tuple) or not all(isinstance(m, str) and m for m in u.members):
                raise InputError(where, f"graph.units[{i}].members", "expected a list of ONNX node names")
            for m in u.nodes:
                if m in covered:
                    fld = f"graph.units[{i}].members" if u.members else f"graph.units[{i}].name"
                    raise InputError(where, fld, f"node {m!r} is already in unit {covered[m]!r} "
                                     "(a node belongs to one unit)")
                covered[m] = u.name
        index = {n: i for i, n in enumerate(names)}
        for i, e in enumerate(self.edges):
            for end in (e.src, e.dst):
                if end not in index:
                    raise InputError(where, f"graph.edges[{i}]", f"unknown unit {end!r}")
            if index[e.src] >= index[e.dst]:
                raise InputError(where, f"graph.edges[{i}]",
                                 f"edge {e.src}->{e.dst} goes against the unit order (cycle or unsorted units)")
            if e.bytes is not None:
                sizes.number(e.bytes, f"graph.edges[{i}].bytes")
        if tuple(names) != self.profile.units:
            missing = sorted(set(names) - set(self.profile.units))
            extra = sorted(set(self.profile.units) - set(names))
            what = (f"profile lacks units {missing[:5]}" if missing
                    else f"profile has unknown units {extra[:5]}" if extra
                    else "profile lists the units in another order")
            raise InputError(where, "profile.units", what)
        check_magnitudes(self.profile, where, "profile.")
        for i, e in enumerate(self.edges):
            if e.bytes is not None:
                check_transfer_bytes(self.profile, e.bytes, where, f"graph.edges[{i}].bytes")

    @cached_property
    def graph(self) -> nx.DiGraph:
        g = nx.DiGraph()
        for u in self.units:
            g.add_node(u.name, op=u.op, flops=u.flops, param_bytes=u.param_bytes, out_bytes=u.out_bytes)
        for e in self.edges:
            g.add_edge(e.src, e.dst, bytes=e.bytes)
        return g

    @cached_property
    def index(self) -> dict[str, int]:
        return {u.name: i for i, u in enumerate(self.units)}

    @cached_property
    def preds(self) -> dict[str, tuple[Edge, ...]]:
        out: dict[str, list[Edge]] = {u.name: [] for u in self.units}
        for e in self.edges:
            out[e.dst].append(e)
        return {k: tuple(v) for k, v in out.items()}

    @property
    def pu_names(self) -> tuple[str, ...]:
        return tuple(self.profile.pus)

    @property
    def is_chain(self) -> bool:
        names = [u.name for u in self.units]
        return set((e.src, e.dst) for e in self.edges) == set(zip(names, names[1:]))

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": "pipeplan.mapping-instance/1",
            "name": self.name,
            "source": self.source,
            "graph": {
                "units": [u.to_dict() for u in self.units],
                "edges": [{"src": e.src, "dst": e.dst, "bytes": e.bytes} for e in self.edges],
            },
            "profile": self.profile.to_dict(),
        }


def restrict_pus(problem: MappingProblem, pus: tuple[str, ...]) -> MappingProblem:
    """The same problem on a subset of the PUs. Raises InputError naming the first unit that no
    chosen PU can run (the request is infeasible), an unknown PU or one listed twice."""
    from dataclasses import replace

    prof = problem.profile
    for k, p in enumerate(pus):
        if p in pus[:k]:
            raise InputError("--pus", p, "listed twice")
        if p not in prof.pus:
            raise InputError("--pus", p, f"unknown PU (PUs: {', '.join(prof.pus)})")
    for i, u in enumerate(problem.units):
        if not any(prof.can_run(i, p) for p in pus):
            raise InputError("--pus", "", f"infeasible: unit {u.name} cannot run on any of {', '.join(pus)}")

    def keep(table: dict) -> dict:
        return {p: v for p, v in table.items() if p in pus}

    def keep_pairs(table: dict) -> dict:      # "SRC->DST" keys: the solvers index both PUs
        return {k: v for k, v in table.items() if all(p in pus for p in k.split("->"))}

    tr = prof.transfers
    transfers = replace(tr, measured={u: keep_pairs(m) for u, m in tr.measured.items()}, pairs=keep_pairs(tr.pairs),
                        switch=keep_pairs(tr.switch), level_scaling=keep_pairs(tr.level_scaling))
    sub = replace(prof, pus=keep(prof.pus), time_ms=keep(prof.time_ms), power_mw=keep(prof.power_mw),
                  input_stage=keep(prof.input_stage), output_stage=keep(prof.output_stage),
                  host_pu=prof.host_pu if prof.host_pu in pus else None, transfers=transfers,
                  reentry=keep(prof.reentry), whole_graph=keep(prof.whole_graph))
    return replace(problem, profile=sub, name=f"{problem.name}[{','.join(pus)}]")


def problem_from_graph(g, profile: Profile, name: str, source: str) -> MappingProblem:
    """The mapping problem of an operator graph (``onnx_graph.load_onnx``), or of its fused
    (``fuse.fuse``) or coarsened (``coarsen.coarsen``) graph, costed by ``profile``, whose
    units are the graph's nodes (in the profile's order). A node's ``members`` become the
    unit's, unless they are just the node itself."""
    missing = [u for u in profile.units if u not in g.nodes]
    if missing or len(profile.units) != g.number_of_nodes():
        extra = missing or sorted(set(g.nodes) - set(profile.units))
        raise InputError(profile.source or source, "units", f"the profile's units are not the model's operators "
                         f"({len(profile.units)} units, {g.number_of_nodes()} operators; e.g. {extra[0]!r})")
    def members(u: str) -> tuple[str, ...]:
        nodes = tuple(g.nodes[u].get("members", ()))
        return () if nodes == (u,) else nodes

    units = tuple(Unit(name=u, op=g.nodes[u]["op"], flops=float(g.nodes[u]["flops"]),
                       param_bytes=float(g.nodes[u]["param_bytes"]), out_bytes=float(g.nodes[u]["out_bytes"]),
                       members=members(u))
                  for u in profile.units)
    edges = tuple(Edge(a, b, float(d.get("bytes", 0.0))) for a, b, d in g.edges(data=True))
    return MappingProblem(name=name, units=units, edges=edges, profile=profile, source=source)

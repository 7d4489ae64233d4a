"""Cut a plan into runnable pieces: map its units onto the model's ONNX nodes, check it against
the model's operator DAG, then split each stage into branch groups, one sub-model each.

Units. A plan places the units of its instance. A unit with ``members`` (a fused unit, a
block: ``problem.Unit``) stands for those ONNX nodes: :func:`expand_plan` replaces it by them,
in the same stage, on the same PU, in topological order at the unit's place in the PU's
order. Every node of the model must be in exactly one unit and every member must be a node.

Branch groups. Inside stage *s* every unit gets a phase: 0 without same-stage predecessors,
else the maximum over them of (their phase + 1 if they run on another PU, + 0 on the same PU).
A group is the set of units with one (stage, PU, phase). An edge between two groups of a stage
strictly increases the phase (on another PU by construction; on the same PU because equal
phases would be the same group), so the groups form an acyclic graph and every group is convex:
no path leaves a group and comes back. Its sub-model is therefore exactly what lies between
its input and output tensors, which is how ``onnx.utils.Extractor`` cuts a model.
"""
from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from pipeplan.core.errors import InputError
from pipeplan.formulations.mapping.plan import Plan, Stage
from pipeplan.formulations.mapping.problem import MappingProblem


@dataclass(frozen=True)
class Group:
    id: str                     # "s<stage>.<PU>.p<phase>"
    stage: int
    pu: str
    phase: int
    nodes: tuple[str, ...]      # units, in the DAG's topological order
    inputs: tuple[str, ...]     # tensors read from other groups or the network input
    outputs: tuple[str, ...]    # tensors other groups read, network outputs, dangling ends
    depends_on: tuple[str, ...]  # groups of the same stage that produce some input


def unit_nodes(problem: MappingProblem, g: nx.DiGraph, source: str) -> dict[str, tuple[str, ...]]:
    """Unit -> the ONNX nodes of ``g`` it stands for. Raises InputError (``source``, field
    ``instance``) unless the units cover every node of ``g`` exactly once with nodes of ``g``."""
    model = g.graph.get("name", "?")
    out: dict[str, tuple[str, ...]] = {}
    for u in problem.units:
        for m in u.nodes:
            if m not in g:
                what = f"unit {u.name!r} holds node {m!r}" if u.members else f"unit {u.name!r}"
                raise InputError(source, "instance", f"{problem.name}: {what}, which is no node of model "
                                 f"{model!r} (the instance does not describe this model)")
        out[u.name] = u.nodes
    covered = {m for nodes in out.values() for m in nodes}
    missing = [n for n in g.nodes if n not in covered]
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise InputError(source, "instance", f"{problem.name}: node {missing[0]!r}{more} of model {model!r} "
                         f"{'are' if more else 'is'} in no unit (the instance does not describe this model)")
    return out


def expand_plan(plan: Plan, problem: MappingProblem, g: nx.DiGraph, source: str) -> Plan:
    """The plan on the ONNX nodes of ``g``: each unit of ``problem`` replaced by its members
    (see the module docstring). A plan whose instance has no unit with members is returned as
    it is (its units are the nodes; :func:`check_plan` checks it). Otherwise the plan is first
    checked at the level of units (fields as in the plan file), then expanded."""
    if not any(u.members for u in problem.units):
        return plan
    nodes = unit_nodes(problem, g, source)
    unit_of = {m: u for u, members in nodes.items() for m in members}
    units = nx.DiGraph(name=f"instance {problem.name}")
    units.add_nodes_from(nodes)
    for a, b, data in g.edges(data=True):
        ua, ub = unit_of[a], unit_of[b]
        if ua != ub:
            known = units.edges[ua, ub]["tensors"] if units.has_edge(ua, ub) else ()
            units.add_edge(ua, ub, tensors=tuple(dict.fromkeys(known + tuple(data["tensors"]))))
    check_plan(plan, units, source, what="unit")
    stages = tuple(Stage(stage.pus, {pu: tuple(m for u in order for m in nodes[u])
                                     for pu, order in stage.order.items()})
                   for stage in plan.stages)
    levels = {m: level for u, level in plan.levels.items() for m in nodes.get(u, (u,))}
    return Plan(stages, mode=plan.mode, levels=levels, shared_pus=plan.shared_pus, instance=plan.instance)


def check_plan(plan: Plan, g: nx.DiGraph, source: str, what: str = "node") -> None:
    """Raise InputError (``source``, the plan field) unless the plan places every node of
    ``g`` exactly once, only names nodes of ``g``, and never reads a tensor in a stage before
    the stage that produces it. ``what`` names the nodes in messages ("unit": ``g`` is the
    graph of an instance's units, :func:`expand_plan`)."""
    where: dict[str, str] = {}
    stage_of: dict[str, int] = {}
    for s, stage in enumerate(plan.stages):
        if not stage.units:
            raise InputError(source, f"stages[{s}]", "stage places no nodes")
        for pu, units in stage.order.items():
            if pu not in stage.pus:
                raise InputError(source, f"stages[{s}].order.{pu}",
                                 f"PU {pu!r} is not in stages[{s}].pus {list(stage.pus)}")
            for i, u in enumerate(units):
                fld = f"stages[{s}].order.{pu}[{i}]"
                if u not in g:
                    whole = (f"an operator of model {g.graph.get('name', '?')!r}" if what == "node"
                             else f"a unit of {g.graph.get('name', '?')}")
                    raise InputError(source, fld, f"unknown {what} {u!r} (not {whole})")
                if u in where:
                    raise InputError(source, fld, f"{what} {u!r} is already placed at {where[u]}")
                where[u], stage_of[u] = fld, s
    missing = [u for u in g.nodes if u not in where]
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        whole = "the model" if what == "node" else g.graph.get("name", "the instance")
        raise InputError(source, "stages", f"{what} {missing[0]!r}{more} of {whole} in no stage")
    for u, fld in where.items():
        for src in g.predecessors(u):
            if stage_of[src] > stage_of[u]:
                tensors = ", ".join(g.edges[src, u]["tensors"])
                raise InputError(source, fld, f"{what} {u!r} in stage {stage_of[u]} reads {tensors}, "
                                 f"which {what} {src!r} produces only in stage {stage_of[src]}")


def branch_groups(plan: Plan, g: nx.DiGraph) -> list[list[Group]]:
    """The groups of each stage (per stage: by phase, then by the stage's PU order); the plan
    must have passed :func:`check_plan`."""
    place = plan.placement()
    order = {u: i for i, u in enumerate(g.nodes)}  # load_onnx adds nodes in topological order
    phase: dict[str, int] = {}
    for u in g.nodes:
        s, pu = place[u]
        phase[u] = max((phase[p] + (place[p][1] != pu) for p in g.predecessors(u) if place[p][0] == s),
                       default=0)
    key_of = {u: (place[u][0], place[u][1], phase[u]) for u in g.nodes}
    members: dict[tuple[int, str, int], list[str]] = {}
    for u in g.nodes:
        members.setdefault(key_of[u], []).append(u)
    gid = {k: f"s{k[0]}.{k[1]}.p{k[2]}" for k in members}
    producer = {t: u for u in g.nodes for t in g.nodes[u]["out_tensors"]}
    readers: dict[str, set] = {}
    for u in g.nodes:
        for t in g.nodes[u]["in_tensors"]:
            readers.setdefault(t, set()).add(key_of[u])
    network_outputs = {name for name, *_ in g.graph["outputs"]}

    stages: list[list[Group]] = [[] for _ in plan.stages]
    for key, units in members.items():
        inside = set(units)
        inputs = dict.fromkeys(t for u in units for t in g.nodes[u]["in_tensors"]
                               if producer.get(t) not in inside)
        outputs = dict.fromkeys(t for u in units for t in g.nodes[u]["out_tensors"]
                                if readers.get(t, set()) - {key} or t in network_outputs
                                or g.out_degree(u) == 0)
        deps = dict.fromkeys(gid[key_of[producer[t]]] for t in inputs
                             if t in producer and key_of[producer[t]][0] == key[0])
        stages[key[0]].append(Group(gid[key], key[0], key[1], key[2],
                                    tuple(sorted(units, key=order.__getitem__)),
                                    tuple(inputs), tuple(outputs), tuple(deps)))
    for s, groups in enumerate(stages):
        pu_rank = {pu: i for i, pu in enumerate(plan.stages[s].pus)}
        groups.sort(key=lambda grp: (grp.phase, pu_rank[grp.pu]))
    return stages

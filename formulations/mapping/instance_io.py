"""Loading mapping instances from their JSON file (``pipeplan.mapping-instance/1``).

An instance holds the unit graph and either an inline profile or a path to a profile file,
relative to the instance file and inside its folder (links followed; only the shipped catalogue
instances, ``trusted``, point at the shared profiles/ folder beside them). A unit may list ``members``: the ONNX nodes it stands for (a
fused unit or a block; see ``problem.Unit``); a list of names, none in two units.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeplan.core.errors import InputError, brief_value
from pipeplan.core.io import check_fields, check_name, exists_safely, inside_folder, load_json
from pipeplan.formulations.mapping.graph_limits import check_graph_size
from pipeplan.formulations.mapping.problem import Edge, MappingProblem, Unit
from pipeplan.formulations.mapping.profile import SCHEMA as PROFILE_SCHEMA
from pipeplan.formulations.mapping.profile import Reader, load_profile, profile_from_dict

INSTANCE_SCHEMA = "pipeplan.mapping-instance/1"
UNIT_FIELDS = ("name", "op", "flops", "param_bytes", "out_bytes", "members")    # what Unit.to_dict writes


def problem_from_dict(doc: Any, source: str, base: Path | None = None, *, trusted: bool = False) -> MappingProblem:
    if not isinstance(doc, dict):
        raise InputError(source, "", "expected a JSON object")
    if doc.get("schema") == PROFILE_SCHEMA:
        raise InputError(source, "schema", "a profile, not an instance: make one with `pipeplan instance MODEL "
                                           f"--profile {source} --out my.json`")
    if doc.get("schema") != INSTANCE_SCHEMA:
        raise InputError(source, "schema", f"unsupported schema {doc.get('schema')!r} (expected {INSTANCE_SCHEMA!r})")
    check_fields(doc, ("schema", "name", "source", "graph", "profile"), source)   # what to_dict writes
    graph = doc.get("graph")
    if not isinstance(graph, dict):
        raise InputError(source, "graph", "missing or not an object")
    check_fields(graph, ("units", "edges"), source, "graph")
    units_raw = graph.get("units")
    if not isinstance(units_raw, list) or not units_raw:
        raise InputError(source, "graph.units", "expected a non-empty list")
    edges_raw = graph.get("edges", [])
    check_graph_size(len(units_raw), len(edges_raw) if isinstance(edges_raw, list) else 0, source)   # before parsing
    r = Reader(source)
    units = []
    for i, u in enumerate(units_raw):
        if not isinstance(u, dict) or not isinstance(u.get("name"), str):
            raise InputError(source, f"graph.units[{i}].name", "missing unit name")
        check_name(u["name"], source, f"graph.units[{i}].name", capped=False)   # printed in tables, plans and errors
        check_fields(u, UNIT_FIELDS, source, f"graph.units[{i}]")
        members = u.get("members", [])
        if not isinstance(members, list) or not all(isinstance(m, str) and m for m in members):
            raise InputError(source, f"graph.units[{i}].members", "expected a list of ONNX node names")
        if len(set(members)) != len(members):
            twice = next(m for m in members if members.count(m) > 1)
            raise InputError(source, f"graph.units[{i}].members", f"node {twice!r} is listed twice")
        # JSON numbers only (not text, not bools), finite once a float: 10**400 had been an
        # OverflowError traceback and "1e300" taken as a number
        size = {k: r.number(u.get(k, 0.0), f"graph.units[{i}].{k}") for k in ("flops", "param_bytes", "out_bytes")}
        units.append(Unit(name=u["name"], op=str(u.get("op", "block")), members=tuple(members), **size))
    edges = []
    if not isinstance(edges_raw, list):
        raise InputError(source, "graph.edges", "expected a list of {src, dst, bytes}")
    seen: dict[tuple[str, str], int] = {}
    for i, e in enumerate(edges_raw):
        if not isinstance(e, dict) or not isinstance(e.get("src"), str) or not isinstance(e.get("dst"), str):
            raise InputError(source, f"graph.edges[{i}]", "expected {src, dst, bytes}")
        check_fields(e, ("src", "dst", "bytes"), source, f"graph.edges[{i}]")
        # a second entry had silently replaced the first's bytes in the evaluator (the solvers kept both)
        first = seen.setdefault((e["src"], e["dst"]), i)
        if first != i:
            raise InputError(source, f"graph.edges[{i}]", f"edge {brief_value(e['src'])} -> {brief_value(e['dst'])} "
                                                          f"is listed twice (also graph.edges[{first}])")
        edges.append(Edge(e["src"], e["dst"], r.number(e.get("bytes"), f"graph.edges[{i}].bytes", allow_none=True)))
    prof = doc.get("profile")
    if isinstance(prof, str):
        folder = base or Path(".")
        path = folder / prof if trusted else inside_folder(folder, prof, source, "profile")
        if not exists_safely(path, file=True):
            raise InputError(source, "profile", f"no profile file {str(path)!r}")
        profile = load_profile(path)
    else:
        profile = profile_from_dict(prof, f"{source}:profile")
    name = check_name(doc["name"], source, "name") if "name" in doc else Path(source).stem   # null had been "None"
    return MappingProblem(name=name, units=tuple(units),
                          edges=tuple(edges), profile=profile, source=source)


def load_problem_file(path: str | Path, *, trusted: bool = False) -> MappingProblem:
    """``trusted``: a shipped catalogue instance, whose profile lies in the package's profiles/.
    Its profile is found beside the file itself, links followed: a link to a shipped instance in
    someone's folder had read its ``../../profiles/...`` there, outside the link's folder."""
    path = Path(path)
    base = path.resolve().parent if trusted else path.parent
    return problem_from_dict(load_json(path), str(path), base=base, trusted=trusted)

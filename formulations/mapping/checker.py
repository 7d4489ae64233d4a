"""Feasibility checker for mapping plans: lists every violated rule, not just the first."""
from __future__ import annotations

from pipeplan.formulations.mapping.plan import Plan
from pipeplan.formulations.mapping.problem import MappingProblem


def violations(problem: MappingProblem, plan: Plan) -> list[str]:
    """Every rule the plan breaks, as readable lines; an empty list means feasible.

    Rules: each unit on exactly one (stage, PU); the PU belongs to its stage and to the
    platform; the unit can run on that PU at its DVFS level; stage indices never decrease along
    an edge; no empty stage; PU sets of stages disjoint unless ``plan.shared_pus``; the order on
    each PU never puts a unit before one of its ancestors in the same stage.
    """
    out: list[str] = []
    prof = problem.profile
    seen: dict[str, tuple[int, str]] = {}
    for s, stage in enumerate(plan.stages):
        if not stage.units:
            out.append(f"stage {s} has no units")
        if len(set(stage.pus)) != len(stage.pus):
            out.append(f"stage {s} lists a PU twice")
        for pu in stage.pus:
            if pu not in prof.pus:
                out.append(f"stage {s}: unknown PU {pu!r}")
        for pu, units in stage.order.items():
            if pu not in stage.pus:
                out.append(f"stage {s}: units ordered on PU {pu!r}, which the stage does not own")
            for u in units:
                if u not in problem.index:
                    out.append(f"stage {s}: unknown unit {u!r}")
                elif u in seen:
                    out.append(f"unit {u} placed twice (stage {seen[u][0]} PU {seen[u][1]} and stage {s} PU {pu})")
                else:
                    seen[u] = (s, pu)
    for u in problem.index:
        if u not in seen:
            out.append(f"unit {u} is not placed")
    if not plan.shared_pus:
        owner: dict[str, int] = {}
        for s, stage in enumerate(plan.stages):
            for pu in stage.pus:
                if pu in owner:
                    out.append(f"PU {pu} serves stages {owner[pu]} and {s} (plan does not allow shared PUs)")
                owner.setdefault(pu, s)
    for u in plan.levels:     # a level for a unit the instance lacks had been ignored
        if u not in problem.index:
            out.append(f"levels: unknown unit {u!r}")
    for u, (s, pu) in seen.items():
        if pu not in prof.pus or u not in problem.index:
            continue
        level = plan.levels.get(u, "max")
        try:
            lv = prof.level(pu, level)
        except KeyError:
            out.append(f"unit {u}: PU {pu} has no DVFS level {level!r}")
            continue
        if prof.time(problem.index[u], pu, lv) is None:
            out.append(f"unit {u} cannot run on PU {pu} at level {lv} (no time in the profile)")
    for e in problem.edges:
        if e.src in seen and e.dst in seen and seen[e.src][0] > seen[e.dst][0]:
            out.append(f"edge {e.src}->{e.dst} goes backwards: stage {seen[e.src][0]} -> {seen[e.dst][0]}")
    g = problem.graph
    for s, stage in enumerate(plan.stages):
        for pu, units in stage.order.items():
            pos = {u: i for i, u in enumerate(units)}
            for e in problem.edges:
                if e.src in pos and e.dst in pos and pos[e.src] > pos[e.dst]:
                    out.append(f"stage {s}, PU {pu}: {e.dst} ordered before its predecessor {e.src}")
        # cross-PU orders can still deadlock (a waits on b's PU, b on a's): detect by simulation
        if not out and _deadlocks(g, stage):
            out.append(f"stage {s}: the per-PU orders deadlock against the precedence edges")
    return out


def _deadlocks(g, stage) -> bool:
    members = set(stage.units)
    heads = {pu: 0 for pu in stage.order}
    done: set[str] = set()
    progressed = True
    while progressed:
        progressed = False
        for pu, units in stage.order.items():
            i = heads[pu]
            if i < len(units) and all(p in done or p not in members for p in g.predecessors(units[i])):
                done.add(units[i])
                heads[pu] += 1
                progressed = True
    return len(done) < len(members)


def is_feasible(problem: MappingProblem, plan: Plan) -> bool:
    return not violations(problem, plan)

"""Tiny multi-network instances built in code, small enough to enumerate every joint plan."""
import itertools

from pipeplan.formulations.mapping.evaluator import InfeasiblePlan
from pipeplan.formulations.mapping.multi.evaluator import evaluate_joint
from pipeplan.formulations.mapping.multi.plan import JointPlan
from pipeplan.formulations.mapping.multi.problem import MultiProblem, Network
from pipeplan.formulations.mapping.plan import plan_from_assignment
from pipeplan.formulations.mapping.problem import Edge, MappingProblem, Unit
from pipeplan.formulations.mapping.profile import profile_from_dict
from pipeplan.solvers.mapping.multi.common import objective_value


def chain(name: str, times: dict[str, list], *, kinds: dict[str, str] | None = None, transfer: float = 0.5,
          reentry: dict[str, float] | None = None, whole_graph: dict[str, float] | None = None,
          edges=None) -> MappingProblem:
    """A network of ``len(times[pu])`` units (a chain unless ``edges``: index pairs) costed by
    ``times`` (PU -> ms per unit, None where the PU cannot run it), one level per PU, board power
    with a static part (so the energy objective has a static share), input and output phases."""
    pus = list(times)
    n = len(times[pus[0]])
    units = [f"{name}{i}" for i in range(n)]
    pairs = edges if edges is not None else [(i, i + 1) for i in range(n - 1)]
    doc = {
        "schema": "pipeplan.profile/1", "name": name, "power_model": "board", "static_power_mw": 300.0,
        "pus": {p: {"kind": (kinds or {}).get(p, "cpu"), "levels": ["max"]} for p in pus},
        "units": units,
        "time_ms": {p: {"max": times[p]} for p in pus},
        "power_mw": {p: {"max": [None if t is None else 1000.0 + 200 * k for t in times[p]]}
                     for k, p in enumerate(pus)},
        "input_stage": {p: {"max": {"time_ms": 0.4, "power_mw": 900.0}} for p in pus},
        "output_stage": {p: {"max": {"time_ms": 0.2, "power_mw": 900.0}} for p in pus},
        "transfers": {"default": {"fixed_ms": transfer, "ms_per_mb": 0.0}, "power_mw": 700.0},
        "reentry": reentry or {}, "whole_graph": whole_graph or {},
    }
    prof = profile_from_dict(doc, name)
    return MappingProblem(name=name, units=tuple(Unit(u) for u in units),
                          edges=tuple(Edge(units[a], units[b], None) for a, b in pairs), profile=prof, source=name)


def tiny_pair(sharing: str = "time_shared", **network_fields) -> MultiProblem:
    """Two chains of three units on PUs A, B (CPUs) and N (an NPU with re-entry and a
    whole-graph speed-up, which the second network's last unit cannot use). ``network_fields``:
    name -> dict of Network fields (weight, latency_ms, min_fps)."""
    a = chain("a", {"A": [3.0, 4.0, 2.0], "B": [4.0, 3.0, 3.0], "N": [1.5, 1.0, 2.5]}, kinds={"N": "npu"},
              reentry={"N": 1.0}, whole_graph={"N": 0.6})
    b = chain("b", {"A": [2.0, 5.0, 3.0], "B": [3.0, 4.0, 2.0], "N": [1.0, 1.5, None]}, kinds={"N": "npu"},
              reentry={"N": 1.0})
    nets = tuple(Network(name=p.name, problem=p, **network_fields.get(p.name, {})) for p in (a, b))
    return MultiProblem(name="tiny-pair", networks=nets, sharing=sharing)


def chain_plans(problem: MappingProblem, shared_pus: bool = False):
    """Every plan of the chain with one PU per unit (a stage per run of one PU); with
    ``shared_pus`` a PU may hold several runs."""
    names = tuple(u.name for u in problem.units)
    pus = list(problem.profile.pus)
    for combo in itertools.product(pus, repeat=len(names)):
        if not all(problem.profile.can_run(i, p) for i, p in enumerate(combo)):
            continue
        stage_of, s = {}, 0
        for i, u in enumerate(names):
            s += i > 0 and combo[i] != combo[i - 1]
            stage_of[u] = s
        if len(set(combo)) < s + 1 and not shared_pus:
            continue
        yield plan_from_assignment(names, stage_of, dict(zip(names, combo)),
                                   shared_pus=len(set(combo)) < s + 1, instance=problem.name)


def brute_force(problem: MultiProblem, objective: str, shared_pus: bool = False) -> float | None:
    """The best value of ``objective`` over every joint plan of one PU per unit (None: none feasible)."""
    per_net = [list(chain_plans(n.problem, shared_pus)) for n in problem.networks]
    maximise = objective != "energy"
    best = None
    for combo in itertools.product(*per_net):
        plan = JointPlan({n.name: p for n, p in zip(problem.networks, combo)}, instance=problem.name)
        try:
            value = objective_value(evaluate_joint(problem, plan), objective)
        except InfeasiblePlan:
            continue
        if best is None or (value > best if maximise else value < best):
            best = value
    return best

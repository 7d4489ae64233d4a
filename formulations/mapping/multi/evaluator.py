"""The one cost model of the multi-network problem: scores a joint plan on every objective.

Each network's plan is scored by the single-network evaluator (formulations/mapping/evaluator),
giving its period P_i, latency L_i, energy per frame, summed phase time and its busy time per
frame b_ip on every PU p: the units' times on p plus the transfers into p. A transfer belongs to
the receiving stage (its time is in that stage's time, evaluator.py), which holds its PUs while
it waits for its input; without that charge, spreading a network over many PUs would look free
to the capacity rule below. A network alone keeps its single-network period: a PU that serves
one stage is busy at most that stage's time. The networks then share the SoC:

* **Capacity.** Network i runs at r_i frames/s: r_i <= 1000 / P_i (its own pipeline), and every
  PU fits all networks' work, sum_i r_i b_ip <= 1000 ms per second. A partitioned plan has one
  network per PU, so the second rule is the first.
* **Eviction** (time-shared only). A PU with a re-entry factor (the NPU keeps one compiled graph
  warm) that runs units of two or more networks finds another network's graph loaded at every
  frame: the first unit of every segment there is cold (evaluator.time_factors, ``evicted``).
* **Worst-case latency** (time-shared only). A frame of network i may, on every PU it uses,
  wait for one frame's work of every other network on that PU (stage jobs run to completion
  on a PU, each network has at most one frame queued per PU at a sustainable rate):
  W_i = L_i + sum over PUs p that i uses of sum_{j != i} b_jp. Partitioned plans wait for
  nobody: W_i = L_i. Deadlines (``latency_ms``) bound W_i.
* **Demands.** With ``min_fps`` given, the plan must serve every network at its demanded rate at
  once: P_i <= 1000 / min_fps_i and sum_i min_fps_i b_ip <= 1000 on every PU.

Objectives (pipeplan.core.vocabulary.MULTI_OBJECTIVES), each at the rates that serve it best:

* ``fairness`` (HaX-CoNN): the largest t such that every network runs at t x its reference rate
  (normalised throughput t): 1 / t = max(max_i P_i / Pref_i, max_p sum_i b_ip / Pref_i), with
  Pref_i = 1000 / reference_fps_i. Linear in the plan's times: what the exact models use.
* ``total``: max sum_i w_i r_i over the capacity rules and r_i >= min_fps_i (a small LP).
* ``rate`` (Puzzle): the largest common rate every network sustains at once:
  1000 / max(max_i P_i, max_p sum_i b_ip); the deadlines hold for every feasible plan.
* ``energy``: board power (mW) at the demanded rates (every network needs ``min_fps``). With a
  board power model and a static board power P_s (SoC on, idle) the SoC pays P_s once, and each
  network its dynamic energy per frame, D_i = E_i - P_s x (phase time)_i: power = P_s +
  sum_i min_fps_i D_i. Without a static power each network's energy per frame is charged in full.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable

import numpy as np

from pipeplan.core.errors import InputError
from pipeplan.core.io import load_json
from pipeplan.formulations.mapping.checker import violations as single_violations
from pipeplan.formulations.mapping.evaluator import Evaluation, InfeasiblePlan, evaluate
from pipeplan.formulations.mapping.multi.plan import JointPlan, joint_plan_from_dict
from pipeplan.formulations.mapping.multi.problem import MultiProblem, Network, reference_fps

TOL = 1e-9


@dataclass
class NetworkScore:
    period_ms: float
    latency_ms: float
    worst_latency_ms: float
    energy_mj: float
    dynamic_mj: float
    reference_fps: float
    busy_ms: dict[str, float]
    pus: list[str]


@dataclass
class JointEvaluation:
    networks: dict[str, NetworkScore]
    pu_load_ms: dict[str, float]              # sum over networks of busy ms per frame, per PU
    min_norm_throughput: float
    fair_fps: dict[str, float]                # the rates of the fairness objective
    sustained_fps: float
    power_mw: float | None                    # None without min_fps on every network
    problem: MultiProblem = field(repr=False)
    details: dict[str, Evaluation] = field(default_factory=dict, repr=False)

    @cached_property
    def total_fps(self) -> dict[str, float]:
        """The rates of the total objective (an LP, solved when first asked for)."""
        return _max_weighted_rates(self.problem, self.networks)

    @property
    def weighted_fps(self) -> float:
        return sum(n.weight * self.total_fps[n.name] for n in self.problem.networks)

    def objectives(self) -> dict[str, float]:
        out = {"min_norm_throughput": self.min_norm_throughput, "weighted_fps": self.weighted_fps,
               "sustained_fps": self.sustained_fps}
        if self.power_mw is not None:
            out["power_mw"] = self.power_mw
        return out

    def to_dict(self) -> dict:
        return {**self.objectives(), "pu_load_ms": self.pu_load_ms, "fair_fps": self.fair_fps,
                "total_fps": self.total_fps,
                "networks": {n: vars(s) for n, s in self.networks.items()}}


def evicted_pus(problem: MultiProblem, plan: JointPlan) -> dict[str, frozenset[str]]:
    """network -> its re-entry PUs that another network uses too (time-shared plans only)."""
    used = {n.name: plan.pus_of(n.name) for n in problem.networks if n.name in plan.plans}
    out = {}
    for n in problem.networks:
        others = set().union(*(u for m, u in used.items() if m != n.name))
        shared = {p for p in used.get(n.name, ()) if p in others and p in n.problem.profile.reentry}
        out[n.name] = frozenset(shared if problem.sharing == "time_shared" else ())
    return out


def violations(problem: MultiProblem, plan: JointPlan, *, single: bool = True) -> list[str]:
    """Every rule the joint plan breaks, but the demands and deadlines (they need the plans'
    times: :func:`evaluate_joint` checks them); empty means feasible. ``single``: also each
    network's own rules (a caller that built the plans from feasible ones may skip them)."""
    out: list[str] = []
    names = [n.name for n in problem.networks]
    for n in names:
        if n not in plan.plans:
            out.append(f"no plan for network {n}")
    for n in plan.plans:
        if n not in names:
            out.append(f"plan for unknown network {n!r} (networks: {', '.join(names)})")
    for net in problem.networks if single else ():
        if net.name in plan.plans:
            out += [f"{net.name}: {v}" for v in single_violations(net.problem, plan.plans[net.name])]
    if problem.sharing == "partitioned" and not out:
        owner: dict[str, str] = {}
        for n in names:
            for p in sorted(plan.pus_of(n)):
                if p in owner:
                    out.append(f"PU {p} serves {owner[p]} and {n}: partitioned PUs serve one network")
                owner.setdefault(p, n)
    return out


def evaluate_joint(problem: MultiProblem, plan: JointPlan,
                   network_eval: Callable[[Network, frozenset[str]], Evaluation] | None = None) -> JointEvaluation:
    """Score a joint plan; raises InfeasiblePlan listing every broken rule, demands and
    deadlines included. ``network_eval(network, evicted)``: scores the network's plan in
    ``plan`` (a cache of single-network evaluations, as brute force keeps); default: the
    checker and the single-network evaluator."""
    bad = violations(problem, plan, single=network_eval is None)
    if bad:
        raise InfeasiblePlan(bad)
    evicted = evicted_pus(problem, plan)
    pus = problem.pu_names
    if network_eval is None:
        def network_eval(net: Network, gone: frozenset[str]) -> Evaluation:
            return evaluate(net.problem, plan.plans[net.name], check=False, evicted=gone)
    details = {n.name: network_eval(n, evicted[n.name]) for n in problem.networks}
    busy = {n.name: pu_time(details[n.name]) for n in problem.networks}
    load = {p: sum(b.get(p, 0.0) for b in busy.values()) for p in pus}
    scores: dict[str, NetworkScore] = {}
    for net in problem.networks:
        ev = details[net.name]
        used = sorted(plan.pus_of(net.name), key=pus.index)
        wait = 0.0
        if problem.sharing == "time_shared":
            wait = sum(load[p] - busy[net.name].get(p, 0.0) for p in used)
        static = net.problem.profile.static_power_mw
        dyn = ev.energy_mj - (static * ev.phases_ms / 1000.0 if _board_static(net) else 0.0)
        scores[net.name] = NetworkScore(period_ms=ev.period_ms, latency_ms=ev.latency_ms,
                                        worst_latency_ms=ev.latency_ms + wait, energy_mj=ev.energy_mj,
                                        dynamic_mj=dyn, reference_fps=reference_fps(net),
                                        busy_ms=busy[net.name], pus=used)
    bad = demand_violations(problem, scores, load)
    if bad:
        raise InfeasiblePlan(bad)

    nets = problem.networks
    pref = {n.name: 1000.0 / scores[n.name].reference_fps for n in nets}
    inv_t = max([scores[n].period_ms / pref[n] for n in pref]
                + [sum(scores[n].busy_ms.get(p, 0.0) / pref[n] for n in pref) for p in pus])
    fair = {n: 1000.0 / (inv_t * pref[n]) for n in pref}
    common = max([s.period_ms for s in scores.values()] + list(load.values()))
    power = None
    if all(n.min_fps is not None for n in nets):
        static = max((n.problem.profile.static_power_mw or 0.0) if _board_static(n) else 0.0 for n in nets)
        power = static + sum(n.min_fps * scores[n.name].dynamic_mj for n in nets)
    return JointEvaluation(networks=scores, pu_load_ms={p: v for p, v in load.items() if v > 0},
                           min_norm_throughput=1.0 / inv_t, fair_fps=fair, sustained_fps=1000.0 / common,
                           power_mw=power, problem=problem, details=details)


def pu_time(ev: Evaluation) -> dict[str, float]:
    """PU -> ms per frame: the units' times there plus the transfers into it."""
    out = dict(ev.pu_busy_ms)
    for pu, ms in ev.copy_ms.items():
        out[pu] = out.get(pu, 0.0) + ms
    return out


def _board_static(net: Network) -> bool:
    prof = net.problem.profile
    return prof.power_model == "board" and prof.static_power_mw is not None


def demand_violations(problem: MultiProblem, scores: dict[str, NetworkScore], load: dict[str, float]) -> list[str]:
    """Broken deadlines and demanded rates (module docstring)."""
    out = []
    for net in problem.networks:
        s = scores[net.name]
        if net.latency_ms is not None and s.worst_latency_ms > net.latency_ms * (1 + TOL):
            out.append(f"{net.name}: worst-case latency {s.worst_latency_ms:.2f} ms exceeds its deadline "
                       f"{net.latency_ms:g} ms")
        if net.min_fps is not None and s.period_ms * net.min_fps > 1000.0 * (1 + TOL):
            out.append(f"{net.name}: period {s.period_ms:.2f} ms cannot serve the demanded {net.min_fps:g} fps")
    if any(n.min_fps is not None for n in problem.networks):
        for p in load:
            demand = sum((n.min_fps or 0.0) * scores[n.name].busy_ms.get(p, 0.0) for n in problem.networks)
            if demand > 1000.0 * (1 + TOL):
                out.append(f"PU {p} is {demand / 10:.1f}% busy at the demanded rates")
    return out


def _max_weighted_rates(problem: MultiProblem, scores: dict[str, NetworkScore]) -> dict[str, float]:
    """max sum w_i r_i subject to the capacity rules and the demanded rates (HiGHS through SciPy)."""
    from scipy.optimize import linprog

    nets = problem.networks
    upper = [1000.0 / scores[n.name].period_ms for n in nets]
    if problem.sharing == "partitioned":
        return {n.name: u for n, u in zip(nets, upper)}
    pus = sorted({p for s in scores.values() for p in s.busy_ms})
    a = np.array([[scores[n.name].busy_ms.get(p, 0.0) for n in nets] for p in pus])
    bounds = [(n.min_fps or 0.0, u) for n, u in zip(nets, upper)]
    res = linprog(c=[-n.weight for n in nets], A_ub=a, b_ub=np.full(len(pus), 1000.0), bounds=bounds,
                  method="highs")
    if res.status != 0:    # only reachable when the demands do not fit, which evaluate_joint rejects first
        raise InfeasiblePlan([f"no rates serve the demands ({res.message})"])
    return {n.name: float(r) for n, r in zip(nets, res.x)}


def evaluate_plan_file(problem: MultiProblem, path) -> tuple[JointPlan, JointEvaluation]:
    """The joint plan in ``path`` (a joint plan or a SolveResult file) and its evaluation; an
    unreadable or infeasible plan is an InputError naming the file (field ``plans``)."""
    joint = joint_plan_from_dict(load_json(path), str(path))
    try:
        return joint, evaluate_joint(problem, joint)
    except InfeasiblePlan as exc:
        raise InputError(str(path), "plans", f"infeasible for {problem.name}: {exc}") from None

"""Exact search on chains: the variants of ``chain_options.py``, each a linear model
(``cpsat_chain.py`` or ``milp_chain.py``), minimised one after another, and the steady-state
energy by a branch and bound over the period's share of the latency.

**Linear objectives** (period, latency, energy per frame) under caps: each variant is solved with
the objective capped at the best plan so far; the optimum is the least over the variants (they
partition the plan space and each scores its plans exactly, ``chain_options``), the certified
bound the least of the variants' bounds. A tie-break objective then gets the same treatment
with the primary capped at its optimum.

**Steady-state energy** (``energy_ss``). On a chain the summed phase time is the latency L, so
with P the period, E the energy per frame, D = E - P_s L the dynamic energy and u = P / L the
period's share of the latency (1 / the concurrency),

    E_ss = P_s P + D (gamma + (1 - gamma) u) = gamma P_s P + (gamma + (1 - gamma) u) E - gamma P_s L,

a product of the energy and the share. For plans whose share lies in [u1, u2] (E >= 0),

    E_ss >= gamma P_s P + (gamma + (1 - gamma) u1) E - gamma P_s L =: lin_u1,

which is linear, and the window u1 L <= P <= u2 L is linear too (the model's P may exceed the
plan's period, which only raises lin for plans outside the window). So the search keeps
intervals of u per variant (at first [1 / stages, 1]: L <= stages x P), repeatedly takes the
interval with the least lower bound, minimises lin over its plans (capped below the incumbent),
and either closes it (no plan below the incumbent, or its bound reaches the incumbent within
``SS_GAP``) or splits it at the u of the plan found (just below it, so that plan leaves the lower
part: in the upper part lin equals its E_ss at the lower end, Dinkelbach's update) and halfway
(bisection: every interval shrinks). Every plan of the variant lies in some open interval or in a
closed one whose bound is at least the incumbent (within ``SS_GAP``), so the least open bound
is a certified lower bound of E_ss, and the search is proven when it reaches the incumbent
within ``SS_GAP``. The models of an interval drop the options its plans cannot need
(``chain_options.SteadyRule``: their share is below u2, and one that beats the incumbent U has
D < (U - P_s u1 L_min) / (gamma + (1 - gamma) u1)); each plan found is polished by a greedy
descent over its levels (:func:`polished`, a primal heuristic). A solve gets a time slice
(``FIRST_SLICE_S``, doubled each time the interval comes back), so that under a time limit every
variant's intervals get bounded, not only the first's. There is no tie-break after it:
E_ss held at its optimum is not a linear constraint.

Every plan is checked with the evaluator: a plan counts only when it meets every cap (a
model's caps are relaxed by its rounding slack; a plan beyond a cap by more than ``CAP_TOL`` is
sought again under caps tightened by that slack).
"""
from __future__ import annotations

import dataclasses
import heapq
import math
from dataclasses import dataclass, field

from pipeplan.core.deadline import Deadline, OutOfTime
from pipeplan.formulations.mapping.evaluator import Evaluation, evaluate
from pipeplan.formulations.mapping.plan import Plan
from pipeplan.formulations.mapping.problem import MappingProblem
from pipeplan.solvers.cpsat_backend import MIN_WORK
from pipeplan.solvers.mapping.chain_options import MONOTONE, SteadyRule, Variant, check_chain, steady_rule, variants
from pipeplan.solvers.mapping.common import tie_break_note

SS_GAP = 1e-4       # relative gap at which the steady-state energy search is proven
FIRST_SLICE_S = 10.0  # an interval's first solve (s, or deterministic s under a work limit), doubled per retry
CAP_TOL = 1e-9      # relative excess over a cap that a plan may show (float noise)
AXIS_SCALE = {"period": 1.0, "latency": 1.0, "energy": 1000.0, "energy_ss": 1000.0}   # result unit -> ms / uJ
KEYS = {"period": "period_ms", "latency": "latency_ms", "energy": "energy_mj", "energy_ss": "energy_ss_mj"}


def steady(problem: MappingProblem) -> bool:
    """Whether ``energy_ss`` differs from ``energy`` (evaluator: board power with a static power)."""
    prof = problem.profile
    return prof.power_model == "board" and prof.static_power_mw is not None and prof.has_power


def value(ev: Evaluation, axis: str) -> float:
    """``axis`` of an evaluation in the chain models' units (ms, uJ)."""
    return getattr(ev, KEYS[axis]) * AXIS_SCALE[axis]


@dataclass
class ChainAnswer:
    plan: Plan | None = None
    value: float = math.inf            # evaluator value of the objective, ms / uJ
    lower: float = -math.inf           # certified lower bound, ms / uJ
    proven: bool = False
    work: float = 0.0
    solves: int = 0
    stopped_by: str | None = None
    notes: list[str] = field(default_factory=list)


class ChainProgram:
    """The variants of one chain problem, each with its model (built on first use; the steady-
    state energy's models per dominance rule), and the limits every solve shares:
    ``deadline`` and ``work_limit`` (deterministic seconds, CP-SAT) or ``node_limit`` (the MILP's
    branch-and-bound nodes per solve; one a limit stops ends the search). ``backend``: "cpsat",
    or the MILP's "highs" or "cbc"."""

    def __init__(self, problem: MappingProblem, *, backend: str, dvfs: bool, deadline: Deadline,
                 max_stages: int | None = None, threads: int = 1, seed: int = 0, work_limit: float | None = None,
                 node_limit: int | None = None):
        check_chain(problem)
        self.problem, self.backend, self.dvfs, self.max_stages = problem, backend, dvfs, max_stages
        self.node_limit, self.nodes = node_limit, 0
        self.deadline, self.threads, self.seed, self.work_limit = deadline, threads, seed, work_limit
        self._variants: dict[SteadyRule | None, list[Variant]] = {}
        self.models: dict[tuple, object] = {}
        self.work, self.solves, self.stopped_by_nodes = 0.0, 0, False

    def variants(self, rule: SteadyRule | None = MONOTONE) -> list[Variant]:
        if rule not in self._variants:
            self._variants[rule] = variants(self.problem, self.dvfs, rule)
        return self._variants[rule]

    def model(self, k: int, rule: SteadyRule | None = MONOTONE):
        if (k, rule) not in self.models:
            variant = self.variants(rule)[k]
            if self.backend == "cpsat":
                from pipeplan.solvers.mapping.cpsat_chain import CpChainModel
                model = CpChainModel(self.problem, variant, dvfs=self.dvfs, max_stages=self.max_stages,
                                     deadline=self.deadline)
            else:
                from pipeplan.solvers.mapping.milp_chain import MilpChainModel
                model = MilpChainModel(self.problem, variant, dvfs=self.dvfs, max_stages=self.max_stages,
                                       deadline=self.deadline, backend=self.backend)
            self.models[(k, rule)] = model
        return self.models[(k, rule)]

    def admits(self, plan: Plan) -> bool:
        """Whether ``plan`` lies in this program's plan space (disjoint PU sets, ``max_stages``)."""
        return not plan.shared_pus and (self.max_stages is None or len(plan.stages) <= self.max_stages)

    def out_of_limits(self) -> str | None:
        if self.deadline.expired():
            return "time"
        if self.work_limit is not None and self.work_limit - self.work < MIN_WORK:
            return "work"
        if self.stopped_by_nodes:
            return "work"
        return None

    def run(self, k: int, weights: dict[str, float], rule: SteadyRule | None = MONOTONE,
            slice_s: float | None = None, **kw):
        """One solve of variant ``k``'s model within what is left of the limits, and at most
        ``slice_s`` seconds (deterministic seconds under a work limit)."""
        model = self.model(k, rule)
        self.deadline.check()
        left = None if self.work_limit is None else self.work_limit - self.work
        time_left = self.deadline.remaining(floor=0.05)
        if slice_s is not None:
            if left is None:
                time_left = slice_s if time_left is None else min(time_left, slice_s)
            else:
                left = min(left, slice_s)
        limits = {} if self.node_limit is None else {"node_limit": self.node_limit}
        res = model.solve(weights, time_limit=time_left, work_limit=left,
                          threads=self.threads, seed=self.seed, **limits, **kw)
        self.work += res.work
        self.nodes += res.nodes
        self.solves += 1
        self.stopped_by_nodes = self.stopped_by_nodes or (self.node_limit is not None and res.stopped_by == "work")
        return res


def meets(ev: Evaluation, caps: dict[str, float]) -> bool:
    return all(value(ev, axis) <= cap * (1 + CAP_TOL) + 1e-9 for axis, cap in caps.items())


def minimize(program: ChainProgram, objective: str, caps: dict[str, float], incumbent: Plan | None,
             tie_break: str | None = None) -> ChainAnswer:
    """Minimise ``objective`` (an axis; ``energy_ss`` by the search of the module docstring)
    under ``caps`` (axis -> ms / uJ), from ``incumbent`` (a plan, used when it meets the caps),
    then ``tie_break`` with the primary held at its optimum (linear primaries only)."""
    out = ChainAnswer()
    problem = program.problem
    if incumbent is not None and program.admits(incumbent):
        ev = evaluate(problem, incumbent)
        if meets(ev, caps):
            out.plan, out.value = incumbent, value(ev, objective)
    try:
        if objective == "energy_ss":
            _steady(program, caps, out)
        else:
            _linear(program, objective, caps, out)
        if out.proven and tie_break and out.plan is not None and objective != "energy_ss":
            held = {**caps, objective: min(caps.get(objective, math.inf), out.value)}
            second = ChainAnswer(plan=out.plan, value=value(evaluate(problem, out.plan), tie_break))
            if tie_break == "energy_ss":
                _steady(program, held, second)
            else:
                _linear(program, tie_break, held, second)
            if second.plan is not out.plan:
                old, new = evaluate(problem, out.plan), evaluate(problem, second.plan)
                if value(new, objective) <= out.value * (1 + CAP_TOL) and value(new, tie_break) < value(old, tie_break):
                    out.plan = second.plan
                    out.value = min(out.value, value(new, objective))
            if (note := tie_break_note(tie_break, "optimal" if second.proven else None)) is not None:
                out.notes.append(note)
    except OutOfTime:
        out.stopped_by = out.stopped_by or "time"
    out.work, out.solves = program.work, program.solves
    if not out.proven and out.stopped_by is None:
        out.stopped_by = program.out_of_limits() or "time"
    return out


def _consider(program: ChainProgram, plan: Plan | None, objective: str, caps: dict, out: ChainAnswer,
              polish: bool = False) -> bool:
    """Take ``plan`` as the incumbent when it meets the caps and improves (with ``polish`` and
    DVFS, after :func:`polished`); False when it breaks a cap (the model's rounding slack)."""
    if plan is None or not program.admits(plan):
        return True
    ev = evaluate(program.problem, plan)
    if not meets(ev, caps):
        return False
    if polish and program.dvfs:
        plan = polished(program, plan, objective, caps)
        ev = evaluate(program.problem, plan)
    if value(ev, objective) < out.value:
        out.plan, out.value = plan, value(ev, objective)
    return True


POLISH_EVALS = 5000     # evaluations one polish may take: a count, so runs stay the same on any machine load


def polished(program: ChainProgram, plan: Plan, objective: str, caps: dict) -> Plan:
    """``plan`` after a greedy descent over its units' DVFS levels (placement and stages kept):
    any single level change that lowers ``objective`` and keeps the caps is taken, until none
    does or ``POLISH_EVALS`` evaluations are spent. A primal heuristic only: every plan it
    returns is scored by the evaluator, and the search's bounds do not depend on it. It finds the
    steady-state energy's incumbents early, which lets its branch and bound refute intervals
    sooner."""
    problem, prof = program.problem, program.problem.profile
    place = plan.placement()
    names = [u.name for u in problem.units]
    levels = {u: prof.level(place[u][1], plan.levels.get(u, "max")) for u in names}
    best = value(evaluate(problem, plan, check=False), objective)
    budget, improved = POLISH_EVALS, True
    while improved and budget > 0:
        improved = False
        for i, u in enumerate(names):
            pu = place[u][1]
            for lv in prof.pus[pu].levels:
                if lv == levels[u] or prof.time(i, pu, lv) is None or budget <= 0:
                    continue
                budget -= 1
                trial = dataclasses.replace(plan, levels={**levels, u: lv})
                ev = evaluate(problem, trial, check=False)
                if meets(ev, caps) and value(ev, objective) < best * (1 - 1e-12):
                    plan, best, levels, improved = trial, value(ev, objective), {**levels, u: lv}, True
    return plan


def _linear(program: ChainProgram, axis: str, caps: dict, out: ChainAnswer) -> None:
    lowers, closed = [], True
    for k in range(len(program.variants())):
        if (why := program.out_of_limits()) is not None:
            out.stopped_by, closed = why, False
            lowers.append(-math.inf)
            continue
        held = dict(caps)
        if math.isfinite(out.value):
            held[axis] = min(held.get(axis, math.inf), out.value)
        res = program.run(k, {axis: 1.0}, caps=held, hint=out.plan)
        if res.status == "infeasible":
            lowers.append(out.value)
            continue
        if not _consider(program, res.plan, axis, caps, out):
            strict = program.run(k, {axis: 1.0}, caps=held, hint=out.plan, strict=True)
            _consider(program, strict.plan, axis, caps, out)
        if res.status != "optimal":
            closed = False
            out.stopped_by = out.stopped_by or res.stopped_by
        lowers.append(res.lower if res.lower is not None else -math.inf)
    out.lower = min(min(lowers, default=math.inf), out.value)
    out.proven = closed


def _steady(program: ChainProgram, caps: dict, out: ChainAnswer) -> None:
    problem = program.problem
    prof = problem.profile
    p_s, gamma = prof.static_power_mw, prof.concurrent_power_share
    cap = caps.get("period")
    widest = steady_rule(problem, program.dvfs, period_cap=cap)
    least = widest.least_latency

    def rule(u1: float, u2: float) -> SteadyRule:
        """The interval's dominance rule (module docstring), rounded up to a grid of 1/32 of the
        widest dynamic power and 1/64 of share (fewer models to build)."""
        share = min(widest.share, u2 + 1e-3)             # +1e-3: the window's relaxation
        dyn = widest.dyn
        if math.isfinite(out.value) and least > 0:
            dyn = min(dyn, (out.value - p_s * u1 * least) / (gamma + (1 - gamma) * u1) / least)
        step = max(widest.dyn, 1e-9) / 32
        return steady_rule(problem, program.dvfs, dyn=math.ceil(max(dyn, 0.0) / step) * step,
                           share=min(1.0, math.ceil(share * 64) / 64), period_cap=cap)

    def weights(u1: float) -> dict[str, float]:
        return {"period": gamma * p_s, "energy": gamma + (1 - gamma) * u1, "latency": -gamma * p_s}

    if out.plan is not None:
        _consider(program, out.plan, "energy_ss", caps, out, polish=True)
    heap = [(-math.inf, k, 1.0 / max(1, program.model(k, widest).stages), 1.0, FIRST_SLICE_S)
            for k in range(len(program.variants(widest)))]
    heapq.heapify(heap)
    done: list[float] = []           # bounds of closed intervals (at least the incumbent then)
    stuck: list[float] = []          # intervals too narrow to split that did not close
    while heap:
        lb, k, u1, u2, slice_s = heap[0]
        if lb >= out.value * (1 - SS_GAP):
            break
        if (why := program.out_of_limits()) is not None:
            out.stopped_by = why
            break
        heapq.heappop(heap)
        cutoff = out.value * (1 - SS_GAP) if math.isfinite(out.value) else None
        node_rule = rule(u1, u2)
        res = program.run(k, weights(u1), node_rule, slice_s, caps=caps, window=(u1, u2), cutoff=cutoff,
                          hint=out.plan)
        before = out.value
        if not _consider(program, res.plan, "energy_ss", caps, out, polish=True):
            strict = program.run(k, weights(u1), node_rule, caps=caps, window=(u1, u2), hint=out.plan, strict=True)
            _consider(program, strict.plan, "energy_ss", caps, out, polish=True)
        improved = out.value < before
        if res.status == "infeasible":
            done.append(cutoff if cutoff is not None else math.inf)
            continue
        new_lb = max(lb, res.lower if res.lower is not None else -math.inf)
        if res.status != "optimal":      # its slice ran out: back in the queue with twice the time
            heapq.heappush(heap, (new_lb, k, u1, u2, 2 * slice_s))
            continue
        if new_lb >= out.value * (1 - SS_GAP):
            done.append(new_lb)
            continue
        ev = evaluate(problem, res.plan)
        split = ev.period_ms / ev.latency_ms - 2 * program.model(k, node_rule).window_room((u1, u2))
        if split <= u1 and improved:         # the plan found lies at the low end: search again below it
            cuts = []
        elif u2 - u1 <= 1e-9:
            stuck.append(new_lb)
            continue
        else:                                # just below the plan (Dinkelbach's step) and halfway
            cuts = sorted({c for c in ((u1 + u2) / 2, split) if u1 < c < u2})
        ends = [u1, *cuts, u2]
        for a, b in zip(ends, ends[1:]):
            heapq.heappush(heap, (new_lb, k, a, b, FIRST_SLICE_S))
    open_lbs = [h[0] for h in heap] + stuck
    out.lower = min([out.value] + open_lbs + done)
    out.proven = math.isfinite(out.value) and out.lower >= out.value * (1 - SS_GAP) and not stuck
    if not math.isfinite(out.value) and not heap and not stuck:
        out.proven = True           # every interval refuted: no plan meets the caps


# ------------------------------------------------------------------ the solvers' entry point


def chain_route(problem: MappingProblem, objective: str, dvfs: bool, tie_break: str | None = None,
                shared_pus: bool = False, bounds: dict | None = None) -> bool:
    """Whether the exact solvers use the chain models: every chain with disjoint PU sets (they
    are exact there and prove chain optima faster than the operator-graph models), unless the
    energy counts (objective, tie-break or bound) and PUs draw idle power (``per_pu``): the chain
    models charge no idle power over the period, so they had proven energy optima 30% above
    the brute force's. ValueError where neither the chain models nor the operator-graph models
    are exact: DVFS levels as decisions, a re-entry or whole-graph rule, or the steady-state
    energy where it differs from the per-frame energy, on an operator graph or with shared PU
    sets; and those with idle energy."""
    prof = problem.profile
    idle_energy = (prof.power_model == "per_pu" and any(pu.idle_power_mw for pu in prof.pus.values())
                   and bool({"energy", "energy_ss"} & {objective, tie_break}
                            or {"energy_mj", "energy_ss_mj"} & set(bounds or {})))
    needs = dvfs or bool(prof.reentry) or bool(prof.whole_graph) or (
        steady(problem) and "energy_ss" in (objective, tie_break))
    what = ("dvfs" if dvfs else "a re-entry or whole-graph rule" if prof.reentry or prof.whole_graph
            else "energy_ss with a static power (its phases are not the latency)")
    if needs and not problem.is_chain:
        raise ValueError(f"{problem.name}: {what} is modelled for chains only (the instance is an operator graph)")
    if needs and shared_pus:
        raise ValueError(f"{what} is modelled with disjoint PU sets only (no shared PUs)")
    if needs and idle_energy:
        raise ValueError(f"{what} is modelled by the chain models only, which charge no idle power: the energy "
                         "of a per_pu profile whose PUs draw idle power is exact in the operator-graph models")
    return problem.is_chain and not shared_pus and not idle_energy


def plain_objective(problem: MappingProblem, objective: str) -> str:
    """``energy`` for ``energy_ss`` where the two are equal (no static power, or per-PU power)."""
    return "energy" if objective == "energy_ss" and not steady(problem) else objective


def plain_bounds(problem: MappingProblem, bounds: dict | None) -> dict | None:
    """Epsilon bounds with ``energy_ss_mj`` as ``energy_mj`` where the two are equal."""
    if not bounds or "energy_ss_mj" not in bounds:
        return bounds
    if steady(problem):
        raise ValueError("a bound on energy_ss_mj is not a linear constraint; bound period, latency or energy")
    out = {k: v for k, v in bounds.items() if k != "energy_ss_mj"}
    out["energy_mj"] = min(out.get("energy_mj", math.inf), bounds["energy_ss_mj"])
    return out


def caps_of(problem: MappingProblem, bounds: dict | None) -> dict[str, float]:
    """Epsilon bounds (objective key -> value) as the chain models' caps (axis -> ms / uJ)."""
    axis_of = {key: axis for axis, key in KEYS.items()}
    out = {}
    for key, val in (bounds or {}).items():
        if key not in axis_of:
            raise ValueError(f"unknown bound {key!r} (use {', '.join(KEYS.values())})")
        axis = plain_objective(problem, axis_of[key])
        if axis == "energy_ss":
            raise ValueError("a bound on energy_ss_mj is not a linear constraint; bound period, latency or energy")
        out[axis] = min(out.get(axis, math.inf), val * AXIS_SCALE[axis])
    return out


def solve_chain(problem: MappingProblem, solver: str, *, backend: str, objective: str, bounds: dict | None,
                tie_break: str | None, dvfs: bool, max_stages: int | None, time_limit: float | None, threads: int,
                seed: int, work_limit: float | None, warm_start: Plan | None, params: dict,
                node_limit: int | None = None):
    """A SolveResult of ``minimize`` for the registered exact solvers (``cpsat``, ``milp``):
    the warm start (else the best heuristic plan; under ``dvfs`` also the max-frequency optimum,
    which is fast and already a plan of the larger space) as the incumbent, the certified bound
    as the result's bound."""
    from pipeplan.core.result import Quality, SolveResult, Termination, stop_note
    from pipeplan.formulations.mapping.bounds import best_analytic
    from pipeplan.solvers.mapping.common import scored_result, search_deadline
    from pipeplan.solvers.mapping.warm_start import best_heuristic_plan, within_stages

    search = search_deadline(time_limit, problem)
    goal = plain_objective(problem, objective)
    second = plain_objective(problem, tie_break) if tie_break else None
    caps = caps_of(problem, bounds)
    key = KEYS[objective]
    left = search.remaining()
    incumbent = within_stages(warm_start, max_stages) or best_heuristic_plan(
        problem, goal, Deadline(None if left is None else left / 4), max_stages)
    answer = None
    if dvfs:             # the max-frequency optimum: a quick incumbent
        top = ChainProgram(problem, backend=backend, dvfs=False, max_stages=max_stages, deadline=Deadline(
            None if search.remaining() is None else search.remaining() / 4), threads=threads, seed=seed,
            work_limit=None if work_limit is None else work_limit / 4, node_limit=node_limit)
        first = minimize(top, goal, caps, incumbent)
        incumbent = first.plan or incumbent
        spent = top.work
    else:
        spent = 0.0
    program = ChainProgram(problem, backend=backend, dvfs=dvfs, max_stages=max_stages, deadline=search,
                           threads=threads, seed=seed, work_limit=None if work_limit is None else work_limit - spent,
                           node_limit=node_limit)
    answer = minimize(program, goal, caps, incumbent, tie_break=second)
    answer.work += spent
    params.update({"method": "chain models", "dvfs": dvfs, "work": round(answer.work, 3), "solves": answer.solves,
                   "variants": [v.name for v in program.variants()]})
    if node_limit is not None or backend != "cpsat":
        params["nodes"] = program.nodes
    if answer.plan is None:
        if answer.proven:
            return SolveResult("mapping", problem.name, solver, Termination.INFEASIBLE, Quality.NONE, params=params,
                               message=f"no plan meets the bounds {bounds}" if bounds else "no plan fits the model")
        return SolveResult("mapping", problem.name, solver, Termination.TIME_LIMIT, Quality.NONE, params=params,
                           message=f"no plan found within the limits; {stop_note(answer.stopped_by)}",
                           stopped_by=answer.stopped_by)
    if dvfs and not answer.plan.levels:      # the max-frequency incumbent: its levels written out
        place = answer.plan.placement()
        answer.plan = dataclasses.replace(answer.plan, levels={
            u.name: problem.profile.pus[place[u.name][1]].max_level for u in problem.units})
    lower = answer.lower / AXIS_SCALE[goal]
    source = "chain models (" + ("steady-state search" if goal == "energy_ss" else backend) + ")"
    if not answer.proven:       # the analytic bounds hold under any caps
        analytic = best_analytic(problem).get(KEYS[goal])
        if analytic is not None and analytic.value > lower:
            lower, source = analytic.value, analytic.source
    notes = list(answer.notes)
    if not answer.proven:
        notes.append(stop_note(answer.stopped_by))
    return scored_result(problem, solver, answer.plan, objective=objective,
                         termination=Termination.OPTIMAL if answer.proven else Termination.TIME_LIMIT,
                         quality=Quality.PROVEN_OPTIMAL if answer.proven else Quality.FEASIBLE,
                         bound={key: max(0.0, lower)}, bound_source={key: source}, params=params,
                         message="; ".join(n for n in notes if n), stopped_by=None if answer.proven else answer.stopped_by)


FRONT_STEP = 1e-6     # the next point of a front sweep lies this much (relative) below the last


def chain_front(problem: MappingProblem, x: str, y: str, *, dvfs: bool, backend: str = "cpsat",
                time_limit: float | None, threads: int = 1, seed: int = 0, max_points: int = 200, progress=None,
                work_limit: float | None = None) -> dict:
    """The exact (x, y) front of a chain by an epsilon-constraint sweep over the chain models
    (``exact_front``'s answer). Each step minimises y with x capped just below the last point,
    then x with y held (a lexicographic pair). With the steady-state energy on one axis it is
    the minimised one (a cap on it is not linear) and has no second solve: a point is dropped
    when a later one (lower x) is no worse in it, so the points left are the front. Points
    closer in x than ``FRONT_STEP`` are not told apart."""
    clock = Deadline(time_limit)
    goal, other = (x, y) if x == "energy_ss" and steady(problem) else (y, x)
    goal, other = plain_objective(problem, goal), plain_objective(problem, other)
    program = ChainProgram(problem, backend=backend, dvfs=dvfs, deadline=clock, threads=threads, seed=seed,
                           work_limit=work_limit)
    points: list[dict] = []
    cap, incumbent, complete, stopped_by = math.inf, None, False, None
    while len(points) < max_points:
        caps = {} if not math.isfinite(cap) else {other: cap}
        answer = minimize(program, goal, caps, incumbent, tie_break=None if goal == "energy_ss" else other)
        if answer.plan is None:
            complete = answer.proven
            stopped_by = None if complete else answer.stopped_by
            break
        ev = evaluate(problem, answer.plan)
        points.append({"objectives": ev.objectives(), "plan": answer.plan.to_dict(), "proven": answer.proven})
        if not answer.proven:
            stopped_by = answer.stopped_by
        if progress:
            progress(len(points), None, f"{KEYS[other]}={ev.objectives()[KEYS[other]]:.3f}")
        cap = value(ev, other) * (1 - FRONT_STEP)
        incumbent = None
        if program.out_of_limits():
            stopped_by = program.out_of_limits()
            break
    kept = []
    for p in points:          # swept by decreasing `other`: drop a point a later one is no worse than
        while kept and kept[-1]["objectives"][KEYS[goal]] >= p["objectives"][KEYS[goal]] * (1 - 1e-12):
            kept.pop()
        kept.append(p)
    kept.sort(key=lambda p: p["objectives"][KEYS[x]])
    return {"axes": [x, y], "points": kept, "complete": complete, "wall_time_s": clock.elapsed(),
            "work": program.work, "stopped_by": None if complete else stopped_by, "dvfs": dvfs}

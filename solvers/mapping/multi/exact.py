"""The exact joint solvers' driver, shared by the CP-SAT and MILP models (cpsat.py, milp.py).

Both objectives the exact models hold are linear in the plan's times once written as a
minimum of Z (evaluator.py):

* ``fairness``: Z = 1 / t = max(max_i P_i ref_i, max_p sum_i b_ip ref_i) / 1000, with t the
  least normalised throughput and ref_i the reference rate (fps);
* ``rate``: Z = max(max_i P_i, max_p sum_i b_ip) ms, the sustained rate being 1000 / Z.

The weighted total (sum_i w_i r_i with r_i <= 1000 / P_i) and the power at demanded rates are
not linear in the periods; the exact solvers refuse them (NSGA-II and the baselines score them).

The plan space splits into combinations of joint variants (variants.py); the driver solves
each one's model, cheapest first, each with the incumbent as a cutoff (only a better plan is
sought), and reports the best plan, re-scored by the joint evaluator, and the least of the
combinations' lower bounds on Z (a combination proven infeasible under the cutoff contributes
the cutoff). The result is proven optimal when every combination was closed and the bound
meets the plan to ``PROOF_TOL``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from pipeplan.core.deadline import Deadline, OutOfTime
from pipeplan.core.result import Quality, SolveResult, Termination
from pipeplan.formulations.mapping.evaluator import InfeasiblePlan
from pipeplan.formulations.mapping.multi.evaluator import evaluate_joint
from pipeplan.formulations.mapping.multi.plan import JointPlan
from pipeplan.formulations.mapping.multi.problem import MultiProblem, reference_fps
from pipeplan.solvers.mapping.multi.common import analytic_bound, check_objective, network_fault, scored_joint_result
from pipeplan.solvers.mapping.multi.variants import JointVariant, combinations

LINEAR = ("fairness", "rate")
PROOF_TOL = 1e-5    # relative: the integer model's rounding (cpsat.py) and HiGHS's gap stay below it


@dataclass
class ComboOutcome:
    status: str                 # optimal | feasible | infeasible | unknown
    plan: JointPlan | None
    lower: float | None         # a lower bound on Z over the combination's plans (under the cutoff)
    work: float = 0.0
    stopped_by: str | None = None


def z_weights(problem: MultiProblem, objective: str) -> dict[str, float]:
    """network -> the factor of its period and busy times in Z (ref_i / 1000, or 1)."""
    if objective == "fairness":
        return {n.name: reference_fps(n) / 1000.0 for n in problem.networks}
    return {n.name: 1.0 for n in problem.networks}


def true_z(problem: MultiProblem, plan: JointPlan, objective: str) -> float | None:
    """Z of ``plan`` by the joint evaluator; None when the plan breaks a rule (a model's
    rounding can leave a deadline or demand a hair off)."""
    try:
        ev = evaluate_joint(problem, plan)
    except InfeasiblePlan:
        return None
    return 1.0 / ev.min_norm_throughput if objective == "fairness" else 1000.0 / ev.sustained_fps


def check_exact_objective(problem: MultiProblem, objective: str) -> None:
    check_objective(problem, objective)
    if objective not in LINEAR:
        raise ValueError(f"the exact joint models hold {' and '.join(LINEAR)} (linear in the plan's times); "
                         f"{objective} is not: use nsga2 or the baselines")


def check_exact(problem: MultiProblem, objective: str) -> None:
    check_exact_objective(problem, objective)
    fault = network_fault(problem, "exact", exact=True)
    if fault:
        raise ValueError(fault)


Build = Callable[[tuple[JointVariant, ...], Deadline], object]


def solve_exact(problem: MultiProblem, solver: str, build: Build, *, objective: str, time_limit: float | None,
                threads: int, seed: int, limit: dict, params: dict) -> SolveResult:
    """Solve every combination with models from ``build(combo, deadline)``; each model's
    ``solve(cutoff=, time_limit=, threads=, seed=, **limit)`` returns a ComboOutcome.

    Limits: the wall clock (``time_limit``) and a CP-SAT work limit (``limit["work_limit"]``,
    deterministic seconds, the same plan on any machine) are shared the same way: each
    combination gets an even slice of what is left, then a second pass gives the unclosed ones
    all that remains. A MILP node limit bounds each solve. A combination never reached or
    without a bound of its own contributes the analytic bound (common.py)."""
    check_exact(problem, objective)
    deadline = Deadline(time_limit)
    combos = combinations(problem)
    analytic = analytic_bound(problem, objective)
    floor_z = 1.0 / analytic if objective == "fairness" else 1000.0 / analytic
    best: tuple[float, JointPlan] | None = None
    lower = {k: floor_z for k in range(len(combos))}
    open_ = list(range(len(combos)))
    models: dict[int, object] = {}
    why, work = None, 0.0
    budget = limit.get("work_limit")
    passes = 1 if time_limit is None and budget is None else 2
    for rnd in range(passes):
        todo, open_ = open_, []
        for pos, k in enumerate(todo):
            if deadline.expired() or (budget is not None and work >= budget):
                open_.append(k)
                why = why or ("time" if deadline.expired() else "work")
                continue
            share = (len(todo) - pos) if rnd + 1 < passes else 1
            left = deadline.remaining()
            # with a work budget the wall clock is only the safety net: slicing it too would make
            # the plan depend on the machine's speed
            slice_s = None if left is None else (left if budget is not None else left / share)
            step = dict(limit)
            if budget is not None:
                step["work_limit"] = (budget - work) / share
            try:
                if k not in models:
                    models[k] = build(combos[k], deadline)
            except OutOfTime:
                open_.append(k)
                why = "time"
                continue
            out = models[k].solve(cutoff=best[0] if best else None, time_limit=slice_s, threads=threads,
                                  seed=seed, **step)
            work += out.work
            if out.plan is not None:
                z = true_z(problem, out.plan, objective)
                if z is not None and (best is None or z < best[0]):
                    best = (z, out.plan)
            if out.status == "infeasible":
                lower[k] = best[0] if best else math.inf
            elif out.status == "optimal":
                lower[k] = max(floor_z, out.lower if out.lower is not None else floor_z)
            else:
                lower[k] = max(lower[k], out.lower if out.lower is not None else floor_z)
                open_.append(k)
                why = out.stopped_by or "time"
    closed = len(combos) - len(open_)
    z_lower = min(lower.values())
    info = {**params, "combinations": len(combos), "closed": closed, "work": round(work, 3)}
    if best is None:
        term = Termination.INFEASIBLE if not open_ else Termination.TIME_LIMIT
        msg = ("no joint plan meets the deadlines and demanded rates" if term is Termination.INFEASIBLE
               else f"no plan found within the limits ({closed}/{len(combos)} variant combinations closed)")
        return SolveResult("multi", problem.name, solver, term, Quality.NONE, params={"objective": objective, **info},
                           message=msg, stopped_by=None if term is Termination.INFEASIBLE else why)
    z, plan = best
    proven = not open_ and z_lower >= z * (1 - PROOF_TOL)
    msg = f"{closed}/{len(combos)} variant combinations closed; Z = {z:.6g}, lower bound {z_lower:.6g}"
    if proven:
        termination = Termination.OPTIMAL
    elif open_:
        termination = Termination.TIME_LIMIT
    else:       # every combination closed, short of a proof only by the model's rounding: no limit stopped it
        termination, why = Termination.COMPLETED, None
        msg += f" (the model's rounding leaves the bound more than {PROOF_TOL:g} below the plan)"
    return scored_joint_result(problem, solver, plan, objective=objective, termination=termination,
                               quality=Quality.PROVEN_OPTIMAL if proven else Quality.FEASIBLE,
                               bound=_objective_bound(objective, min(z_lower, z)),
                               bound_source=f"{solver} joint model", params=info, message=msg,
                               stopped_by=None if proven else why)


def _objective_bound(objective: str, z_lower: float) -> float:
    """The objective's upper bound from a lower bound on Z (both objectives are 1/Z-like)."""
    if z_lower <= 0:
        return math.inf
    return 1.0 / z_lower if objective == "fairness" else 1000.0 / z_lower

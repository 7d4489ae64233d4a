"""How tight the offline optimum is: for each preset workload and R, on the real (on-demand,
nonlinear) engine and on its linear counterpart, the best schedule any solver finds (every
online policy, the just-in-time planner ``step-plan`` and CP-SAT, each re-scored in the
simulator) against the best proven lower bound (the separate analytic bound, the flow-shop
bounds of ``flowshop_bound``, the step-indexed bound of ``step_bound``, and CP-SAT's own bound
where its model is exact: the linear engine). Also the rho sweep (trainer scaled) of one
workload. Writes ``optimum_gaps.md`` and ``optimum_gaps.csv``."""
from __future__ import annotations

import time
from pathlib import Path

import pipeplan
from pipeplan.app.studies.rollout import _when, linearized, rho_of, with_rho
from pipeplan.core.io import staged_folder, write_atomic
from pipeplan.core.tables import csv_text, markdown_table
from pipeplan.formulations.rollout.bounds import separate_bound, train_end_lower_bound
from pipeplan.formulations.rollout.flowshop_bound import chain_bound
from pipeplan.formulations.rollout.workloads import PRESETS, R_PAPER, preset_round
from pipeplan.solvers.rollout.energy_ceiling import energy_ceiling
from pipeplan.solvers.rollout.online import POLICIES
from pipeplan.solvers.rollout.refuted_bound import BISECT_TOL, refuted_bound
from pipeplan.solvers.rollout.step_bound import BRANCH_GAPS, BUCKETS, LINEAR_LADDER, step_bound
from pipeplan.solvers.rollout.step_plan import (
    GUIDED_MOVES,
    GUIDED_RESTARTS,
    SEQUENCE_MAX_R,
    SEQUENCE_MOVES,
    guided_plan,
)

PLAN_EVALUATIONS = 10_000   # annealing moves per start of step-plan (about 7 s at R = 32)
PROOF_EVALUATIONS = 20_000  # where the slow bounds run (R = 32); with the update-sequence start and plans kept
                            # within the engine's limits, 40,000 found nothing better (sci-xw, lsat-ar at rho 0.5)
BRANCH_TIME = 420.0         # s of branching on the round's last step (``step_bound``): R = 32, gap open
                            # (lsat-ar R = 32 proved its first target alone in 183-240 s; the guided plan of
                            # the single MILP's solutions runs first, within this time: its walks take about
                            # 60 s at lsat-ar, 135 s at sci-xw)
WIDE_BEYOND_R = 32
WIDE_BUCKETS = 16           # the step-indexed bound's buckets beyond R = 32: with 32 its MILP does not close
                            # and its dual bound wanders (lsat-ar R = 64, linear: 465.6 s in 90 s, 400.3 s in
                            # 300 s with a shorter horizon; 16 buckets: 459.3 s in 60 s, 459.4 s closed in 300 s)
LNS_TIME = 120.0            # s of large-neighbourhood search (``cpsat-lns``) on the linear engine, every R
                            # (lsat-ar R = 64: defer 517.1 -> 489.7 s in 150 s; CP-SAT alone 549.8 s in 90 s)
SELF_TUNED = ("defer",)      # policies that pick their parameter by simulating the round (a search, not a rule)
ROLLOUT_BOUND, TRAINER_BOUND = 0.5, 2.0   # rho at or below / at or above: one side takes at least twice the other's time
FILES = ("optimum_gaps.md", "optimum_gaps.csv")
COLUMNS = ("workload", "R", "engine", "rho", "rho_value", "regime", "best_s", "best_solver", "online_s", "online_policy",
           "online_ratio", "online_over_bound", "rule_s", "rule_policy", "rule_ratio", "cpsat_s", "cpsat_status",
           "lns_s", "old_bound_s", "fast_bound_s", "chain_bound_s", "chain_closed", "step_plan_s", "step_bound_s",
           "step_bound_buckets", "step_bound_ranges", "cpsat_bound_s", "refuted_bound_s", "bound_s", "bound_source",
           "old_gap", "gap", "ceiling_s", "ceiling_gap", "wall_s")


def regime_of(rho_value: float) -> str:
    """rollout-bound at or below ``ROLLOUT_BOUND``, trainer-bound at or above ``TRAINER_BOUND``,
    balanced between. A relative 1e-9 counts as on the boundary: the sweep's rho is met only up
    to float rounding (rho 2 came out as 1.9999999999999998 and was called balanced)."""
    if rho_value <= ROLLOUT_BOUND * (1 + 1e-9):
        return "rollout-bound"
    return "trainer-bound" if rho_value >= TRAINER_BOUND * (1 - 1e-9) else "balanced"


def gap_row(problem, *, workload: str, R: int, engine: str, rho, time_limit: float | None, threads: int,
            bound_time: float | None, branch_time: float = 0.0, lns_time: float = 0.0, seed: int = 0) -> dict:
    """One setting: every policy, the just-in-time planner (``PROOF_EVALUATIONS`` moves per start
    where the slow bounds run), CP-SAT when ``time_limit`` is not None, on the linear engine the
    large-neighbourhood search for ``lns_time`` s (> 0) from the best of them, and every bound
    (when ``bound_time`` is not None, the CP-SAT flow-shop relaxation and the step-indexed bound,
    each for ``bound_time`` s). The update-sequence searches (``SEQUENCE_MOVES`` and the guided
    plan of the bound's solutions) run only up to ``SEQUENCE_MAX_R``: their backward pass grows
    with R^2."""
    began = time.perf_counter()
    results = {name: pipeplan.solve(problem, name) for name in POLICIES}
    online = {name: r.objectives for name, r in results.items()}
    ends = {name: objectives["train_end_s"] for name, objectives in online.items()}
    online_policy = min(ends, key=ends.get)
    rule_policy = min((name for name in ends if name not in SELF_TUNED), key=ends.get)
    rho_value = rho_of(online["sync"])
    # beyond R = 32 no update-sequence search: its backward pass grows with R^2 (minutes at R = 96)
    sequences = problem.R <= SEQUENCE_MAX_R
    moves, sequence = (PLAN_EVALUATIONS, 0) if bound_time is None else (PROOF_EVALUATIONS,
                                                                         SEQUENCE_MOVES if sequences else 0)
    results["step-plan"] = pipeplan.solve(problem, "step-plan", seed=seed, evaluations=moves, sequence_moves=sequence)
    ends["step-plan"] = results["step-plan"].objectives["train_end_s"]
    cpsat_s, cpsat_bound, status, lns_s = None, 0.0, "-", None
    if time_limit is not None:
        r = pipeplan.solve(problem, "cpsat", time_limit=time_limit, threads=threads, seed=seed)
        cpsat_s, status = r.objectives["train_end_s"], f"{r.termination.value}/{r.quality.value}"
        ends["cpsat"], results["cpsat"] = cpsat_s, r
        cpsat_bound = r.bound["train_end_s"] if r.params.get("model_exact") else 0.0
    if lns_time > 0 and problem.engine.linear and not status.startswith("optimal"):
        start = results[min(ends, key=ends.get)].plan
        lns_s = pipeplan.solve(problem, "cpsat-lns", time_limit=lns_time, threads=threads, seed=seed,
                               start=start).objectives["train_end_s"]
        ends["cpsat-lns"] = lns_s
    best_solver = min(ends, key=ends.get)
    best = ends[best_solver]
    old, fast = separate_bound(problem), train_end_lower_bound(problem)
    chain, closed = (0.0, False) if bound_time is None else \
        chain_bound(problem, time_limit=bound_time, work_limit=4 * bound_time, threads=threads, closed=True)
    # the step-indexed bound: c1, c2 and prefill work on the real engine, the batch and KV limits on both
    # the bound's MILP solutions as update sequences (``guided_plan``): those of the single MILP
    # before the branching, whose targets then come from the better schedule, and the branching's
    guided, planned = [], 0

    def plan(orders):
        nonlocal planned
        planned = len(orders)
        guided.append(guided_plan(problem, orders, seed=seed))
        return guided[-1] and guided[-1].metrics()["train_end_s"]

    steps = None if bound_time is None else step_bound(problem, time_limit=bound_time + branch_time, threads=threads,
                                                         upper=best, branch_s=branch_time,
                                                         buckets=WIDE_BUCKETS if problem.R > WIDE_BEYOND_R else BUCKETS,
                                                         plan=plan if sequences else None)
    if steps and sequences:
        guided.append(guided_plan(problem, steps.orders[planned:], seed=seed))
    for schedule in guided:
        if schedule is not None and schedule.metrics()["train_end_s"] < best:
            best_solver, best = "bound-guided", schedule.metrics()["train_end_s"]
            ends[best_solver] = best
    bounds = {"separate": old, "johnson": fast, "flow-shop CP-SAT": chain, "CP-SAT exact model": cpsat_bound,
              "step-indexed": steps.bound_s if steps else 0.0}
    # linear engine, where the slow bounds run: targets CP-SAT refutes between the best bound and
    # the best schedule, and how high the step-indexed bound could go at all
    ceiling = None
    if bound_time is not None and problem.engine.linear:
        known = max(bounds.values())
        bounds["refuted (CP-SAT)"] = refuted_bound(problem, known, best, time_limit=bound_time, threads=threads) \
            if known < best * (1 - BISECT_TOL) else 0.0
        ceiling = energy_ceiling(problem, seconds=bound_time, seed=seed).train_end_s
    source = max(bounds, key=bounds.get)
    bound = bounds[source]
    regime = regime_of(rho_value)
    return {"workload": workload, "R": R, "engine": engine, "rho": rho, "rho_value": rho_value, "regime": regime,
            "best_s": best, "best_solver": best_solver, "online_s": ends[online_policy], "online_policy": online_policy,
            "online_ratio": ends[online_policy] / best, "online_over_bound": ends[online_policy] / bound if bound else None,
            "rule_s": ends[rule_policy], "rule_policy": rule_policy, "rule_ratio": ends[rule_policy] / best,
            "cpsat_s": cpsat_s, "cpsat_status": status, "lns_s": lns_s, "old_bound_s": old, "fast_bound_s": fast,
            "chain_bound_s": chain, "chain_closed": closed, "step_plan_s": ends["step-plan"],
            "step_bound_s": steps.bound_s if steps else None, "step_bound_buckets": steps.buckets if steps else None,
            "step_bound_ranges": steps.ranges if steps else None,
            "cpsat_bound_s": cpsat_bound or None, "refuted_bound_s": bounds.get("refuted (CP-SAT)") or None,
            "bound_s": bound,
            "bound_source": source, "old_gap": (best - old) / best, "gap": (best - bound) / best,
            "ceiling_s": ceiling, "ceiling_gap": None if ceiling is None else (best - ceiling) / best,
            "wall_s": time.perf_counter() - began}


def optimum_gaps(*, workloads=tuple(PRESETS), Rs=R_PAPER, cpsat_Rs=(32,), bound_Rs=(32,), seed: int = 0,
                 time_limit: float = 60.0, threads: int = 2, bound_time: float = 60.0, rho_workload: str = "lsat-ar", rho_R: int = 32,
                 rhos=(0.25, 0.5, 1, 2, 4), engines=("real", "linear"), branch_time: float = BRANCH_TIME,
                 lns_time: float = LNS_TIME, progress=None) -> list[dict]:
    """Rows for every (workload, R, engine) at the preset trainer (rho ``preset``), then the
    ``rhos`` sweep of ``rho_workload`` at ``rho_R``. CP-SAT runs (``time_limit`` s, ``threads``)
    on the linear engine where R is in ``cpsat_Rs`` (there its model is exact and its bound a
    proof; on the real engine its replayed plans were beaten by step-plan in every setting of
    the previous run, 2026-12-03), elsewhere the best policy or plan stands; the CP-SAT flow-shop
    relaxation (``bound_time`` s) where R is in ``bound_Rs``, elsewhere the fast bounds; there, on
    the step-indexed bound branches for up to ``branch_time`` s more. On the linear engine the
    large-neighbourhood search runs ``lns_time`` s at every R (0: never)."""
    jobs = []
    for w in workloads:
        for R in Rs:
            for engine in engines:
                jobs.append((w, R, engine, "preset"))
    jobs += [(rho_workload, rho_R, engine, rho) for engine in engines for rho in rhos]
    rows = []
    for k, (w, R, engine, rho) in enumerate(jobs):
        if progress:
            progress(k, len(jobs), f"{w} R={R} {engine} rho={rho}")
        problem = preset_round(w, R, seed=seed)
        if engine == "linear":
            problem = linearized(problem)
        if rho != "preset":
            problem, _ = with_rho(problem, rho)
        rows.append(gap_row(problem, workload=w, R=R, engine=engine, rho=rho,
                            time_limit=time_limit if R in cpsat_Rs and engine == "linear" else None, threads=threads,
                            bound_time=bound_time if R in bound_Rs else None,
                            branch_time=branch_time if R in bound_Rs else 0.0, lns_time=lns_time, seed=seed))
    if progress:
        progress(len(jobs), len(jobs), "done")
    return rows


def optimum_gaps_markdown(rows: list[dict], command: str, branch_time: float = BRANCH_TIME,
                          lns_time: float = LNS_TIME) -> str:
    def cell(r):
        return [r["workload"], r["R"], r["engine"], r["rho"], f"{r['best_s']:.1f} ({r['best_solver']})",
                f"{r['old_bound_s']:.1f}", f"{r['bound_s']:.1f} ({r['bound_source']})", f"{r['old_gap']:.1%}",
                f"{r['gap']:.1%}", "-" if r.get("ceiling_s") is None else f"{r['ceiling_s']:.1f}",
                f"{r['rho_value']:.2f} {r['regime']}",
                f"{r['online_ratio']:.3f} ({r['online_policy']})"]

    head = ("workload", "R", "engine", "rho", "best schedule (s)", "old bound (s)", "new bound (s)", "old gap", "gap",
            "energy ceiling (s)", "trainer / rollout", "best online / best")
    preset = [r for r in rows if r["rho"] == "preset"]
    swept = [r for r in rows if r["rho"] != "preset"]
    lines = ["# How tight the offline optimum is", "", f"Made by `{command}` on {_when()}.", "",
             "best schedule: the least train end of every online policy, the just-in-time planner `step-plan` "
             f"({SEQUENCE_MOVES:,} update-sequence moves, then {PROOF_EVALUATIONS:,} annealing moves per start at "
             f"R = 32; no sequence search and {PLAN_EVALUATIONS:,} moves beyond; plans kept within the engine's "
             "limits), on the linear engine at R = 32 CP-SAT and at every R the large-neighbourhood search from the "
             "best of them (`cpsat-lns`: CP-SAT on a window of steps, a few groups or scattered requests at a time, "
             f"the rest held, {lns_time:.0f} s), and at R = 32 the step-indexed bound's MILP solutions "
             "taken as update sequences, the best of them walked further "
             f"({GUIDED_RESTARTS} walks of {GUIDED_MOVES} update-sequence moves per group, near-equal sequences "
             "taken: `bound-guided`, `step_plan.guided_plan`), each re-scored in the simulator. "
             "old bound: the separate analytic bound "
             "(`bounds.separate_bound`). new bound: the largest proven bound of the separate bound, the Johnson "
             "flow-shop bound, CP-SAT's bound on the flow-shop relaxation (`flowshop_bound.chain_bound`), the "
             "step-indexed bound (`solvers/rollout/step_bound.py`, HiGHS's dual bound; at R = 32, "
             f"where it is more than {min(BRANCH_GAPS):.2%} below the best schedule, branching on the round's last step for "
             f"up to {branch_time:.0f} s more: each range's MILP decides whether the train end can lie below a "
             f"target, the best schedule (or the guided plan of the single MILP's solutions, if better) less "
             f"{', '.join(f'{g:.2%}' for g in BRANCH_GAPS)} in turn (on the linear engine first "
             f"{', '.join(f'{g:.1%}' for g in LINEAR_LADDER)}: "
             "its single MILP starts further below); a range with a schedule below it is halved "
             "and the buckets of that schedule's groups refined, and the last target proven is the bound) and, on "
             "the linear engine "
             "where the offline model is exact, CP-SAT's own proven bound and, where the slow bounds run, the "
             "largest train end CP-SAT proves no schedule reaches (`solvers/rollout/refuted_bound.py`: targets "
             "bisected between the best bound and the best schedule, each a short decision run on the exact model "
             "with cuts that turn the target into deadlines, as long as each slow bound runs). "
             "gap = (best - bound) / best. "
             "energy ceiling (linear engine, where the slow bounds run): the train end of a schedule of the fluid "
             "relaxation, in which a request may spend its KV at any time before it is forced "
             "(`solvers/rollout/energy_ceiling.py`, searched over finish orders as long as each slow bound runs): the "
             "step-indexed bound, whatever its buckets, never exceeds it, so where it lies more than 2% below "
             "the best schedule that bound cannot prove 2%. "
             "rho `preset`: the paper's trainer. trainer / rollout: total trainer time over the synchronous "
             f"rollout makespan (rollout-bound at or below {ROLLOUT_BOUND}, trainer-bound at or above "
             f"{TRAINER_BOUND}: one side takes at least twice the other's time). best online / best: the least "
             "train end of the online policies (oracle policies included) over the best schedule; the ratio to the "
             "optimum lies between it and (best online / bound), in optimum_gaps.csv. `defer` picks how many groups "
             "it holds back by simulating the round with each count (a search over one parameter with the true "
             "lengths): the summary also gives the ratio without it (rule policies), the csv its figures "
             "(`rule_*`).",
             "", "## Preset trainer", "", *markdown_table(head, (cell(r) for r in preset)), ""]
    if swept:
        lines += [f"## rho sweep ({swept[0]['workload']}, R = {swept[0]['R']})", "",
                  *markdown_table(head, (cell(r) for r in swept)), ""]
    for engine in dict.fromkeys(r["engine"] for r in rows):
        at32 = [r for r in rows if r["engine"] == engine and r["R"] == 32]
        if at32:
            worst = max(at32, key=lambda r: r["gap"])
            lines.append(f"- {engine} engine, R = 32: largest gap {worst['gap']:.1%} ({worst['workload']}, rho "
                         f"{worst['rho']}); {sum(r['gap'] <= 0.02 for r in at32)} of {len(at32)} settings within 2%.")
        open_ = [r for r in at32 if r["gap"] > 0.02 and r.get("ceiling_s") is not None]
        if open_:
            capped = [r for r in open_ if r["ceiling_gap"] > 0.02]
            lines.append(f"- {engine} engine, R = 32: in {len(capped)} of the {len(open_)} settings beyond 2% the "
                         "energy ceiling lies more than 2% below the best schedule ("
                         + ", ".join(f"{r['workload']} rho {r['rho']}: {r['ceiling_gap']:.1%}" for r in open_)
                         + "): the step-indexed bound cannot prove 2% there.")
    for regime, goal in (("rollout-bound", 1.10), ("trainer-bound", 1.05), ("balanced", None)):
        for engine in dict.fromkeys(r["engine"] for r in rows):
            picked = [r for r in rows if r["engine"] == engine and r["regime"] == regime]
            if picked:
                worst = max(picked, key=lambda r: r["online_ratio"])
                rule = max(picked, key=lambda r: r["rule_ratio"])
                lines.append(f"- {regime}, {engine} engine: best online / best at most {worst['online_ratio']:.3f} "
                             f"({worst['workload']} R = {worst['R']}, rho {worst['rho']})"
                             + (f"; {sum(r['online_ratio'] <= goal for r in picked)} of {len(picked)} settings "
                                f"within {goal:.2f}" if goal else "")
                             + f". Rule policies alone: at most {rule['rule_ratio']:.3f} ({rule['workload']} R = "
                             f"{rule['R']}, rho {rule['rho']})"
                             + (f"; {sum(r['rule_ratio'] <= goal for r in picked)} of {len(picked)} within {goal:.2f}."
                                if goal else "."))
    return "\n".join(lines) + "\n"


def write_optimum_gaps(rows: list[dict], out: str | Path, command: str, branch_time: float = BRANCH_TIME,
                       lns_time: float = LNS_TIME) -> str:
    """optimum_gaps.md and .csv, moved into ``out`` together (each atomically); the markdown."""
    md = optimum_gaps_markdown(rows, command, branch_time, lns_time)
    with staged_folder(out, writes=FILES) as stage:
        write_atomic(stage / "optimum_gaps.md", md)
        write_atomic(stage / "optimum_gaps.csv", csv_text(rows, COLUMNS))
    return md

"""``pipeplan multi study``: results/multi/, exact against heuristic joint plans on the measured
pairs and triple, the baselines the issue names, and fronts of one network's rate against the
other's.

Per instance and objective (fairness, rate, total) every multi solver runs: the exact joint
models (cpsat, milp; 2 threads; fairness and rate, the linear objectives), NSGA-II and the baselines (each network alone on its best PU, each
network's own optimum, a greedy PU partition, every network on the NPU). The summary puts the
joint optimum against the baselines (the goals: fairness >= 1.3 x "alone on its best PU";
sustained rate against "NPU only" and "best single mapping", Puzzle's 3.7x / 2.2x) and NSGA-II
against the optimum (goal: within 2%).

Fronts (two-network instances): the set of rate pairs (r_A, r_B) a plan sustains is down-closed,
so its upper boundary is traced by rays: with reference rates (R_A cos a, R_B sin a) (R: the
networks' own reference rates, so the rays spread evenly over the normalised plane) the
fairness objective is the largest t with (t R_A cos a, t R_B sin a) sustainable, i.e. where
the ray at angle a leaves the union over all plans. The exact model gives that point for every ray (a proven front
to the solver's tolerance); NSGA-II gives its own.
"""
from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pipeplan
from pipeplan.app.figures import pyplot, save_figure
from pipeplan.core.io import write_atomic
from pipeplan.core.registry import get_solver
from pipeplan.core.tables import csv_text, markdown_table
from pipeplan.core.vocabulary import MULTI_OBJECTIVES
from pipeplan.formulations.mapping.multi.problem import reference_fps
from pipeplan.instances.multi import load_multi

INSTANCES = ("multi/yolo+mobile", "multi/alex+mobile", "multi/google+res+squeeze", "multi/yolo+mobile-partitioned")
OBJECTIVES = ("fairness", "rate", "total")
EXACT_OBJECTIVES = ("fairness", "rate")     # linear in the plan's times (solvers/mapping/multi/exact.py)
BASELINES = ("alone-best-pu", "own-optimum", "greedy-partition", "npu-only")
SOLVERS = ("cpsat", "milp", "nsga2") + BASELINES
FRONT_INSTANCES = ("multi/yolo+mobile", "multi/alex+mobile")
RAYS = 11
# the study's tables; its front_<pair>.png names follow FRONT_INSTANCES and are checked when they move in
FILES = ("runs.csv", "fronts.csv", "summary.md")
COLUMNS = ("instance", "objective", "solver", "termination", "quality", "value", "bound", "gap", "wall_s", "note")


def _has_npu(problem) -> bool:
    return any(pu.kind == "npu" for n in problem.networks for pu in n.problem.profile.pus.values())


def run_rows(instances=INSTANCES, objectives=OBJECTIVES, *, time_limit: float, threads: int, seed: int,
             progress=None) -> list[dict]:
    rows = []
    jobs = [(i, o, s) for i in instances for o in objectives for s in SOLVERS]
    for k, (name, objective, solver) in enumerate(jobs):
        problem = load_multi(name)
        if solver == "npu-only" and not _has_npu(problem):
            continue
        exact = get_solver("multi", solver).exact
        if exact and objective not in EXACT_OBJECTIVES:
            continue
        if progress:
            progress(k, len(jobs), f"{name} {objective} {solver}")
        r = pipeplan.solve(problem, solver, objective=objective, seed=seed,
                           time_limit=time_limit, threads=threads if exact else 1)
        key = MULTI_OBJECTIVES[objective].key
        rows.append({"instance": name, "objective": objective, "solver": solver,
                     "termination": r.termination.value, "quality": r.quality.value,
                     "value": r.objectives.get(key), "bound": r.bound.get(key), "gap": r.gap,
                     "wall_s": round(r.wall_time_s, 2), "note": r.message.split(" | ")[0][:120]})
    return rows


def front(name: str, solver: str, *, rays: int, time_limit: float, threads: int, seed: int) -> list[dict]:
    """The rate pairs where rays at angles in (0, 90) degrees leave the set of sustainable pairs."""
    problem = load_multi(name)
    a, b = problem.networks
    ra, rb = reference_fps(a), reference_fps(b)      # rays even in the normalised plane
    out = []
    for k in range(rays):
        ang = (k + 0.5) * (math.pi / 2) / rays
        ray = replace(problem, networks=(replace(a, reference_fps=ra * math.cos(ang)),
                                         replace(b, reference_fps=rb * math.sin(ang))))
        r = pipeplan.solve(ray, solver, objective="fairness", seed=seed, time_limit=time_limit,
                           threads=threads if get_solver("multi", solver).exact else 1)
        if r.plan is None:
            continue
        t = r.objectives["min_norm_throughput"]
        out.append({"instance": name, "solver": solver, "angle_deg": round(math.degrees(ang), 2),
                    "a_fps": t * ra * math.cos(ang), "b_fps": t * rb * math.sin(ang),
                    "proven": r.quality.value == "proven_optimal"})
    return out


def front_plot(path: Path, name: str, points: list[dict], baselines: dict[str, tuple[float, float]]) -> Path:
    plt = pyplot()
    problem = load_multi(name)
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for solver, style in (("cpsat", "o-"), ("nsga2", "x--")):
        pts = [p for p in points if p["solver"] == solver]
        if pts:
            ax.plot([p["a_fps"] for p in pts], [p["b_fps"] for p in pts], style, label=f"{solver} (rays)")
    for label, (x, y) in baselines.items():
        ax.plot([x], [y], "s", label=label)
    ax.set_xlabel(f"{problem.networks[0].name} ({problem.networks[0].problem.name}) fps")
    ax.set_ylabel(f"{problem.networks[1].name} ({problem.networks[1].problem.name}) fps")
    ax.set_title(f"{name}: rates both networks sustain at once")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def _value(rows, name, objective, solver):
    for r in rows:
        if (r["instance"], r["objective"], r["solver"]) == (name, objective, solver):
            return r["value"]
    return None


def ratios(rows: list[dict]) -> list[dict]:
    """Per instance: the joint optimum against the baselines and NSGA-II against the optimum."""
    out = []
    for name in dict.fromkeys(r["instance"] for r in rows):
        fair = {s: _value(rows, name, "fairness", s) for s in SOLVERS}
        rate = {s: _value(rows, name, "rate", s) for s in SOLVERS}
        total = {s: _value(rows, name, "total", s) for s in SOLVERS}

        def ratio(x, y):
            return x / y if x is not None and y else None
        out.append({"instance": name,
                    "fair_opt_over_alone": ratio(fair["cpsat"], fair["alone-best-pu"]),
                    "rate_opt_over_npu_only": ratio(rate["cpsat"], rate["npu-only"]),
                    "rate_opt_over_best_single": ratio(rate["cpsat"], rate["alone-best-pu"]),
                    "total_nsga2_over_alone": ratio(total["nsga2"], total["alone-best-pu"]),
                    "nsga2_fair_shortfall": None if not fair["cpsat"] or fair["nsga2"] is None
                    else 1 - fair["nsga2"] / fair["cpsat"],
                    "nsga2_rate_shortfall": None if not rate["cpsat"] or rate["nsga2"] is None
                    else 1 - rate["nsga2"] / rate["cpsat"]})
    return out


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def study(out: Path, *, time_limit: float = 60.0, threads: int = 2, seed: int = 0, rays: int = RAYS,
          command: str = "pipeplan multi study", progress=None) -> str:
    rows = run_rows(time_limit=time_limit, threads=threads, seed=seed, progress=progress)
    fronts = []
    for k, (name, solver) in enumerate((n, s) for n in FRONT_INSTANCES for s in ("cpsat", "nsga2")):
        if progress:
            progress(k, 2 * len(FRONT_INSTANCES), f"front {name} {solver} ({rays} rays)")
        fronts += front(name, solver, rays=rays, time_limit=time_limit, threads=threads, seed=seed)
    write_atomic(out / "runs.csv", csv_text(rows, COLUMNS))
    if fronts:
        write_atomic(out / "fronts.csv", csv_text(
            [{"instance": f["instance"], "solver": f["solver"], "angle_deg": f["angle_deg"], "a_fps": f["a_fps"],
              "b_fps": f["b_fps"], "proven": f["proven"]} for f in fronts],
            ["instance", "solver", "angle_deg", "a_fps", "b_fps", "proven"]))
    for name in FRONT_INSTANCES:
        problem = load_multi(name)
        base = {}
        for solver in ("alone-best-pu", "npu-only", "own-optimum"):
            if solver == "npu-only" and not _has_npu(problem):
                continue
            r = pipeplan.solve(problem, solver, objective="fairness")
            if r.plan is not None:
                base[f"{solver} (fair rates)"] = tuple(r.objectives[f"{n.name}.fps_fair"] for n in problem.networks)
        front_plot(out / f"front_{name.split('/')[1]}.png", name, [f for f in fronts if f["instance"] == name], base)
    md = summary_markdown(rows, ratios(rows), fronts, command, time_limit, threads)
    write_atomic(out / "summary.md", md)
    return md


def summary_markdown(rows, ratio_rows, fronts, command: str, time_limit: float, threads: int) -> str:
    lines = ["# Several DNNs on one SoC: exact against heuristic joint plans", "",
             f"Written by `{command}` (each solver {time_limit:g} s; exact ones on {threads} threads). "
             "Values: fairness = the least normalised throughput (each network's rate over its rate alone "
             "on its best single PU); rate = the request rate every network sustains at once (fps); total = "
             "the weighted sum of rates (fps; not linear in the periods: heuristics and baselines only). "
             "Model and rules: formulations/mapping/multi/evaluator.py.", ""]
    for name in dict.fromkeys(r["instance"] for r in rows):
        lines += [f"## {name}", ""]
        table = [[r["objective"], r["solver"], f"{r['termination']}/{r['quality']}", _fmt(r["value"]),
                  _fmt(r["bound"]), "-" if r["gap"] is None else f"{r['gap']:.2%}", _fmt(r["wall_s"])]
                 for r in rows if r["instance"] == name]
        lines += markdown_table(["objective", "solver", "status", "value", "bound", "gap", "s"], table)
        lines.append("")
    lines += ["## Against the baselines and NSGA-II", ""]
    table = [[r["instance"], _fmt(r["fair_opt_over_alone"]), _fmt(r["rate_opt_over_npu_only"]),
              _fmt(r["rate_opt_over_best_single"]), _fmt(r["total_nsga2_over_alone"]),
              "-" if r["nsga2_fair_shortfall"] is None else f"{r['nsga2_fair_shortfall']:.2%}",
              "-" if r["nsga2_rate_shortfall"] is None else f"{r['nsga2_rate_shortfall']:.2%}"] for r in ratio_rows]
    lines += markdown_table(["instance", "fairness: optimum / alone on best PU", "rate: optimum / NPU only",
                             "rate: optimum / best single mapping",
                             "weighted total: NSGA-II / alone on best PU", "NSGA-II short of optimum (fairness)",
                             "NSGA-II short of optimum (rate)"], table)
    lines.append("")
    if fronts:
        proven = sum(f["proven"] for f in fronts if f["solver"] == "cpsat")
        total = sum(1 for f in fronts if f["solver"] == "cpsat")
        lines += ["## Fronts", "",
                  f"front_<pair>.png, fronts.csv: the rate pairs both networks sustain at once, traced by rays "
                  f"(module docstring of pipeplan/app/studies/multi.py); {proven}/{total} exact ray points proven.", ""]
    return "\n".join(lines) + "\n"

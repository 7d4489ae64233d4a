"""``pipeplan gradcode study``: the gradient-coding results under results/gradcode/.

* training.csv, time_to_target.md and loss_<model>_s<s>_mean<m>.png: every training scheme on
  the digits with n = 12, s in {1, 2, 3} and exponential straggler delays of mean 1 s and 2 s
  (the PGC experiments' n, s and delays), simulated time; time to a target loss and the ratios
  PGC / GC and PGC / uncoded;
* assignment.csv, assignment.md: the assignment solvers against FR/CR (and their pipelined
  versions) on the heterogeneous instances, scored by the evaluator;
* perf.md: the two timed benchmarks of the issue (exhaustive verification n = 24, s = 3;
  100,000 steps x 100 workers of simulation);
* without ``--quick``, three further studies, each with its own page: timing.* (PGC vs GC with
  workers as queues, communication and decoding; ``gradcode_timing``), codes.* (the codes from
  the literature: conditioning, decoding error, verification at scale; ``gradcode_codes``) and
  general.* (the general assignment class against the best construction, with its proven
  bound; ``gradcode_general``).
"""
from __future__ import annotations

import platform
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

import pipeplan
from pipeplan.app.figures import pyplot, save_figure
from pipeplan.app.studies.gradcode_training_setup import TARGET_LOSS, study_code
from pipeplan.core.io import write_atomic
from pipeplan.core.tables import cell, csv_text, markdown_table

STUDY_N = 12              # workers of every training run (the PGC experiments' n)
# the study's tables; its loss_<model>_s<s>_mean<m>.png names follow --models and are checked when they move in
FILES = ("training.csv", "ratios.csv", "assignment.csv", "report.md")
STUDY_SCHEMES = ("uncoded", "gc-fr", "gc-cr", "ignore-sgd", "ignore-gc", "pgc-fr", "pgc-cr", "pgc-cr-lstsq")
ASSIGNMENT_INSTANCES = ("gradcode/homog-n12-s2", "gradcode/hetero-n12-s1", "gradcode/hetero-n12-s2",
                        "gradcode/hetero-n12-s3", "gradcode/hetero-n12-s2-markov", "gradcode/hetero-n12-s1-pipe",
                        "gradcode/hetero-n12-s2-pipe")


def _plot(path: Path, title: str, runs: dict, target: float) -> None:
    fig, (a1, a2) = pyplot().subplots(1, 2, figsize=(11, 4.2), dpi=110)
    for i, (name, run) in enumerate(runs.items()):
        style = "-" if name.startswith("pgc") else "--"
        a1.plot(run.loss, style, color=f"C{i}", lw=1.2, label=name)
        a2.plot(run.time_s, run.loss, style, color=f"C{i}", lw=1.2, label=name)
    for ax, xl in ((a1, "step"), (a2, "simulated time (s)")):
        ax.axhline(target, color="grey", lw=0.8, ls=":")
        ax.set_yscale("log")
        ax.set_xlabel(xl)
        ax.set_ylabel("training loss")
        ax.grid(alpha=0.3)
    low = min(min(r.loss) for r in runs.values())
    a1.set_ylim(max(low * 0.8, 1e-3), 3.0)
    a2.set_ylim(max(low * 0.8, 1e-3), 3.0)
    a2.legend(fontsize=7, ncol=2)
    fig.suptitle(title, fontsize=10)
    save_figure(fig, path)


def training_study(out: Path, *, steps: int, models: list[str], s_values, means, progress=None) -> tuple[list[dict], list[dict]]:
    from pipeplan.deploy.gradcode.training import train_simulated
    from pipeplan.formulations.gradcode.problem import homogeneous_problem
    from pipeplan.formulations.gradcode.straggler import StragglerModel
    rows, ratios = [], []
    total = len(models) * len(s_values) * len(means) * len(STUDY_SCHEMES)
    done = 0
    for model in models:
        target = TARGET_LOSS[model]
        for s in s_values:
            for mean in means:
                problem = homogeneous_problem(STUDY_N, s, straggler=StragglerModel(kind="exponential", mean_s=mean))
                runs = {}
                for scheme in STUDY_SCHEMES:
                    if progress:
                        progress(done, total, f"{model} s={s} mean={mean} {scheme}")
                    run = train_simulated(problem, study_code(scheme, STUDY_N, s), model=model, steps=steps, seed=0)
                    runs[scheme] = run
                    done += 1
                    rows.append({"model": model, "s": s, "delay_mean_s": mean, "scheme": scheme,
                                 "target_loss": target, "steps_to_target": run.steps_to_loss(target),
                                 "time_to_target_s": run.time_to_loss(target),
                                 "mean_step_s": run.time_s[-1] / steps, "final_loss": run.loss[-1],
                                 "test_accuracy": run.test_accuracy})
                tt = {k: r.time_to_loss(target) for k, r in runs.items()}
                ratio = lambda a, b: (tt[a] / tt[b]) if tt[a] and tt[b] else None
                ratios.append({"model": model, "s": s, "delay_mean_s": mean,
                               "pgc_fr_vs_gc_fr": ratio("pgc-fr", "gc-fr"), "pgc_cr_vs_gc_cr": ratio("pgc-cr", "gc-cr"),
                               "pgc_fr_vs_uncoded": ratio("pgc-fr", "uncoded"),
                               "pgc_cr_vs_uncoded": ratio("pgc-cr", "uncoded"),
                               "pgc_fr_vs_ignore_sgd": ratio("pgc-fr", "ignore-sgd")})
                _plot(out / f"loss_{model}_s{s}_mean{mean:g}.png",
                      f"{model} on digits, n = 12, s = {s}, exponential delay mean {mean:g} s (simulated time)",
                      runs, target)
    return rows, ratios


def assignment_study(*, instances, time_limit: float, progress=None) -> list[dict]:
    from pipeplan.instances.gradcode import load_instance
    rows = []
    runs = [(i, solver, obj) for i in instances for solver, obj in
            (("fr", "expected"), ("cr", "expected"), ("pgc-fr", "expected"), ("pgc-cr", "expected"),
             ("cpsat", "expected"), ("milp", "expected"), ("cpsat", "worst"), ("milp", "worst"))]
    for done, (inst, solver, obj) in enumerate(runs):
        if progress:
            progress(done, len(runs), f"{inst} {solver} {obj}")
        problem = load_instance(inst)
        if solver.startswith("pgc") != problem.pipelined and solver in ("fr", "cr", "pgc-fr", "pgc-cr"):
            continue   # compare like with like: pipelined instances against PGC, the others against GC
        construction = solver in ("fr", "cr", "pgc-fr", "pgc-cr")     # they take no objective
        r = pipeplan.solve(problem, solver, time_limit=time_limit, seed=0, threads=2,
                           **({} if construction else {"objective": obj}))
        o = r.objectives
        rows.append({"instance": inst, "solver": solver if construction else f"{solver}-{obj}",
                     "termination": r.termination.value, "quality": r.quality.value,
                     "expected_step_s": o.get("expected_step_s"), "p95_step_s": o.get("p95_step_s"),
                     "worst_step_s": o.get("worst_step_s"), "gap": r.gap, "wall_time_s": r.wall_time_s})
    return rows


def perf_benchmarks() -> dict:
    from pipeplan.formulations.gradcode.problem import homogeneous_problem
    from pipeplan.formulations.gradcode.simulator import simulate_step_times
    from pipeplan.formulations.gradcode.verifier import verify
    from pipeplan.solvers.gradcode.baselines import ignore_stragglers_gc
    from pipeplan.solvers.gradcode.cyclic import cyclic_repetition
    from pipeplan.solvers.gradcode.fractional import fractional_repetition
    out = {}
    cr = cyclic_repetition(24, 3, tries=1)
    best = np.inf
    for _ in range(3):
        began = time.perf_counter()
        v = verify(cr)
        best = min(best, time.perf_counter() - began)
    out["verify_n24_s3"] = {"seconds": best, "sets": v.sets_checked, "worst_condition": v.worst_condition,
                            "worst_residual": v.worst_residual}
    problem = homogeneous_problem(100, 3, capacity=4)
    for name, code in (("groups rule (FR)", fractional_repetition(100, 3)),
                       ("count rule (n-s-th reply)", ignore_stragglers_gc(100, 3))):
        began = time.perf_counter()
        times = simulate_step_times(problem, code, 100_000, seed=0)
        out[f"simulate_100k_x_100 {name}"] = {"seconds": time.perf_counter() - began, "mean_step_s": float(times.mean())}
    return out


def run_study(out: Path, *, steps: int, models: list[str], time_limit: float, quick: bool, progress=None,
              command: str = "pipeplan gradcode study") -> str:
    s_values, means = ((2,), (1.0,)) if quick else ((1, 2, 3), (1.0, 2.0))
    instances = ASSIGNMENT_INSTANCES[:3] if quick else ASSIGNMENT_INSTANCES
    models = models[:1] if quick else models
    rows, ratios = training_study(out, steps=steps, models=models, s_values=s_values, means=means, progress=progress)
    assignment = assignment_study(instances=instances, time_limit=min(time_limit, 10.0) if quick else time_limit,
                                  progress=progress)
    perf = perf_benchmarks()
    write_atomic(out / "training.csv", csv_text(rows, list(rows[0])))
    write_atomic(out / "ratios.csv", csv_text(ratios, list(ratios[0])))
    write_atomic(out / "assignment.csv", csv_text(assignment, list(assignment[0])))
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    cmd = command
    lines = ["# Gradient coding results", "", f"Made by `{cmd}` on {when}, {platform.machine()} "
             f"(Python {platform.python_version()}). Simulated time; real gradients on scikit-learn's digits.", "",
             "## Time to target training loss (simulated seconds), n = 12, exponential delays", "",
             "Each worker straggles in a step with probability 0.2; a partition takes 0.5 s. `pgc-cr` uses the "
             "published fixed linear decoder; `pgc-cr-lstsq` decodes exactly by least squares.", ""]
    by_setting = {}
    for r in rows:
        by_setting.setdefault((r["model"], r["s"], r["delay_mean_s"]), {})[r["scheme"]] = r
    lines += markdown_table(
        ("model", "s", "delay mean", *STUDY_SCHEMES),
        ([model, s, f"{mean:g} s", *(cell(mine[sc]["time_to_target_s"], ".4g", none="not reached")
                                      for sc in STUDY_SCHEMES)]
         for (model, s, mean), mine in by_setting.items()))
    lines += ["", "## Ratios of time to target (below 1: PGC is faster)", ""]
    lines += markdown_table(
        ("model", "s", "delay mean", "PGC-FR / GC-FR", "PGC-CR / GC-CR", "PGC-FR / uncoded", "PGC-CR / uncoded",
         "PGC-FR / ignore-SGD"),
        ([r["model"], r["s"], f"{r['delay_mean_s']:g} s", *(cell(r[k], ".3g") for k in (
            "pgc_fr_vs_gc_fr", "pgc_cr_vs_gc_cr", "pgc_fr_vs_uncoded", "pgc_cr_vs_uncoded", "pgc_fr_vs_ignore_sgd"))]
         for r in ratios))
    lines += ["", "## Assignment solver vs FR / CR (evaluator: 20,000 simulated steps; worst case exact)", ""]
    table = []
    for inst in dict.fromkeys(r["instance"] for r in assignment):
        mine = [r for r in assignment if r["instance"] == inst]
        base = min(r["expected_step_s"] for r in mine if r["solver"] in ("fr", "cr", "pgc-fr", "pgc-cr"))
        table += [[inst, r["solver"], f"{r['termination']}/{r['quality']}", cell(r["expected_step_s"], ".4g"),
                   cell(r["p95_step_s"], ".4g"), cell(r["worst_step_s"], ".4g"), f"x{r['expected_step_s'] / base:.3f}"]
                  for r in mine]
    lines += markdown_table(("instance", "solver", "status", "expected step (s)", "p95 (s)", "worst case (s)",
                             "vs best construction (expected)"), table)
    lines += ["", "## Timed benchmarks", ""]
    for name, v in perf.items():
        lines.append(f"- {name}: {v['seconds']:.3f} s " + ", ".join(f"{k} {cell(x, '.4g')}" for k, x in v.items() if k != "seconds"))
    if not quick:
        from pipeplan.app.studies.gradcode_codes import codes_study
        from pipeplan.app.studies.gradcode_general import general_study
        from pipeplan.app.studies.gradcode_timing import timing_study
        timing_study(out, steps=steps, progress=progress, command=command)
        codes_study(out, progress=progress, command=command)
        general_study(out, time_limit=time_limit, progress=progress, command=command)
        lines += ["", "## Further pages", "",
                  "- [timing.md](timing.md): PGC vs GC with workers as queues (carry-over), communication and "
                  "decoding time, exponential and Pareto delays",
                  "- [codes.md](codes.md): FR, CR, cyclic-MDS and approximate codes: conditioning, decoding error, "
                  "verification times up to n = 1,000",
                  "- [general.md](general.md): the general assignment class against the best construction, with "
                  "the proven coverage bound"]
    md = "\n".join(lines) + "\n"
    write_atomic(out / "report.md", md)
    return md

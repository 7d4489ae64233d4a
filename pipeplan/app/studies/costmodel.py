"""results/costmodel/: the cost model against every measured Khadas VIM3 run (``pipeplan costmodel``).

What it writes, all from the committed derived files (instances/khadas-vim3/evaluations.csv,
switching_runs.csv, the profiles), so a clean checkout reproduces it:

* ``runs.csv``: every measured figure (period, latency, per-frame energy, steady-state energy)
  next to its prediction; for the figures a fitted parameter moves, also the prediction with
  the parameters fitted without that run's fold (k-fold) and without its network;
* ``README.md``: the parameters, the cross-validation table (median and 90th-percentile
  error per metric and network: fitted / k-fold / leave one network out), the contention
  figures, and the runs the model cannot express, with the reason;
* ``predicted_vs_measured_<metric>.png``: one scatter per metric, a marker per network.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import statistics
from dataclasses import dataclass
from pathlib import Path

from pipeplan.app.figures import pyplot, save_figure
from pipeplan.core.io import write_atomic
from pipeplan.formulations.mapping.evaluator import evaluate
from pipeplan.formulations.mapping.frequencies import plan_for
from pipeplan.formulations.mapping.profile import Profile, load_profile
from pipeplan.instances.paths import INSTANCES_DIR, PLATFORMS_DIR
from pipeplan.profiles import khadas_costmodel as km

FOLDER = "khadas-vim3"
PROFILES_DIR = PLATFORMS_DIR.parent / "data"
METRICS = ("period", "latency", "energy", "steady_energy")
UNITS = {"period": "ms", "latency": "ms", "energy": "mJ", "steady_energy": "mJ"}


@dataclass(frozen=True)
class Row:
    run: km.Run
    metric: str
    measured: float
    predicted: float
    kfold: float | None = None
    lono: float | None = None

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1


def load_inputs() -> tuple[dict[str, Profile], list[km.Run], list[km.Run]]:
    profiles = {p.stem: load_profile(p) for p in sorted((PROFILES_DIR / FOLDER).glob("*.json"))}
    whole = km.read_runs(INSTANCES_DIR / FOLDER / "evaluations.csv")
    switching = km.read_runs(INSTANCES_DIR / FOLDER / "switching_runs.csv")
    return profiles, whole, switching


def unexpressible(profiles: dict[str, Profile], runs: list[km.Run]) -> list[tuple[km.Run, str]]:
    """Runs the model cannot score, with the reason (a PU or level without measurements)."""
    out = []
    for run in runs:
        prob = km.chain_problem(profiles[run.network])
        try:
            evaluate(prob, plan_for(prob, run.mapping, run.mode, run.freq, source=run.source))
        except (ValueError, KeyError) as exc:
            pus = prob.profile.pus
            missing = sorted({pu for i, pu in enumerate(run.mapping) if pu not in pus or not prob.profile.can_run(i, pu)})
            why = (f"no per-block measurements on {', '.join(missing)} for {run.network} (only whole-network runs)"
                   if missing else str(exc).splitlines()[0])
            out.append((run, why))
    return out


def rows(profiles: dict[str, Profile], whole: list[km.Run], switching: list[km.Run]) -> list[Row]:
    """Every measured figure with its predictions (see the module docstring)."""
    checks = {(c.run.label, c.metric): c for c in km.cross_validation(profiles, whole + switching)}
    out = []
    skip = {r.label for r, _ in unexpressible(profiles, whole + switching)}
    for run in whole + switching:
        if run.label in skip:
            continue
        prob = km.chain_problem(profiles[run.network])
        ev = evaluate(prob, plan_for(prob, run.mapping, run.mode, run.freq, source=run.source))
        measured = {"period": run.period_ms, "latency": run.latency_ms, "energy": run.energy_mj,
                    "steady_energy": run.steady_mj}
        predicted = {"period": ev.period_ms, "latency": ev.latency_ms, "energy": ev.energy_mj,
                     "steady_energy": ev.energy_ss_mj}
        for metric in METRICS:
            if measured[metric] is None:
                continue
            c = checks.get((run.label, metric))
            out.append(Row(run, metric, measured[metric], predicted[metric],
                           c.kfold if c else None, c.lono if c else None))
    return out


def _stats(errors: list[float]) -> str:
    if not errors:
        return "-"
    e = sorted(abs(x) for x in errors)
    p90 = e[min(len(e) - 1, int(0.9 * len(e)))]
    return f"{100 * statistics.median(e):.1f}% / {100 * p90:.1f}%"


def cv_table(table: list[Row]) -> list[str]:
    lines = ["| metric | network | runs | fitted (median / p90) | k-fold | leave network out |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    for metric in METRICS:
        for net in sorted({r.run.network for r in table if r.metric == metric}) + ["all"]:
            sel = [r for r in table if r.metric == metric and (net == "all" or r.run.network == net)]
            if not sel:
                continue
            kf = [r.kfold / r.measured - 1 for r in sel if r.kfold is not None]
            lo = [r.lono / r.measured - 1 for r in sel if r.lono is not None]
            lines.append(f"| {metric} | {net} | {len(sel)} | {_stats([r.error for r in sel])} | {_stats(kf)} | "
                         f"{_stats(lo)} |")
    return lines


def scatter(path: Path, metric: str, table: list[Row]) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.6, 5.0), dpi=120)
    sel = [r for r in table if r.metric == metric]
    for net in sorted({r.run.network for r in sel}):
        pts = [r for r in sel if r.run.network == net]
        ax.scatter([r.measured for r in pts], [r.predicted for r in pts], s=14, label=f"{net} ({len(pts)})")
    lo = min(min(r.measured, r.predicted) for r in sel)
    hi = max(max(r.measured, r.predicted) for r in sel)
    ax.plot([lo, hi], [lo, hi], color="black", lw=0.8)
    ax.plot([lo, hi], [lo * 1.1, hi * 1.1], color="grey", lw=0.6, ls="--")
    ax.plot([lo, hi], [lo * 0.9, hi * 0.9], color="grey", lw=0.6, ls="--", label="+-10%")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(f"measured {metric} ({UNITS[metric]})")
    ax.set_ylabel(f"predicted {metric} ({UNITS[metric]})")
    ax.set_title(f"Khadas VIM3: {metric}, model vs board")
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def contention_lines(profiles: dict[str, Profile], whole: list[km.Run]) -> list[str]:
    """Per pipelined run: measured vs predicted period, and measured board power against the
    additive model (share 1) and the fitted share."""
    lines = ["| run | period measured / predicted (ms) | board power measured (mW) | additive (share 1) | fitted |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for run in whole:
        if run.steady_mj is None:
            continue
        prof = profiles[run.network]
        power = []
        for share in (1.0, prof.concurrent_power_share):
            prob = km.chain_problem(dataclasses.replace(prof, concurrent_power_share=share))
            ev = evaluate(prob, plan_for(prob, run.mapping, run.mode, run.freq, source=run.source))
            power.append(ev.energy_ss_mj / ev.period_ms * 1000)
        lines.append(f"| {run.network} {run.mapping} @{run.freq[:12]} | {run.period_ms:.1f} / {ev.period_ms:.1f} | "
                     f"{run.power_mw:.0f} | {power[0]:.0f} | {power[1]:.0f} |")
    return lines


def write(out: Path) -> list[Path]:
    profiles, whole, switching = load_inputs()
    table = rows(profiles, whole, switching)
    written = []
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["network", "mapping", "mode", "freq", "source", "metric", "measured", "predicted", "error",
                "kfold_predicted", "lono_predicted"])
    for r in table:
        w.writerow([r.run.network, r.run.mapping, r.run.mode, r.run.freq, r.run.source, r.metric,
                    f"{r.measured:.4f}", f"{r.predicted:.4f}", f"{r.error:.4f}",
                    "" if r.kfold is None else f"{r.kfold:.4f}", "" if r.lono is None else f"{r.lono:.4f}"])
    written.append(write_atomic(out / "runs.csv", buf.getvalue()))
    for metric in METRICS:
        if any(r.metric == metric for r in table):
            written.append(scatter(out / f"predicted_vs_measured_{metric}.png", metric, table))
    ref = next(iter(p for p in profiles.values() if p.reentry))
    sw = {c: ref.transfers.switch[pair].per_size for c, pair in (("CPU<->GPU", "B->G"), ("CPU<->CPU", "L->B"))
          if pair in ref.transfers.switch}
    doc = ["# The cost model against the board (Khadas VIM3)", "",
           "Generated by `pipeplan costmodel` from the committed measured runs (instances/khadas-vim3/"
           f"evaluations.csv: {len(whole)} whole-network runs; switching_runs.csv: {len(switching)} layer-switching "
           "runs of YOLOv3) and "
           "the profiles. Source of the measurements: public repository Ehsan-aghapour/CO-UP-Profiling at "
           "commit 22005a9d8742a71fb9e03e6e1484359984084a12. The model and every rule: "
           "formulations/mapping/evaluator.py; the fits: pipeplan/profiles/khadas_costmodel.py.", "",
           "## Parameters", "",
           "| parameter | value | what it is | fitted on |", "| --- | ---: | --- | --- |"]
    doc += [f"| switch k, {c} | {v:.3f} ms per ms of size | conversion/cache work per switch, x the tensor's "
            "GPU read-back time | runs that switch (latency) |" for c, v in sw.items()]
    doc += [f"| NPU re-entry | {ref.reentry.get('N', 0):.3f} x first block | cold start of each NPU graph when "
            "a frame holds >= 2 | runs that switch (latency) |",
            f"| NPU whole graph | {ref.whole_graph.get('N', 0):.3f} x summed blocks | one compiled NPU graph | "
            "MobileV1 all-NPU runs (the only network with both) |",
            f"| static board power | {ref.static_power_mw:.0f} mW | lowest board power measured (upper bound) | "
            "not fitted |",
            f"| concurrent power share | {ref.concurrent_power_share:.3f} | share of a further concurrent "
            "stage's dynamic power on the board | pipelined runs (steady-state energy) |", "",
            "## Cross-validated errors", "",
            "Median / 90th-percentile absolute relative error. *fitted*: parameters fitted on every run; "
            "*k-fold*: 10 folds over the runs, each predicted by parameters fitted without its fold; *leave "
            "network out*: fitted without any run of that network. Whole-network runs without switches move no "
            "fitted parameter except the NPU whole-graph share (MobileV1 all-NPU rows), so for them *fitted* is "
            "already a prediction; k-fold columns are filled where a fitted parameter enters.", ""]
    doc += cv_table(table)
    doc += ["", "Plots: " + ", ".join(f"`predicted_vs_measured_{m}.png`" for m in METRICS
                                       if any(r.metric == m for r in table)) + "; every figure in `runs.csv`.", "",
            "## Contention", "",
            "Pipelined runs: the measured period against the model's, and the board power while the pipeline "
            "runs against the additive model (every concurrent stage's dynamic power adds) and the fitted share.",
            ""]
    doc += contention_lines(profiles, whole)
    doc += ["", "The additive model over-predicts the board power of every pipelined run: a further concurrent "
            f"stage adds only {ref.concurrent_power_share:.2f} of its dynamic power (the fitted share; 1 would be "
            "additive, 0 one stage at a time), as the stages share DRAM bandwidth and the board's rails. "
            "A time-contention term (stages slowing each other, the BetterTogether approach) "
            "cannot be fitted here: it can only lengthen predicted periods, and the measured periods are "
            "mostly *shorter* than predicted (GPU->NPU pipelines by 16-18%), and no co-running profiles "
            "are in the data.", "",
            "## Runs the model cannot express", "", "| run | reason |", "| --- | --- |"]
    doc += [f"| {run.label} | {why} |" for run, why in unexpressible(profiles, whole + switching)]
    written.append(write_atomic(out / "README.md", "\n".join(doc) + "\n"))
    return written

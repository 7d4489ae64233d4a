"""The DVFS study behind results/mapping/dvfs.md: what choosing every block's DVFS level saves on
the measured Khadas VIM3 chains, proven by the exact chain models (``cpsat``, ``dvfs=True``)
against the same models at every PU's top level (``dvfs=False``).

Per network (instances khadas-vim3/<net>):

* P*: the least period with every PU at its top level (the throughput optimum);
* the least energy per frame (``energy``) and the least steady-state energy (``energy_ss``) with
  the period held at P* or below, at the top levels and with DVFS: proven status, certified
  gap, wall time;
* points of the exact period-energy front: the least energy per frame under the period caps
  P* x ``FRONT_CAPS``, at the top levels and with DVFS (each point a proven optimum of its cap,
  so each lies on the exact front), drawn as results/mapping/dvfs_<net>.png.

``python -m pipeplan.solvers.mapping.dvfs_study --out results/mapping`` writes dvfs.md,
dvfs.json (every solve's record) and the figures, each file atomically. The instances are read
from the package's instances folder by path (this module sits below the instances layer).
"""
from __future__ import annotations

import argparse
import io
import json
import os
import time
from pathlib import Path

from pipeplan.core.io import write_atomic
from pipeplan.formulations.mapping.instance_io import load_problem_file
from pipeplan.formulations.mapping.plan import plan_from_dict
from pipeplan.solvers.mapping.cpsat import solve_cpsat

NETWORKS = ("Alex", "Google", "MobileV1", "ResV1_50", "SqueezeV1", "YOLOv3")
FRONT_CAPS = (1.0, 1.25, 1.5, 2.0, 3.0, 5.0)
KEYS = {"period": "period_ms", "energy": "energy_mj", "energy_ss": "energy_ss_mj"}


def instances_dir() -> Path:
    """The packaged instances folder (pipeplan/instances, the repository's instances/)."""
    return Path(__file__).resolve().parents[2] / "instances"


def solve(problem, objective: str, *, dvfs: bool, cap: float | None, time_limit: float, threads: int) -> dict:
    """One CP-SAT solve as a record: value, proven, certified gap, wall time, the plan's mapping
    string and levels."""
    began = time.perf_counter()
    r = solve_cpsat(problem, objective=objective, dvfs=dvfs, time_limit=time_limit, threads=threads,
                    bounds=None if cap is None else {"period_ms": cap})
    wall = time.perf_counter() - began
    out = {"objective": objective, "dvfs": dvfs, "period_cap_ms": cap, "termination": r.termination.value,
           "quality": r.quality.value, "wall_s": round(wall, 2), "gap": r.gap, "value": None}
    if r.plan is not None:
        plan = plan_from_dict(r.plan)
        units = tuple(u.name for u in problem.units)
        out.update(value=r.objectives[KEYS[objective]], objectives=r.objectives,
                   bound=r.bound.get(KEYS[objective]), mapping=plan.mapping_string(units),
                   stages=len(plan.stages), levels=[plan.levels.get(u, "max") for u in units])
    return out


def load_network(name: str):
    """The packaged Khadas instance of network ``name``. Trusted: its profile lies in the
    package's profiles folder, outside the instance's own, which a user's instance may not
    reach (read untrusted, every network had been refused and the study ended in a traceback)."""
    return load_problem_file(instances_dir() / "khadas-vim3" / f"{name}.json", trusted=True)


def run_network(name: str, *, time_limit: float, threads: int, front_limit: float, progress=print) -> dict:
    problem = load_network(name)
    rec = {"network": name, "units": len(problem.units), "pus": list(problem.profile.pus),
           "reentry": problem.profile.reentry, "whole_graph": problem.profile.whole_graph}
    rec["period"] = solve(problem, "period", dvfs=False, cap=None, time_limit=time_limit, threads=threads)
    p_star = rec["period"]["value"]
    progress(f"{name}: P* = {p_star:.3f} ms ({rec['period']['quality']}, {rec['period']['wall_s']} s)")
    rec["at_p_star"] = []
    for objective in ("energy", "energy_ss"):
        for dvfs in (False, True):
            r = solve(problem, objective, dvfs=dvfs, cap=p_star, time_limit=time_limit, threads=threads)
            rec["at_p_star"].append(r)
            progress(f"  {objective} dvfs={dvfs}: {r['value']} ({r['quality']}, gap {r['gap']}, {r['wall_s']} s)")
    rec["front"] = []
    for factor in FRONT_CAPS:
        for dvfs in (False, True):
            r = solve(problem, "energy", dvfs=dvfs, cap=p_star * factor, time_limit=front_limit, threads=threads)
            r["factor"] = factor
            rec["front"].append(r)
        progress(f"  front x{factor}: " + ", ".join(f"{r['value']}" for r in rec["front"][-2:]))
    return rec


# ------------------------------------------------------------------------------ output


def _cell(r: dict, digits: int = 1) -> str:
    if r.get("value") is None:
        return f"none ({r['termination']})"
    status = "proven" if r["quality"] == "proven_optimal" else f"gap {100 * (r['gap'] or 0):.2f}%"
    return f"{r['value']:.{digits}f} ({status}, {r['wall_s']:.1f} s)"


def _saving(top: dict, dvfs: dict) -> str:
    if top.get("value") is None or dvfs.get("value") is None:
        return "-"
    return f"{100 * (1 - dvfs['value'] / top['value']):.1f}%"


def markdown(records: list[dict], meta: dict) -> str:
    lines = [
        "# DVFS as a decision: exact energy savings on the Khadas VIM3 chains",
        "",
        "Generated by `python -m pipeplan.solvers.mapping.dvfs_study --out results/mapping` "
        f"(CP-SAT, {meta['threads']} threads, {meta['time_limit']:.0f} s per solve, {meta['front_limit']:.0f} s per "
        f"front point, {meta['cpus']} CPUs; total {meta['total_s']:.0f} s). Every number is the evaluator's "
        "(formulations/mapping/evaluator.py) for the plan the solver returned; \"proven\" means the exact chain "
        "models closed the search (linear objectives: optimal in the model's 10 ns / 10 nJ units, whose "
        "rounding is certified in the bound; steady-state energy: the branch and bound over the period share "
        "closed to its relative gap of 1e-4, solvers/mapping/chain_search.py). \"max-freq\": every PU at its "
        "top level (`dvfs=False`); \"DVFS\": every block's level chosen (`dvfs=True`).",
        "",
        "## At the throughput optimum: least energy with period <= P*",
        "",
        "P*: the least period at the top levels (ms). Energy per frame (mJ) and steady-state energy per "
        "inference (mJ) with the period held at P* or below; value (status, wall time).",
        "",
        "| network | P* (ms) | energy max-freq | energy DVFS | saved | energy_ss max-freq | energy_ss DVFS | saved |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for rec in records:
        e_top, e_dvfs, s_top, s_dvfs = rec["at_p_star"]
        lines.append(f"| {rec['network']} | {_cell(rec['period'], 3)} | {_cell(e_top)} | {_cell(e_dvfs)} | "
                     f"{_saving(e_top, e_dvfs)} | {_cell(s_top)} | {_cell(s_dvfs)} | {_saving(s_top, s_dvfs)} |")
    lines += ["", "Plans (one PU letter per block; DVFS levels per block, `g.h` = GPU level g with host level h):",
              ""]
    for rec in records:
        for r in [rec["period"], *rec["at_p_star"]]:
            if r.get("value") is not None:
                what = "period" if r["objective"] == "period" else f"{r['objective']} {'DVFS' if r['dvfs'] else 'max-freq'}"
                levels = " ".join(r["levels"]) if r["dvfs"] else "top"
                lines.append(f"- {rec['network']}, {what}: `{r['mapping']}` ({r['stages']} stages), levels: {levels}")
    lines += ["", "## Period-energy front points", "",
              "Least energy per frame (mJ) under the period cap P* x factor, max-freq / DVFS; each point is a "
              f"proven optimum of its cap unless marked (front solves get {meta['front_limit']:.0f} s). "
              "Figures: `dvfs_<network>.png`.", "",
              "| network | " + " | ".join(f"x{f:g}" for f in FRONT_CAPS) + " |",
              "|---|" + "---|" * len(FRONT_CAPS)]
    for rec in records:
        cells = []
        for f in FRONT_CAPS:
            top, dv = (r for r in rec["front"] if r["factor"] == f)
            mark = lambda r: "" if r["quality"] == "proven_optimal" else "*"      # noqa: E731
            cells.append(f"{top['value']:.0f}{mark(top)} / {dv['value']:.0f}{mark(dv)}"
                         if top.get("value") is not None and dv.get("value") is not None else "-")
        lines.append(f"| {rec['network']} | " + " | ".join(cells) + " |")
    lines += ["", "(* not proven within the time limit: the best plan found.)", "",
              "The DVFS front's plans (the caps they are optimal at; one stage with every block on the NPU is the "
              "whole network as one compiled graph, `Profile.whole_graph`):", ""]
    for rec in records:
        seen: dict[str, list[str]] = {}
        for r in rec["front"]:
            if r["dvfs"] and r.get("value") is not None:
                seen.setdefault(f"`{r['mapping']}` ({r['stages']} stage{'s' if r['stages'] > 1 else ''})",
                                []).append(f"x{r['factor']:g}")
        lines.append(f"- {rec['network']}: " + "; ".join(f"{m} at {', '.join(f)}" for m, f in seen.items()))
    lines += ["", "## Method", "",
              "- Chains with disjoint PU sets go to the chain models (solvers/mapping/chain_search.py, "
              "cpsat_chain.py, milp_chain.py): per block a PU, a DVFS level and a stage; every time and energy "
              "the evaluator counts belongs to one block (its time, the copy into it scaled by its own level, "
              "the input/output phase by the first/last block's level).",
              "- NPU re-entry: the plans split into 'the NPU holds one segment' (no penalty) and 'two or more "
              "segments' (the first block of each is cold, (1 + k) x its time); the whole-graph plan (every "
              "block on the NPU, one stage, share r of the time) is a third part. Each part scores its plans "
              "exactly and the parts cover every plan once, so the optimum is the least of the parts' optima "
              "(solvers/mapping/chain_options.py).",
              "- Levels: per block and PU the levels no plan can need are dropped, exactly (for period, latency, "
              "energy: slower and not cheaper, for every PU the copy may come from; for the steady-state energy "
              "a stricter rule, because a slower block lowers the average power, chain_options.py).",
              "- Steady-state energy: E_ss = gamma P_s P + (gamma + (1 - gamma) u) E - gamma P_s L with "
              "u = P / L; a branch and bound over intervals of u with a linear lower bound per interval, closed "
              "to a relative gap of 1e-4 (chain_search.py).",
              ""]
    unproven = [(rec["network"], r) for rec in records for r in [rec["period"], *rec["at_p_star"]]
                if r["quality"] != "proven_optimal"]
    lines += ["## Not proven within the limit", ""]
    if unproven:
        for net, r in unproven:
            lines.append(f"- {net}, {r['objective']} {'DVFS' if r['dvfs'] else 'max-freq'}: best {r['value']} "
                         f"with a certified bound {r.get('bound')} (gap {100 * (r['gap'] or 1):.2f}%) after "
                         f"{r['wall_s']} s.")
    else:
        lines.append("- none: every solve of the first table was proven.")
    return "\n".join(lines) + "\n"


def front_png(rec: dict) -> bytes:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=120)
    for dvfs, color, label in ((False, "black", "max frequency"), (True, "C0", "DVFS")):
        pts = sorted((r["objectives"]["period_ms"], r["value"], r["quality"] == "proven_optimal")
                     for r in rec["front"] if r["dvfs"] == dvfs and r.get("value") is not None)
        if not pts:
            continue
        xs, ys, proven = zip(*pts)
        ax.step(xs, ys, where="post", color=color, lw=1, alpha=0.6)
        ax.scatter(xs, ys, facecolors=[color if p else "none" for p in proven], edgecolors=color, s=30,
                   label=f"{label} (filled: proven)", zorder=3)
    ss = [r for r in rec["at_p_star"] if r["objective"] == "energy_ss" and r.get("value") is not None]
    for r in ss:
        ax.scatter([r["objectives"]["period_ms"]], [r["value"]], marker="^" if r["dvfs"] else "v", s=40,
                   color="C3" if r["dvfs"] else "C1",
                   label=f"least energy_ss at P* ({'DVFS' if r['dvfs'] else 'max frequency'})", zorder=4)
    ax.set_xlabel("period (ms)")
    ax.set_ylabel("energy per inference (mJ)")
    ax.set_title(f"khadas-vim3/{rec['network']}: least energy under a period cap", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("results/mapping"))
    ap.add_argument("--networks", default=",".join(NETWORKS))
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--front-limit", type=float, default=60.0)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    began = time.perf_counter()
    records = [run_network(n, time_limit=args.time_limit, threads=args.threads, front_limit=args.front_limit)
               for n in args.networks.split(",")]
    meta = {"threads": args.threads, "time_limit": args.time_limit, "front_limit": args.front_limit,
            "cpus": os.cpu_count(), "total_s": time.perf_counter() - began}
    write_atomic(args.out / "dvfs.json", json.dumps({"meta": meta, "networks": records}, indent=1))
    for rec in records:
        write_atomic(args.out / f"dvfs_{rec['network']}.png", front_png(rec))
    write_atomic(args.out / "dvfs.md", markdown(records, meta))


if __name__ == "__main__":
    main()

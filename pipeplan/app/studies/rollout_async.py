"""Several RL rounds and asynchrony (``pipeplan rollout async``): throughput against staleness.

Each setting runs ``rounds`` consecutive rounds of a preset workload under one admission
policy and one staleness bound: 0 is the paper's on-policy pipeline (round r waits for the
weights trained on round r - 1), 1 is one-step off-policy overlap (slime / verl async: round
r + 1 is generated while round r trains), larger values are AReaL's bounded staleness eta.
Every figure comes from the simulator through ``pipeplan.solve``; the checker re-derives each
request's weight version from the publish times and rejects a schedule that exceeds the bound.
"""
from __future__ import annotations

import dataclasses
from statistics import mean

import pipeplan
from pipeplan.app.studies.rollout import _when
from pipeplan.core.tables import markdown_table
from pipeplan.formulations.rollout.workloads import QWEN3_1_7B_2xA100, preset_round

ASYNC_POLICIES = ("sync", "cgp", "fgd-soft", "fifo")
# KV capacities per engine: the paper's hardware, and a tight cache where retractions happen
# and the queue position of a retracted request matters (see fgd_regimes.md)
ASYNC_KV = (460_000, 60_000)


def async_study(*, workloads=("lsat-ar", "olyphys"), R: int = 32, rounds: int = 4, stalenesses=(0, 1, 2, 3),
                kv=ASYNC_KV, seeds: int = 2, progress=None) -> list[dict]:
    """One row per (workload, KV, staleness, policy): means over ``seeds``."""
    rows, total, done = [], len(workloads) * len(kv) * len(stalenesses), 0
    for w in workloads:
        for cap in kv:
            engine = dataclasses.replace(QWEN3_1_7B_2xA100, kv_capacity_tokens=cap)
            problems = [preset_round(w, R, seed=s, rounds=rounds, engine=engine) for s in range(seeds)]
            for eta in stalenesses:
                if progress:
                    progress(done, total, f"{w} kv={cap} staleness={eta}")
                for policy in ASYNC_POLICIES:
                    runs = [pipeplan.solve(p, policy, **({"staleness": eta} if eta else {})).objectives
                            for p in problems]
                    rows.append({"workload": w, "R": R, "rounds": rounds, "kv_capacity_tokens": cap,
                                 "staleness": eta, "policy": policy, "seeds": seeds,
                                 **{k: mean(r[k] for r in runs) for k in
                                    ("train_end_s", "samples_per_s", "mean_staleness", "max_staleness",
                                     "waiting_ratio", "retractions")}})
                done += 1
    if progress:
        progress(total, total, "done")
    base = {(r["workload"], r["kv_capacity_tokens"], r["policy"]): r["samples_per_s"] for r in rows
            if r["staleness"] == 0}
    for r in rows:
        r["speedup_vs_on_policy"] = r["samples_per_s"] / base[(r["workload"], r["kv_capacity_tokens"], r["policy"])]
    return rows


ASYNC_COLUMNS = ("workload", "R", "rounds", "kv_capacity_tokens", "staleness", "policy", "seeds", "train_end_s",
                 "samples_per_s", "speedup_vs_on_policy", "mean_staleness", "max_staleness", "waiting_ratio",
                 "retractions")


def async_markdown(rows: list[dict], command: str) -> str:
    r0 = rows[0]
    lines = ["# Several rounds: throughput against staleness", "",
             f"Made by `{command}` on {_when()}. {r0['rounds']} consecutive rounds of R = {r0['R']} groups (K = 8, "
             f"U = 2), the paper's engine and trainer models, means over {r0['seeds']} seeds. Staleness 0 is the paper's "
             "on-policy pipeline; 1 is one-step off-policy overlap (slime / verl async); larger values are AReaL's "
             "bounded staleness eta. The checker re-derives every request's weight version from the publish times "
             "and holds each schedule to its bound.", ""]
    for (w, cap) in dict.fromkeys((r["workload"], r["kv_capacity_tokens"]) for r in rows):
        mine = [r for r in rows if r["workload"] == w and r["kv_capacity_tokens"] == cap]
        lines += [f"## {w}, KV {cap // 1000}k tokens", "",
                  *markdown_table(("staleness", "policy", "train end (s)", "samples/s", "vs on-policy",
                                   "mean / max staleness", "trainer waiting", "retractions"),
                                  ([r["staleness"], r["policy"], f"{r['train_end_s']:.0f}", f"{r['samples_per_s']:.3f}",
                                    f"{r['speedup_vs_on_policy']:.2f}x",
                                    f"{r['mean_staleness']:.2f} / {r['max_staleness']:.0f}",
                                    f"{r['waiting_ratio']:.1%}", f"{r['retractions']:.0f}"] for r in mine)), ""]
    lines += ["## Reading", ""]
    for (w, cap) in dict.fromkeys((r["workload"], r["kv_capacity_tokens"]) for r in rows):
        mine = [r for r in rows if r["workload"] == w and r["kv_capacity_tokens"] == cap]
        best = {eta: max((r for r in mine if r["staleness"] == eta), key=lambda r: r["samples_per_s"])
                for eta in dict.fromkeys(r["staleness"] for r in mine)}
        on, top = best[min(best)], max(best.values(), key=lambda r: r["samples_per_s"])
        cgp = sorted((r["staleness"], r["samples_per_s"]) for r in mine if r["policy"] == "cgp")
        peak = max(cgp, key=lambda x: x[1])
        text = (f"- {w}, KV {cap // 1000}k: on-policy the best is {on['policy']} at {on['samples_per_s']:.3f} "
                f"samples/s (trainer waiting {on['waiting_ratio']:.0%}); the best overall is {top['policy']} with "
                f"staleness <= {top['staleness']} at {top['samples_per_s']:.3f} samples/s "
                f"({top['samples_per_s'] / on['samples_per_s']:.2f}x, mean staleness {top['mean_staleness']:.2f}).")
        if peak[0] < cgp[-1][0] and cgp[-1][1] < peak[1] * 0.98:
            last = next(r for r in mine if r["policy"] == "cgp" and r["staleness"] == cgp[-1][0])
            why = ("later rounds' requests take the cache, and under SGLang's rule a retracted request of the "
                   f"current round rejoins the queue behind them ({last['retractions']:.0f} retractions)"
                   if last["retractions"] >= 10 else
                   "later rounds' requests share the batch with the current round's and slow them (every step "
                   "serves them all), so the current round completes later")
            text += (f" CGP peaks at staleness {peak[0]} ({peak[1]:.3f}) and falls to {cgp[-1][1]:.3f} at "
                     f"{cgp[-1][0]}: {why}; FGD and FIFO keep the current round first.")
        lines.append(text)
    return "\n".join(lines) + "\n"


def async_plot(rows: list[dict], path, title: str):
    from pipeplan.app.figures import pyplot, save_figure
    plt = pyplot()
    keys = list(dict.fromkeys((r["workload"], r["kv_capacity_tokens"]) for r in rows))
    fig, axes = plt.subplots(1, len(keys), figsize=(4.2 * len(keys), 3.8), dpi=110, squeeze=False)
    for ax, (w, cap) in zip(axes[0], keys):
        for policy in ASYNC_POLICIES:
            pts = sorted((r["mean_staleness"], r["samples_per_s"]) for r in rows
                         if r["workload"] == w and r["kv_capacity_tokens"] == cap and r["policy"] == policy)
            xs, ys = zip(*pts)
            ax.plot(xs, ys, marker="o", ms=4, lw=1, label=policy)
        ax.set_xlabel("mean staleness (weight versions)")
        ax.set_ylabel("samples / s")
        ax.set_title(f"{w}, KV {cap // 1000}k", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    return save_figure(fig, path)

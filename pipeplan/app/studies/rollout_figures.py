"""Rollout plots (matplotlib Agg, atomic PNG writes): the Gantt chart of one round and the
regime plot of a rho sweep."""
from __future__ import annotations

import heapq
from pathlib import Path

import numpy as np

from pipeplan.app.figures import pyplot, save_figure

# Peak memory per request of a Gantt chart, on top of the simulation's BYTES_PER_REQUEST
# (measured: 65 MB more for 160,000 requests, about 400 bytes each, with matplotlib's own ~40 MB)
GANTT_BYTES_PER_REQUEST = 1024


def engine_slots(segments) -> list[int]:
    """A slot per stay in the batch (lowest free slot at admission), for drawing only."""
    order = sorted(range(len(segments)), key=lambda j: (segments[j].admit_s, segments[j].end_s))
    busy: list[tuple[float, int]] = []      # (end, slot) of the stays still drawn
    free: list[int] = []                    # slots free again, lowest first
    slot = [0] * len(segments)
    for j in order:
        s = segments[j]
        while busy and busy[0][0] <= s.admit_s + 1e-12:
            heapq.heappush(free, heapq.heappop(busy)[1])
        k = heapq.heappop(free) if free else len(busy)
        heapq.heappush(busy, (s.end_s, k))
        slot[j] = k
    return slot


def _bars(ax, rows, lefts, widths, height: float, colors, **style) -> None:
    """Horizontal bars as one collection: a chart of 160,000 stays had taken minutes and 1.6 GB
    as one ``barh`` call each."""
    from matplotlib.collections import PolyCollection

    if not rows:
        return
    y, x, w = np.asarray(rows, float), np.asarray(lefts, float), np.asarray(widths, float)
    lo, hi = y - height / 2, y + height / 2
    verts = np.stack([np.stack([x, lo], 1), np.stack([x + w, lo], 1), np.stack([x + w, hi], 1),
                      np.stack([x, hi], 1)], 1)
    ax.add_collection(PolyCollection(verts, facecolors=colors, **style))


def gantt(problem, schedule, path: Path, title: str) -> Path:
    """Requests on engine slots (coloured by group; hatched stays ended in a retraction),
    group completions, and the trainer's updates on their own row."""
    plt = pyplot()
    segs = schedule.segments
    slots = engine_slots(segs)
    n_slots = max(slots) + 1 if slots else 1
    fig, ax = plt.subplots(figsize=(11, 6.5), dpi=110)
    cmap = plt.get_cmap("tab20")
    for finished in (True, False):
        mine = [(s, k) for s, k in zip(segs, slots) if s.finished == finished]
        _bars(ax, [k for _, k in mine], [s.admit_s for s, _ in mine], [s.end_s - s.admit_s for s, _ in mine], 0.9,
              [cmap(s.request // problem.K % 20) for s, _ in mine], linewidths=0,
              hatch=None if finished else "////")
    trainer_row = n_slots + max(2, n_slots // 20)
    ups = schedule.updates
    _bars(ax, [trainer_row] * len(ups), [u.start_s for u in ups], [u.end_s - u.start_s for u in ups],
          max(2, n_slots // 15), [cmap(u.groups[0] % 20) for u in ups], edgecolors="black", linewidths=0.4)
    ax.scatter(schedule.group_complete_s, [n_slots + 0.5] * problem.R, marker="|", color="black", s=40,
               label="group complete")
    m = schedule.metrics()
    ax.axvline(m["rollout_makespan_s"], color="grey", ls=":", lw=1, label="rollout done")
    ax.axvline(m["first_dispatch_s"], color="tab:green", ls="--", lw=1, label="first dispatch")
    ax.autoscale_view()
    ax.set_xlim(left=0)
    ax.set_yticks([n_slots / 2, trainer_row])
    ax.set_yticklabels([f"engine\n({n_slots} slots)", "trainer"])
    ax.set_xlabel("time (s)")
    ax.set_title(f"{title}: train end {m['train_end_s']:.0f} s, waiting ratio {m['waiting_ratio']:.0%}", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    return save_figure(fig, path)


Y_CLIP = 1.6


def regime_plot(rows: list[dict], path: Path, title: str) -> Path:
    """Each policy's ratio to the reference (proven optimum, or the best schedule found) per
    rho, one panel per engine."""
    plt = pyplot()
    engines = list(dict.fromkeys(r["engine"] for r in rows))
    fig, axes = plt.subplots(1, len(engines), figsize=(6.2 * len(engines), 4.4), dpi=110, squeeze=False)
    markers = "osD^v<>P*X"
    for ax, engine in zip(axes[0], engines):
        mine = [r for r in rows if r["engine"] == engine]
        solvers = list(dict.fromkeys(r["solver"] for r in mine))
        rhos = sorted({r["rho"] for r in mine})
        for k, solver in enumerate(solvers):
            pts = sorted((r["rho"], r["ratio"]) for r in mine if r["solver"] == solver and r["ratio"])
            if pts:
                xs, ys = zip(*pts)
                off = " (partly off scale)" if max(ys) > Y_CLIP else ""
                ax.plot(xs, ys, marker=markers[k % len(markers)], ms=4, lw=1, label=solver + off)
        ref = "proven optimum" if all(r["reference"] == "optimum" for r in mine) else "best found (or optimum)"
        ax.set_xscale("log", base=2)
        ax.set_xticks(rhos)
        ax.set_xticklabels([f"{x:g}" for x in rhos])
        ax.set_ylim(0.98, Y_CLIP)
        ax.set_xlabel("rho = total trainer time / rollout makespan")
        ax.set_ylabel(f"train end / {ref}")
        ax.set_title(f"{engine} engine", fontsize=10)
        ax.axhline(1.0, color="black", lw=0.6)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    fig.suptitle(title, fontsize=10)
    return save_figure(fig, path)

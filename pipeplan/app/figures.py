"""PNG plots (matplotlib, no display), written atomically."""
from __future__ import annotations

import io
from pathlib import Path

from pipeplan.core.io import write_atomic
from pipeplan.core.vocabulary import MAPPING_OBJECTIVES

LABELS = {o.key: o.label for o in MAPPING_OBJECTIVES.values()}


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display needed); every figure starts here."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save_figure(fig, path: Path) -> Path:
    """The one way a figure is saved: tight layout, PNG rendered in memory, the figure closed,
    the file written atomically (a reader never sees half a picture)."""
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    pyplot().close(fig)
    return write_atomic(path, buf.getvalue())


def pareto_plot(path: Path, title: str, x: str, y: str, *, exact: list[dict] | None = None,
                approx: dict[str, list[dict]] | None = None, points: dict[str, dict] | None = None) -> Path:
    """``exact``: the exact sweep's points (``objectives`` and ``proven``): proven points filled,
    unproven ones (a step the time limit cut) hollow and labelled so; ``approx``: heuristic fronts
    (lists of objective dicts, never called proven); ``points``: single solver results."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=120)
    if exact:
        pts = sorted((p["objectives"][x], p["objectives"][y], bool(p.get("proven"))) for p in exact)
        xs, ys, proven = zip(*pts)
        ax.step(xs, ys, where="post", color="black", lw=1, alpha=0.6)
        for flag, label, face in ((True, "proven front points (CP-SAT)", "black"),
                                  (False, "unproven points (time limit)", "none")):
            sel = [(a, b) for a, b, p in pts if p == flag]
            if sel:
                ax.scatter(*zip(*sel), facecolors=face, edgecolors="black", s=28, label=label, zorder=3)
    for i, (name, front) in enumerate((approx or {}).items()):
        if front:
            xs, ys = zip(*sorted((p[x], p[y]) for p in front))
            ax.scatter(xs, ys, marker="x", s=36, label=f"{name} front (not proven)", zorder=4, color=f"C{i}")
    markers = "osD^v<>P*"
    for i, (name, obj) in enumerate((points or {}).items()):
        if obj and x in obj and y in obj:
            ax.scatter([obj[x]], [obj[y]], marker=markers[i % len(markers)], s=60, facecolors="none",
                       edgecolors=f"C{i + 3}", lw=1.5, label=name, zorder=5)
    ax.set_xlabel(LABELS.get(x, x))
    ax.set_ylabel(LABELS.get(y, y))
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    else:       # an empty legend had been a matplotlib UserWarning on stderr (pareto --time-limit 1e-9)
        ax.text(0.5, 0.5, "no plan found within the limits", transform=ax.transAxes, ha="center")
    return save_figure(fig, path)


def bar_chart(path: Path, title: str, groups: dict[str, dict[str, float]], *, ylabel: str) -> Path:
    """Grouped bars: one group per key of ``groups``, one bar per series inside it."""
    plt = pyplot()
    series = list(dict.fromkeys(k for g in groups.values() for k in g))
    width = 0.8 / max(1, len(series))
    fig, ax = plt.subplots(figsize=(max(6.4, 0.9 * len(groups)), 4.4), dpi=120)
    for i, name in enumerate(series):
        xs = [j + i * width for j in range(len(groups))]
        ax.bar(xs, [g.get(name, 0.0) for g in groups.values()], width=width, label=name, color=f"C{i}")
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(groups))])
    ax.set_xticklabels(list(groups), rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    if series:                  # an empty chart has no legend (matplotlib warns on stderr)
        ax.legend(fontsize=7, ncol=2)
    return save_figure(fig, path)

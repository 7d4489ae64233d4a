"""Plots of the FGD regime map (``rollout_regimes``; matplotlib Agg, atomic PNG writes): heat maps
of FGD-soft's train-end change vs CGP over KV pressure x length tail, and the policies of the
headline regime next to its reference."""
from __future__ import annotations

from pathlib import Path

from pipeplan.app.figures import pyplot, save_figure

CLIP = 0.15          # colour scale: +-15%


def regime_heatmap(rows: list[dict], path: Path, title: str, value: str = "fgd_soft_vs_cgp") -> Path:
    """One panel per (R, deployment, retract rule) x asynchrony; rows KV (most KV on top),
    columns tail; cells the mean change in % (blue: FGD faster). Cells with no regime stay blank."""
    plt = pyplot()
    import numpy as np

    panels = list(dict.fromkeys((r["R"], r["deployment"], r["retract_rule"]) for r in rows))
    asyncs = list(dict.fromkeys(r["asynchrony"] for r in rows))
    kvs = sorted({r["kv_tokens"] for r in rows}, reverse=True)
    tails = list(dict.fromkeys(r["tail"] for r in rows))
    fig, axes = plt.subplots(len(panels), len(asyncs), figsize=(3.3 * len(asyncs), 0.75 * len(kvs) * len(panels) + 1.4),
                             dpi=110, squeeze=False)
    image = None
    for i, (R, deployment, rule) in enumerate(panels):
        for j, asyn in enumerate(asyncs):
            ax = axes[i][j]
            grid = np.full((len(kvs), len(tails)), np.nan)
            for r in rows:
                if (r["R"], r["deployment"], r["retract_rule"], r["asynchrony"]) == (R, deployment, rule, asyn):
                    grid[kvs.index(r["kv_tokens"]), tails.index(r["tail"])] = r[value]
            image = ax.imshow(np.clip(grid, -CLIP, CLIP), cmap="RdBu_r", vmin=-CLIP, vmax=CLIP, aspect="auto")
            for a in range(len(kvs)):
                for b in range(len(tails)):
                    if not np.isnan(grid[a, b]):
                        ax.text(b, a, f"{100 * grid[a, b]:+.1f}", ha="center", va="center", fontsize=8,
                                color="white" if abs(grid[a, b]) > 0.6 * CLIP else "black",
                                fontweight="bold" if grid[a, b] <= -0.05 else "normal")
            ax.set_xticks(range(len(tails)))
            ax.set_xticklabels(tails, fontsize=7)
            ax.set_yticks(range(len(kvs)))
            ax.set_yticklabels([f"{k // 1000}k" for k in kvs], fontsize=7)
            ax.set_title(f"R={R}, {deployment}, {rule}\n{asyn}", fontsize=7)
            if j == 0:
                ax.set_ylabel("KV tokens", fontsize=7)
    cbar = fig.colorbar(image, ax=axes, shrink=0.6, location="right")
    cbar.set_label("FGD-soft vs CGP train end (%, clipped at +-15; bold: <= -5%)", fontsize=7)
    cbar.set_ticks([-CLIP, -0.05, 0, 0.05, CLIP])
    cbar.set_ticklabels([f"{100 * t:+.0f}" for t in (-CLIP, -0.05, 0, 0.05, CLIP)])
    fig.suptitle(title, fontsize=9)
    fig.set_layout_engine("constrained")
    return _save(fig, path)


def _save(fig, path: Path) -> Path:
    """``save_figure`` without its tight layout (the constrained layout places the colour bar)."""
    import io

    from pipeplan.core.io import write_atomic

    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    pyplot().close(fig)
    return write_atomic(path, buf.getvalue())


BAR_POLICIES = ("sync", "cgp", "fgd-soft", "fgd-soft+prio", "fgd-hard", "fifo", "longest-first", "shortest-first",
                "deadline")


def headline_bars(rows: list[dict], path: Path) -> Path:
    """Train end of every policy in the headline regime (and its twin under the other retract
    rule), with the best schedule found and the best lower bound as lines."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(rows), figsize=(5.6 * len(rows), 4.4), dpi=110, squeeze=False, sharey=True)
    for ax, r in zip(axes[0], rows):
        ends = [r[f"train_end_{p.replace('-', '_').replace('+', '_')}"] for p in BAR_POLICIES]
        colors = ["tab:blue" if p.startswith("fgd") else "tab:orange" if p == "cgp" else "tab:grey"
                  for p in BAR_POLICIES]
        ax.bar(range(len(ends)), ends, color=colors)
        for k, e in enumerate(ends):
            ax.text(k, e, f"{e:.0f}", ha="center", va="bottom", fontsize=7)
        ax.axhline(r["best_found_s"], color="black", ls="--", lw=1, label=f"best found {r['best_found_s']:.0f} s")
        ax.axhline(r["bound_s"], color="tab:green", ls=":", lw=1.2, label=f"lower bound {r['bound_s']:.0f} s")
        ax.set_xticks(range(len(ends)))
        ax.set_xticklabels(BAR_POLICIES, rotation=35, ha="right", fontsize=8)
        ax.set_title(f"{r['regime']}\nFGD-soft vs CGP {100 * r['fgd_soft_vs_cgp']:+.1f}% "
                     f"({r['seeds']} seed{'s' * (r['seeds'] > 1)})", fontsize=8)
        ax.set_ylabel("train end (s)")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    return save_figure(fig, path)

"""The plot of the quality-cost frontiers :func:`locus_model.routing.frontier.evaluate_frontiers` returns
(``locus evaluate --models-file --plot``, bench/bench_frontier.py): each router's fold-mean hull, the curve the
table's cost shares are read from, so that the table and the plot say the same."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from locus_model.routing.curves import cost_at
from locus_model.routing.frontier import fold_mean_hull, share_text

LABELS = {
    "locus": "LOCUS",
    "embedllm_mf": "EmbedLLM-MF",
    "irt": "IRT",
    "knn": "kNN",
    "per_benchmark": "per-benchmark",
    "best_single": "best single (anchor rates)",
    "oracle": "oracle (knows the labels)",
    "threshold_locus": "2-model threshold (LOCUS P)",
    "threshold_mf": "2-model threshold (MF P)",
    "random_mix": "random mix (cheapest / best single)",
}


def plot_frontiers(folds: Sequence[dict], path, *, cost_label: str = "mean cost per query"):
    """Each router's fold-mean hull (fold_mean_hull: the curve the table's cost shares are read from) against the
    share of the best single model's cost, the best single model (star, at 100%), 95% of its accuracy (dotted) and where
    LOCUS reaches it; ``folds`` as :func:`evaluate_frontiers` returns them. The y-axis spans the routers' curves but the
    oracle's: an oracle far
    above them would flatten them, so its level is written under the top edge, beside an up arrow, instead."""
    from locus_model.figures import save_figure  # why: matplotlib loads only when a plot is drawn

    return save_figure(frontiers_figure(folds, cost_label=cost_label), path)


def frontiers_figure(folds: Sequence[dict], *, cost_label: str = "mean cost per query"):
    """The matplotlib Figure plot_frontiers saves."""
    from locus_model.figures import new_figure  # why: matplotlib loads only when a plot is drawn

    fig = new_figure(9.0, 4.8)
    ax = fig.add_subplot(1, 1, 1)
    units = [f["best_single_cost"] for f in folds]
    right = max(f["cost_range"][1] / unit for f, unit in zip(folds, units))
    bs_acc = float(np.mean([f["best_single_accuracy"] for f in folds]))
    drawn, lows = {}, [0.95 * bs_acc, bs_acc]
    for i, name in enumerate(folds[0]["routers"]):
        hx, hy = fold_mean_hull(
            [(np.array(f["routers"][name]["hull_cost"]), np.array(f["routers"][name]["hull_accuracy"])) for f in folds],
            units,
        )
        hx, hy = np.append(hx, max(right, hx[-1])), np.append(hy, hy[-1])  # flat to the most expensive model
        drawn[name] = (hx, hy)
        ax.plot(
            hx,
            hy,
            label=LABELS.get(name, name),
            color=f"C{i % 10}",
            lw=2.4 if name == "locus" else 1.2,
            ls="--" if name == "random_mix" else "-",
        )
    shown = [hy for name, (_, hy) in drawn.items() if name != "oracle"] or [hy for _, hy in drawn.values()]
    low, high = min(min(lows), *(float(h.min()) for h in shown)), max(max(lows), *(float(h.max()) for h in shown))
    pad = 0.06 * max(high - low, 1e-3)
    ax.set_ylim(low - pad, high + 2 * pad)
    if "oracle" in drawn and drawn["oracle"][1].max() > high + 2 * pad:
        level = float(drawn["oracle"][1].max())
        ax.text(
            0.01,
            0.98,
            f"\u2191 oracle (knows the labels): up to {level:.3f}, above the plot",
            va="top",
            transform=ax.transAxes,
            fontsize=7,
            color=f"C{list(drawn).index('oracle') % 10}",
            bbox=dict(facecolor="white", edgecolor="none", alpha=0.8),
        )
    ax.scatter(
        [1.0], [bs_acc], marker="*", s=150, color="black", zorder=5, label=f"best single (fold mean): {bs_acc:.3f}"
    )
    ax.axhline(0.95 * bs_acc, color="black", lw=0.7, ls=":", label="95% of best single")
    if "locus" in drawn:
        reach = cost_at(*drawn["locus"], 0.95 * bs_acc)
        if np.isfinite(reach):
            ax.scatter(
                [reach],
                [0.95 * bs_acc],
                marker="o",
                s=40,
                facecolor="none",
                edgecolor="C0",
                zorder=6,
                label=f"LOCUS at 95%: {share_text(reach)} of best single's cost",
            )
    ax.xaxis.set_major_formatter(lambda x, _: f"{x:.0%}")
    ax.set_xlabel(f"{cost_label}, as a share of the best single model's (fold by fold)")
    ax.set_ylabel("accuracy on the test queries")
    ax.set_title(f"Quality-cost frontiers (non-decreasing convex hulls, mean over {len(folds)} fold(s))", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return fig


__all__ = ["LABELS", "frontiers_figure", "plot_frontiers"]

"""The quality-cost frontier of the cost-aware router: accuracy against mean cost per query as the quality weight
varies, on labelled queries, beside the best single model, the cheapest model and their random mix; and its plot.

Every query is routed by :func:`locus_model.routing.route_many`, the rule ``locus serve`` applies per request
(:func:`locus_model.routing.route`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np
import pandas as pd

from locus_model.routing.costs import DEFAULT_OUTPUT_TOKENS, CostTable, estimate_tokens
from locus_model.routing.errors import CostError, RoutingError
from locus_model.routing.route import quality_lambda, route_many


DEFAULT_WEIGHTS = tuple(np.round(np.concatenate([[0.0], np.geomspace(0.01, 1.0, 40)]), 6))


@dataclass(frozen=True)
class CostFrontier:
    """Accuracy vs mean cost per query of the cost-aware router as the quality weight varies."""

    table: pd.DataFrame  # quality_weight, lam, accuracy, mean_cost, pareto (on the accuracy/cost frontier)
    names: list[str]
    best_single: str  # the model with the highest accuracy on these queries
    best_single_accuracy: float
    best_single_cost: float
    cheapest: str  # the model with the lowest mean cost
    cheapest_accuracy: float
    cheapest_cost: float
    n_queries: int
    share: float  # the target share of the best single model's accuracy (0.95)
    cost_at_share: float | None  # the lowest mean cost at which the router reaches it (None: never)
    weight_at_share: float | None
    chosen: np.ndarray | None = None  # (K, Q) row of ``names`` chosen per query, one row per weight of ``table``
    cost_basis: str = ""  # the CostTable's basis ("usd", "params_b", "none") when the costs came from one
    unknown_cost: tuple[str, ...] = ()  # models left out: no cost known on that basis (frontier_of_pool)

    def random_mix(self, n: int = 11) -> pd.DataFrame:
        """The cheapest model with probability 1 - p, the best single model with probability p: a straight line."""
        p = np.linspace(0, 1, n)
        return pd.DataFrame({"p_best": p, "accuracy": (1 - p) * self.cheapest_accuracy + p * self.best_single_accuracy,
                             "mean_cost": (1 - p) * self.cheapest_cost + p * self.best_single_cost})

    def summary(self) -> str:
        at = ("never reached" if self.cost_at_share is None else
              f"reached at mean cost {self.cost_at_share:.4g} per query (quality_weight {self.weight_at_share:g}, "
              f"{self.cost_at_share / self.best_single_cost:.1%} of the best single model's cost)"
              if self.best_single_cost > 0 else f"reached at mean cost {self.cost_at_share:.4g}")
        top = self.table.iloc[-1] if len(self.table) else None
        return (f"best single model {self.best_single}: accuracy {self.best_single_accuracy:.4f} at mean cost "
                f"{self.best_single_cost:.4g}; cheapest {self.cheapest}: {self.cheapest_accuracy:.4f} at "
                f"{self.cheapest_cost:.4g}; router at quality_weight 1: "
                + (f"{top['accuracy']:.4f} at {top['mean_cost']:.4g}" if top is not None else "-")
                + f"; {self.share:.0%} of the best single model's accuracy: {at} ({self.n_queries} queries).")

    def plot(self, path, *, cost_label: str = "mean cost per query"):
        from locus_model.analysis._common import new_figure, save_figure

        fig = new_figure(6.4, 4.4)
        ax = fig.add_subplot(1, 1, 1)
        t = self.table.sort_values("mean_cost")
        ax.plot(t["mean_cost"], t["accuracy"], "-o", ms=3, label="LOCUS cost-aware router (quality_weight varies)")
        mix = self.random_mix()
        ax.plot(mix["mean_cost"], mix["accuracy"], "--", color="grey", label="random mix of cheapest and best single")
        ax.scatter([self.best_single_cost], [self.best_single_accuracy], marker="*", s=140, color="C3", zorder=5,
                   label=f"best single ({self.best_single})")
        ax.scatter([self.cheapest_cost], [self.cheapest_accuracy], marker="s", s=60, color="C2", zorder=5,
                   label=f"cheapest ({self.cheapest})")
        ax.axhline(self.share * self.best_single_accuracy, color="C3", lw=0.8, ls=":",
                   label=f"{self.share:.0%} of best single")
        if self.cost_at_share is not None:
            ax.axvline(self.cost_at_share, color="C0", lw=0.8, ls=":")
        ax.set_xlabel(cost_label)
        ax.set_ylabel("routing accuracy (test queries)")
        ax.set_title("Quality-cost frontier")
        ax.legend(fontsize=7, loc="lower right")
        return save_figure(fig, path)


def cost_frontier(
    probs: np.ndarray,  # (M, Q) P(correct)
    labels: np.ndarray,  # (M, Q) observed scores, NaN where unknown
    costs: np.ndarray,  # (M,) or (M, Q) cost per query
    *,
    names: Sequence[str] | None = None,
    weights: Sequence[float] = DEFAULT_WEIGHTS,
    share: float = 0.95,
) -> CostFrontier:
    """Route every labelled query at each quality weight (among the models labelled on it): accuracy (mean label
    of the chosen model) and mean cost of the chosen model; the best single model (highest mean label) and the
    cheapest (lowest mean cost) on the same queries; the lowest mean cost at which the router reaches ``share``
    of the best single model's accuracy."""
    p = np.asarray(probs, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    if p.ndim != 2 or p.shape != y.shape:
        raise RoutingError(f"cost_frontier: probs {p.shape} and labels {y.shape} must both be (M, Q).")
    c = np.broadcast_to(np.asarray(costs, dtype=np.float64).reshape(p.shape[0], -1), p.shape)
    if (c < 0).any() or np.isnan(c).any():
        raise CostError("cost_frontier: costs must be >= 0 (no NaN: leave the models of unknown cost out).")
    names = [f"model_{i}" for i in range(p.shape[0])] if names is None else [str(n) for n in names]
    cols = (~np.isnan(y)).any(axis=0)
    if not cols.any():
        raise RoutingError("cost_frontier: no query has a label. How to fix: pass labelled test queries.")
    p, y, c = p[:, cols], y[:, cols], c[:, cols]
    known = ~np.isnan(y)
    q = np.arange(p.shape[1])
    rows, choices = [], []
    for w in sorted({float(v) for v in weights}):
        chosen = route_many(p, c, w, known)
        choices.append(chosen)
        rows.append({"quality_weight": w, "lam": quality_lambda(w), "accuracy": float(y[chosen, q].mean()),
                     "mean_cost": float(c[chosen, q].mean())})
    table = pd.DataFrame(rows)
    # pareto: no other point is at least as accurate and strictly cheaper, or strictly more accurate and as cheap
    acc, cost = table["accuracy"].to_numpy(), table["mean_cost"].to_numpy()
    table["pareto"] = [not (((acc >= a) & (cost < m)) | ((acc > a) & (cost <= m))).any() for a, m in zip(acc, cost)]
    single_acc = np.array([np.nanmean(row) if k.any() else -np.inf for row, k in zip(y, known)])
    single_cost = np.array([row[k].mean() if k.any() else np.inf for row, k in zip(c, known)])
    best = int(np.argmax(single_acc))
    cheap = int(np.lexsort((-single_acc, single_cost))[0])
    target = share * single_acc[best]
    reach = table[table["accuracy"] >= target - 1e-12]
    at = reach.sort_values(["mean_cost", "quality_weight"]).iloc[0] if len(reach) else None
    return CostFrontier(table, names, names[best], float(single_acc[best]), float(single_cost[best]), names[cheap],
                        float(single_acc[cheap]), float(single_cost[cheap]), int(p.shape[1]), share,
                        None if at is None else float(at["mean_cost"]), None if at is None else float(at["quality_weight"]),
                        np.stack(choices))


def frontier_of_pool(probs: np.ndarray, labels: np.ndarray, names: Sequence[str], texts: Sequence[str],
                     costs: CostTable, *, output_tokens: int = DEFAULT_OUTPUT_TOKENS,
                     weights: Sequence[float] = DEFAULT_WEIGHTS) -> CostFrontier:
    """:func:`cost_frontier` of a pool's models (probs, labels (M, Q); ``texts`` the Q query texts) with the costs
    of a :class:`CostTable` (a query's cost from its estimated input tokens and ``output_tokens``, as ``locus
    serve`` charges a request). The models of unknown cost are left out (a frontier needs the mean cost of what it
    chooses; never a made-up cost) and named in ``unknown_cost``, unless no model has a known cost (basis "none":
    every cost 0)."""
    names = [str(n) for n in names]
    p, y = np.asarray(probs, dtype=np.float64), np.asarray(labels, dtype=np.float64)
    if costs.names != tuple(names):
        costs = costs.subset(names)
    unknown = tuple(costs.unknown) if costs.known.any() else ()
    if unknown:
        keep = costs.known
        names, p, y = [n for n, k in zip(names, keep) if k], p[keep], y[keep]
        costs = costs.subset(names)
    c = np.stack([costs.costs(estimate_tokens(t), output_tokens) for t in texts], axis=1)  # (M, Q)
    result = cost_frontier(p, y, np.nan_to_num(c) if costs.basis == "none" else c, names=names, weights=weights)
    return replace(result, cost_basis=costs.basis, unknown_cost=unknown)


__all__ = ["DEFAULT_WEIGHTS", "CostFrontier", "cost_frontier", "frontier_of_pool"]

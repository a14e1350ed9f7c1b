"""The curves a router's knob traces on labelled queries, and RouterBench's figures of them: the non-decreasing
convex hull of operating points, its area (AIQ) and the cost at which it reaches an accuracy; the cost-aware rule's
curve over the quality weight, a RouteLLM-style threshold router's, random mixing's. What
:mod:`locus_model.routing.frontier` sums up per router and fold (its docstring cites RouterBench's definitions).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from locus_model.routing.policy import RoutingPolicy
from locus_model.routing.route import route_many

# 0, 40 weights from 0.01 to 1 evenly on a log scale, and 40 from 0.5 to 0.9999 denser near 1, where lambda =
# (1 - w) / w is small and the rule trades a little accuracy for a lot of cost
DEFAULT_WEIGHTS = tuple(
    sorted(
        {
            *np.round(np.concatenate([[0.0], np.geomspace(0.01, 1.0, 40)]), 6).tolist(),
            *np.round(1 - np.geomspace(1e-4, 0.5, 40), 6).tolist(),
        }
    )
)


# ---------------------------------------------------------------------------------------------- RouterBench's figures


def monotone_hull(costs, accuracies) -> tuple[np.ndarray, np.ndarray]:
    """The non-decreasing convex hull of operating points (RouterBench): the most accuracy reachable at mean cost
    <= c by mixing points at random, for c from the cheapest point to the (cheapest) most accurate one; flat after.
    Returns the hull's vertices (cost ascending, accuracy non-decreasing)."""
    c, a = np.asarray(costs, np.float64), np.asarray(accuracies, np.float64)
    if c.shape != a.shape or c.ndim != 1 or c.size == 0 or np.isnan(c).any() or np.isnan(a).any():
        raise ValueError(
            f"monotone_hull: costs {c.shape} and accuracies {a.shape} must be 1-D, equal, non-empty, no NaN"
        )
    order = np.lexsort((-a, c))  # cost ascending, the most accurate first among equal costs
    c, a = c[order], a[order]
    top = int(np.argmax(a))  # the first (cheapest) point of the highest accuracy ends the rising part
    hull: list[tuple[float, float]] = []
    for x, y in zip(c[: top + 1], a[: top + 1]):
        if hull and x == hull[-1][0]:
            continue  # same cost, not more accurate (sorted so)
        while len(hull) >= 2:  # upper hull: drop the last vertex when it is on or below the chord to the new point
            (x1, y1), (x2, y2) = hull[-2], hull[-1]
            if (x2 - x1) * (y - y1) - (y2 - y1) * (x - x1) >= 0:
                hull.pop()
            else:
                break
        hull.append((float(x), float(y)))
    return np.array([h[0] for h in hull]), np.array([h[1] for h in hull])


def hull_area(hx: np.ndarray, hy: np.ndarray, lo: float, hi: float) -> float:
    """Integral over [lo, hi] of the hull (0 below its first cost, linear between vertices, flat after the last)."""
    start = max(lo, float(hx[0]))
    if start >= hi:
        return 0.0
    grid = np.unique(np.concatenate([[start, hi], hx[(hx > start) & (hx < hi)]]))
    values = np.interp(grid, hx, hy)
    return float(np.sum((grid[1:] - grid[:-1]) * (values[1:] + values[:-1]) / 2))


def aiq(hx: np.ndarray, hy: np.ndarray, lo: float, hi: float) -> float:
    """RouterBench's AIQ of a hull over the cost range [lo, hi] (the cheapest and the most expensive model's mean
    cost): its area there over hi - lo (the module docstring). A range of one cost (every model costs the same):
    the hull's accuracy at that cost."""
    if hi <= lo:
        return float(np.interp(lo, hx, hy)) if hx[0] <= lo else 0.0
    return hull_area(hx, hy, lo, hi) / (hi - lo)


def cost_at(hx: np.ndarray, hy: np.ndarray, target: float) -> float:
    """The lowest mean cost at which the hull reaches ``target`` accuracy (inf: never)."""
    if hy[-1] < target - 1e-12:
        return float("inf")
    i = int(np.argmax(hy >= target - 1e-12))
    if i == 0:
        return float(hx[0])
    (x1, y1), (x2, y2) = (hx[i - 1], hy[i - 1]), (hx[i], hy[i])
    return float(x1 + (target - y1) * (x2 - x1) / (y2 - y1))


# ---------------------------------------------------------------------------------------------- the routers


@dataclass(frozen=True)
class Curve:
    """One router's operating points on a set of queries: per point (one value of its knob: quality weight,
    threshold, mixing probability), the label and the cost of the model chosen for each query."""

    knob: np.ndarray  # (K,)
    correct: np.ndarray  # (K, Q) label of the chosen model (random mix: of its two ends)
    cost: np.ndarray  # (K, Q) its cost
    chosen: np.ndarray | None = None  # (K, Q) rows chosen; None for the random mix

    def points(self, weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(accuracy (B, K), mean cost (B, K)) on B query-resampled copies (weights (B, Q)); None: the data as is."""
        w = np.ones((1, self.correct.shape[1])) if weights is None else weights
        n = w.sum(axis=1, keepdims=True)
        return (w @ self.correct.T) / n, (w @ self.cost.T) / n


def undominated(probs: np.ndarray, costs: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """The candidate rows the rule can choose for some query at some weight (costs (M,), the same on every query),
    and the first of the dearest (it sets the rule's cost normalisation): a model is dropped when on every query
    another candidate is cheaper and at least as likely right, or as cheap, at least as likely right and of a lower
    row (it wins every tie the rule breaks: cheaper first, then lower row). Choosing among these gives exactly the
    choices among all the candidates, at a fraction of the work on a pool of thousands of models."""
    order = candidates[np.lexsort((candidates, costs[candidates]))]  # cost ascending, then row
    p = probs[order]  # (C, Q)
    best_before = np.maximum.accumulate(np.vstack([np.full((1, p.shape[1]), -np.inf), p[:-1]]), axis=0)
    keep = (p > best_before).any(axis=1)
    keep[np.flatnonzero(costs[order] == costs[order].max())[0]] = True
    return np.sort(order[keep])


def rule_curve(
    probs: np.ndarray,
    labels: np.ndarray,
    costs: np.ndarray,
    known: np.ndarray,
    weights: Sequence[float] = DEFAULT_WEIGHTS,
) -> Curve:
    """The cost-aware rule (:func:`route_many`, locus serve's) on ``probs`` (M, Q) at each quality weight, each
    query routed among the models ``known`` (M, Q) on it (labelled, of known cost); costs (M, Q)."""
    q = np.arange(probs.shape[1])
    rows = np.arange(probs.shape[0])
    uniform = (known == known[:, :1]).all() and (np.nan_to_num(costs) == np.nan_to_num(costs[:, :1])).all()
    if uniform:  # one candidate set and one cost per model: the dominated never win, leave them out
        rows = undominated(probs, costs[:, 0], np.flatnonzero(known[:, 0]))
    p, c, k = probs[rows], costs[rows], known[rows]
    # probs are what ranks already (a guarded method's routing scores), so no standing here
    chosen = np.stack([rows[route_many(p, c, RoutingPolicy(quality_weight=w), known=k)] for w in weights])  # (K, Q)
    return Curve(np.asarray(weights, np.float64), labels[chosen, q], costs[chosen, q], chosen)


def threshold_curve(
    p_weak: np.ndarray, labels: np.ndarray, costs: np.ndarray, strong: int, weak: int, n_thresholds: int = 101
) -> Curve:
    """RouteLLM-style two-model router (Ong et al. 2024, arXiv 2406.18665): the strong model where the weak one's
    predicted P(correct) ``p_weak`` (Q,) is below a threshold t, else the weak one, t swept over the quantiles of
    ``p_weak`` (all weak first, all strong last)."""
    q = np.arange(len(p_weak))
    ts = np.unique(np.quantile(p_weak, np.linspace(0, 1, n_thresholds)))
    ts = np.concatenate([[-np.inf], ts, [np.inf]])
    chosen = np.where(p_weak[None, :] < ts[:, None], strong, weak)  # (K, Q)
    return Curve(ts, labels[chosen, q], costs[chosen, q], chosen)


def mix_curve(labels: np.ndarray, costs: np.ndarray, strong: int, weak: int) -> Curve:
    """Random mixing of the weak and the strong model: its two ends (every mix lies on the line between them)."""
    ends = np.array([weak, strong])
    return Curve(np.array([0.0, 1.0]), labels[ends], costs[ends])


__all__ = [
    "DEFAULT_WEIGHTS",
    "Curve",
    "aiq",
    "cost_at",
    "hull_area",
    "mix_curve",
    "monotone_hull",
    "rule_curve",
    "threshold_curve",
    "undominated",
]

"""Cost-aware routing over a pool of model embeddings (arXiv 2601.21082, routing as a downstream use).

The correctness predictor gives P(correct) for every (model, query); the paper routes each query to the model
with the highest P(correct). Here each candidate also has a cost per query, and the router trades the two:

    score_m = w * P_m - (1 - w) * c_m / max_k c_k          w = quality_weight in [0, 1]

which ranks exactly as ``P_m - lambda * c~_m`` with ``lambda = (1 - w) / w`` (w = 1: lambda = 0, the paper's
router; w = 0.5: lambda = 1, the most expensive candidate must be 1.0 more likely to be right than a free one;
w = 0: lambda = infinity, the cheapest candidate, ties broken by P(correct)). Costs are normalised by the most
expensive candidate so that lambda has the same meaning whatever the unit. Alternatively a cost cap
(``max_cost``) keeps only the candidates that cost at most that much and ranks them the same way.

Costs (:func:`cost_table`): a fixed ``cost_per_query``, else prices per million input/output tokens times token
estimates, else the parameter count (billions) as a proxy when no price is known (from the models table, else
read from the name, e.g. ``acme/new-model-7b``), which the cost table says. A model without a cost on that basis
has an unknown cost (NaN): it is never charged a made-up cost; a cost-aware ranking (w < 1 or a cost cap) leaves
it out and says so, the plain ranking (w = 1) keeps it.

A fallback chain is the chosen model's nearest neighbours in the embedding space (Euclidean) among the other
candidates (the paper's nearest-neighbour fallback, which keeps most of the routing accuracy when the routed
model is unavailable), tried in the order of the same cost-aware score that ranked the candidates.

:func:`cost_frontier` measures accuracy against mean cost per query as the quality weight varies, on labelled
queries, beside the best single model, the cheapest model and their random mix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

DEFAULT_OUTPUT_TOKENS = 256  # answer length assumed when the request does not say (max_tokens)
CHARS_PER_TOKEN = 4  # the usual rule of thumb for English text with BPE tokenizers


# ----------------------------------------------------------------------------------------------- costs


def estimate_tokens(text: str) -> int:
    """Rough token count of a text: one token per 4 characters, at least 1."""
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


@dataclass(frozen=True)
class CostTable:
    """Per-model cost of one query. ``basis`` is "usd" (prices or cost per query), "params_b" (parameter count as
    a proxy: no price known) or "none" (nothing known: every cost 0, routing by P(correct) only)."""

    names: tuple[str, ...]
    cost_per_query: np.ndarray  # (M,) fixed cost per query, NaN where priced by tokens
    price_input: np.ndarray  # (M,) per million input tokens (0 where cost_per_query is used)
    price_output: np.ndarray  # (M,) per million output tokens
    basis: str
    unknown: tuple[str, ...] = ()  # models without a cost on the basis: their cost is NaN (unknown)
    note: str = ""
    parsed: tuple[str, ...] = ()  # basis params_b: models whose size was read from their name

    def costs(self, input_tokens: int = 0, output_tokens: int = DEFAULT_OUTPUT_TOKENS) -> np.ndarray:  # (M,)
        """Expected cost of one query with these token counts, per model."""
        by_tokens = (self.price_input * input_tokens + self.price_output * output_tokens) / 1e6
        return np.where(np.isnan(self.cost_per_query), by_tokens, self.cost_per_query)

    def subset(self, names: Sequence[str]) -> "CostTable":
        idx = [self.names.index(n) for n in names]
        return CostTable(tuple(names), self.cost_per_query[idx], self.price_input[idx], self.price_output[idx],
                         self.basis, tuple(n for n in self.unknown if n in set(names)), self.note,
                         tuple(n for n in self.parsed if n in set(names)))

    @property
    def known(self) -> np.ndarray:  # (M,) bool: the model has a cost on the basis
        return ~np.isin(np.array(self.names, dtype=object), np.array(self.unknown, dtype=object))


def _number(value) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return float("nan")
    return out if math.isfinite(out) else float("nan")


def cost_table(names: Sequence[str], info: Mapping[str, Mapping[str, object]]) -> CostTable:
    """The cost table of ``names`` from per-model ``info`` (keys ``cost_per_query``, ``price_input_per_mtok``,
    ``price_output_per_mtok``, ``params_b``; any may be missing).

    A model has a dollar cost when it has ``cost_per_query`` or at least one token price (a missing one counts 0).
    The basis is dollars when any model has one, else parameter counts when any model has one (a missing
    ``params_b`` is read from the name, e.g. "acme/new-model-7b" -> 7, and listed in ``parsed``), else none.
    Models without a cost on that basis have cost NaN (unknown, never a made-up figure) and are listed in
    ``unknown``; negative costs are refused."""
    from locus_model.data.catalog import parse_params_b

    names = [str(n) for n in names]
    per_query, p_in, p_out, params = (np.full(len(names), np.nan) for _ in range(4))
    for i, name in enumerate(names):
        row = info.get(name, {}) or {}
        per_query[i] = _number(row.get("cost_per_query"))
        p_in[i], p_out[i] = _number(row.get("price_input_per_mtok")), _number(row.get("price_output_per_mtok"))
        params[i] = _number(row.get("params_b"))
    stated = ~np.isnan(params)
    params = np.where(stated, params, [parse_params_b(n) for n in names]) if len(names) else params
    for label, values in (("cost_per_query", per_query), ("price_input_per_mtok", p_in),
                          ("price_output_per_mtok", p_out), ("params_b", params)):
        if (values < 0).any():
            bad = names[int(np.flatnonzero(values < 0)[0])]
            raise ValueError(f"cost_table: {label} of model {bad!r} is negative. How to fix: give a cost >= 0.")
    priced = ~np.isnan(p_in) | ~np.isnan(p_out)
    usd = ~np.isnan(per_query) | priced
    zeros = np.zeros(len(names))
    if usd.any():
        unknown = [n for n, k in zip(names, usd) if not k]
        note = "cost in USD per query (cost_per_query, or token prices x estimated tokens)"
        if unknown:
            note += (f"; {len(unknown)} model(s) without a price have an unknown cost: left out of cost-aware "
                     f"routing ({', '.join(unknown[:5])}{' ...' if len(unknown) > 5 else ''})")
        p_in, p_out = np.where(usd, np.nan_to_num(p_in), np.nan), np.where(usd, np.nan_to_num(p_out), np.nan)
        return CostTable(tuple(names), per_query, p_in, p_out, "usd", tuple(unknown), note)
    if (~np.isnan(params)).any():
        unknown = [n for n, p in zip(names, params) if np.isnan(p)]
        parsed = [n for n, s, p in zip(names, stated, params) if not s and not np.isnan(p)]
        note = ("no price known: the parameter count (billions) is the cost proxy, so costs are relative, not "
                "dollars")
        if parsed:
            note += f"; the size of {len(parsed)} model(s) is read from the name ({', '.join(parsed[:5])}{' ...' if len(parsed) > 5 else ''})"
        if unknown:
            note += (f"; {len(unknown)} model(s) of unknown size have an unknown cost: left out of cost-aware "
                     f"routing ({', '.join(unknown[:5])}{' ...' if len(unknown) > 5 else ''})")
        no_price = np.where(np.isnan(params), np.nan, 0.0)  # the unknown stay NaN in costs()
        return CostTable(tuple(names), params, no_price, no_price, "params_b", tuple(unknown), note, tuple(parsed))
    return CostTable(tuple(names), zeros.copy(), zeros, zeros, "none", tuple(names),
                     "no price and no parameter count known: every cost is 0, routing by P(correct) only")


# ----------------------------------------------------------------------------------------------- routing


def check_quality_weight(quality_weight: float) -> float:
    w = float(quality_weight)
    if not 0.0 <= w <= 1.0:
        raise ValueError(f"quality_weight={quality_weight} must be in [0, 1] (1 = best P(correct) whatever the cost, "
                         "0 = the cheapest model).")
    return w


def quality_lambda(quality_weight: float) -> float:
    """lambda of ``P - lambda * normalised cost`` for a quality weight w: (1 - w) / w (infinite at w = 0)."""
    w = check_quality_weight(quality_weight)
    return math.inf if w == 0 else (1.0 - w) / w


def normalized_costs(costs: np.ndarray) -> np.ndarray:
    """costs / max(costs) (all 0 when the most expensive is free)."""
    c = np.asarray(costs, dtype=np.float64)
    top = c.max(initial=0.0)
    return c / top if top > 0 else np.zeros_like(c)


def route_scores(probs: np.ndarray, costs: np.ndarray, quality_weight: float) -> np.ndarray:  # (M,) or (M, Q)
    """w * P - (1 - w) * cost / max cost; costs (M,) or (M, Q), normalised per query over the models."""
    w = check_quality_weight(quality_weight)
    c = np.asarray(costs, dtype=np.float64)
    p = np.asarray(probs, dtype=np.float64)
    top = c.max(axis=0, keepdims=True)
    norm = np.divide(c, top, out=np.zeros_like(c), where=top > 0)
    return w * p - (1.0 - w) * norm


@dataclass(frozen=True)
class RouteDecision:
    """One query's routing: indices refer to the arrays given to :func:`route`."""

    ranking: np.ndarray  # eligible candidates, best first
    scores: np.ndarray  # (M,) the score that ranked them (NaN for models left out)
    chosen: int
    fallbacks: np.ndarray  # the chosen model's nearest neighbours among the other eligible candidates
    over_cost: np.ndarray  # candidates left out by max_cost
    quality_weight: float
    lam: float = field(default=0.0)
    unknown_cost: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # left out: cost unknown


def fallback_chain(embeddings: np.ndarray, chosen: int, among: Sequence[int], *, k: int | None = None) -> np.ndarray:
    """The models of ``among`` (other than ``chosen``) ordered by Euclidean distance of their model embedding to
    the chosen one's, nearest first (ties: lower index); at most ``k``."""
    z = np.asarray(embeddings, dtype=np.float64)
    others = np.array([i for i in among if i != chosen], dtype=np.int64)
    if others.size == 0:
        return others
    dist = np.linalg.norm(z[others] - z[chosen], axis=1)
    order = others[np.lexsort((others, dist))]
    return order if k is None else order[:k]


def route(
    probs: np.ndarray,  # (M,) P(correct) of each candidate for this query
    costs: np.ndarray,  # (M,) expected cost of each candidate for this query (NaN = unknown)
    *,
    quality_weight: float = 1.0,
    max_cost: float | None = None,
    embeddings: np.ndarray | None = None,  # (M, d) model embeddings, for the fallback chain
    n_fallbacks: int | None = None,
) -> RouteDecision:
    """Rank the candidates by :func:`route_scores` (ties: cheaper first, then lower index), keeping only those
    that cost at most ``max_cost`` when given; the chosen model is the first, its fallback chain its nearest
    embedding neighbours among the other kept candidates (empty without embeddings), in ranking order.

    A candidate of unknown cost (NaN) is left out (``unknown_cost``) when the ranking uses cost (w < 1 or a cost
    cap) and another candidate has a known cost; at w = 1 cost does not matter and it is ranked like the others."""
    p = np.asarray(probs, dtype=np.float64)
    c = np.asarray(costs, dtype=np.float64)
    if p.ndim != 1 or p.shape != c.shape or p.size == 0:
        raise ValueError(f"route: probs {p.shape} and costs {c.shape} must be 1-D, equal and non-empty.")
    if (c < 0).any():
        raise ValueError("route: costs must be >= 0 (NaN = unknown).")
    if max_cost is not None and not max_cost >= 0:
        raise ValueError(f"route: max_cost={max_cost} must be >= 0.")
    w = check_quality_weight(quality_weight)
    unknown = np.isnan(c)
    uses_cost = w < 1 or max_cost is not None
    if uses_cost and unknown.all():
        raise ValueError("route: every candidate's cost is unknown, so no cost-aware ranking (quality_weight < 1 or "
                         "max_cost) is possible. How to fix: give prices (or parameter counts), or quality_weight=1.")
    left_out = unknown if uses_cost else np.zeros(len(c), dtype=bool)
    c = np.where(unknown, 0.0 if not uses_cost else np.inf, c)  # at w = 1 the cost only breaks ties
    keep = ~left_out if max_cost is None else ~left_out & (c <= max_cost)
    if not keep.any():
        cheapest = int(np.argmin(np.where(left_out, np.inf, c)))
        raise ValueError(f"route: no candidate costs at most max_cost={max_cost:g}; the cheapest costs "
                         f"{c[cheapest]:g}. How to fix: raise max_cost or add cheaper candidates.")
    idx = np.flatnonzero(keep)
    scores = np.full(len(c), np.nan)
    scores[idx] = route_scores(p[idx], c[idx], w)
    ranking = idx[np.lexsort((idx, c[idx], -scores[idx]))]
    chosen = int(ranking[0])
    chain = (fallback_chain(embeddings, chosen, ranking, k=n_fallbacks) if embeddings is not None
             else np.zeros(0, dtype=np.int64))
    position = {int(m): r for r, m in enumerate(ranking)}
    chain = np.array(sorted(chain.tolist(), key=position.__getitem__), dtype=np.int64)  # nearest k, tried best-scored first
    return RouteDecision(ranking, scores, chosen, chain, np.flatnonzero(~keep & ~left_out), w, quality_lambda(w),
                         np.flatnonzero(left_out))


def route_many(probs: np.ndarray, costs: np.ndarray, quality_weight: float,
               known: np.ndarray | None = None) -> np.ndarray:  # (Q,) chosen model per query
    """The chosen model of each query (column) of ``probs`` (M, Q); costs (M,) or (M, Q). ``known`` (M, Q) bool
    restricts each query to those models (e.g. labelled ones). Ties as in :func:`route`."""
    p = np.asarray(probs, dtype=np.float64)
    c = np.broadcast_to(np.asarray(costs, dtype=np.float64).reshape(p.shape[0], -1), p.shape)
    known = np.ones(p.shape, dtype=bool) if known is None else np.asarray(known, dtype=bool)
    c_known = np.where(known, c, 0.0)
    s = np.where(known, route_scores(p, c_known, quality_weight), -np.inf)
    # best score, then cheaper, then lower index (np.lexsort sorts by its last key first)
    rows = np.arange(p.shape[0])[:, None] * np.ones((1, p.shape[1]))
    order = np.lexsort((rows, c, -s), axis=0)
    return order[0]


# ----------------------------------------------------------------------------------------------- frontier


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
        ax.set_ylabel("routing accuracy (held-out queries)")
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
        raise ValueError(f"cost_frontier: probs {p.shape} and labels {y.shape} must both be (M, Q).")
    c = np.broadcast_to(np.asarray(costs, dtype=np.float64).reshape(p.shape[0], -1), p.shape)
    if (c < 0).any() or np.isnan(c).any():
        raise ValueError("cost_frontier: costs must be >= 0 (no NaN).")
    names = [f"model_{i}" for i in range(p.shape[0])] if names is None else [str(n) for n in names]
    cols = (~np.isnan(y)).any(axis=0)
    if not cols.any():
        raise ValueError("cost_frontier: no query has a label. How to fix: pass labelled held-out queries.")
    p, y, c = p[:, cols], y[:, cols], c[:, cols]
    known = ~np.isnan(y)
    q = np.arange(p.shape[1])
    rows = []
    for w in sorted({float(v) for v in weights}):
        chosen = route_many(p, c, w, known)
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
                        None if at is None else float(at["mean_cost"]), None if at is None else float(at["quality_weight"]))


__all__ = ["CostTable", "cost_table", "estimate_tokens", "quality_lambda", "route_scores", "route", "route_many",
           "fallback_chain", "RouteDecision", "cost_frontier", "CostFrontier", "DEFAULT_OUTPUT_TOKENS"]

"""The quality-cost frontier: accuracy against mean cost per query of every router on labelled queries, and the
figures routing papers compare routers by (their plot: :mod:`locus_model.routing.frontier_plot`).

Two views of one rule. :func:`cost_frontier` (the ``cost_frontier`` asset) sweeps the quality weight of the
cost-aware router, :func:`locus_model.routing.route_many`, the rule ``locus serve`` applies per request
(:func:`locus_model.routing.route`), and says at which weight it reaches 95% of the best single model.
:func:`evaluate_frontiers` (``locus evaluate --models-file``, the ``routing_evaluation`` asset,
bench/bench_frontier.py) sweeps every method's router on each fold's test queries (the same rule on each method's
P(correct), a RouteLLM-style two-model threshold router, and random mixing of the best single and the cheapest
model, the straight line) and gives, with paired bootstrap intervals, RouterBench's AIQ and the lowest mean cost at
which a router reaches 95% and 100% of the best single model's accuracy, as a share of that model's cost.

AIQ (RouterBench: Hu et al. 2024, "RouterBench: A Benchmark for Multi-LLM Routing System", arXiv 2403.12031,
Sec. 3; code: withmartian/routerbench, evaluation/AIQ.py, ``get_non_descreasing_convex_hull_of`` and ``calc_AIQ``):
a router's operating points (mean cost, accuracy) are replaced by their non-decreasing convex hull (mixing two
operating points at random reaches every point between them, and paying more never has to lose accuracy), and AIQ
is the area under the hull over the cost range divided by its width, ``1 / (c_max - c_min) * integral from c_min
to c_max``, i.e. the cost normalised to [0, 1]; here c_min and c_max are the mean costs of the cheapest and the most
expensive model on the same queries. As in ``calc_AIQ`` the hull counts 0 below its first point and is extended flat
from its last point to c_max.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from locus_model.routing.costs import DEFAULT_OUTPUT_TOKENS, CostTable, estimate_tokens
from locus_model.routing.curves import (
    DEFAULT_WEIGHTS,
    Curve,
    aiq,
    cost_at,
    mix_curve,
    monotone_hull,
    rule_curve,
    threshold_curve,
)
from locus_model.routing.errors import CostError, RoutingError
from locus_model.routing.route import quality_lambda
from locus_model.stats.bootstrap import resample_weights


def share_text(share: float | None) -> str:
    """A cost share as a percentage; "never" for a target never reached (inf, or None in a result JSON)."""
    return "never" if share is None or not np.isfinite(share) else f"{share:.1%}"


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
    # RouterBench's AIQ and the cost shares at 100% / 95% of the best single model's accuracy on the router's hull
    # (frontier_figures, the code of locus evaluate --models-file; inf: never reached)
    figures: dict[str, float] | None = None

    def random_mix(self, n: int = 11) -> pd.DataFrame:
        """The cheapest model with probability 1 - p, the best single model with probability p: a straight line."""
        p = np.linspace(0, 1, n)
        return pd.DataFrame(
            {
                "p_best": p,
                "accuracy": (1 - p) * self.cheapest_accuracy + p * self.best_single_accuracy,
                "mean_cost": (1 - p) * self.cheapest_cost + p * self.best_single_cost,
            }
        )

    def summary(self) -> str:
        at = (
            "never reached"
            if self.cost_at_share is None
            else f"reached at mean cost {self.cost_at_share:.4g} per query (quality_weight {self.weight_at_share:g}, "
            f"{self.cost_at_share / self.best_single_cost:.1%} of the best single model's cost)"
            if self.best_single_cost > 0
            else f"reached at mean cost {self.cost_at_share:.4g}"
        )
        top = self.table.iloc[-1] if len(self.table) else None
        return (
            f"best single model {self.best_single}: accuracy {self.best_single_accuracy:.4f} at mean cost "
            f"{self.best_single_cost:.4g}; cheapest {self.cheapest}: {self.cheapest_accuracy:.4f} at "
            f"{self.cheapest_cost:.4g}; router at quality_weight 1: "
            + (f"{top['accuracy']:.4f} at {top['mean_cost']:.4g}" if top is not None else "-")
            + f"; {self.share:.0%} of the best single model's accuracy: {at} ({self.n_queries} queries)."
            + (
                ""
                if self.figures is None
                else f" Mixing weights at random (the hull, RouterBench): AIQ {self.figures['aiq']:.4f}; the best "
                "single "
                f"model's accuracy at {share_text(self.figures['cost_share_at_best_single'])} of its cost, 95% of it "
                f"at {share_text(self.figures['cost_share_at_95'])}."
            )
        )

    def plot(self, path, *, cost_label: str = "mean cost per query"):
        from locus_model.figures import new_figure, save_figure  # why: matplotlib loads only when a plot is drawn

        fig = new_figure(6.4, 4.4)
        ax = fig.add_subplot(1, 1, 1)
        t = self.table.sort_values("mean_cost")
        ax.plot(t["mean_cost"], t["accuracy"], "-o", ms=3, label="LOCUS cost-aware router (quality_weight varies)")
        mix = self.random_mix()
        ax.plot(mix["mean_cost"], mix["accuracy"], "--", color="grey", label="random mix of cheapest and best single")
        ax.scatter(
            [self.best_single_cost],
            [self.best_single_accuracy],
            marker="*",
            s=140,
            color="C3",
            zorder=5,
            label=f"best single ({self.best_single})",
        )
        ax.scatter(
            [self.cheapest_cost],
            [self.cheapest_accuracy],
            marker="s",
            s=60,
            color="C2",
            zorder=5,
            label=f"cheapest ({self.cheapest})",
        )
        ax.axhline(
            self.share * self.best_single_accuracy, color="C3", lw=0.8, ls=":", label=f"{self.share:.0%} of best single"
        )
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
    weights = sorted({float(v) for v in weights})
    curve = rule_curve(p, y, c, known, weights)
    acc, cost = (x[0] for x in curve.points())
    table = pd.DataFrame(
        {"quality_weight": weights, "lam": [quality_lambda(w) for w in weights], "accuracy": acc, "mean_cost": cost}
    )
    # pareto: no other point is at least as accurate and strictly cheaper, or strictly more accurate and as cheap
    table["pareto"] = [not (((acc >= a) & (cost < m)) | ((acc > a) & (cost <= m))).any() for a, m in zip(acc, cost)]
    single_acc = np.array([np.nanmean(row) if k.any() else -np.inf for row, k in zip(y, known)])
    single_cost = np.array([row[k].mean() if k.any() else np.inf for row, k in zip(c, known)])
    best = int(np.argmax(single_acc))
    cheap = int(np.lexsort((-single_acc, single_cost))[0])
    target = share * single_acc[best]
    reach = table[table["accuracy"] >= target - 1e-12]
    at = reach.sort_values(["mean_cost", "quality_weight"]).iloc[0] if len(reach) else None
    # RouterBench's figures, by the code of evaluate_frontiers, on the queries where the best single model is labelled
    on = known[best]
    figures = frontier_figures(
        {"locus": rule_curve(p[:, on], y[:, on], c[:, on], known[:, on], weights)}, y[:, on], c[:, on], best
    )["locus"]
    return CostFrontier(
        table,
        names,
        names[best],
        float(single_acc[best]),
        float(single_cost[best]),
        names[cheap],
        float(single_acc[cheap]),
        float(single_cost[cheap]),
        int(p.shape[1]),
        share,
        None if at is None else float(at["mean_cost"]),
        None if at is None else float(at["quality_weight"]),
        curve.chosen,
        figures={f: float(v[0]) for f, v in figures.items()},
    )


def frontier_of_pool(
    probs: np.ndarray,
    labels: np.ndarray,
    names: Sequence[str],
    texts: Sequence[str],
    costs: CostTable,
    *,
    output_tokens: int = DEFAULT_OUTPUT_TOKENS,
    weights: Sequence[float] = DEFAULT_WEIGHTS,
) -> CostFrontier:
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


def query_costs(costs: CostTable, texts: Sequence[str], output_tokens: int = DEFAULT_OUTPUT_TOKENS) -> np.ndarray:
    """(M, Q) cost of each query on each model of ``costs`` (NaN: unknown), a query's cost from its estimated input
    tokens and ``output_tokens``, as ``locus serve`` charges a request; the same for every query when the costs do
    not depend on tokens (a cost per query, parameter counts): then a read-only (M, Q) view of the (M,) costs."""
    if costs.basis == "usd" and (np.nan_to_num(costs.price_input) > 0).any():
        return np.stack([costs.costs(estimate_tokens(t), output_tokens) for t in texts], axis=1)
    return np.broadcast_to(costs.costs(0, output_tokens)[:, None], (len(costs.names), len(texts)))


THRESHOLD_OF = {"threshold_locus": "locus", "threshold_mf": "embedllm_mf"}  # router -> the method whose P it reads


def frontier_curves(
    probs: Mapping[str, np.ndarray],
    labels: np.ndarray,
    costs: np.ndarray,
    *,
    strong: int,
    weak: int,
    weights: Sequence[float] = DEFAULT_WEIGHTS,
) -> dict[str, Curve]:
    """Every router's curve on one set of queries: the cost-aware rule on each method's P(correct) (probs {method:
    (M, Q)}), each query among the models labelled on it and of known cost; the two-model threshold router on the
    P(correct) of each method of :data:`THRESHOLD_OF` that is there; random mixing of ``weak`` and ``strong``.
    labels (M, Q) with NaN = not labelled; costs (M, Q) with NaN = unknown; ``strong`` and ``weak`` are labelled
    on every query."""
    known = ~np.isnan(labels) & ~np.isnan(costs)
    curves = {name: rule_curve(np.asarray(p, np.float64), labels, costs, known, weights) for name, p in probs.items()}
    for name, method in THRESHOLD_OF.items():
        if method in probs:
            curves[name] = threshold_curve(np.asarray(probs[method][weak], np.float64), labels, costs, strong, weak)
    curves["random_mix"] = mix_curve(labels, costs, strong, weak)
    return curves


FIGURES = ("aiq", "cost_share_at_best_single", "cost_share_at_95")
SHARES = {"cost_share_at_best_single": 1.0, "cost_share_at_95": 0.95}  # figure -> share of the best single's accuracy


def fold_mean_hull(
    hulls: Sequence[tuple[np.ndarray, np.ndarray]], unit_costs: Sequence[float]
) -> tuple[np.ndarray, np.ndarray]:
    """The mean over folds of one router's hulls (each (cost ascending, accuracy non-decreasing), flat after its
    last vertex), each fold's cost over its ``unit_costs`` (the fold's best single model's mean cost: 1 = that
    model's cost), from the share where every fold's hull has started: its vertices (the union of the folds', where
    the mean is exactly linear between them). The one curve both the frontier table's cost shares (pooled_figures)
    and the plot (frontier_plot.plot_frontiers) are read from."""
    hulls = [(np.asarray(hx) / unit, np.asarray(hy)) for (hx, hy), unit in zip(hulls, unit_costs)]
    start = max(float(hx[0]) for hx, _ in hulls)
    xs = np.unique(np.concatenate([[start]] + [hx[hx > start] for hx, _ in hulls]))
    return xs, np.mean([np.interp(xs, hx, hy) for hx, hy in hulls], axis=0)


@dataclass(frozen=True)
class FoldHulls:
    """One fold's routers on B query-resampled copies: each router's hull per copy, and the references of each copy."""

    hulls: dict[str, list[tuple[np.ndarray, np.ndarray]]]  # router -> B hulls
    target: np.ndarray  # (B,) the best single model's accuracy
    strong_cost: np.ndarray  # (B,) its mean cost
    lo: np.ndarray  # (B,) the cheapest model's mean cost (of known cost)
    hi: np.ndarray  # (B,) the most expensive model's


def fold_hulls(
    curves: Mapping[str, Curve], labels: np.ndarray, costs: np.ndarray, strong: int, weights: np.ndarray | None = None
) -> FoldHulls:
    """Every router's hull on B query-resampled copies of one fold (weights (B, Q); None: the data as is)."""
    w = np.ones((1, labels.shape[1])) if weights is None else np.asarray(weights, np.float64)
    n = w.sum(axis=1)
    priced = ~np.isnan(costs).any(axis=1)
    model_cost = (w @ costs[priced].T) / n[:, None]  # (B, M_priced)
    hulls = {}
    for name, curve in curves.items():
        acc, cost = curve.points(w)
        hulls[name] = [monotone_hull(cost[b], acc[b]) for b in range(len(w))]
    return FoldHulls(
        hulls, (w @ labels[strong]) / n, (w @ costs[strong]) / n, model_cost.min(axis=1), model_cost.max(axis=1)
    )


def pooled_figures(folds: Sequence[FoldHulls]) -> dict[str, dict[str, np.ndarray]]:
    """{router: {figure: (B,)}} over the folds, copy by copy: AIQ, the mean of the folds' (each over its range from
    the cheapest to the most expensive model of known cost); the cost shares, the lowest share of the best single
    model's cost (fold by fold) at which the fold-mean hull (fold_mean_hull: what the plot draws) reaches 100% / 95%
    of the folds' mean best single accuracy (inf: not reached)."""
    routers = list(folds[0].hulls)
    b_count = len(folds[0].target)
    target = np.mean([f.target for f in folds], axis=0)
    out = {name: {f: np.empty(b_count) for f in FIGURES} for name in routers}
    with np.errstate(divide="ignore", invalid="ignore"):
        for name in routers:
            for b in range(b_count):
                out[name]["aiq"][b] = np.mean([aiq(*f.hulls[name][b], f.lo[b], f.hi[b]) for f in folds])
                hx, hy = fold_mean_hull([f.hulls[name][b] for f in folds], [f.strong_cost[b] for f in folds])
                for figure, share in SHARES.items():
                    out[name][figure][b] = cost_at(hx, hy, share * target[b])
    return out


def frontier_figures(
    curves: Mapping[str, Curve], labels: np.ndarray, costs: np.ndarray, strong: int, weights: np.ndarray | None = None
) -> dict[str, dict[str, np.ndarray]]:
    """pooled_figures of one fold: {router: {figure: (B,)}} on B query-resampled copies (weights (B, Q); None: the
    data as is): AIQ over the range from the cheapest to the most expensive model of known cost, and the lowest
    mean cost at which the router's hull reaches 100% and 95% of the best single model's (``strong``) accuracy over
    that model's mean cost (inf: never reached), each on the same resample."""
    return pooled_figures([fold_hulls(curves, labels, costs, strong, weights)])


def _interval(point: float, draws: np.ndarray, level: float) -> dict:
    """{mean, ci_low, ci_high, not_reached}: a percentile interval of the draws; a bound past every finite draw (a
    router that does not reach its target on that share of resamples) is inf (None in the result JSON);
    not_reached: the share of resamples where the figure is inf."""
    tail = (1 - level) / 2
    d = np.sort(draws[~np.isnan(draws)])
    if not len(d):
        return {"mean": point, "ci_low": None, "ci_high": None, "not_reached": None}
    return {
        "mean": point,
        "ci_low": float(np.quantile(d, tail, method="inverted_cdf")),
        "ci_high": float(np.quantile(d, 1 - tail, method="inverted_cdf")),
        "not_reached": float(np.mean(np.isinf(d))),
    }


def evaluate_frontiers(
    probs: Mapping[str, Sequence[np.ndarray]],
    labels: Sequence[np.ndarray],
    costs: Sequence[np.ndarray],
    anchor_rates: Sequence[np.ndarray],
    *,
    names: Sequence[str],
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
    weights: Sequence[float] = DEFAULT_WEIGHTS,
) -> dict:
    """Every router's frontier on each fold's test queries and its figures, fold means with paired intervals.

    Args:
        probs: {method: one (M, Q_k) P(correct) per fold}; labels: the (M, Q_k) labels of each fold (NaN = not
            labelled); costs: the (M, Q_k) cost of each query on each model (NaN = unknown: the model is left out
            of every router, never priced); anchor_rates: (M,) per fold, what the best single model is chosen by
            (its mean on the fold's anchors, the harness's best_single).
        names: the M model names. The two-model routers' strong model is the best single model (the best on the
            anchors among the models of known cost), the weak one the cheapest (the better on the anchors among
            equally cheap ones).
        n_boot, seed, level: the paired bootstrap: every router on the same resamples of each fold's queries
            (stats.bootstrap.resample_weights); each draw pools the folds' resamples as pooled_figures does
            (AIQ: the folds' mean; a cost share: read from the fold-mean hull, the curve plot_frontiers draws).

    Each fold keeps the test queries on which the strong and the weak model are labelled. Returns {"methods":
    {router: {"aiq" | "cost_share_at_best_single" | "cost_share_at_95": {"mean", "ci_low", "ci_high"},
    "aiq_vs_locus": {"diff", "ci_low", "ci_high"} (LOCUS's AIQ minus this router's, when LOCUS ran)}}, "folds":
    [{fold's queries, best single (of known cost), the most accurate model (priced or not: the verdict's best single
    model), cheapest, cost range, each router's operating points and hull}]}; a cost share
    the fold-mean hull never reaches is inf (None in the JSON), and each cost share says in ``not_reached`` the
    share of resamples in which it was not reached."""
    labels = [np.asarray(y, np.float64) for y in labels]
    methods = list(probs)
    folds, curves, strongs = [], [], []
    for k, y in enumerate(labels):
        c = np.broadcast_to(np.asarray(costs[k], np.float64), y.shape)
        priced = np.flatnonzero(~np.isnan(c).any(axis=1))
        if not len(priced):
            raise CostError(
                "evaluate_frontiers: no model has a known cost. How to fix: give prices or parameter "
                "counts (routing.COST_KEYS) for the models."
            )
        rate = np.asarray(anchor_rates[k], np.float64)
        best = int(np.argmax(rate))  # the most accurate: best_single's choice and the verdict's, priced or not
        strong = int(priced[np.argmax(rate[priced])])  # the reference of the cost shares: it, when it has a price
        mean_cost = c[priced].mean(axis=1)
        cheapest = int(priced[np.lexsort((-rate[priced], mean_cost))[0]])
        keep = ~np.isnan(y[strong]) & ~np.isnan(y[cheapest])
        if not keep.any():
            raise RoutingError(
                f"evaluate_frontiers: fold {k}: no test query on which both {names[strong]!r} (the best "
                f"single model) and {names[cheapest]!r} (the cheapest) are labelled"
            )
        y, c = y[:, keep], np.ascontiguousarray(c[:, keep])
        fold_curves = frontier_curves(
            {m: np.asarray(probs[m][k])[:, keep] for m in methods}, y, c, strong=strong, weak=cheapest, weights=weights
        )
        curves.append((fold_curves, y, c))
        strongs.append(strong)
        folds.append({**_fold_record(fold_curves, y, c, strong, cheapest, names), "most_accurate": names[best]})
    point = pooled_figures([fold_hulls(cv, y, c, s) for (cv, y, c), s in zip(curves, strongs)])
    rng = np.random.default_rng(seed)
    draws: dict[str, dict[str, list[np.ndarray]]] = {r: {f: [] for f in FIGURES} for r in point}
    for start in range(0, n_boot, 256):  # chunks bound memory at (256, Q_k)
        size = min(n_boot, start + 256) - start
        pooled = pooled_figures(
            [fold_hulls(cv, y, c, s, resample_weights(rng, y.shape[1], size)) for (cv, y, c), s in zip(curves, strongs)]
        )
        for r in draws:
            for f in FIGURES:
                draws[r][f].append(pooled[r][f])
    out = {}
    for r in point:
        out[r] = {f: _interval(float(point[r][f][0]), np.concatenate(draws[r][f]), level) for f in FIGURES}
        out[r]["aiq"].pop("not_reached")  # AIQ is always reached
        if "locus" in point and r != "locus":
            diff = _interval(
                float(point["locus"]["aiq"][0] - point[r]["aiq"][0]),
                np.concatenate(draws["locus"]["aiq"]) - np.concatenate(draws[r]["aiq"]),
                level,
            )
            diff.pop("not_reached")
            out[r]["aiq_vs_locus"] = {"diff": diff.pop("mean"), **diff}
    return {"methods": out, "folds": folds}


def _fold_record(
    curves: Mapping[str, Curve], labels: np.ndarray, costs: np.ndarray, strong: int, weak: int, names: Sequence[str]
) -> dict:
    """What a result keeps of one fold's frontier: its queries, the two reference models, the cost range and each
    router's operating points and hull (what frontier_plot.plot_frontiers draws)."""
    priced = ~np.isnan(costs).any(axis=1)
    model_cost = costs[priced].mean(axis=1)
    routers = {}
    for name, curve in curves.items():
        acc, cost = (x[0] for x in curve.points())
        hx, hy = monotone_hull(cost, acc)
        routers[name] = {
            "knob": curve.knob.tolist(),
            "accuracy": acc.round(6).tolist(),
            "mean_cost": cost.round(6).tolist(),
            "hull_cost": hx.round(6).tolist(),
            "hull_accuracy": hy.round(6).tolist(),
        }
    return {
        "queries": int(labels.shape[1]),
        "models_of_known_cost": int(priced.sum()),
        "best_single": names[strong],
        "best_single_accuracy": float(labels[strong].mean()),
        "best_single_cost": float(costs[strong].mean()),
        "cheapest": names[weak],
        "cheapest_accuracy": float(labels[weak].mean()),
        "cheapest_cost": float(costs[weak].mean()),
        "cost_range": [float(model_cost.min()), float(model_cost.max())],
        "routers": routers,
    }


__all__ = [
    "FIGURES",
    "THRESHOLD_OF",
    "CostFrontier",
    "FoldHulls",
    "cost_frontier",
    "evaluate_frontiers",
    "fold_hulls",
    "fold_mean_hull",
    "frontier_curves",
    "frontier_figures",
    "frontier_of_pool",
    "pooled_figures",
    "query_costs",
    "share_text",
]

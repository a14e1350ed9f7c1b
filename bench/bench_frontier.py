"""Quality-cost frontier of every router on metabench: how much cheaper can the best single model's quality be had?

For each of the five query folds of `bench_accuracy.py --suite metabench` (budget 256, the same test queries, anchors
and held-out models), each router's knob is swept on the fold's test queries and every operating point gives
(routing accuracy, mean cost of the chosen model). Nothing is retrained: the P(correct) of every method comes from
the fit cache that `bench_accuracy.py --fit-cache DIR [--tag T]` writes (``--reuse-tags`` as there).

Routers (all 2,001 models are candidates, held-out ones included, as in the accuracy bench's "all" group):
  locus / embedllm_mf / irt   the library's cost-aware rule (locus_model.routing.route_many, the rule of the
        ``cost_frontier`` asset; locus serve's ``route`` decides the same, tests/bench/test_bench_frontier.py) on
        that method's P(correct): w * P - (1 - w) * cost / max cost, as w goes from 0 (cheapest) to 1.
  locus_portfolio   the same rule on LOCUS's P(correct) among the served portfolio only: the k-center portfolio of
        --portfolio-k models (15) over the fold's LOCUS model embeddings, as bench_geometry.py and the portfolios
        asset build it and ``locus serve --portfolio k-center-15`` serves it (members of unknown cost left out).
  per_benchmark_cap   each benchmark's best model on its anchors (the per_benchmark baseline's P) among the models
        of cost at most C, C swept over every cost in the pool (the same rule at w = 1 with a cost cap: a size
        cap with the default costs, a dollar cap with --prices).
  threshold_locus / threshold_mf   RouteLLM-style two-model router: the best single model (strong; best on the
        anchors) when P_strong - P_small > t by that method's P(correct), else the best small model (best on the
        anchors among models of at most --small-params billion), t swept.
  random_mix   the strong model with probability p, else the small one: the straight line between the two.

Cost = the chosen model's parameter count (billions), a proxy for self-hosted inference cost, from models.csv
(``locus_model.routing.cost_table``); a model of unknown size is left out of every router's candidates, never
priced (``--sizes csv+name`` also reads sizes from names, as locus serve and the asset do, and says how many).
With ``--prices CSV`` (columns ``model`` and ``price_input_per_mtok`` / ``price_output_per_mtok`` in USD per
million tokens, or ``cost_per_query`` in USD: the keys of locus serve's models config) the cost is dollars per
query instead, at --input-tokens (default: the mean estimate over the suite's queries) and --output-tokens (256)
per query; a model without a price is left out, and the small model is still chosen by size.

AIQ (RouterBench, Hu et al. 2024, arXiv 2403.12031): the area under a router's non-decreasing convex hull (mixing
two operating points at random reaches every point between them) over the fold's cost range (cheapest to dearest
operating point of any router), divided by the range; a router has 0 below its cheapest point, as in RouterBench's
calc_AIQ. Cost at 95% / 100%: the lowest mean cost at which the hull reaches that share of the best single model's
test accuracy. Fold means; intervals: 95% percentile bootstrap over the test queries resampled within folds, every
router on the same resamples (as bench_accuracy's LOCUS-minus intervals).

    .venv/bin/python -m bench.bench_frontier --suite metabench --fit-cache bench/.cache/fits \\
        --tag _latent --reuse-tags _baselines --epochs 24 --patience 24

Writes bench/results/frontier_metabench_b256<tag>.json and bench/results/frontier_metabench.png; `--table JSON
[--plot-out PNG]` prints (and draws) a result again without reading the cache.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from bench.common import CACHE, METABENCH, RESULTS, ProtocolSetup, fit_path, protocol_setup
from locus_model.routing import (COST_KEYS, DEFAULT_OUTPUT_TOKENS, DEFAULT_WEIGHTS, cost_info, cost_table,
                                 estimate_tokens, route_many)

MODELS_CSV = METABENCH.parent / "models.csv"
RULE_METHODS = ("locus", "embedllm_mf", "irt")  # the cost-aware rule on each one's P(correct)
THRESHOLD_METHODS = {"threshold_locus": "locus", "threshold_mf": "embedllm_mf"}
LABELS = {"locus": "LOCUS (cost rule, w)", "locus_portfolio": "LOCUS on the served k-center portfolio (cost rule, w)", "embedllm_mf": "EmbedLLM-MF (cost rule, w)", "irt": "IRT (cost rule, w)",
          "per_benchmark_cap": "per-benchmark rule, size cap", "threshold_locus": "2-model threshold (LOCUS P)",
          "threshold_mf": "2-model threshold (MF P)", "random_mix": "random mix (small / best single)"}
# denser near w = 1, where lambda = (1 - w) / w is small and the rule trades a little accuracy for a lot of cost
WEIGHTS = tuple(sorted({*map(float, DEFAULT_WEIGHTS), *np.round(1 - np.geomspace(1e-4, 0.5, 40), 6).tolist()}))


# ---------------------------------------------------------------------------------------------- the frontier


def monotone_hull(costs, accuracies) -> tuple[np.ndarray, np.ndarray]:
    """The non-decreasing convex hull of operating points (RouterBench): the most accuracy reachable at mean cost
    <= c by mixing points at random, for c from the cheapest point to the (cheapest) most accurate one; flat after.
    Returns the hull's vertices (cost ascending, accuracy non-decreasing)."""
    c, a = np.asarray(costs, np.float64), np.asarray(accuracies, np.float64)
    if c.shape != a.shape or c.ndim != 1 or c.size == 0 or np.isnan(c).any() or np.isnan(a).any():
        raise ValueError(f"monotone_hull: costs {c.shape} and accuracies {a.shape} must be 1-D, equal, non-empty, no NaN")
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
    if hi <= lo:
        return 0.0
    start = max(lo, float(hx[0]))
    if start >= hi:
        return 0.0
    grid = np.unique(np.concatenate([[start, hi], hx[(hx > start) & (hx < hi)]]))
    values = np.interp(grid, hx, hy)
    return float(np.sum((grid[1:] - grid[:-1]) * (values[1:] + values[:-1]) / 2))


def aiq(hulls: dict[str, tuple[np.ndarray, np.ndarray]], lo: float | None = None,
        hi: float | None = None) -> dict[str, float]:
    """AIQ of each router: its hull's area over the common cost range [lo, hi] divided by hi - lo (default: the
    cheapest and the dearest hull vertex of any router). A router that has one cost only (hi = lo) gets its
    accuracy."""
    lo = min(float(h[0][0]) for h in hulls.values()) if lo is None else lo
    hi = max(float(h[0][-1]) for h in hulls.values()) if hi is None else hi
    if hi <= lo:
        return {name: float(np.interp(lo, *h)) if h[0][0] <= lo else 0.0 for name, h in hulls.items()}
    return {name: hull_area(*h, lo, hi) / (hi - lo) for name, h in hulls.items()}


def cost_at(hx: np.ndarray, hy: np.ndarray, target: float) -> float:
    """The lowest cost at which the hull reaches ``target`` accuracy (NaN: never)."""
    if hy[-1] < target - 1e-12:
        return float("nan")
    i = int(np.argmax(hy >= target - 1e-12))
    if i == 0:
        return float(hx[0])
    (x1, y1), (x2, y2) = (hx[i - 1], hy[i - 1]), (hx[i], hy[i])
    return float(x1 + (target - y1) * (x2 - x1) / (y2 - y1))


# ---------------------------------------------------------------------------------------------- the routers


def undominated(probs: np.ndarray, costs: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """The candidates that the rule can choose for some query at some weight or cost cap, and the first of the
    dearest (it sets the rule's cost normalisation): a model is dropped when on every query another candidate is
    cheaper and at least as likely right, or as cheap, at least as likely right and of a lower row (it wins every
    tie the rule breaks: cheaper first, then lower row). Choosing among these gives exactly the same models as
    choosing among all the candidates, at a fraction of the work on a 2,001-model pool."""
    order = candidates[np.lexsort((candidates, costs[candidates]))]  # cost ascending, then row
    p = probs[order]  # (C, Q)
    best_before = np.maximum.accumulate(np.vstack([np.full((1, p.shape[1]), -np.inf), p[:-1]]), axis=0)
    keep = (p > best_before).any(axis=1)
    keep[np.flatnonzero(costs[order] == costs[order].max())[0]] = True
    return np.sort(order[keep])


def rule_choices(probs: np.ndarray, costs: np.ndarray, weights, candidates: np.ndarray) -> np.ndarray:
    """(K, Q) model rows chosen by the library's cost-aware rule at each weight, among ``candidates`` (rows of
    known cost): locus_model.routing.route_many, the rule of the cost_frontier asset (on the undominated
    candidates, which changes no choice)."""
    rows = undominated(probs, costs, candidates)
    p, c = probs[rows], costs[rows]
    return np.stack([rows[route_many(p, c, w)] for w in weights])


def cap_choices(probs: np.ndarray, costs: np.ndarray, caps, candidates: np.ndarray) -> np.ndarray:
    """(K, Q) model rows chosen by the rule at w = 1 (best P(correct), the cheaper on ties) among the candidates
    of cost <= each cap."""
    rows = undominated(probs, costs, candidates)
    out = []
    for cap in caps:
        keep = rows[costs[rows] <= cap]
        out.append(keep[route_many(probs[keep], costs[keep], 1.0)])
    return np.stack(out)


def threshold_choices(probs: np.ndarray, strong: int, small: int) -> tuple[np.ndarray, np.ndarray]:
    """((K, Q) rows, thresholds): the strong model where P_strong - P_small > t, else the small one, for every t
    that changes a decision (all small first, all strong last)."""
    d = probs[strong].astype(np.float64) - probs[small]
    ts = np.concatenate([[np.inf], np.unique(d)[:-1][::-1], [-np.inf]])  # every distinct d but the largest, descending
    return np.stack([np.where(d > t, strong, small) for t in ts]), ts


def best_on_anchors(anchor_rate: np.ndarray, rows: np.ndarray) -> int:
    """The row among ``rows`` with the highest anchor mean rate (the first on ties, as BestSingle.best_row)."""
    return int(rows[int(np.argmax(anchor_rate[rows]))])


@dataclass
class Curve:
    """One router on one fold: its operating points (knob values) as per-query chosen rows."""

    knob: np.ndarray  # (K,) the knob value of each point (w, cap, threshold, p)
    chosen: np.ndarray | None  # (K, Q) rows, or None for the random mix (given by its two ends)
    correct: np.ndarray  # (K, Q) label of the chosen model per query (the mix: its two ends)
    cost: np.ndarray  # (K, Q) cost of the chosen model per query

    def points(self, weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(accuracy (B, K), mean cost (B, K)) on query-resampled copies (weights (B, Q)); None: the data as is."""
        w = np.ones((1, self.correct.shape[1])) if weights is None else weights
        n = w.sum(axis=1, keepdims=True)
        return (w @ self.correct.T) / n, (w @ self.cost.T) / n


def fold_curves(probs: dict[str, np.ndarray], labels: np.ndarray, costs: np.ndarray, anchor_rate: np.ndarray, *,
                small_params: float, weights=WEIGHTS, portfolio: np.ndarray | None = None,
                params: np.ndarray | None = None) -> tuple[dict[str, Curve], dict]:
    """Every router's curve on one fold's test queries. probs: {method: (M, Q)}; labels (M, Q); costs (M,) with NaN
    = unknown (left out of every router); anchor_rate (M,) each model's mean on the fold's anchors; ``portfolio``
    (rows): the served portfolio, whose members of known cost the cost rule on LOCUS's P also routes among
    (router ``locus_portfolio``, as ``locus serve --portfolio`` does); ``params`` (M,) the sizes that choose the
    small model when the costs are dollars (default: the costs are the sizes)."""
    q = np.arange(labels.shape[1])
    candidates = np.flatnonzero(~np.isnan(costs))
    c0 = np.nan_to_num(costs)

    def curve(knob, chosen) -> Curve:
        return Curve(np.asarray(knob, np.float64), chosen, labels[chosen, q], c0[chosen])

    strong = best_on_anchors(anchor_rate, np.arange(len(costs)))
    if np.isnan(costs[strong]):
        raise SystemExit(f"the best single model (row {strong}) has no known size: its cost cannot be compared")
    size = costs if params is None else params
    small_rows = candidates[np.nan_to_num(size[candidates], nan=np.inf) <= small_params]
    if not len(small_rows):
        raise SystemExit(f"--small-params {small_params}: no model of known size is that small")
    small = best_on_anchors(anchor_rate, small_rows)
    curves = {m: curve(weights, rule_choices(probs[m], costs, weights, candidates)) for m in RULE_METHODS if m in probs}
    if portfolio is not None and "locus" in probs:
        served = np.intersect1d(portfolio, candidates)
        if not len(served):
            raise SystemExit("the portfolio has no model of known cost: nothing to route among")
        curves["locus_portfolio"] = curve(weights, rule_choices(probs["locus"], costs, weights, served))
    if "per_benchmark" in probs:
        caps = np.unique(costs[undominated(probs["per_benchmark"], costs, candidates)])  # where a choice can change
        curves["per_benchmark_cap"] = curve(caps, cap_choices(probs["per_benchmark"], costs, caps, candidates))
    for name, method in THRESHOLD_METHODS.items():
        if method in probs:
            chosen, ts = threshold_choices(probs[method], strong, small)
            curves[name] = curve(ts, chosen)
    ends = np.stack([np.full(len(q), small), np.full(len(q), strong)])
    curves["random_mix"] = Curve(np.array([0.0, 1.0]), None, labels[ends, q], c0[ends])
    info = {"strong": strong, "small": small, "best_single_accuracy": float(labels[strong].mean()),
            "best_single_cost": float(costs[strong]), "small_accuracy": float(labels[small].mean()),
            "small_cost": float(costs[small])}
    return curves, info


def fold_figures(curves: dict[str, Curve], target_rows: np.ndarray, weights: np.ndarray | None = None,
                 shares=(0.95, 1.0)) -> dict[str, dict[str, np.ndarray]]:
    """{router: {"aiq", "cost@95", "cost@100"}: (B,)} on B resamples (weights (B, Q); None: the data as is). The
    target accuracy is the best single model's (labels ``target_rows``, (Q,)) on the same resample."""
    w = np.ones((1, len(target_rows))) if weights is None else weights
    target = (w @ target_rows) / w.sum(axis=1)  # (B,)
    pts = {name: c.points(w) for name, c in curves.items()}
    out = {name: {"aiq": np.empty(len(w)), **{f"cost@{round(100 * s)}": np.empty(len(w)) for s in shares}}
           for name in curves}
    for b in range(len(w)):
        hulls = {name: monotone_hull(cost[b], acc[b]) for name, (acc, cost) in pts.items()}
        for name, value in aiq(hulls).items():
            out[name]["aiq"][b] = value
            for s in shares:
                out[name][f"cost@{round(100 * s)}"][b] = cost_at(*hulls[name], s * target[b])
    return out


def fold_record(curves: dict[str, Curve], info: dict) -> dict:
    """What the result JSON keeps of a fold: its figures, each router's operating points and hull, the cost range."""
    pts = {name: c.points() for name, c in curves.items()}
    hulls = {name: monotone_hull(cost[0], acc[0]) for name, (acc, cost) in pts.items()}
    return {**{k: v for k, v in info.items() if k not in ("strong", "small")},
            "cost_range": [min(float(h[0][0]) for h in hulls.values()), max(float(h[0][-1]) for h in hulls.values())],
            "routers": {name: {"knob": c.knob.tolist(), "accuracy": pts[name][0][0].round(6).tolist(),
                               "mean_cost": pts[name][1][0].round(6).tolist(),
                               "hull_cost": hulls[name][0].round(6).tolist(), "hull_accuracy": hulls[name][1].round(6).tolist()}
                        for name, c in curves.items()}}


# ---------------------------------------------------------------------------------------------- data


def model_costs(names: list[str], sizes: str = "csv", prices: Path | None = None, *, input_tokens: int = 0,
                output_tokens: int = DEFAULT_OUTPUT_TOKENS) -> tuple[np.ndarray, dict]:
    """(costs (M,), NaN = unknown; what the cost table says) via routing.cost_table. Without ``prices``: billions of
    parameters from models.csv (``sizes="csv"`` keeps a size the table read from a name unknown). With ``prices``:
    dollars per query from a CSV of ``model`` and any of routing.COST_KEYS (``price_input_per_mtok``,
    ``price_output_per_mtok``, or ``cost_per_query``), ``input_tokens`` / ``output_tokens`` per query as
    locus serve charges a request; a model without a price is unknown."""
    if prices is not None:
        ct = cost_table(names, cost_info(pd.read_csv(prices)))
        if ct.basis != "usd":
            raise SystemExit(f"{prices}: no model of the suite has a price (columns: model and any of {COST_KEYS})")
        costs = ct.costs(input_tokens, output_tokens).astype(np.float64)
        unknown = [n for n, c in zip(names, costs) if np.isnan(c)]
        return costs, {"basis": ct.basis, "note": ct.note, "prices": str(prices), "input_tokens": input_tokens,
                       "output_tokens": output_tokens, "unknown": len(unknown), "unknown_examples": unknown[:10]}
    table = pd.read_csv(MODELS_CSV)
    ct = cost_table(names, cost_info(table[["model", "params_b"]]))
    if ct.basis != "params_b":
        raise SystemExit(f"{MODELS_CSV}: expected parameter counts as the cost basis, got {ct.basis!r}")
    costs = ct.costs().astype(np.float64)
    parsed = set(ct.parsed)
    if sizes == "csv":
        costs[[i for i, n in enumerate(names) if n in parsed]] = np.nan
    unknown = [n for n, c in zip(names, costs) if np.isnan(c)]
    return costs, {"basis": ct.basis, "note": ct.note, "sizes": sizes, "read_from_name": len(parsed) if sizes != "csv" else 0,
                   "unknown": len(unknown), "unknown_examples": unknown[:10]}


def served_portfolio(setup: ProtocolSetup, fold, cache: Path, tags: tuple[str, ...], k: int) -> np.ndarray:
    """The k-center portfolio of k models over the fold's LOCUS model embeddings (every model embedded from its
    anchor evaluations, as bench_geometry.py and the portfolios asset build it), from the cached LOCUS checkpoint."""
    from locus_model.analysis.portfolio import k_center
    from locus_model.infer import embed_evaluation_sets
    from locus_model.model import load_checkpoint

    args = setup.fit_args("locus", fold)
    found = [fit_path(cache, args, t).with_suffix(".pt") for t in tags]
    path = next((p for p in found if p.is_file()), None)
    if path is None:
        raise SystemExit(f"--portfolio-k {k}: no cached LOCUS checkpoint for fold {fold.index} (tried "
                         f"{[p.name for p in found]}). How to fix: --portfolio-k 0, or the --tag of a run that cached it")
    z = embed_evaluation_sets(load_checkpoint(path)[0], setup.encodings, setup.anchor_sets(fold))  # (M, d)
    return np.sort(np.asarray(k_center(z, k), dtype=np.int64))


def cached_probs(cache: Path, setup: ProtocolSetup, name: str, fold, tags: tuple[str, ...]) -> tuple[np.ndarray, str]:
    """A fold's cached test probabilities of one method (bench_accuracy's fit cache; the first of ``tags`` found),
    and the file. The arguments are those bench_accuracy's evaluate() gives, so the key is the same."""
    args = setup.fit_args(name, fold)
    if name == "per_benchmark":  # evaluate() gives per_benchmark its benchmark labels (protocol.evaluate)
        from locus_model.evaluation.baselines import PerBenchmarkConfig

        args["baseline_config"] = PerBenchmarkConfig(benchmarks=tuple(np.asarray(setup.matrix.benchmarks).astype(str)))
    tried = []
    for tag in tags:
        path = fit_path(cache, args, tag)
        tried.append(path.name)
        if path.is_file():
            with np.load(path) as z:
                return z["probs"], path.name
    raise SystemExit(f"no cached fit of {name} on fold {fold.index} in {cache} (tried {tried} for tags {list(tags)}). "
                     f"How to fix: run bench_accuracy.py --suite metabench --budgets {len(fold.anchors)} --methods {name} "
                     f"--only-folds {fold.index} --fit-cache {cache} --tag T with the same LOCUS options, and pass "
                     "--tag/--reuse-tags T here")


# ---------------------------------------------------------------------------------------------- summary


def interval(point: float, draws: np.ndarray) -> dict:
    d = draws[~np.isnan(draws)]
    return {"value": None if np.isnan(point) else float(point),
            "ci_low": float(np.quantile(d, 0.025)) if len(d) else None,
            "ci_high": float(np.quantile(d, 0.975)) if len(d) else None, "resamples_defined": float(len(d) / len(draws))}


def summarise(point: list[dict], boot: list[dict], infos: list[dict], against: str = "locus") -> dict:
    """Fold means (NaN where a fold never reaches) with intervals; the reference router minus each other."""
    names = list(point[0])
    out = {}
    bs_cost = np.mean([i["best_single_cost"] for i in infos])
    for name in names:
        entry = {}
        for metric in point[0][name]:
            per_fold = np.array([p[name][metric][0] for p in point])
            draws = np.mean([b[name][metric] for b in boot], axis=0)  # NaN where any fold never reaches
            entry[metric] = {**interval(float(per_fold.mean()), draws), "per_fold": per_fold.tolist()}
            if metric.startswith("cost@"):
                entry[metric]["share_of_best_single_cost"] = interval(float(per_fold.mean()) / bs_cost, draws / bs_cost)
            if name != against and against in names:
                ref = np.mean([p[against][metric][0] for p in point])
                ref_draws = np.mean([b[against][metric] for b in boot], axis=0)
                entry[metric][f"{against}_minus"] = interval(float(ref - per_fold.mean()), ref_draws - draws)
        out[name] = entry
    return out


def fmt(stat: dict, scale: float = 1.0, digits: int = 1) -> str:
    if stat["value"] is None:
        return "-"
    text = f"{scale * stat['value']:.{digits}f}"
    if stat["ci_low"] is not None:
        text += f" [{scale * stat['ci_low']:.{digits}f}, {scale * stat['ci_high']:.{digits}f}]"
    return text


def reached(stat: dict, scale: float = 1.0, digits: int = 1) -> str:
    """A cost figure, or in how many folds the router never reaches the accuracy."""
    if stat["value"] is not None:
        return fmt(stat, scale, digits)
    never = int(np.isnan(stat["per_fold"]).sum()) if "per_fold" in stat else None
    return f"not reached ({never}/{len(stat['per_fold'])} folds)" if never is not None else "not reached"


UNITS = {"params_b": ("B params", 1.0, 1, "mean parameters of the chosen model (billions; the cost proxy)"),
         "usd": ("USD / 1k queries", 1000.0, 3, "mean cost of the chosen model (USD per 1,000 queries)")}


def markdown(result: dict) -> str:
    s = result["summary"]
    unit, scale, digits, _ = UNITS[result["settings"]["cost"].get("basis", "params_b")]
    lines = [f"| router | AIQ x100 | LOCUS minus, AIQ x100 | cost @95% ({unit}) | % of best single's cost "
             f"| cost @100% ({unit}) | % of best single's cost |", "|---|---|---|---|---|---|---|"]
    for name, e in s.items():
        vs = e["aiq"].get("locus_minus")
        lines.append(f"| {LABELS.get(name, name)} | {fmt(e['aiq'], 100)} | {fmt(vs, 100) if vs else ''} | "
                     f"{reached(e['cost@95'], scale, digits)} | {fmt(e['cost@95']['share_of_best_single_cost'], 100, 0)} | "
                     f"{reached(e['cost@100'], scale, digits)} | {fmt(e['cost@100']['share_of_best_single_cost'], 100, 0)} |")
    return "\n".join(lines)


def plot(result: dict, path: Path) -> Path:
    """Left: each router's non-decreasing convex hull, mean over the folds (from where every fold's hull starts);
    right: the cost rule's operating points (fold mean at each weight) and fold 0's size-capped per-benchmark rule."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folds = result["folds"]
    grid = np.linspace(min(min(f["cost_range"]) for f in folds), max(max(f["cost_range"]) for f in folds), 600)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.6))
    colours = {"locus": "C0", "locus_portfolio": "C9", "embedllm_mf": "C1", "irt": "C2", "per_benchmark_cap": "C4", "threshold_locus": "C5",
               "threshold_mf": "C6", "random_mix": "grey"}
    for name in folds[0]["routers"]:
        hulls = [(np.array(f["routers"][name]["hull_cost"]), np.array(f["routers"][name]["hull_accuracy"])) for f in folds]
        start = max(h[0][0] for h in hulls)
        y = np.mean([np.interp(grid, *h) for h in hulls], axis=0)
        ax.plot(grid[grid >= start], 100 * y[grid >= start], label=LABELS.get(name, name), color=colours.get(name),
                lw=2.4 if name == "locus" else 1.3, ls="--" if name == "random_mix" else "-")
        r = [f["routers"][name] for f in folds]
        if name in (*RULE_METHODS, "locus_portfolio"):  # the same weights on every fold: the fold mean of each point
            bx.plot(np.mean([x["mean_cost"] for x in r], axis=0), 100 * np.mean([x["accuracy"] for x in r], axis=0),
                    "o-", ms=2.5, lw=0.8, color=colours[name], label=LABELS[name])
        elif name == "per_benchmark_cap":
            bx.plot(r[0]["mean_cost"], 100 * np.array(r[0]["accuracy"]), ".", ms=3, color=colours[name],
                    label=LABELS[name] + " (fold 0)")
    bs_acc = np.mean([f["best_single_accuracy"] for f in folds])
    bs_cost = np.mean([f["best_single_cost"] for f in folds])
    for a in (ax, bx):
        a.scatter([bs_cost], [100 * bs_acc], marker="*", s=160, color="C3", zorder=5, label="best single (fold mean)")
        a.axhline(95 * bs_acc, color="C3", lw=0.7, ls=":")
        a.axvline(0.5 * bs_cost, color="black", lw=0.7, ls=":")
        a.set_xlabel(UNITS[result["settings"]["cost"].get("basis", "params_b")][3])
        a.grid(alpha=0.3)
    ax.set_ylim(max(0.0, 100 * bs_acc - 15), min(100.0, 100 * bs_acc + 12))
    ax.set_ylabel("routing accuracy on the test queries, %")
    ax.set_title(f"non-decreasing convex hulls, mean over {len(folds)} folds (dotted: 95% of best single, half its cost)",
                 fontsize=8)
    bx.set_xscale("log")
    bx.set_title("operating points (cost rule: fold mean per weight)", fontsize=8)
    ax.legend(fontsize=7, loc="lower right")
    bx.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    return path


# ---------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", default="metabench", choices=["metabench"])
    p.add_argument("--budget", type=int, default=256)
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--only-folds", type=int, nargs="+", default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fit-cache", type=Path, default=CACHE / "fits",
                   help="bench_accuracy's --fit-cache folder (read only)")
    p.add_argument("--tag", default="", help="the --tag of the bench_accuracy run whose fits to read")
    p.add_argument("--reuse-tags", nargs="+", default=[], metavar="TAG", help="also read fits cached under these tags")
    p.add_argument("--epochs", type=int, default=None, help="LOCUS --epochs of that run (part of its cache key)")
    p.add_argument("--patience", type=int, default=None, help="LOCUS --patience of that run")
    p.add_argument("--train-option", action="append", default=[], metavar="NAME=VALUE", help="as bench_accuracy's")
    p.add_argument("--small-params", type=float, default=8.0,
                   help="the two-model routers' small model: the best on the anchors among models of at most this many "
                        "billion parameters")
    p.add_argument("--sizes", choices=["csv", "csv+name"], default="csv",
                   help="csv: sizes from models.csv only; csv+name: also sizes read from model names (as serve does)")
    p.add_argument("--portfolio-k", type=int, default=15,
                   help="also route LOCUS's cost rule among the k-center portfolio of this many models over the fold's "
                        "LOCUS embeddings (the portfolio locus serve --portfolio k-center-K serves); 0: not")
    p.add_argument("--prices", type=Path, default=None,
                   help="CSV of model and price_input_per_mtok / price_output_per_mtok (USD per million tokens) or "
                        "cost_per_query (USD): costs in dollars instead of parameters; models without a price are left out")
    p.add_argument("--input-tokens", type=int, default=None,
                   help="with --prices: input tokens per query (default: the mean estimate over the suite's queries, "
                        "4 characters a token, as locus serve estimates)")
    p.add_argument("--output-tokens", type=int, default=DEFAULT_OUTPUT_TOKENS,
                   help=f"with --prices: output tokens per query (default {DEFAULT_OUTPUT_TOKENS}, locus serve's default)")
    p.add_argument("--n-boot", type=int, default=1000)
    p.add_argument("--out-dir", type=Path, default=RESULTS)
    p.add_argument("--table", type=Path, default=None, help="print the markdown table of this result JSON and exit")
    p.add_argument("--plot-out", type=Path, default=None, help="with --table: also draw its figure to this PNG")
    args = p.parse_args(argv)
    if args.table is not None:
        result = json.loads(args.table.read_text())
        print(markdown(result))
        print(json.dumps(result["targets"], indent=1))
        if args.plot_out is not None:
            print(f"wrote {plot(result, args.plot_out)}")
        return 0
    start = time.perf_counter()
    options = ([f"epochs={args.epochs}"] if args.epochs is not None else []) + (
        [f"patience={args.patience}"] if args.patience is not None else []) + list(args.train_option)
    setup = protocol_setup(args.suite, budget=args.budget, folds=args.folds, seed=args.seed, train_options=options)
    names = list(setup.matrix.models)
    input_tokens = args.input_tokens if args.input_tokens is not None else int(round(np.mean(
        [estimate_tokens(t) for t in setup.matrix.queries])))
    costs, cost_note = model_costs(names, args.sizes, args.prices, input_tokens=input_tokens,
                                   output_tokens=args.output_tokens)
    params = model_costs(names, args.sizes)[0] if args.prices is not None else None  # the small model is by size
    tags = (args.tag, *args.reuse_tags)
    methods = sorted({*RULE_METHODS, *THRESHOLD_METHODS.values(), "per_benchmark", "best_single"})
    folds = [f for f in setup.splits if args.only_folds is None or f.index in args.only_folds]
    rng = np.random.default_rng(args.seed)
    point, boot, infos, fold_out = [], [], [], []
    for fold in folds:
        probs, files = {}, {}
        for m in methods:
            probs[m], files[m] = cached_probs(args.fit_cache, setup, m, fold, tags)
        labels = setup.scores[:, fold.test].astype(np.float64)
        if np.isnan(labels).any():
            raise SystemExit("metabench is complete: a NaN label means the wrong matrix")
        anchor_rate = probs["best_single"][:, 0].astype(np.float64)  # BestSingle: each model's anchor mean rate
        portfolio = served_portfolio(setup, fold, args.fit_cache, tags, args.portfolio_k) if args.portfolio_k else None
        curves, info = fold_curves(probs, labels, costs, anchor_rate, small_params=args.small_params, portfolio=portfolio,
                                   params=params)
        target_rows = labels[info["strong"]]
        n_q = labels.shape[1]
        weights = np.stack([np.bincount(r, minlength=n_q) for r in rng.integers(0, n_q, size=(args.n_boot, n_q))])
        point.append(fold_figures(curves, target_rows))
        boot.append(fold_figures(curves, target_rows, weights.astype(np.float64)))
        infos.append(info)
        fold_out.append({"fold": fold.index, "test_queries": n_q, "files": files,
                         "portfolio": [names[i] for i in portfolio] if portfolio is not None else None,
                         "portfolio_unknown_cost": int(np.isnan(costs[portfolio]).sum()) if portfolio is not None else None,
                         "best_single": names[info["strong"]], "small": names[info["small"]],
                         **fold_record(curves, info)})
        print(f"fold {fold.index}: best single {names[info['strong']]} {100 * info['best_single_accuracy']:.1f}% at "
              f"cost {info['best_single_cost']:.4g}; small {names[info['small']]} {100 * info['small_accuracy']:.1f}% at "
              f"cost {info['small_cost']:.4g}; AIQ " + ", ".join(f"{n} {100 * v['aiq'][0]:.1f}" for n, v in point[-1].items()),
              flush=True)
    summary = summarise(point, boot, infos)
    locus = summary.get("locus")
    targets = {}
    if locus is not None:
        below = [n for n, e in summary.items() if n != "locus" and e["aiq"]["locus_minus"]["ci_high"] is not None
                 and e["aiq"]["locus_minus"]["ci_high"] < 0]
        share = locus["cost@100"]["share_of_best_single_cost"]
        targets = {"locus_aiq_not_significantly_below_any": {"met": not below, "significantly_below": below},
                   "locus_reaches_best_single_at_half_its_cost": {
                       "met": share["value"] is not None and share["value"] <= 0.5, "share": share}}
    tag = args.tag or "_untagged"
    result = {
        "settings": {"suite": args.suite, "budget": args.budget, "folds": [f.index for f in folds], "tags": list(tags),
                     "locus_train_options": options, "small_params": args.small_params, "n_boot": args.n_boot,
                     "seed": args.seed, "weights": list(WEIGHTS), "cost": cost_note,
                     "portfolio_k": args.portfolio_k,
                     "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])])},
        "summary": summary, "targets": targets, "folds": fold_out, "wall_s": round(time.perf_counter() - start, 1),
    }
    args.out_dir.mkdir(parents=True, exist_ok=True)
    out = args.out_dir / f"frontier_{args.suite}_b{args.budget}{tag}.json"
    out.write_text(json.dumps(result, indent=1))
    png = plot(result, args.out_dir / f"frontier_{args.suite}.png")  # the latest run's figure (its JSON names the fits)
    print(markdown(result))
    print(json.dumps(targets, indent=1))
    print(f"wrote {out} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

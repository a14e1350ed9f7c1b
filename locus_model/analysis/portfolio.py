"""Portfolio selection from model embeddings: which few models to keep serving.

Paper (arXiv 2601.21082): a 15-model k-center portfolio matches the routing accuracy of all 112 EmbedLLM models;
coverage-greedy under a parameter budget gets near full accuracy with ~150B of the pool's 1,930B parameters.

Selectors (all deterministic, ties broken by the lowest model index):
- k_center: greedy farthest-point (min over portfolios of the max distance to the nearest member; 2-approximate).
- k_medoids: PAM (greedy BUILD, then best-improvement SWAP) minimising the mean distance to the nearest member.
- coverage_greedy: facility-location coverage gain per billion parameters, under a total-parameter budget.
A portfolio is evaluated by routing among its members only, with the correctness predictor's probabilities.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from locus_model.analysis._common import (check_embeddings, check_metric, check_names, markdown_table,
                                          new_figure, pairwise_distances, save_figure)
from locus_model.data.catalog import params_for_models
from locus_model.evaluation.metrics import routing_accuracy

# ----------------------------------------------------------------------------- selectors


def _argmin(x: np.ndarray) -> int:
    """Lowest index whose value is within float rounding (1e-9 relative) of the minimum: ties are stable."""
    m = np.min(x)
    return int(np.flatnonzero(x <= m + 1e-9 * max(1.0, abs(m)))[0])


def _argmax(x: np.ndarray) -> int:
    return _argmin(-x)


def _first_medoid(d: np.ndarray) -> int:
    return _argmin(d.sum(axis=1))


ROW_BLOCK = 1024  # rows of distances computed at a time where only rows are needed (k_center: O(M) memory)


def _distance_row_sums(z: np.ndarray, metric: str) -> np.ndarray:
    """(M,) total distance of each model to all others, ROW_BLOCK rows at a time (the same values as
    pairwise_distances(z).sum(axis=1), without the (M, M) matrix)."""
    return np.concatenate([pairwise_distances(z[i:i + ROW_BLOCK], z, metric=metric).sum(axis=1)
                           for i in range(0, len(z), ROW_BLOCK)])


def k_center(embeddings: np.ndarray, k: int, *, metric: str = "euclidean") -> list[int]:
    """Greedy farthest-point k-center: indices of k models, in the order chosen (prefixes are k'-portfolios).

    Start: the medoid (the model with the smallest total distance to all others), so the result does not
    depend on model order or a seed. Then repeatedly add the model farthest from its nearest chosen model.
    Euclidean by default: the 2-approximation guarantee needs a metric (cosine distance is not one).
    Cost: O(M^2 d) time, O(M) memory: distances are computed one row (one chosen model) at a time.
    """
    z = check_embeddings(embeddings, where="k_center")
    check_metric(metric, where="k_center")
    k = _check_k(k, len(z), where="k_center")
    chosen = [_argmin(_distance_row_sums(z, metric))]

    def row(i: int) -> np.ndarray:                                 # (M,) distances of model i to all
        return pairwise_distances(z[i:i + 1], z, metric=metric)[0]

    nearest = row(chosen[0])                   # (M,) distance to the nearest chosen model
    while len(chosen) < k:
        nearest[chosen] = -1.0                 # never re-pick (matters when points coincide)
        nxt = _argmax(nearest)
        chosen.append(nxt)
        nearest = np.minimum(nearest, row(nxt))
    return chosen


def k_medoids(embeddings: np.ndarray, k: int, *, metric: str = "euclidean", max_iter: int = 100) -> list[int]:
    """PAM k-medoids: indices of k models (sorted) minimising the summed distance to the nearest medoid.

    BUILD: start at the medoid, then add the model that lowers the total cost most. SWAP: apply the best
    improving (medoid, non-medoid) exchange until none improves (or max_iter swaps). Fully deterministic
    (ties: the lowest medoid position, then the lowest candidate index, within 1e-9 relative).
    Memory: O(M^2), said here as the rule asks: the (M, M) distance matrix and two (M, M) temporaries per
    swap (32 MB each at M = 2,001). Time: the cost of every (medoid, candidate) exchange at once per swap,
    as in FastPAM1 (Schubert & Rousseeuw 2019): O(M^2) array work and one (M, M) x (M, k) product, no loop
    over medoids.
    """
    z = check_embeddings(embeddings, where="k_medoids")
    check_metric(metric, where="k_medoids")
    k = _check_k(k, len(z), where="k_medoids")
    d = pairwise_distances(z, metric=metric)   # (M, M)
    return _pam_swap(d, _pam_build(d, k), max_iter=max_iter)


def _pam_build(d: np.ndarray, k: int) -> list[int]:
    """PAM's greedy BUILD on an (M, M) distance matrix: the medoid, then the model lowering the total cost most
    (the k-prefix of BUILD to k' > k is BUILD to k, so one run serves a whole curve)."""
    chosen = [_first_medoid(d)]
    nearest = d[chosen[0]].copy()
    while len(chosen) < k:
        cost = np.minimum(nearest[None, :], d).sum(axis=1)  # (M,) total cost if each candidate were added
        cost[chosen] = np.inf
        nxt = _argmin(cost)
        chosen.append(nxt)
        nearest = np.minimum(nearest, d[nxt])
    return chosen


def _pam_swap(d: np.ndarray, start: Sequence[int], *, max_iter: int = 100) -> list[int]:
    """PAM's SWAP from the medoids `start` (sorted result)."""
    m, k = len(d), len(start)
    chosen = list(start)
    current = d[chosen].min(axis=0).sum()
    for _ in range(max_iter):
        dm = d[chosen]                          # (k, M)
        order = np.argsort(dm, axis=0, kind="stable")
        first = order[0]                                            # (M,) position of each model's nearest medoid
        d1 = dm[first, np.arange(m)]                                # (M,) distance to it
        d2 = dm[order[1], np.arange(m)] if k > 1 else np.full(m, np.inf)  # (M,) to the second nearest
        near1 = np.minimum(d1[None, :], d)                          # (M cand, M) with candidate h added
        # removing medoid p moves the models it served from d1 to d2: cost(h, p) = sum_o min(without_p(o), d(h, o))
        fix = (np.minimum(d2[None, :], d) - near1) @ np.eye(k)[first]  # (M, k)
        cost = near1.sum(axis=1)[:, None] + fix                     # (M, k) cost after swapping chosen[p] for h
        cost[chosen] = np.inf
        # each medoid's best candidate, its cost summed again directly (as one sum over models) so that
        # exchanges of equal cost compare as equal and the first medoid position wins, whatever the rounding above
        best = (current - 1e-12 * max(current, 1.0), None, None)
        for pos in range(k):
            h = _argmin(cost[:, pos])
            if not np.isfinite(cost[h, pos]):
                continue
            others = np.delete(dm, pos, axis=0)
            without = others.min(axis=0) if len(others) else np.full(m, np.inf)  # (M,)
            exact = np.minimum(without, d[h]).sum()
            if exact < best[0]:
                best = (exact, pos, h)
        if best[1] is None:
            break
        chosen[best[1]] = best[2]
        current = best[0]
    return sorted(chosen)


def coverage_similarity(embeddings: np.ndarray, *, bandwidth: float | None = None) -> np.ndarray:
    """(M, M) similarity s(i, j) = exp(-|z_i - z_j|^2 / (2 h^2)), h = median pairwise distance by default."""
    z = check_embeddings(embeddings, where="coverage_similarity")
    d = pairwise_distances(z, metric="euclidean")
    if bandwidth is None:
        off = d[np.triu_indices(len(z), k=1)]
        bandwidth = float(np.median(off)) if len(off) and np.median(off) > 0 else 1.0
    if not bandwidth > 0:
        raise ValueError(f"coverage_similarity: bandwidth must be > 0, got {bandwidth}. "
                         "How to fix: pass a positive bandwidth or None for the median distance.")
    return np.exp(-(d ** 2) / (2.0 * bandwidth ** 2))


def coverage(similarity: np.ndarray, chosen: Sequence[int]) -> float:
    """Facility-location coverage of a portfolio, in [0, 1]: mean over all models of max_{j in S} s(i, j)."""
    if len(chosen) == 0:
        return 0.0
    return float(similarity[:, list(chosen)].max(axis=1).mean())


def coverage_greedy(embeddings: np.ndarray, params_b: np.ndarray, budget_b: float, *,
                    bandwidth: float | None = None) -> list[int]:
    """Greedy coverage per parameter under a total-parameter budget: indices of the models, in the order chosen.

    Coverage F(S) = mean_i max_{j in S} s(i, j) with the Gaussian similarity of `coverage_similarity`
    (monotone submodular: each model is "served" by its most similar portfolio member). Each step adds the
    affordable model with the largest gain F(S + j) - F(S) per billion parameters; it stops when no
    affordable model adds coverage. As in cost-benefit greedy (Khuller et al. 1999), the answer is the better
    of that set and the single affordable model with the highest coverage. Models with unknown (NaN)
    parameter counts cannot be budgeted and are never chosen.
    Lazy evaluation (Minoux 1978): a model's gain only shrinks as the portfolio grows, so each step recomputes
    the gains of the models whose last ratio could still be the best, in batches, and picks the same model as
    recomputing every gain would (ties: lowest index). Memory: O(M^2), said here as the rule asks: the (M, M)
    similarity (32 MB at M = 2,001) and a (batch, M) temporary.
    """
    z = check_embeddings(embeddings, where="coverage_greedy")
    p = np.asarray(params_b, dtype=np.float64)
    if p.shape != (len(z),):
        raise ValueError(f"coverage_greedy: params_b has shape {p.shape}, expected ({len(z)},). "
                         "How to fix: pass one parameter count (billions) per model, e.g. params_for_models(names).")
    if np.any(p[~np.isnan(p)] <= 0):
        raise ValueError(f"coverage_greedy: parameter counts must be > 0, got {p[p <= 0][:5].tolist()}. "
                         "How to fix: use NaN for unknown sizes, never 0.")
    s = coverage_similarity(z, bandwidth=bandwidth)        # (M, M), symmetric: row j = column j
    affordable = ~np.isnan(p) & (p <= budget_b)
    cost = np.nan_to_num(p, nan=np.inf)
    chosen: list[int] = []
    best_cover = np.zeros(len(z))                          # (M,) max similarity to the portfolio so far
    spent = 0.0
    upper = np.where(affordable, np.inf, -np.inf)          # (M,) each model's last gain per billion (an upper bound)

    def ratios(js: np.ndarray) -> np.ndarray:              # gain per billion of adding each of js, now
        gain = np.maximum(s[js], best_cover[None, :]).mean(axis=1) - best_cover.mean()  # (len(js),) row sums
        return np.where(gain > 1e-12, gain / cost[js], -np.inf)

    while True:
        cand = np.flatnonzero((upper > -np.inf) & (spent + cost <= budget_b + 1e-9))
        if not len(cand):
            break
        cand = cand[np.lexsort((cand, -upper[cand]))]      # highest bound first
        best, done, batch = -np.inf, 0, 64
        while done < len(cand):
            js = cand[done:done + batch]
            upper[js] = ratios(js)
            best = max(best, float(upper[js].max()))
            done, batch = done + len(js), 2 * batch
            # the rest cannot beat `best` (slack: their bounds are exact up to float rounding)
            if done < len(cand) and upper[cand[done]] < best - 1e-12 - 1e-9 * abs(best):
                break
        if best == -np.inf:
            break
        j = int(cand[:done][upper[cand[:done]] == best].min())
        chosen.append(j)
        spent += p[j]
        upper[j] = -np.inf
        best_cover = np.maximum(best_cover, s[j])
    if affordable.any():
        single = int(np.argmax(np.where(affordable, s.mean(axis=1), -np.inf)))
        if coverage(s, [single]) > coverage(s, chosen) + 1e-12:
            return [single]
    return chosen


def _check_k(k: int, m: int, *, where: str) -> int:
    if not 1 <= int(k) <= m:
        raise ValueError(f"{where}: k must be between 1 and the pool size {m}, got {k}. "
                         "How to fix: choose a smaller portfolio size.")
    return int(k)

# ----------------------------------------------------------------------------- routing accuracy curve


@dataclass(frozen=True)
class PortfolioCurve:
    """Routing accuracy of portfolios of growing size (k) or parameter budget, vs the full pool."""
    method: str                      # "k_center" | "k_medoids" | "coverage_greedy"
    x_name: str                      # "k" or "budget_b"
    xs: np.ndarray                   # (T,) portfolio sizes or budgets
    accuracy: np.ndarray             # (T,) routing accuracy routing among the portfolio only
    random_accuracy: np.ndarray      # (T,) mean over seeds of random portfolios of the same size (NaN for budgets)
    params_b: np.ndarray             # (T,) total parameters of each portfolio (NaN if any member unknown)
    portfolios: tuple[tuple[str, ...], ...]  # T portfolios, member names
    full_accuracy: float             # routing accuracy of the whole pool
    n_models: int
    tolerance: float                 # "matches the full pool" = accuracy >= full_accuracy - tolerance
    smallest_matching: float | None  # smallest x whose portfolio matches the full pool, None if none does

    def table(self) -> pd.DataFrame:
        return pd.DataFrame({self.x_name: self.xs, "n_models": [len(p) for p in self.portfolios],
                             "routing_accuracy": self.accuracy, "random_portfolio_accuracy": self.random_accuracy,
                             "params_b": self.params_b, "portfolio": [", ".join(p) for p in self.portfolios]})

    def to_markdown(self) -> str:
        match = ("no portfolio on the curve" if self.smallest_matching is None
                 else f"{self.x_name} = {self.smallest_matching:g}")
        t = self.table().drop(columns="portfolio")
        return (f"**Portfolio selection: {self.method}** (pool of {self.n_models} models, full-pool routing accuracy "
                f"{self.full_accuracy:.4f}). Smallest portfolio within {100 * self.tolerance:.1f} points of the "
                f"full pool: {match}.\n\n" + markdown_table(t, max_rows=None))

    def draw(self, ax, *, title: bool = False) -> None:
        """The curve on a matplotlib axis: accuracy vs k or budget, the random baseline, the full pool and
        its tolerance band, and where the portfolio first matches it."""
        ax.plot(self.xs, self.accuracy, marker="o", ms=3, label=self.method)
        if np.isfinite(self.random_accuracy).any():
            ax.plot(self.xs, self.random_accuracy, ls="--", color="grey", label="random portfolio (mean)")
        ax.axhline(self.full_accuracy, color="k", lw=1, label=f"all {self.n_models} models")
        ax.axhspan(self.full_accuracy - self.tolerance, self.full_accuracy, color="k", alpha=0.08)
        if self.smallest_matching is not None:
            ax.axvline(self.smallest_matching, color="C3", lw=1, ls=":",
                       label=f"matches at {self.x_name}={self.smallest_matching:g}")
        if self.x_name == "budget_b":
            ax.set_xscale("log")
        ax.set_xlabel("portfolio size k" if self.x_name == "k" else "parameter budget (billions)")
        ax.set_ylabel("routing accuracy")
        if title:
            ax.set_title(self.method)
        ax.legend(fontsize=7)

    def plot(self, path: str | Path) -> Path:
        fig = new_figure(6.4, 4.2)
        self.draw(fig.add_subplot(1, 1, 1))
        return save_figure(fig, path)


def plot_curves(curves: Sequence[PortfolioCurve], path: str | Path) -> Path:
    """One panel per PortfolioCurve (routing accuracy vs k or budget, the full pool and its 0.5-point band)."""
    fig = new_figure(4.2 * max(1, len(curves)), 3.8)
    for i, c in enumerate(curves):
        c.draw(fig.add_subplot(1, max(1, len(curves)), i + 1), title=True)
    return save_figure(fig, path)


def portfolio_curve(embeddings: np.ndarray, probs: np.ndarray, labels: np.ndarray, *, names=None,
                    method: str = "k_center", ks: Sequence[int] | None = None,
                    budgets_b: Sequence[float] | None = None, params_b: np.ndarray | None = None,
                    metric: str = "euclidean", tolerance: float = 0.005, n_random: int = 5,
                    seed: int = 0) -> PortfolioCurve:
    """Routing accuracy of the chosen portfolio as a function of its size (k) or parameter budget.

    Args:
        embeddings: (M, d) model embeddings; probs: (M, Q) predicted P(correct); labels: (M, Q), NaN = unknown
            (use held-out queries).
        method: "k_center" / "k_medoids" (curve over `ks`, default 1..M) or "coverage_greedy" (curve over
            `budgets_b` with `params_b`, e.g. from params_for_models).
        tolerance: a portfolio "matches" the full pool when its accuracy >= full - tolerance (0.005 = 0.5 point).
        n_random, seed: random portfolios of the same size (k methods) as a baseline, mean over n_random draws.
    Routing among a portfolio = locus_model.evaluation.metrics.routing_accuracy on the portfolio's rows of probs/labels
    (per query, the member with the highest predicted probability; with a dense label matrix every
    portfolio is scored on the same queries).
    """
    where = "portfolio_curve"
    z = check_embeddings(embeddings, where=where)
    names = check_names(names, len(z), where=where)
    probs, labels = _check_probs_labels(probs, labels, len(z), where=where)
    full = routing_accuracy(probs, labels)
    rng = np.random.default_rng(seed)
    if method in ("k_center", "k_medoids"):
        xs = np.asarray(ks if ks is not None else range(1, len(z) + 1), dtype=np.int64)
        if method == "k_center":  # greedy: every prefix is the smaller portfolio
            order = k_center(z, int(xs.max()), metric=metric)
            picks = [order[:k] for k in xs]
        else:  # one distance matrix and one BUILD (its prefixes) for the whole curve, then SWAP per k
            check_metric(metric, where=where)
            for k in (xs.min(), xs.max()):
                _check_k(int(k), len(z), where="k_medoids")
            d = pairwise_distances(z, metric=metric)  # (M, M)
            build = _pam_build(d, int(xs.max()))
            picks = [_pam_swap(d, build[:int(k)]) for k in xs]
        rand = np.array([np.mean([routing_accuracy(probs[s], labels[s]) for s in
                                  (rng.choice(len(z), size=int(k), replace=False) for _ in range(n_random))])
                         for k in xs]) if n_random > 0 else np.full(len(xs), np.nan)
        x_name = "k"
    elif method == "coverage_greedy":
        if budgets_b is None or params_b is None:
            raise ValueError(f"{where}: method='coverage_greedy' needs budgets_b and params_b. "
                             "How to fix: pass params_b=params_for_models(names, models) and a list of budgets.")
        xs = np.asarray(budgets_b, dtype=np.float64)
        picks = [coverage_greedy(z, params_b, float(b)) for b in xs]
        rand = np.full(len(xs), np.nan)
        x_name = "budget_b"
    else:
        raise ValueError(f"{where}: unknown method {method!r}. "
                         "How to fix: use 'k_center', 'k_medoids' or 'coverage_greedy'.")
    p_all = params_for_models(names) if params_b is None else np.asarray(params_b, dtype=np.float64)
    acc = np.array([routing_accuracy(probs[list(s)], labels[list(s)]) if len(s) else np.nan for s in picks])
    matching = [x for x, a in zip(xs, acc) if a >= full - tolerance]
    return PortfolioCurve(
        method=method, x_name=x_name, xs=xs, accuracy=acc, random_accuracy=rand,
        params_b=np.array([p_all[list(s)].sum() if len(s) else 0.0 for s in picks]),
        portfolios=tuple(tuple(names[i] for i in s) for s in picks), full_accuracy=float(full),
        n_models=len(z), tolerance=tolerance, smallest_matching=float(min(matching)) if matching else None)


def _check_probs_labels(probs, labels, n_models: int, *, where: str) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(probs, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    if p.ndim != 2 or p.shape != y.shape or p.shape[0] != n_models:
        raise ValueError(f"{where}: probs {p.shape} and labels {y.shape} must both be (M, Q) with M = "
                         f"{n_models} model embeddings. How to fix: predict and label the same queries for "
                         "every model, rows in the embedding order.")
    return p, y

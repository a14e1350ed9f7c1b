"""The portfolios of a pool: the k-center and k-medoids curves over the portfolio size and the coverage-greedy
curve over a total-parameter budget (portfolio.portfolio_curve each), in one result that renders its report.

Sizes: every k up to DENSE_K, then GEOMETRIC_K sizes spaced geometrically up to the largest (portfolio_sizes);
budgets: geometric from the smallest known model to the pool's total known parameters (budget_grid).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from locus_model.analysis._common import left_out_note
from locus_model.analysis.portfolio import PortfolioCurve, plot_curves, portfolio_curve

DENSE_K = 50  # the k curves take every size up to this, then GEOMETRIC_K sizes more up to the whole pool
GEOMETRIC_K = 20
TABLE_COLUMNS = ["method", "x_name", "x", "n_models", "routing_accuracy", "random_portfolio_accuracy", "params_b",
                 "full_pool_accuracy", "smallest_matching", "portfolio"]


def portfolio_sizes(m: int, max_k: int = 0) -> list[int]:
    """The k curves' portfolio sizes: every k up to max_k (0 = the pool) while k <= DENSE_K, then GEOMETRIC_K
    sizes spaced geometrically up to max_k, which is always included (pools up to DENSE_K models: 1..m)."""
    top = min(max_k, m) if max_k > 0 else m
    dense = list(range(1, min(top, DENSE_K) + 1))
    if top <= DENSE_K:
        return dense
    return sorted(set(dense) | {int(round(k)) for k in np.geomspace(DENSE_K, top, GEOMETRIC_K + 1)} | {top})


def budget_grid(params_b: np.ndarray, n: int) -> list[float]:
    """Geometric budgets from the smallest known model to the pool's total known parameters (both included)."""
    known = params_b[np.isfinite(params_b) & (params_b > 0)]
    if len(known) == 0:
        return []
    return sorted({round(float(b), 3) for b in np.geomspace(known.min(), known.sum(), max(2, n))} | {float(known.sum())})


@dataclass(frozen=True)
class Portfolios:
    """The pool's portfolio curves: k_center and k_medoids, then coverage_greedy where parameter counts are known."""
    curves: tuple[PortfolioCurve, ...]
    params_b: np.ndarray             # (M,) parameter count per model, NaN = unknown
    tolerance: float
    left_out: tuple[str, ...] = ()   # models left out before the call (no held-out labels)

    def smallest(self) -> dict[str, float | None]:
        """method -> the smallest k (or budget) whose portfolio matches the full pool, None where none does."""
        return {c.method: c.smallest_matching for c in self.curves}

    def headline(self) -> str:
        match = self.smallest()
        fmt = {m: ("none on the curve" if v is None else f"{v:g}") for m, v in match.items()}
        unknown = int(np.isnan(self.params_b).sum())
        if "coverage_greedy" in match:
            found = match["coverage_greedy"]
            greedy = (("; coverage-greedy: no budget matches" if found is None else f"; coverage-greedy: budget {found:g}B")
                      + f" of the {float(np.nansum(self.params_b)):g}B known"
                      + (f" ({unknown} model(s) of unknown size are never chosen)" if unknown else ""))
        else:
            greedy = "; coverage-greedy: no parameter counts known"
        first = self.curves[0]
        return (f"full pool of {first.n_models} models: routing accuracy {first.full_accuracy:.4f}; smallest k within "
                f"{100 * self.tolerance:g} point: k-center k = {fmt['k_center']}, k-medoids k = {fmt['k_medoids']}"
                + greedy + ".")

    def to_markdown(self) -> str:
        body = "\n\n".join(c.to_markdown() for c in self.curves)
        if all(c.method != "coverage_greedy" for c in self.curves):
            body += "\n\nNo parameter count is known (models file or name), so there is no coverage-greedy curve."
        return (body + "\n\nRouting among a portfolio: for every held-out query, the member with the highest predicted "
                "P(correct) answers (the correctness predictor's probabilities from the pool embeddings)."
                + left_out_note(self.left_out))

    def table(self) -> pd.DataFrame:
        """One row per point of every curve (TABLE_COLUMNS): x is k or the budget, as x_name says."""
        frames = []
        for c in self.curves:
            t = c.table().rename(columns={c.x_name: "x"})
            frames.append(t.assign(method=c.method, x_name=c.x_name, full_pool_accuracy=c.full_accuracy,
                                   smallest_matching=(t["x"] == c.smallest_matching) if c.smallest_matching is not None else False))
        return pd.concat(frames, ignore_index=True)[TABLE_COLUMNS]

    def plot(self, path: str | Path) -> Path:
        return plot_curves(self.curves, path)

    def figures(self) -> dict[str, float]:
        return {"full_pool_routing_accuracy": float(self.curves[0].full_accuracy),
                **{f"smallest_{m}": (float(v) if v is not None else -1.0) for m, v in self.smallest().items()}}


def portfolios(embeddings: np.ndarray, probs: np.ndarray, labels: np.ndarray, *, names, params_b: np.ndarray,
               max_k: int = 0, max_k_medoids: int = DENSE_K, n_budgets: int = 12, tolerance: float = 0.005,
               n_random: int = 5, seed: int = 0, left_out: Sequence[str] = ()) -> Portfolios:
    """k-center and k-medoids curves over portfolio_sizes(M, max_k) (k-medoids up to max_k_medoids; <= 0: as far
    as k-center), and the coverage-greedy curve over budget_grid(params_b, n_budgets) when any count is known.
    Arguments as portfolio_curve; params_b: (M,) parameter counts in billions, NaN = unknown (never budgeted)."""
    ks = portfolio_sizes(len(embeddings), max_k)
    medoid_ks = [k for k in ks if max_k_medoids <= 0 or k <= max_k_medoids]
    common = dict(names=names, tolerance=tolerance, n_random=n_random, seed=seed)
    curves = [portfolio_curve(embeddings, probs, labels, method=m, ks=k, **common)
              for m, k in (("k_center", ks), ("k_medoids", medoid_ks))]
    params = np.asarray(params_b, dtype=np.float64)
    budgets = budget_grid(params, n_budgets)
    if budgets:
        curves.append(portfolio_curve(embeddings, probs, labels, method="coverage_greedy", budgets_b=budgets,
                                      params_b=params, **common))
    return Portfolios(tuple(curves), params, tolerance, tuple(map(str, left_out)))


def smallest_matching_portfolio(table: pd.DataFrame, method: str = "k_center") -> list[str]:
    """The members of the smallest portfolio of ``method`` matching the full pool, from a Portfolios.table()
    (the curve's largest portfolio where none matches; [] where the table has no such curve)."""
    curve = table[table["method"] == method]
    chosen = curve[curve["smallest_matching"]] if curve["smallest_matching"].any() else curve.tail(1)
    return [m for m in str(chosen["portfolio"].iloc[0]).split(", ") if m] if len(chosen) else []

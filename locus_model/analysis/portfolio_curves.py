"""Routing accuracy of portfolios: one curve per selector (portfolio_curve: the portfolio.py selectors' picks over
a size k or a parameter budget, against the full pool), and the portfolios of a pool (portfolios: the k-center
and k-medoids curves over k and the coverage-greedy curve over a budget), one result that renders its report.

Sizes: every k up to DENSE_K, then GEOMETRIC_K sizes spaced geometrically up to the largest (portfolio_sizes);
budgets: geometric from the smallest known model to the pool's total known parameters (budget_grid).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from locus_model.analysis._common import (
    check_embeddings,
    check_metric,
    check_names,
    check_probs_labels,
    left_out_note,
    markdown_table,
    pairwise_distances,
)
from locus_model.analysis.portfolio import check_k, coverage_greedy, k_center, pam_build, pam_swap
from locus_model.data.catalog import params_for_models
from locus_model.figures import new_figure, save_figure
from locus_model.markdown import escape_markdown
from locus_model.stats.metrics import routing_accuracy

DENSE_K = 50  # the k curves take every size up to this, then GEOMETRIC_K sizes more up to the whole pool
GEOMETRIC_K = 20
TABLE_COLUMNS = [
    "method",
    "x_name",
    "x",
    "n_models",
    "routing_accuracy",
    "random_portfolio_accuracy",
    "params_b",
    "unknown_size",
    "full_pool_accuracy",
    "smallest_matching",
    "portfolio",
]
NAMES_SHOWN = 6  # members named in a report row; the table (Parquet) keeps every name


@dataclass(frozen=True)
class PortfolioCurve:
    """Routing accuracy of portfolios of growing size (k) or parameter budget, vs the full pool."""

    method: str  # "k_center" | "k_medoids" | "coverage_greedy"
    x_name: str  # "k" or "budget_b"
    xs: np.ndarray  # (T,) portfolio sizes or budgets
    accuracy: np.ndarray  # (T,) routing accuracy routing among the portfolio only
    random_accuracy: np.ndarray  # (T,) mean over seeds of random portfolios of the same size (NaN for budgets)
    params_b: np.ndarray  # (T,) total parameters of each portfolio's members of known size
    unknown_size: np.ndarray  # (T,) members of unknown size (not counted in params_b)
    portfolios: tuple[tuple[str, ...], ...]  # T portfolios, member names
    full_accuracy: float  # routing accuracy of the whole pool
    n_models: int
    tolerance: float  # "matches the full pool" = accuracy >= full_accuracy - tolerance
    smallest_matching: float | None  # smallest x whose portfolio matches the full pool, None if none does

    def table(self) -> pd.DataFrame:
        return pd.DataFrame(
            {
                self.x_name: self.xs,
                "n_models": [len(p) for p in self.portfolios],
                "routing_accuracy": self.accuracy,
                "random_portfolio_accuracy": self.random_accuracy,
                "params_b": self.params_b,
                "unknown_size": self.unknown_size,
                "portfolio": [", ".join(p) for p in self.portfolios],
            }
        )

    def matching_members(self) -> tuple[str, ...]:
        """The smallest matching portfolio's members (() where none matches)."""
        if self.smallest_matching is None:
            return ()
        return self.portfolios[int(np.flatnonzero(self.xs == self.smallest_matching)[0])]

    def medoid_note(self) -> str:
        """Why k-center's single model can score below a random one ("" where it does not)."""
        if (
            self.method != "k_center"
            or not len(self.xs)
            or self.xs[0] != 1
            or not self.accuracy[0] < self.random_accuracy[0]
        ):
            return ""
        return (
            f"k-center with k = 1 ({self.accuracy[0]:.4f}) is below a random single model "
            f"({self.random_accuracy[0]:.4f}): k-center starts from the most central model (the medoid of the "
            "embeddings, the one closest to all others), not the most accurate one; it pays off as k grows, "
            "when the members cover the pool's different skills."
        )

    def to_markdown(self) -> str:
        members = self.matching_members()
        match = (
            "no portfolio on the curve"
            if self.smallest_matching is None
            else f"{self.x_name} = {self.smallest_matching:g}: " + ", ".join(map(escape_markdown, members))
        )
        t = (
            self.table()
            .drop(columns=["params_b", "unknown_size", "portfolio"])
            .assign(
                params_b=[size_cell(p, u) for p, u in zip(self.params_b, self.unknown_size)],
                portfolio=[names_cell(p) for p in self.portfolios],
            )
        )
        if not np.isfinite(self.random_accuracy).any():  # budgets, or no random draws
            t = t.drop(columns="random_portfolio_accuracy")
        note = self.medoid_note()
        return (
            f"**Portfolio selection: {self.method}** (pool of {self.n_models} models, full-pool routing accuracy "
            f"{self.full_accuracy:.4f}). Smallest portfolio within {100 * self.tolerance:.1f} points of the "
            f"full pool: {match}.\n\n" + (note + "\n\n" if note else "") + markdown_table(t, max_rows=None)
        )

    def draw(self, ax, *, title: bool = False) -> None:
        """The curve on a matplotlib axis: accuracy vs k or budget, the random baseline, the full pool and
        its tolerance band, and where the portfolio first matches it."""
        ax.plot(self.xs, self.accuracy, marker="o", ms=3, label=self.method)
        if np.isfinite(self.random_accuracy).any():
            ax.plot(self.xs, self.random_accuracy, ls="--", color="grey", label="random portfolio (mean)")
        ax.axhline(self.full_accuracy, color="k", lw=1, label=f"all {self.n_models} models")
        ax.axhspan(self.full_accuracy - self.tolerance, self.full_accuracy, color="k", alpha=0.08)
        if self.smallest_matching is not None:
            ax.axvline(
                self.smallest_matching,
                color="C3",
                lw=1,
                ls=":",
                label=f"matches at {self.x_name}={self.smallest_matching:g}",
            )
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


def size_cell(known_b: float, unknown: int) -> str:
    """A portfolio's parameter count for a report: "20", "20 + 1 of unknown size", "unknown (2 models)"."""
    if unknown == 0:
        return f"{known_b:g}"
    if known_b > 0:
        return f"{known_b:g} + {unknown} of unknown size"
    return f"unknown ({unknown} model{'s' if unknown > 1 else ''})"


def names_cell(members: Sequence[str]) -> str:
    """A portfolio's members for a report row: up to NAMES_SHOWN names, then how many more."""
    shown = ", ".join(members[:NAMES_SHOWN])
    return shown + (f" and {len(members) - NAMES_SHOWN} more" if len(members) > NAMES_SHOWN else "")


def plot_curves(curves: Sequence[PortfolioCurve], path: str | Path) -> Path:
    """One panel per PortfolioCurve (routing accuracy vs k or budget, the full pool and its 0.5-point band)."""
    fig = new_figure(4.2 * max(1, len(curves)), 3.8)
    for i, c in enumerate(curves):
        c.draw(fig.add_subplot(1, max(1, len(curves)), i + 1), title=True)
    return save_figure(fig, path)


def portfolio_curve(
    embeddings: np.ndarray,
    probs: np.ndarray,
    labels: np.ndarray,
    *,
    names=None,
    method: str = "k_center",
    ks: Sequence[int] | None = None,
    budgets_b: Sequence[float] | None = None,
    params_b: np.ndarray | None = None,
    metric: str = "euclidean",
    tolerance: float = 0.005,
    n_random: int = 5,
    seed: int = 0,
) -> PortfolioCurve:
    """Routing accuracy of the chosen portfolio as a function of its size (k) or parameter budget.

    Args:
        embeddings: (M, d) model embeddings; probs: (M, Q) predicted P(correct); labels: (M, Q), NaN = unknown
            (use test queries).
        method: "k_center" / "k_medoids" (curve over `ks`, default 1..M) or "coverage_greedy" (curve over
            `budgets_b` with `params_b`, e.g. from params_for_models).
        tolerance: a portfolio "matches" the full pool when its accuracy >= full - tolerance (0.005 = 0.5 point).
        n_random, seed: random portfolios of the same size (k methods) as a baseline, mean over n_random draws.
    Routing among a portfolio = locus_model.stats.metrics.routing_accuracy on the portfolio's rows of probs/labels
    (per query, the member with the highest predicted probability; with a dense label matrix every
    portfolio is scored on the same queries).
    """
    where = "portfolio_curve"
    z = check_embeddings(embeddings, where=where)
    names = check_names(names, len(z), where=where)
    probs, labels = check_probs_labels(probs, labels, len(z), where=where)
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
                check_k(int(k), len(z), where="k_medoids")
            d = pairwise_distances(z, metric=metric)  # (M, M)
            build = pam_build(d, int(xs.max()))
            picks = [pam_swap(d, build[: int(k)]) for k in xs]
        rand = (
            np.array(
                [
                    np.mean(
                        [
                            routing_accuracy(probs[s], labels[s])
                            for s in (rng.choice(len(z), size=int(k), replace=False) for _ in range(n_random))
                        ]
                    )
                    for k in xs
                ]
            )
            if n_random > 0
            else np.full(len(xs), np.nan)
        )
        x_name = "k"
    elif method == "coverage_greedy":
        if budgets_b is None or params_b is None:
            raise ValueError(
                f"{where}: method='coverage_greedy' needs budgets_b and params_b. "
                "How to fix: pass params_b=params_for_models(names, models) and a list of budgets."
            )
        xs = np.asarray(budgets_b, dtype=np.float64)
        picks = [coverage_greedy(z, params_b, float(b)) for b in xs]
        rand = np.full(len(xs), np.nan)
        x_name = "budget_b"
    else:
        raise ValueError(
            f"{where}: unknown method {method!r}. How to fix: use 'k_center', 'k_medoids' or 'coverage_greedy'."
        )
    p_all = params_for_models(names) if params_b is None else np.asarray(params_b, dtype=np.float64)
    acc = np.array([routing_accuracy(probs[list(s)], labels[list(s)]) if len(s) else np.nan for s in picks])
    matching = [x for x, a in zip(xs, acc) if a >= full - tolerance]
    return PortfolioCurve(
        method=method,
        x_name=x_name,
        xs=xs,
        accuracy=acc,
        random_accuracy=rand,
        params_b=np.array([np.nansum(p_all[list(s)]) if len(s) else 0.0 for s in picks]),
        unknown_size=np.array([int(np.isnan(p_all[list(s)]).sum()) for s in picks], dtype=np.int64),
        portfolios=tuple(tuple(names[i] for i in s) for s in picks),
        full_accuracy=float(full),
        n_models=len(z),
        tolerance=tolerance,
        smallest_matching=float(min(matching)) if matching else None,
    )


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
    return sorted(
        {round(float(b), 3) for b in np.geomspace(known.min(), known.sum(), max(2, n))} | {float(known.sum())}
    )


@dataclass(frozen=True)
class Portfolios:
    """The pool's portfolio curves: k_center and k_medoids, then coverage_greedy where parameter counts are known."""

    curves: tuple[PortfolioCurve, ...]
    params_b: np.ndarray  # (M,) parameter count per model, NaN = unknown
    tolerance: float
    left_out: tuple[str, ...] = ()  # models left out before the call (no held-out labels)

    def smallest(self) -> dict[str, float | None]:
        """method -> the smallest k (or budget) whose portfolio matches the full pool, None where none does."""
        return {c.method: c.smallest_matching for c in self.curves}

    def headline(self) -> str:
        match = self.smallest()
        fmt = {m: ("none on the curve" if v is None else f"{v:g}") for m, v in match.items()}
        unknown = int(np.isnan(self.params_b).sum())
        if "coverage_greedy" in match:
            found = match["coverage_greedy"]
            greedy = (
                ("; coverage-greedy: no budget matches" if found is None else f"; coverage-greedy: budget {found:g}B")
                + f" of the {float(np.nansum(self.params_b)):g}B known"
                + (f" ({unknown} model(s) of unknown size are never chosen)" if unknown else "")
            )
        else:
            greedy = "; coverage-greedy: no parameter counts known"
        first = self.curves[0]
        named = f" ({escape_markdown(names_cell(first.matching_members()))})" if first.matching_members() else ""
        return (
            f"full pool of {first.n_models} models: routing accuracy {first.full_accuracy:.4f}; smallest k within "
            f"{100 * self.tolerance:g} point: k-center k = {fmt['k_center']}{named}, k-medoids k = {fmt['k_medoids']}"
            + greedy
            + "."
        )

    def to_markdown(self) -> str:
        body = "\n\n".join(c.to_markdown() for c in self.curves)
        if all(c.method != "coverage_greedy" for c in self.curves):
            body += "\n\nNo parameter count is known (models file or name), so there is no coverage-greedy curve."
        return (
            body + "\n\nRouting among a portfolio: for every test query, the member with the highest predicted "
            "P(correct) answers (the correctness predictor's probabilities from the pool embeddings)."
            + left_out_note(self.left_out)
        )

    def table(self) -> pd.DataFrame:
        """One row per point of every curve (TABLE_COLUMNS): x is k or the budget, as x_name says."""
        frames = []
        for c in self.curves:
            t = c.table().rename(columns={c.x_name: "x"})
            frames.append(
                t.assign(
                    method=c.method,
                    x_name=c.x_name,
                    full_pool_accuracy=c.full_accuracy,
                    smallest_matching=(t["x"] == c.smallest_matching) if c.smallest_matching is not None else False,
                )
            )
        return pd.concat(frames, ignore_index=True)[TABLE_COLUMNS]

    def plot(self, path: str | Path) -> Path:
        return plot_curves(self.curves, path)

    def figures(self) -> dict[str, float]:
        return {
            "full_pool_routing_accuracy": float(self.curves[0].full_accuracy),
            **{f"smallest_{m}": (float(v) if v is not None else -1.0) for m, v in self.smallest().items()},
        }


def portfolios(
    embeddings: np.ndarray,
    probs: np.ndarray,
    labels: np.ndarray,
    *,
    names,
    params_b: np.ndarray,
    max_k: int = 0,
    max_k_medoids: int = DENSE_K,
    n_budgets: int = 12,
    tolerance: float = 0.005,
    n_random: int = 5,
    seed: int = 0,
    left_out: Sequence[str] = (),
) -> Portfolios:
    """k-center and k-medoids curves over portfolio_sizes(M, max_k) (k-medoids up to max_k_medoids; <= 0: as far
    as k-center), and the coverage-greedy curve over budget_grid(params_b, n_budgets) when any count is known.
    Arguments as portfolio_curve; params_b: (M,) parameter counts in billions, NaN = unknown (never budgeted)."""
    ks = portfolio_sizes(len(embeddings), max_k)
    medoid_ks = [k for k in ks if max_k_medoids <= 0 or k <= max_k_medoids]
    params = np.asarray(params_b, dtype=np.float64)
    common = dict(names=names, tolerance=tolerance, n_random=n_random, seed=seed, params_b=params)
    curves = [
        portfolio_curve(embeddings, probs, labels, method=m, ks=k, **common)
        for m, k in (("k_center", ks), ("k_medoids", medoid_ks))
    ]
    budgets = budget_grid(params, n_budgets)
    if budgets:
        curves.append(portfolio_curve(embeddings, probs, labels, method="coverage_greedy", budgets_b=budgets, **common))
    return Portfolios(tuple(curves), params, tolerance, tuple(map(str, left_out)))


def smallest_matching_portfolio(table: pd.DataFrame, method: str = "k_center") -> list[str]:
    """The members of the smallest portfolio of ``method`` matching the full pool, from a Portfolios.table()
    (the curve's largest portfolio where none matches; [] where the table has no such curve)."""
    curve = table[table["method"] == method]
    chosen = curve[curve["smallest_matching"]] if curve["smallest_matching"].any() else curve.tail(1)
    return [m for m in str(chosen["portfolio"].iloc[0]).split(", ") if m] if len(chosen) else []

"""What distances in the embedding space mean: distance vs correctness disagreement (family clustering: clustering.py).

Paper (arXiv 2601.21082), EmbedLLM pool of 112 models: Pearson 0.887 (Euclidean) / 0.845 (cosine) and Spearman
0.876 / 0.886 between embedding distance and the correctness disagreement rate.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from locus_model.analysis._common import (
    check_embeddings,
    check_names,
    left_out_note,
    markdown_table,
    pairwise_distances,
)
from locus_model.figures import new_figure, save_figure

# ----------------------------------------------------------------------------- distance vs disagreement

SCATTER_MAX_POINTS = 20_000  # dots drawn in the distance-vs-disagreement figure (2,001 models have 2.0 million pairs)


@dataclass(frozen=True)
class Correlation:
    """Correlation of one embedding distance with the disagreement rate, over model pairs."""

    pearson: float
    spearman: float
    kendall: float


@dataclass(frozen=True)
class DistanceDisagreement:
    """Per model pair: embedding distances and the correctness disagreement rate on test queries."""

    names: tuple[str, ...]  # M
    pair_a: np.ndarray  # (P,) int, index of the first model of each pair (a < b)
    pair_b: np.ndarray  # (P,) int
    euclidean: np.ndarray  # (P,) Euclidean distance between the two model embeddings
    cosine: np.ndarray  # (P,) cosine distance 1 - cos
    disagreement: np.ndarray  # (P,) mean |y_a - y_b| over queries both are labelled on (= rate for 0/1 labels)
    n_shared: np.ndarray  # (P,) int, number of those queries
    euclidean_corr: Correlation
    cosine_corr: Correlation
    n_queries: int = 0  # test queries the disagreement is measured on
    left_out: tuple[str, ...] = ()  # models left out before the call (no held-out labels)

    def table(self) -> pd.DataFrame:
        names = np.asarray(self.names, dtype=object)  # indexed in C: no Python loop over the M(M-1)/2 pairs
        return pd.DataFrame(
            {
                "model_a": names[self.pair_a],
                "model_b": names[self.pair_b],
                "euclidean": self.euclidean,
                "cosine": self.cosine,
                "disagreement": self.disagreement,
                "n_shared": self.n_shared,
            }
        )

    def headline(self) -> str:
        """The result in one sentence, beside the paper's numbers."""
        eu, co = self.euclidean_corr, self.cosine_corr
        return (
            f"Pearson {eu.pearson:.3f} (Euclidean) / {co.pearson:.3f} (cosine), Spearman {eu.spearman:.3f} / "
            f"{co.spearman:.3f}, Kendall {eu.kendall:.3f} / {co.kendall:.3f} between embedding distance and "
            f"held-out disagreement, {len(self.pair_a)} pairs of {len(self.names)} models (paper, EmbedLLM: "
            "Pearson 0.887 / 0.845, Spearman 0.876 / 0.886)."
        )

    def correlation_table(self) -> pd.DataFrame:
        rows = [("euclidean", self.euclidean_corr), ("cosine", self.cosine_corr)]
        return pd.DataFrame(
            [{"distance": n, "pearson": c.pearson, "spearman": c.spearman, "kendall": c.kendall} for n, c in rows]
        )

    def to_markdown(self) -> str:
        return (
            f"**Embedding distance vs correctness disagreement** ({len(self.pair_a)} model pairs, "
            f"{len(self.names)} models; paper: Pearson 0.887 Euclidean / 0.845 cosine)\n\n"
            + markdown_table(self.correlation_table(), digits=3)
            + f"\n\nDisagreement is measured on the {self.n_queries} test queries, which no pool "
            "embedding was computed from." + left_out_note(self.left_out)
        )

    def figures(self) -> dict[str, float]:
        """The correlations by name (pearson_euclidean ... kendall_cosine)."""
        return {
            f"{stat}_{name}": getattr(corr, stat)
            for name, corr in (("euclidean", self.euclidean_corr), ("cosine", self.cosine_corr))
            for stat in ("pearson", "spearman", "kendall")
        }

    def plot(self, path: str | Path, *, max_points: int = SCATTER_MAX_POINTS) -> Path:
        """Distance vs disagreement, one dot per pair; pools with more than `max_points` pairs draw a uniform
        random sample of that many (seed 0), said in the axis label (the correlations are over all pairs)."""
        fig = new_figure(10, 4.2)
        shown = np.arange(len(self.pair_a))
        if len(shown) > max_points:
            shown = np.sort(np.random.default_rng(0).choice(len(shown), size=max_points, replace=False))
        sample = "" if len(shown) == len(self.pair_a) else f", {len(shown):,} of {len(self.pair_a):,} pairs drawn"
        for k, (dist, corr, label) in enumerate(
            [(self.euclidean, self.euclidean_corr, "Euclidean"), (self.cosine, self.cosine_corr, "cosine")]
        ):
            ax = fig.add_subplot(1, 2, k + 1)
            ax.scatter(
                dist[shown],
                self.disagreement[shown],
                s=6 if len(shown) < 5000 else 2,
                alpha=0.5 if len(shown) < 5000 else 0.2,
                linewidths=0,
            )
            ax.set_xlabel(f"{label} distance between model embeddings" + sample)
            ax.set_ylabel("correctness disagreement rate (held-out)")
            ax.set_title(f"{label}: Pearson {corr.pearson:.3f}, Spearman {corr.spearman:.3f}")
        return save_figure(fig, path)


def distance_vs_disagreement(
    embeddings: np.ndarray, labels_test: np.ndarray, names=None, *, min_shared: int = 1, left_out=()
) -> DistanceDisagreement:
    """For every model pair, embedding distance vs how often the two models disagree on correctness.

    Args:
        embeddings: (M, d) model embeddings.
        labels_test: (M, Q) correctness labels on the test queries in [0, 1], NaN = model not evaluated on the query.
            Use queries the embeddings were NOT computed from, so the correlation is not circular.
        names: M model names (for the table), default model_<i>.
        min_shared: pairs sharing fewer labelled queries are left out of the pairs and the correlations.
        left_out: names of models the caller left out (no held-out labels), named by the report.
    Disagreement of (a, b) = mean over queries labelled for both of |y_a - y_b|, i.e. the disagreement rate
    for 0/1 labels. Correlations (Pearson, Spearman, Kendall tau-b) are over all kept pairs.
    Memory: O(M^2), said here as the rule asks: a few (M, M) float64 matrices (32 MB each at M = 2,001) and the
    result's M(M-1)/2 pairs (2.0 million at 2,001 models); the time is BLAS products, no loop over models.
    """
    z = check_embeddings(embeddings, where="distance_vs_disagreement", min_models=3)
    y = np.asarray(labels_test, dtype=np.float64)  # (M, Q)
    if y.ndim != 2 or y.shape[0] != z.shape[0]:
        raise ValueError(
            f"distance_vs_disagreement: labels_test has shape {y.shape}, expected "
            f"({z.shape[0]}, Q) to match {z.shape[0]} model embeddings. "
            "How to fix: pass the held-out label matrix with models in the embedding order."
        )
    names = check_names(names, z.shape[0], where="distance_vs_disagreement")
    known = ~np.isnan(y)  # (M, Q)
    y0 = np.where(known, y, 0.0)
    kf = known.astype(np.float64)
    n_shared = kf @ kf.T  # (M, M) queries labelled for both
    abs_diff = _shared_abs_diff(y0, known)  # (M, M) sum over shared queries of |y_a - y_b|
    a, b = np.triu_indices(z.shape[0], k=1)
    keep = n_shared[a, b] >= max(min_shared, 1)
    a, b = a[keep], b[keep]
    if len(a) < 3:
        raise ValueError(
            f"distance_vs_disagreement: only {len(a)} model pairs share >= {min_shared} labelled "
            "queries; correlations need at least 3. How to fix: use a denser held-out label matrix."
        )
    disagreement = abs_diff[a, b] / n_shared[a, b]
    eu = pairwise_distances(z, metric="euclidean")[a, b]
    co = pairwise_distances(z, metric="cosine")[a, b]

    def corr(d: np.ndarray) -> Correlation:
        return Correlation(
            pearson=float(stats.pearsonr(d, disagreement)[0]),
            spearman=float(stats.spearmanr(d, disagreement)[0]),
            kendall=float(stats.kendalltau(d, disagreement)[0]),
        )

    return DistanceDisagreement(
        names=tuple(names),
        pair_a=a,
        pair_b=b,
        euclidean=eu,
        cosine=co,
        disagreement=disagreement,
        n_shared=n_shared[a, b].astype(int),
        euclidean_corr=corr(eu),
        cosine_corr=corr(co),
        n_queries=y.shape[1],
        left_out=tuple(map(str, left_out)),
    )


def _shared_abs_diff(y0: np.ndarray, known: np.ndarray) -> np.ndarray:
    """(M, M) sum over the queries both models are labelled on of |y_a - y_b| (y0: labels, 0 where unknown).

    0/1 labels: |a - b| = a + b - 2ab, three matrix products (exact: sums of integers). Other scores in [0, 1]:
    one block of models against all at a time, so the (block, M, Q) temporary stays near 64 MB."""
    kf = known.astype(np.float64)
    if np.isin(y0, (0.0, 1.0)).all():
        both = y0 @ kf.T  # (M, M) sum of y_a over queries labelled for b too
        return both + both.T - 2.0 * (y0 @ y0.T)
    m, q = y0.shape
    block = max(1, int(8e6 // max(1, m * q)))
    out = np.empty((m, m))
    for i in range(0, m, block):
        a, ka = y0[i : i + block, None, :], known[i : i + block, None, :]  # (b, 1, Q)
        out[i : i + block] = (np.abs(a - y0[None]) * (ka & known[None])).sum(axis=2)
    return out

"""What distances in the embedding space mean: distance vs correctness disagreement, and family clustering.

Paper (arXiv 2601.21082), EmbedLLM pool of 112 models: Pearson 0.887 (Euclidean) / 0.845 (cosine) and Spearman
0.876 / 0.886 between embedding distance and the correctness disagreement rate; unsupervised hierarchical
clustering separates math- and code-finetuned families.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import colormaps
from scipy import stats
from scipy.cluster.hierarchy import dendrogram, fcluster, linkage
from sklearn.metrics import adjusted_rand_score

from locus_model.analysis._common import (check_embeddings, check_metric, check_names, markdown_table,
                                          new_figure, pairwise_distances, save_figure)

# ----------------------------------------------------------------------------- distance vs disagreement


@dataclass(frozen=True)
class Correlation:
    """Correlation of one embedding distance with the disagreement rate, over model pairs."""
    pearson: float
    spearman: float
    kendall: float


@dataclass(frozen=True)
class DistanceDisagreement:
    """Per model pair: embedding distances and the correctness disagreement rate on held-out queries."""
    names: tuple[str, ...]   # M
    pair_a: np.ndarray       # (P,) int, index of the first model of each pair (a < b)
    pair_b: np.ndarray       # (P,) int
    euclidean: np.ndarray    # (P,) Euclidean distance between the two model embeddings
    cosine: np.ndarray       # (P,) cosine distance 1 - cos
    disagreement: np.ndarray  # (P,) mean |y_a - y_b| over queries both are labelled on (= rate for 0/1 labels)
    n_shared: np.ndarray     # (P,) int, number of those queries
    euclidean_corr: Correlation
    cosine_corr: Correlation

    def table(self) -> pd.DataFrame:
        return pd.DataFrame({
            "model_a": [self.names[i] for i in self.pair_a], "model_b": [self.names[j] for j in self.pair_b],
            "euclidean": self.euclidean, "cosine": self.cosine,
            "disagreement": self.disagreement, "n_shared": self.n_shared})

    def headline(self) -> str:
        """The result in one sentence, beside the paper's numbers."""
        eu, co = self.euclidean_corr, self.cosine_corr
        return (f"Pearson {eu.pearson:.3f} (Euclidean) / {co.pearson:.3f} (cosine), Spearman {eu.spearman:.3f} / "
                f"{co.spearman:.3f}, Kendall {eu.kendall:.3f} / {co.kendall:.3f} between embedding distance and "
                f"held-out disagreement, {len(self.pair_a)} pairs of {len(self.names)} models (paper, EmbedLLM: "
                "Pearson 0.887 / 0.845, Spearman 0.876 / 0.886).")

    def correlation_table(self) -> pd.DataFrame:
        rows = [("euclidean", self.euclidean_corr), ("cosine", self.cosine_corr)]
        return pd.DataFrame([{"distance": n, "pearson": c.pearson, "spearman": c.spearman, "kendall": c.kendall}
                             for n, c in rows])

    def to_markdown(self) -> str:
        return (f"**Embedding distance vs correctness disagreement** ({len(self.pair_a)} model pairs, "
                f"{len(self.names)} models; paper: Pearson 0.887 Euclidean / 0.845 cosine)\n\n"
                + markdown_table(self.correlation_table(), digits=3))

    def plot(self, path: str | Path) -> Path:
        fig = new_figure(10, 4.2)
        for k, (dist, corr, label) in enumerate([(self.euclidean, self.euclidean_corr, "Euclidean"),
                                                  (self.cosine, self.cosine_corr, "cosine")]):
            ax = fig.add_subplot(1, 2, k + 1)
            ax.scatter(dist, self.disagreement, s=6, alpha=0.5)
            ax.set_xlabel(f"{label} distance between model embeddings")
            ax.set_ylabel("correctness disagreement rate (held-out)")
            ax.set_title(f"{label}: Pearson {corr.pearson:.3f}, Spearman {corr.spearman:.3f}")
        return save_figure(fig, path)


def distance_vs_disagreement(embeddings: np.ndarray, labels_heldout: np.ndarray, names=None, *,
                             min_shared: int = 1) -> DistanceDisagreement:
    """For every model pair, embedding distance vs how often the two models disagree on correctness.

    Args:
        embeddings: (M, d) model embeddings.
        labels_heldout: (M, Q) held-out correctness labels in [0, 1], NaN = model not evaluated on the query.
            Use queries the embeddings were NOT computed from, so the correlation is not circular.
        names: M model names (for the table), default model_<i>.
        min_shared: pairs sharing fewer labelled queries are left out of the pairs and the correlations.
    Disagreement of (a, b) = mean over queries labelled for both of |y_a - y_b|, i.e. the disagreement rate
    for 0/1 labels. Correlations (Pearson, Spearman, Kendall tau-b) are over all kept pairs.
    """
    z = check_embeddings(embeddings, where="distance_vs_disagreement", min_models=3)
    y = np.asarray(labels_heldout, dtype=np.float64)  # (M, Q)
    if y.ndim != 2 or y.shape[0] != z.shape[0]:
        raise ValueError(f"distance_vs_disagreement: labels_heldout has shape {y.shape}, expected "
                         f"({z.shape[0]}, Q) to match {z.shape[0]} model embeddings. "
                         "How to fix: pass the held-out label matrix with models in the embedding order.")
    names = check_names(names, z.shape[0], where="distance_vs_disagreement")
    known = ~np.isnan(y)                                    # (M, Q)
    y0 = np.where(known, y, 0.0)
    kf = known.astype(np.float64)
    n_shared = kf @ kf.T                                    # (M, M) queries labelled for both
    # sum over shared queries of |y_a - y_b|, one model against all at a time (M ~ 100, Q ~ 10^4: cheap)
    abs_diff = np.stack([(np.abs(y0[i] - y0) * (known[i] & known)).sum(axis=1) for i in range(len(y0))])
    a, b = np.triu_indices(z.shape[0], k=1)
    keep = n_shared[a, b] >= max(min_shared, 1)
    a, b = a[keep], b[keep]
    if len(a) < 3:
        raise ValueError(f"distance_vs_disagreement: only {len(a)} model pairs share >= {min_shared} labelled "
                         "queries; correlations need at least 3. How to fix: use a denser held-out label matrix.")
    disagreement = abs_diff[a, b] / n_shared[a, b]
    eu = pairwise_distances(z, metric="euclidean")[a, b]
    co = pairwise_distances(z, metric="cosine")[a, b]

    def corr(d: np.ndarray) -> Correlation:
        return Correlation(pearson=float(stats.pearsonr(d, disagreement)[0]),
                           spearman=float(stats.spearmanr(d, disagreement)[0]),
                           kendall=float(stats.kendalltau(d, disagreement)[0]))

    return DistanceDisagreement(names=tuple(names), pair_a=a, pair_b=b, euclidean=eu, cosine=co,
                                disagreement=disagreement, n_shared=n_shared[a, b].astype(int),
                                euclidean_corr=corr(eu), cosine_corr=corr(co))

# ----------------------------------------------------------------------------- family clustering


@dataclass(frozen=True)
class FamilyClustering:
    """Agglomerative clustering of model embeddings, scored against known families where given."""
    names: tuple[str, ...]        # M
    families: tuple[str, ...] | None  # M, "" = unknown
    method: str
    metric: str
    linkage: np.ndarray           # (M-1, 4) scipy linkage matrix over all M models
    clusters: np.ndarray | None   # (M,) int cluster at the cut, -1 for models of unknown family; None if no cut
    n_families: int               # distinct known families (= number of clusters at the cut)
    purity: float                 # share of known-family models in their cluster's majority family
    adjusted_rand: float          # ARI of clusters vs families (1 = identical partitions, ~0 = chance)

    def table(self) -> pd.DataFrame:
        leaves = dendrogram(self.linkage, no_plot=True)["leaves"]
        order = np.empty(len(self.names), dtype=int)
        order[leaves] = np.arange(len(leaves))
        return pd.DataFrame({"model": list(self.names),
                             "family": list(self.families) if self.families else [""] * len(self.names),
                             "cluster": self.clusters if self.clusters is not None else -1,
                             "leaf_order": order}).sort_values("leaf_order", ignore_index=True)

    def to_markdown(self) -> str:
        head = (f"**Family clustering** ({self.method} linkage, {self.metric} distance, {len(self.names)} models)")
        if self.clusters is None:
            return head + "\n\nNo family labels (fewer than 2 known families): dendrogram only."
        return (head + f"\n\nCut at {self.n_families} clusters (the number of known families): "
                f"purity {self.purity:.3f}, adjusted Rand {self.adjusted_rand:.3f}.\n\n"
                + markdown_table(self.table(), max_rows=None))

    def plot(self, path: str | Path) -> Path:
        m = len(self.names)
        fig = new_figure(max(6.0, 0.18 * m + 2), 5.5)
        ax = fig.add_subplot(1, 1, 1)
        dendrogram(self.linkage, labels=list(self.names), ax=ax, leaf_rotation=90,
                   leaf_font_size=max(4, min(9, 600 // max(m, 1))))
        ax.set_ylabel(f"{self.metric} distance ({self.method} linkage)")
        ax.set_title("Hierarchical clustering of model embeddings")
        if self.families:  # colour tick labels by family so mixed clusters stand out
            fams = sorted({f for f in self.families if f})
            # saturated colours only (tab20's odd entries are pale, unreadable as label text): tab20's dark half,
            # then the darkest of tab20b and tab20c
            dark = ([colormaps["tab20"](i) for i in range(0, 20, 2)] + [colormaps["tab20b"](i) for i in (0, 4, 8, 12, 16)]
                    + [colormaps["tab20c"](i) for i in (0, 4, 8, 12)])
            colours = {f: dark[i % len(dark)] for i, f in enumerate(fams)}
            family_of = dict(zip(self.names, self.families))
            for tick in ax.get_xticklabels():
                fam = family_of.get(tick.get_text(), "")
                tick.set_color(colours[fam] if fam else "grey")
        return save_figure(fig, path)


def family_clustering(embeddings: np.ndarray, names, families=None, *, method: str = "average",
                      metric: str = "cosine") -> FamilyClustering:
    """Hierarchical (agglomerative) clustering of model embeddings; purity and ARI against known families.

    Linkage choice: average linkage (UPGMA) on cosine distance by default. Average linkage uses every pair
    between two clusters, so one close pair cannot chain two families together (single linkage does), and
    unlike ward/centroid it is valid for a non-Euclidean distance. Cosine ignores embedding norms, which vary
    with overall accuracy more than with family. ward/centroid/median need metric="euclidean".

    Args:
        embeddings: (M, d) model embeddings; names: M model names (dendrogram labels).
        families: M family names, "" or None = unknown. Scores use only known-family models: their own tree
            (same method/metric) is cut at the number of distinct known families, so unlabelled models cannot
            absorb clusters. Purity = sum over clusters of its majority-family count / n; ARI from sklearn.
    """
    where = "family_clustering"
    z = check_embeddings(embeddings, where=where, min_models=2)
    names = check_names(names, z.shape[0], where=where)
    check_metric(metric, where=where)
    if method in ("ward", "centroid", "median") and metric != "euclidean":
        raise ValueError(f"{where}: {method} linkage is only defined for Euclidean distance, got metric={metric!r}. "
                         "How to fix: pass metric='euclidean' or use method='average'/'complete'.")
    tree = linkage(_condensed(pairwise_distances(z, metric=metric)), method=method)
    fams = None
    clusters, n_fam, purity, ari = None, 0, float("nan"), float("nan")
    if families is not None:
        fams = tuple("" if f is None or (isinstance(f, float) and np.isnan(f)) else str(f) for f in families)
        if len(fams) != len(names):
            raise ValueError(f"{where}: got {len(fams)} families for {len(names)} models. "
                             "How to fix: pass one family per model ('' when unknown).")
        known = np.array([f != "" for f in fams])
        labels = np.array(fams)[known]
        n_fam = len(set(labels))
        if n_fam >= 2 and known.sum() > n_fam:
            zk = z[known]
            sub = linkage(_condensed(pairwise_distances(zk, metric=metric)), method=method)
            cut = fcluster(sub, t=n_fam, criterion="maxclust")
            clusters = np.full(len(names), -1, dtype=int)
            clusters[known] = cut
            majority = sum(pd.Series(labels[cut == c]).value_counts().iloc[0] for c in np.unique(cut))
            purity = float(majority / len(labels))
            ari = float(adjusted_rand_score(labels, cut))
    return FamilyClustering(names=tuple(names), families=fams, method=method, metric=metric, linkage=tree,
                            clusters=clusters, n_families=n_fam, purity=purity, adjusted_rand=ari)


def _condensed(d: np.ndarray) -> np.ndarray:
    """Square symmetric distance matrix -> condensed vector (scipy's pdist layout)."""
    i, j = np.triu_indices(len(d), k=1)
    return d[i, j]

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
from scipy.spatial.distance import pdist
from scipy.cluster.hierarchy import dendrogram, fcluster, leaves_list, linkage
from sklearn.metrics import adjusted_rand_score

from locus_model.analysis._common import (check_embeddings, check_metric, check_names, markdown_table,
                                          new_figure, pairwise_distances, save_figure)

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
        names = np.asarray(self.names, dtype=object)  # indexed in C: no Python loop over the M(M-1)/2 pairs
        return pd.DataFrame({
            "model_a": names[self.pair_a], "model_b": names[self.pair_b],
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

    def plot(self, path: str | Path, *, max_points: int = SCATTER_MAX_POINTS) -> Path:
        """Distance vs disagreement, one dot per pair; pools with more than `max_points` pairs draw a uniform
        random sample of that many (seed 0), said in the axis label (the correlations are over all pairs)."""
        fig = new_figure(10, 4.2)
        shown = np.arange(len(self.pair_a))
        if len(shown) > max_points:
            shown = np.sort(np.random.default_rng(0).choice(len(shown), size=max_points, replace=False))
        sample = "" if len(shown) == len(self.pair_a) else f", {len(shown):,} of {len(self.pair_a):,} pairs drawn"
        for k, (dist, corr, label) in enumerate([(self.euclidean, self.euclidean_corr, "Euclidean"),
                                                  (self.cosine, self.cosine_corr, "cosine")]):
            ax = fig.add_subplot(1, 2, k + 1)
            ax.scatter(dist[shown], self.disagreement[shown], s=6 if len(shown) < 5000 else 2,
                       alpha=0.5 if len(shown) < 5000 else 0.2, linewidths=0)
            ax.set_xlabel(f"{label} distance between model embeddings" + sample)
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
    Memory: O(M^2), said here as the rule asks: a few (M, M) float64 matrices (32 MB each at M = 2,001) and the
    result's M(M-1)/2 pairs (2.0 million at 2,001 models); the time is BLAS products, no loop over models.
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
    abs_diff = _shared_abs_diff(y0, known)                  # (M, M) sum over shared queries of |y_a - y_b|
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

def _shared_abs_diff(y0: np.ndarray, known: np.ndarray) -> np.ndarray:
    """(M, M) sum over the queries both models are labelled on of |y_a - y_b| (y0: labels, 0 where unknown).

    0/1 labels: |a - b| = a + b - 2ab, three matrix products (exact: sums of integers). Other scores in [0, 1]:
    one block of models against all at a time, so the (block, M, Q) temporary stays near 64 MB."""
    kf = known.astype(np.float64)
    if np.isin(y0, (0.0, 1.0)).all():
        both = y0 @ kf.T                                    # (M, M) sum of y_a over queries labelled for b too
        return both + both.T - 2.0 * (y0 @ y0.T)
    m, q = y0.shape
    block = max(1, int(8e6 // max(1, m * q)))
    out = np.empty((m, m))
    for i in range(0, m, block):
        a, ka = y0[i:i + block, None, :], known[i:i + block, None, :]   # (b, 1, Q)
        out[i:i + block] = (np.abs(a - y0[None]) * (ka & known[None])).sum(axis=2)
    return out

# ----------------------------------------------------------------------------- family clustering

DENDROGRAM_MAX_LEAVES = 60  # leaves drawn: a larger pool's dendrogram shows its top 60 branches with their sizes
LISTED_MODELS = 100  # the report lists every model up to this pool size, else its largest clusters
LISTED_CLUSTERS = 20


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
        leaves = leaves_list(self.linkage)  # the dendrogram's left-to-right order (C, no recursion limit)
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
        head += (f"\n\nCut at {self.n_families} clusters (the number of known families): "
                 f"purity {self.purity:.3f}, adjusted Rand {self.adjusted_rand:.3f}.\n\n")
        if len(self.names) <= LISTED_MODELS:
            return head + markdown_table(self.table(), max_rows=None)
        return (head + f"The {LISTED_CLUSTERS} largest of the {len(np.unique(self.clusters[self.clusters >= 0]))} "
                f"clusters ({len(self.names)} models: every model's cluster is in table()):\n\n"
                + markdown_table(self.cluster_table().head(LISTED_CLUSTERS), max_rows=None))

    def cluster_table(self) -> pd.DataFrame:
        """One row per cluster at the cut, largest first: size, its most common families and a few members."""
        if self.clusters is None:
            return pd.DataFrame(columns=["cluster", "models", "top_families", "majority_share", "members"])
        t = pd.DataFrame({"model": list(self.names), "family": list(self.families), "cluster": self.clusters})
        rows = []
        for c, g in t[t["cluster"] >= 0].groupby("cluster"):
            counts = g["family"].value_counts()
            rows.append({"cluster": int(c), "models": len(g),
                         "top_families": ", ".join(f"{f} ({n})" for f, n in counts.head(3).items()),
                         "majority_share": float(counts.iloc[0] / len(g)),
                         "members": ", ".join(g["model"].head(4)) + (" ..." if len(g) > 4 else "")})
        return pd.DataFrame(rows).sort_values(["models", "cluster"], ascending=[False, True], ignore_index=True)

    def plot(self, path: str | Path, *, max_leaves: int = DENDROGRAM_MAX_LEAVES) -> Path:
        """The dendrogram, leaves labelled by model; a pool of more than `max_leaves` models is drawn with its
        top `max_leaves` branches, each labelled by its number of models (scipy's truncate_mode="lastp")."""
        m = len(self.names)
        shown = min(m, max_leaves)
        fig = new_figure(max(6.0, 0.18 * shown + 2), 5.5)
        ax = fig.add_subplot(1, 1, 1)
        truncate = {} if m <= max_leaves else {"truncate_mode": "lastp", "p": max_leaves, "show_contracted": True}
        dendrogram(self.linkage, labels=list(self.names), ax=ax, leaf_rotation=90,
                   leaf_font_size=max(4, min(9, 600 // max(shown, 1))), **truncate)
        ax.set_ylabel(f"{self.metric} distance ({self.method} linkage)")
        ax.set_title("Hierarchical clustering of model embeddings" if not truncate else
                     f"Hierarchical clustering of {m:,} model embeddings: top {max_leaves} branches "
                     "(label (n) = n models)")
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
    Memory: O(M^2), said here as the rule asks: scipy's linkage needs the M(M-1)/2 condensed distances (16 MB at
    M = 2,001; the square matrix is never built) and its time is O(M^2) in C.

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
    tree = linkage(_condensed(z, metric), method=method)
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
            sub = linkage(_condensed(zk, metric), method=method)
            cut = fcluster(sub, t=n_fam, criterion="maxclust")
            clusters = np.full(len(names), -1, dtype=int)
            clusters[known] = cut
            majority = sum(pd.Series(labels[cut == c]).value_counts().iloc[0] for c in np.unique(cut))
            purity = float(majority / len(labels))
            ari = float(adjusted_rand_score(labels, cut))
    return FamilyClustering(names=tuple(names), families=fams, method=method, metric=metric, linkage=tree,
                            clusters=clusters, n_families=n_fam, purity=purity, adjusted_rand=ari)


def _condensed(z: np.ndarray, metric: str) -> np.ndarray:
    """(M(M-1)/2,) distances between the rows of z in scipy's pdist layout, as pairwise_distances has them."""
    d = pdist(z, metric=metric)
    if metric == "cosine":
        d = np.nan_to_num(d, nan=1.0)  # a zero vector has no direction: orthogonal to all (as pairwise_distances)
    return np.maximum(d, 0.0)

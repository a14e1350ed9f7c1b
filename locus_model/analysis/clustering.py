"""Family clustering: an agglomerative tree of the model embeddings, cut at the number of known families and
scored against them (purity, adjusted Rand); a pool's tree scored against several groupings at once.

Paper (arXiv 2601.21082): unsupervised hierarchical clustering separates math- and code-finetuned families.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import matplotlib.colors
import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from scipy.cluster.hierarchy import dendrogram, fcluster, leaves_list, linkage
from scipy.spatial.distance import pdist
from sklearn.metrics import adjusted_rand_score

from locus_model.analysis._common import check_embeddings, check_metric, check_names, markdown_table
from locus_model.figures import new_figure, save_figure

DENDROGRAM_MAX_LEAVES = 60  # leaves drawn: a larger pool's dendrogram shows its top 60 branches with their sizes
LISTED_MODELS = 100  # the report lists every model up to this pool size, else its largest clusters
LISTED_CLUSTERS = 20


@dataclass(frozen=True)
class FamilyClustering:
    """Agglomerative clustering of model embeddings, scored against known families where given."""

    names: tuple[str, ...]  # M
    families: tuple[str, ...] | None  # M, "" = unknown
    method: str
    metric: str
    linkage: np.ndarray  # (M-1, 4) scipy linkage matrix over all M models
    clusters: np.ndarray | None  # (M,) int cluster at the cut, -1 for models of unknown family; None if no cut
    n_families: int  # distinct known families (= number of clusters at the cut)
    purity: float  # share of known-family models in their cluster's majority family
    adjusted_rand: float  # ARI of clusters vs families (1 = identical partitions, ~0 = chance)

    def table(self) -> pd.DataFrame:
        leaves = leaves_list(self.linkage)  # the dendrogram's left-to-right order (C, no recursion limit)
        order = np.empty(len(self.names), dtype=int)
        order[leaves] = np.arange(len(leaves))
        return pd.DataFrame(
            {
                "model": list(self.names),
                "family": list(self.families) if self.families else [""] * len(self.names),
                "cluster": self.clusters if self.clusters is not None else -1,
                "leaf_order": order,
            }
        ).sort_values("leaf_order", ignore_index=True)

    def to_markdown(self) -> str:
        head = f"**Family clustering** ({self.method} linkage, {self.metric} distance, {len(self.names)} models)"
        if self.clusters is None:
            return head + "\n\nNo family labels (fewer than 2 known families): dendrogram only."
        head += (
            f"\n\nCut at {self.n_families} clusters (the number of known families): "
            f"purity {self.purity:.3f}, adjusted Rand {self.adjusted_rand:.3f}.\n\n"
        )
        if len(self.names) <= LISTED_MODELS:
            return head + markdown_table(self.table(), max_rows=None)
        return (
            head + f"The {LISTED_CLUSTERS} largest of the {len(np.unique(self.clusters[self.clusters >= 0]))} "
            f"clusters ({len(self.names)} models: every model's cluster is in table()):\n\n"
            + markdown_table(self.cluster_table().head(LISTED_CLUSTERS), max_rows=None)
        )

    def cluster_table(self) -> pd.DataFrame:
        """One row per cluster at the cut, largest first: size, its most common families and a few members."""
        if self.clusters is None:
            return pd.DataFrame(columns=["cluster", "models", "top_families", "majority_share", "members"])
        assert self.families is not None  # a cut is made only where families are given
        t = pd.DataFrame({"model": list(self.names), "family": list(self.families), "cluster": self.clusters})
        rows = []
        for c, g in t[t["cluster"] >= 0].groupby("cluster"):
            counts = g["family"].value_counts()
            rows.append(
                {
                    "cluster": int(c),
                    "models": len(g),
                    "top_families": ", ".join(f"{f} ({n})" for f, n in counts.head(3).items()),
                    "majority_share": float(counts.iloc[0] / len(g)),
                    "members": ", ".join(g["model"].head(4)) + (" ..." if len(g) > 4 else ""),
                }
            )
        return pd.DataFrame(rows).sort_values(["models", "cluster"], ascending=[False, True], ignore_index=True)

    def plot(self, path: str | Path, *, max_leaves: int = DENDROGRAM_MAX_LEAVES) -> Path:
        """The dendrogram (figure()) as a PNG."""
        return save_figure(self.figure(max_leaves=max_leaves), path)

    def figure(self, *, max_leaves: int = DENDROGRAM_MAX_LEAVES) -> Figure:
        """The dendrogram, leaves labelled by model; a pool of more than `max_leaves` models is drawn with its
        top `max_leaves` branches, each labelled by its number of models (scipy's truncate_mode="lastp"). Where
        families are known, a branch whose models are all of one family takes that family's colour, as do the
        leaf labels (a legend names them); a branch joining several families is black, models of unknown family grey."""
        m = len(self.names)
        shown = min(m, max_leaves)
        fig = new_figure(max(6.0, 0.18 * shown + 2), 5.5)
        ax = fig.add_subplot(1, 1, 1)
        truncate = {} if m <= max_leaves else {"truncate_mode": "lastp", "p": max_leaves, "show_contracted": True}
        colours = family_colours(self.families) if self.families else {}
        branch = branch_colours(self.linkage, self.families, colours) if self.families else None
        dendrogram(
            self.linkage,
            labels=list(self.names),
            ax=ax,
            leaf_rotation=90,
            leaf_font_size=max(4, min(9, 600 // max(shown, 1))),
            **({"link_color_func": branch.__getitem__} if branch is not None else {}),
            **truncate,
        )
        # most merges of a trained pool sit near 0 beside a few high ones: a log scale (linear below the smallest
        # merge above 0, so a merge at exactly 0 stays drawable) spreads them out
        heights = self.linkage[:, 2]
        low = float(heights[heights > 0].min()) if (heights > 0).any() else 1.0
        ax.set_yscale("symlog", linthresh=low, linscale=0.2)
        ax.set_ylabel(f"{self.metric} distance ({self.method} linkage; log scale)")
        ax.set_title(
            "Hierarchical clustering of model embeddings"
            if not truncate
            else f"Hierarchical clustering of {m:,} model embeddings: top {max_leaves} branches (label (n) = n models)"
        )
        if self.families:  # tick labels in their family's colour, so mixed clusters stand out
            family_of = dict(zip(self.names, self.families))
            for tick in ax.get_xticklabels():
                tick.set_color(colours.get(family_of.get(tick.get_text(), ""), UNKNOWN_COLOUR))
            entries = list(colours.items())
            assert branch is not None  # computed above wherever families are given
            if MIXED_COLOUR in branch[m:]:
                entries.append(("several families", MIXED_COLOUR))
            if "" in self.families:
                entries.append(("unknown family", UNKNOWN_COLOUR))
            ax.legend(
                handles=[Line2D([], [], color=c, lw=2, label=f) for f, c in entries],
                title="family",
                fontsize=7,
                title_fontsize=7,
                loc="upper right",
                ncol=1 + len(entries) // 12,
            )
        return fig


# saturated colours only (tab20's odd entries are pale, unreadable as label text): tab20's dark half, then the
# darkest of tab20b and tab20c; black and grey are kept for branches of several families and of unknown ones
FAMILY_COLOURS = tuple(
    matplotlib.colors.to_hex(c)
    for c in [colormaps["tab20"](i) for i in range(0, 20, 2) if i != 14]  # tab20's 14 is grey
    + [colormaps["tab20b"](i) for i in (0, 4, 8, 12, 16)]
    + [colormaps["tab20c"](i) for i in (0, 4, 8, 12)]
)
MIXED_COLOUR = "#000000"
UNKNOWN_COLOUR = "#999999"


def family_colours(families: Sequence[str]) -> dict[str, str]:
    """Known family -> its colour (sorted families, FAMILY_COLOURS in turn, cycling)."""
    fams = sorted({f for f in families if f})
    return {f: FAMILY_COLOURS[i % len(FAMILY_COLOURS)] for i, f in enumerate(fams)}


def branch_colours(tree: np.ndarray, families: Sequence[str], colours: Mapping[str, str]) -> list[str]:
    """Colour of every node of a scipy linkage (index = node id, leaves 0..M-1, merges M..2M-2), scipy's
    link_color_func order: its family's colour where all the models below it are of one known family,
    UNKNOWN_COLOUR where all are of unknown family, MIXED_COLOUR otherwise."""
    m = len(families)
    below: list[str | None] = [str(f) for f in families] + [None] * (m - 1)  # one family, None = several
    for i, (a, b) in enumerate(tree[:, :2].astype(int)):
        below[m + i] = below[a] if below[a] == below[b] else None
    return [MIXED_COLOUR if f is None else colours.get(f, UNKNOWN_COLOUR) for f in below]


def family_clustering(
    embeddings: np.ndarray, names, families=None, *, method: str = "average", metric: str = "cosine"
) -> FamilyClustering:
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
        raise ValueError(
            f"{where}: {method} linkage is only defined for Euclidean distance, got metric={metric!r}. "
            "How to fix: pass metric='euclidean' or use method='average'/'complete'."
        )
    tree = linkage(_condensed(z, metric), method=method)
    fams = None
    clusters, n_fam, purity, ari = None, 0, float("nan"), float("nan")
    if families is not None:
        fams = tuple("" if f is None or (isinstance(f, float) and np.isnan(f)) else str(f) for f in families)
        if len(fams) != len(names):
            raise ValueError(
                f"{where}: got {len(fams)} families for {len(names)} models. "
                "How to fix: pass one family per model ('' when unknown)."
            )
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
    return FamilyClustering(
        names=tuple(names),
        families=fams,
        method=method,
        metric=metric,
        linkage=tree,
        clusters=clusters,
        n_families=n_fam,
        purity=purity,
        adjusted_rand=ari,
    )


def _condensed(z: np.ndarray, metric: str) -> np.ndarray:
    """(M(M-1)/2,) distances between the rows of z in scipy's pdist layout, as pairwise_distances has them."""
    d = pdist(z, metric=metric)
    if metric == "cosine":
        d = np.nan_to_num(d, nan=1.0)  # a zero vector has no direction: orthogonal to all (as pairwise_distances)
    return np.maximum(d, 0.0)


LINKAGE_NOTE = (
    "Linkage: average (UPGMA) on cosine distance by default: every pair between two clusters counts, so one "
    "close pair cannot chain two families (as single linkage can), and it is valid for a non-Euclidean "
    "distance; cosine ignores embedding norms, which follow overall accuracy more than family."
)


@dataclass(frozen=True)
class PoolClustering:
    """One tree of the pool scored against each known grouping of its models: the first grouping (the family)
    is the main one (its table, figure and figures); the others (e.g. the fine-tune variant) are cuts of the same
    tree at their own number of groups."""

    by_grouping: dict[str, FamilyClustering]

    @property
    def main(self) -> FamilyClustering:
        return next(iter(self.by_grouping.values()))

    def scored(self) -> dict[str, FamilyClustering]:
        """The groupings with at least two known groups (a cut to score)."""
        return {g: r for g, r in self.by_grouping.items() if r.clusters is not None}

    def headline(self) -> str:
        r, scored = self.main, self.scored()
        if not scored:
            return f"{len(r.names)} models clustered ({r.method} linkage, {r.metric}); no family labels to score."
        return (
            f"{r.method}-linkage tree ({r.metric} distance) of {len(r.names)} models, cut at the number of known "
            "groups: "
            + "; ".join(
                f"{g} ({s.n_families} groups): adjusted Rand {s.adjusted_rand:.3f}, purity {s.purity:.3f}"
                for g, s in scored.items()
            )
            + "."
        )

    def to_markdown(self) -> str:
        others = [(g, s) for g, s in self.scored().items() if s is not self.main]
        return (
            self.main.to_markdown()
            + "".join(
                f"\n\nThe same tree cut at the {s.n_families} groups of `{g}`: adjusted Rand "
                f"{s.adjusted_rand:.3f}, purity {s.purity:.3f}."
                for g, s in others
            )
            + "\n\n"
            + LINKAGE_NOTE
        )

    def table(self) -> pd.DataFrame:
        """The main grouping's table (model, family, cluster, leaf_order), with `<grouping>` and
        `<grouping>_cluster` columns for every other scored grouping."""
        table = self.main.table()
        for g, s in self.scored().items():
            if s is self.main:
                continue
            assert s.families is not None and s.clusters is not None  # scored(): cut, so families are given
            group_of, cluster_of = dict(zip(s.names, s.families)), dict(zip(s.names, s.clusters))
            table = table.assign(
                **{
                    g: [group_of[m] for m in table["model"]],
                    f"{g}_cluster": [int(cluster_of[m]) for m in table["model"]],
                }
            )
        return table

    def plot(self, path: str | Path) -> Path:
        return self.main.plot(path)

    def figures(self) -> dict[str, float]:
        r = self.main
        return {
            "adjusted_rand": float(r.adjusted_rand),
            "purity": float(r.purity),
            "n_families": int(r.n_families),
            **{f"adjusted_rand_{g}": float(s.adjusted_rand) for g, s in self.scored().items() if s is not r},
        }


def cluster_pool(
    embeddings: np.ndarray,
    names,
    groupings: Mapping[str, Sequence[str]],
    *,
    method: str = "average",
    metric: str = "cosine",
) -> PoolClustering:
    """family_clustering of the pool once per grouping (name -> one group per model, "" = unknown); the first
    grouping is the main one."""
    if not groupings:
        raise ValueError("cluster_pool: no grouping. How to fix: pass at least {'family': [...]} ('' where unknown).")
    return PoolClustering(
        {
            g: family_clustering(embeddings, names, groups, method=method, metric=metric)
            for g, groups in groupings.items()
        }
    )

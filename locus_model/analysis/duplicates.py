"""Fingerprinting: near-duplicate models are those whose embeddings cannot be told apart across resamples.

Paper (arXiv 2601.21082): near-duplicate endpoints land on the same point, at cosine distance < 1e-5.
Each model is embedded R times from independently resampled subsets of its evaluation set; a pair is a
near-duplicate when the distance between the two models is no larger than each model's own resampling spread.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from locus_model.analysis._common import check_metric, check_names, markdown_table, pairwise_distances
from locus_model.figures import new_figure, save_figure
from locus_model.markdown import escape_markdown
from locus_model.neighbours import paired_distances

EmbedFn = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (query_idx (n,), scores (n,)) -> (d,) embedding
EvaluationSets = Sequence[tuple[np.ndarray, np.ndarray]]
EmbedManyFn = Callable[[EvaluationSets], np.ndarray]  # M evaluation sets -> (M, d) embeddings, one batched call

FLAGGED_LISTED = 50  # flagged pairs listed beside the pool distance in the report; all of them are in the table
MAX_PAIRS = 100_000  # near_duplicates keeps the lowest-scored pairs up to this many (2,001 models have 2.0 million)


def resample_embeddings(
    embed_fn: EmbedFn | None,
    sets: EvaluationSets,
    R: int,
    frac: float,
    seed: int,
    *,
    embed_many: EmbedManyFn | None = None,
) -> np.ndarray:
    """(R, M, d) embeddings of each model from R independently resampled subsets of its evaluation set.

    Args:
        embed_fn: query indices (n,) and scores (n,) -> model embedding (d,) (e.g. a closure over a trained
            Locus and the query encodings).
        sets: one evaluation set (query_idx (n_m,), scores (n_m,)) per model.
        R: number of resamples; frac: share of each set kept per resample (without replacement, at least 1).
        seed: numpy default_rng seed; one draw per (resample, model), independent across models.
        embed_many: optional, the M subsets of one resample -> (M, d) in one call (e.g. embed_evaluation_sets,
            which batches them); used instead of embed_fn, with the same draws. R calls instead of R x M.
    """
    if R < 2 or not 0 < frac <= 1:
        raise ValueError(
            f"resample_embeddings: need R >= 2 and 0 < frac <= 1, got R={R}, frac={frac}. "
            "How to fix: e.g. R=8, frac=0.5."
        )
    if embed_fn is None and embed_many is None:
        raise ValueError(
            "resample_embeddings: needs embed_fn or embed_many. How to fix: pass the function that embedded the pool."
        )
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(R):
        subsets = []
        for m, (idx, scores) in enumerate(sets):
            idx, scores = np.asarray(idx), np.asarray(scores)
            if len(idx) != len(scores) or len(idx) == 0:
                raise ValueError(
                    f"resample_embeddings: evaluation set {m} has {len(idx)} query indices and "
                    f"{len(scores)} scores. How to fix: pass non-empty, equal-length arrays."
                )
            keep = rng.choice(len(idx), size=max(1, int(round(frac * len(idx)))), replace=False)
            subsets.append((idx[keep], scores[keep]))
        if embed_many is not None:
            row = np.asarray(embed_many(subsets), dtype=np.float64)
            if row.shape[0] != len(sets):
                raise ValueError(
                    f"resample_embeddings: embed_many returned {row.shape[0]} embeddings for "
                    f"{len(sets)} evaluation sets. How to fix: return one row per set, in order."
                )
        else:
            assert embed_fn is not None  # checked above: embed_fn or embed_many is given
            row = np.stack([np.asarray(embed_fn(i, y), dtype=np.float64) for i, y in subsets])
        out.append(row)
    return np.stack(out)  # (R, M, d)


@dataclass(frozen=True)
class NearDuplicates:
    """Model pairs scored by between-model distance over within-model resampling spread: every pair's score is
    computed, the lowest-scored `max_pairs` are kept as rows (all of them in pools up to 447 models)."""

    names: tuple[str, ...]
    metric: str
    threshold: float
    R: int
    pairs: pd.DataFrame  # model_a, model_b, between, within_a, within_b, score, near_duplicate; sorted by score
    n_pairs: int = -1  # pairs scored: M(M-1)/2 (-1: as many as `pairs` has)
    n_flagged: int = -1  # pairs with score <= threshold, kept or not (-1: count them in `pairs`)
    histogram: tuple[np.ndarray, np.ndarray] | None = None  # (counts (40,), edges (41,)) of log10 score, all pairs
    fraction: float | None = None  # share of each evaluation set kept per resample (for the report)
    known: frozenset = frozenset()  # known duplicate pairs (frozensets of two names), e.g. the catalog's re-uploads
    not_resampled: tuple[str, ...] = ()  # pool models without evaluations to resample (left out)

    @property
    def duplicates(self) -> pd.DataFrame:
        return self.pairs[self.pairs["near_duplicate"]].reset_index(drop=True)

    def table(self) -> pd.DataFrame:
        return self.pairs

    def to_markdown(self) -> str:
        n_pairs = self.n_pairs if self.n_pairs >= 0 else len(self.pairs)
        flagged = self.n_flagged if self.n_flagged >= 0 else len(self.duplicates)
        kept = (
            ""
            if len(self.pairs) == n_pairs
            else f" The {len(self.pairs):,} lowest-scored of {n_pairs:,} pairs are kept."
        )
        text = (
            f"**Near-duplicate models** ({len(self.names)} models, {self.R} resampled evaluation sets each, "
            f"{self.metric} distance): {flagged} pair(s) with score <= {self.threshold:g} (score = "
            "2 x between-model distance / sum of the two within-model spreads; ~1 = indistinguishable)."
            + kept
            + "\n\n"
            + markdown_table(self.pairs, max_rows=20)
        )
        if "pool_cosine_distance" in self.pairs.columns:
            listed = self.duplicates.head(FLAGGED_LISTED)
            columns = ["model_a", "model_b", "score", "pool_cosine_distance", "known_duplicate"]
            text += "\n\nFlagged pairs with the pool embeddings' cosine distance:\n\n" + (
                markdown_table(listed[columns], max_rows=None) if len(listed) else "(none)"
            )
            if flagged > len(listed):
                text += f"\n\n({flagged - len(listed)} more flagged pairs: the full table has them.)"
        if self.not_resampled:
            names = ", ".join(map(escape_markdown, self.not_resampled[:20]))
            text += f"\n\nNot resampled (evaluations not found): {names}."
        return text

    def headline(self) -> str:
        flagged = self.n_flagged if self.n_flagged >= 0 else len(self.duplicates)
        at = "" if self.fraction is None else f" at {self.fraction:g}"
        line = f"{flagged} near-duplicate pair(s) among {len(self.names)} models ({self.R} resamples{at})"
        if self.known:
            found = self.known_found()
            line += f"; known re-uploads found: {found} of {len(self.known)}, other pairs flagged: {flagged - found}"
        return line + "."

    def known_found(self) -> int:
        """Known duplicate pairs among the flagged pairs kept."""
        d = self.duplicates
        return int(sum(frozenset((a, b)) in self.known for a, b in zip(d["model_a"], d["model_b"])))

    def figures(self) -> dict[str, int]:
        return {
            "flagged_pairs": self.n_flagged if self.n_flagged >= 0 else len(self.duplicates),
            "known_duplicates_found": self.known_found(),
            "known_duplicates": len(self.known),
        }

    def beside_pool(
        self, pool_names, pool_embeddings: np.ndarray, *, known=frozenset(), not_resampled=()
    ) -> "NearDuplicates":
        """This result with each pair's cosine distance between the two pool embeddings (`pool_cosine_distance`),
        whether it is a `known_duplicate` (pairs of names in ``known``), and the pool models not resampled."""
        rows = pd.Index([str(n) for n in pool_names])
        z = np.asarray(pool_embeddings, dtype=np.float64)
        known = frozenset(frozenset(map(str, p)) for p in known)
        pairs = self.pairs.assign(
            pool_cosine_distance=paired_distances(
                z[rows.get_indexer(self.pairs["model_a"])], z[rows.get_indexer(self.pairs["model_b"])], metric="cosine"
            ),
            known_duplicate=[frozenset((a, b)) in known for a, b in zip(self.pairs["model_a"], self.pairs["model_b"])],
        )
        return replace(self, pairs=pairs, known=known, not_resampled=tuple(map(str, not_resampled)))

    def plot(self, path: str | Path) -> Path:
        fig = new_figure(6.4, 4.0)
        ax = fig.add_subplot(1, 1, 1)
        counts, edges = self.histogram if self.histogram is not None else _log_histogram(self.pairs["score"].to_numpy())
        ax.stairs(counts, edges, fill=True)
        ax.axvline(np.log10(self.threshold), color="C3", ls=":", label=f"threshold {self.threshold:g}")
        ax.set_xlabel("log10 score (between / within spread)")
        ax.set_ylabel("model pairs")
        ax.legend()
        return save_figure(fig, path)


def _log_histogram(score: np.ndarray, bins: int = 40) -> tuple[np.ndarray, np.ndarray]:
    """Counts and edges of log10 score (clipped at 1e-3; infinite scores left out)."""
    return np.histogram(np.log10(np.clip(score[np.isfinite(score)], 1e-3, None)), bins=bins)


def known_duplicates(catalog: pd.DataFrame) -> frozenset:
    """The known duplicate pairs of a model catalog with a `duplicate_of` column (the synthetic pool's
    re-uploads), as frozensets of two names; empty without the column."""
    if "duplicate_of" not in catalog.columns:
        return frozenset()
    dup = catalog[catalog["duplicate_of"].fillna("").astype(str) != ""]
    return frozenset(frozenset((str(m), str(o))) for m, o in zip(dup["model"], dup["duplicate_of"]))


def near_duplicates(
    resampled: np.ndarray,
    names=None,
    *,
    metric: str = "euclidean",
    threshold: float = 1.1,
    max_pairs: int | None = MAX_PAIRS,
    fraction: float | None = None,
) -> NearDuplicates:
    """Pairs of models whose embeddings stay within the models' own resampling spread.

    Args:
        resampled: (R, M, d) embeddings, R independent resamples of each model's evaluation set
            (resample_embeddings).
        threshold: a pair is a near-duplicate when score <= threshold.
        max_pairs: rows kept in `pairs`, the lowest-scored first (None = every pair); the histogram and the
            count of flagged pairs are over every pair.
        fraction: the share of each evaluation set kept per resample (only reported).
    Memory: O(M^2), said here as the rule asks: the (M, M) mean between-model distance, one (M, M) block of
    distances at a time (R^2 blocks, 32 MB each at M = 2,001), and the M(M-1)/2 pair scores (16 MB); never the
    (R M)^2 matrix of every resample against every other (2 GB at R = 8, M = 2,001).
    For models a, b with resampled embeddings a_1..a_R, b_1..b_R:
        between(a, b) = mean over all (r, s) of dist(a_r, b_s)
        within(a)     = mean over r != s of dist(a_r, a_s)     (the model's own resampling spread)
        score(a, b)   = 2 between(a, b) / (within(a) + within(b)).
    With Euclidean distance 2 E|A-B| - E|A-A'| - E|B-B'| is the energy distance, >= 0 and 0 only when the
    two models' embedding distributions coincide, so score ~ 1 means "indistinguishable", > 1 means apart.
    If both spreads are 0 (deterministic embeddings), score is 0 for identical points and inf otherwise.
    """
    where = "near_duplicates"
    e = np.asarray(resampled, dtype=np.float64)
    if e.ndim != 3 or e.shape[0] < 2 or e.shape[1] < 2:
        raise ValueError(
            f"{where}: resampled must be (R, M, d) with R >= 2 resamples and M >= 2 models, got "
            f"{e.shape}. How to fix: build it with resample_embeddings(embed_fn, sets, R, frac, seed)."
        )
    if not np.isfinite(e).all():
        raise ValueError(f"{where}: resampled embeddings contain NaN/inf. How to fix: re-embed those models.")
    check_metric(metric, where=where)
    R, M, _ = e.shape
    names = check_names(names, M, where=where)
    between = np.zeros((M, M))  # (M, M) sum over all (r, s)
    within = np.zeros(M)  # (M,) sum over r != s (the diagonal is 0)
    for r in range(R):
        for s in range(R):
            block = pairwise_distances(e[r], e[s], metric=metric)  # (M, M) resample r against resample s
            between += block
            within += np.diagonal(block)  # each model against itself
    between /= R * R
    within /= R * (R - 1)
    a, b = np.triu_indices(M, k=1)
    spread = within[a] + within[b]
    btw = between[a, b]
    del between
    with np.errstate(divide="ignore", invalid="ignore"):
        score = np.where(spread > 0, 2 * btw / spread, np.where(btw > 0, np.inf, 0.0))
    order = np.lexsort((btw, score))  # by score, then between; stable
    if max_pairs is not None:
        order = order[: max(0, int(max_pairs))]
    a, b = a[order], b[order]
    pairs = pd.DataFrame(
        {
            "model_a": np.asarray(names, dtype=object)[a],
            "model_b": np.asarray(names, dtype=object)[b],
            "between": btw[order],
            "within_a": within[a],
            "within_b": within[b],
            "score": score[order],
            "near_duplicate": score[order] <= threshold,
        }
    )
    return NearDuplicates(
        names=tuple(names),
        metric=metric,
        threshold=threshold,
        R=R,
        pairs=pairs,
        n_pairs=len(score),
        n_flagged=int((score <= threshold).sum()),
        histogram=_log_histogram(score),
        fraction=fraction,
    )

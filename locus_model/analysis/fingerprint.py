"""Fingerprinting: near-duplicate models are those whose embeddings cannot be told apart across resamples.

Paper (arXiv 2601.21082): near-duplicate endpoints land on the same point, at cosine distance < 1e-5.
Each model is embedded R times from independently resampled subsets of its evaluation set; a pair is a
near-duplicate when the distance between the two models is no larger than each model's own resampling spread.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from locus_model.analysis._common import (check_metric, check_names, markdown_table, new_figure,
                                          pairwise_distances, save_figure)

EmbedFn = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (query_idx (n,), scores (n,)) -> (d,) embedding


def resample_embeddings(embed_fn: EmbedFn, sets: Sequence[tuple[np.ndarray, np.ndarray]], R: int,
                        frac: float, seed: int) -> np.ndarray:
    """(R, M, d) embeddings of each model from R independently resampled subsets of its evaluation set.

    Args:
        embed_fn: query indices (n,) and scores (n,) -> model embedding (d,) (e.g. a closure over a trained
            Locus and the query encodings).
        sets: one evaluation set (query_idx (n_m,), scores (n_m,)) per model.
        R: number of resamples; frac: share of each set kept per resample (without replacement, at least 1).
        seed: numpy default_rng seed; one draw per (resample, model), independent across models.
    """
    if R < 2 or not 0 < frac <= 1:
        raise ValueError(f"resample_embeddings: need R >= 2 and 0 < frac <= 1, got R={R}, frac={frac}. "
                         "How to fix: e.g. R=8, frac=0.5.")
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(R):
        row = []
        for m, (idx, scores) in enumerate(sets):
            idx, scores = np.asarray(idx), np.asarray(scores)
            if len(idx) != len(scores) or len(idx) == 0:
                raise ValueError(f"resample_embeddings: evaluation set {m} has {len(idx)} query indices and "
                                 f"{len(scores)} scores. How to fix: pass non-empty, equal-length arrays.")
            keep = rng.choice(len(idx), size=max(1, int(round(frac * len(idx)))), replace=False)
            row.append(np.asarray(embed_fn(idx[keep], scores[keep]), dtype=np.float64))
        out.append(np.stack(row))
    return np.stack(out)  # (R, M, d)


@dataclass(frozen=True)
class NearDuplicates:
    """Every model pair scored by between-model distance over within-model resampling spread."""
    names: tuple[str, ...]
    metric: str
    threshold: float
    R: int
    pairs: pd.DataFrame  # model_a, model_b, between, within_a, within_b, score, near_duplicate; sorted by score

    @property
    def duplicates(self) -> pd.DataFrame:
        return self.pairs[self.pairs["near_duplicate"]].reset_index(drop=True)

    def table(self) -> pd.DataFrame:
        return self.pairs

    def to_markdown(self) -> str:
        dup = self.duplicates
        return (f"**Near-duplicate models** ({len(self.names)} models, {self.R} resampled evaluation sets each, "
                f"{self.metric} distance): {len(dup)} pair(s) with score <= {self.threshold:g} (score = "
                "2 x between-model distance / sum of the two within-model spreads; ~1 = indistinguishable).\n\n"
                + markdown_table(self.pairs, max_rows=20))

    def plot(self, path: str | Path) -> Path:
        fig = new_figure(6.4, 4.0)
        ax = fig.add_subplot(1, 1, 1)
        s = self.pairs["score"].to_numpy()
        ax.hist(np.log10(np.clip(s[np.isfinite(s)], 1e-3, None)), bins=40)
        ax.axvline(np.log10(self.threshold), color="C3", ls=":", label=f"threshold {self.threshold:g}")
        ax.set_xlabel("log10 score (between / within spread)")
        ax.set_ylabel("model pairs")
        ax.legend()
        return save_figure(fig, path)


def near_duplicates(resampled: np.ndarray, names=None, *, metric: str = "euclidean",
                    threshold: float = 1.1) -> NearDuplicates:
    """Pairs of models whose embeddings stay within the models' own resampling spread.

    Args:
        resampled: (R, M, d) embeddings, R independent resamples of each model's evaluation set
            (resample_embeddings).
        threshold: a pair is a near-duplicate when score <= threshold.
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
        raise ValueError(f"{where}: resampled must be (R, M, d) with R >= 2 resamples and M >= 2 models, got "
                         f"{e.shape}. How to fix: build it with resample_embeddings(embed_fn, sets, R, frac, seed).")
    if not np.isfinite(e).all():
        raise ValueError(f"{where}: resampled embeddings contain NaN/inf. How to fix: re-embed those models.")
    check_metric(metric, where=where)
    R, M, _ = e.shape
    names = check_names(names, M, where=where)
    d = pairwise_distances(e.reshape(R * M, -1), metric=metric).reshape(R, M, R, M)
    between = d.mean(axis=(0, 2))                               # (M, M) over all (r, s)
    diag = np.einsum("rmsm->mrs", d)                            # (M, R, R) each model against itself
    within = diag.sum(axis=(1, 2)) / (R * (R - 1))              # (M,) over r != s (diagonal is 0)
    a, b = np.triu_indices(M, k=1)
    spread = within[a] + within[b]
    btw = between[a, b]
    with np.errstate(divide="ignore", invalid="ignore"):
        score = np.where(spread > 0, 2 * btw / spread, np.where(btw > 0, np.inf, 0.0))
    pairs = pd.DataFrame({"model_a": [names[i] for i in a], "model_b": [names[j] for j in b], "between": btw,
                          "within_a": within[a], "within_b": within[b], "score": score,
                          "near_duplicate": score <= threshold})
    pairs = pairs.sort_values(["score", "between"], ignore_index=True, kind="stable")
    return NearDuplicates(names=tuple(names), metric=metric, threshold=threshold, R=R, pairs=pairs)

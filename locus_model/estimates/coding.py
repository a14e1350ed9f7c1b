"""The evaluation set's arithmetic every estimate shares: the benchmarks' coding and one-hot matrix, the observed
answers' sums and counts per benchmark, the mean of any per-query figure per benchmark, the intervals' level and its
normal quantile, and random evaluation sets. One place for each, so that every (.., K) array of the package is in
the same benchmark order."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from statistics import NormalDist
from typing import Sequence

import numpy as np

from locus_model.infer import EvaluationSet

LEVEL = 0.90  # the intervals' nominal coverage


def z_of(level: float = LEVEL) -> float:
    """Standard deviations in half a central interval of that level (1.645 at 90%)."""
    return NormalDist().inv_cdf(0.5 + level / 2)


@dataclass(frozen=True)
class Benchmarks:
    """Each query's benchmark, coded: ``names`` (K,) sorted, ``codes`` (Q,) in 0..K-1, ``size`` (K,) queries each."""

    names: np.ndarray  # (K,)
    codes: np.ndarray  # (Q,)

    @classmethod
    def of(cls, benchmarks: np.ndarray | Sequence[str]) -> "Benchmarks":
        names, codes = np.unique(np.asarray(benchmarks).astype(str), return_inverse=True)
        return cls(names=names, codes=codes.astype(np.int64))

    @property
    def K(self) -> int:
        return len(self.names)

    @property
    def Q(self) -> int:
        return len(self.codes)

    @cached_property
    def size(self) -> np.ndarray:  # (K,) N_b
        return np.bincount(self.codes, minlength=self.K).astype(np.float64)

    @cached_property
    def onehot(self) -> np.ndarray:  # (Q, K)
        out = np.zeros((self.Q, self.K))
        out[np.arange(self.Q), self.codes] = 1.0
        return out

    def means(self, per_query: np.ndarray) -> np.ndarray:  # (..., Q) -> (..., K)
        """Mean of a per-query figure over each benchmark's queries, NaN cells skipped (NaN where all are)."""
        known = ~np.isnan(per_query)
        with np.errstate(invalid="ignore", divide="ignore"):
            return (np.where(known, per_query, 0.0) @ self.onehot) / (known @ self.onehot)

    def counts(self, sets: Sequence[EvaluationSet]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """((M, Q) observed mask, (M, K) sum of the observed scores, (M, K) observed answers) of evaluation sets."""
        seen = np.zeros((len(sets), self.Q), dtype=bool)
        right, count = np.zeros((len(sets), self.K)), np.zeros((len(sets), self.K))
        for m, (idx, s) in enumerate(sets):
            idx = np.asarray(idx, dtype=np.int64)
            seen[m, idx] = True
            np.add.at(right[m], self.codes[idx], np.asarray(s, dtype=np.float64))
            np.add.at(count[m], self.codes[idx], 1.0)
        return seen, right, count


def observed_rate(right: np.ndarray, count: np.ndarray) -> np.ndarray:
    """The observed accuracy right / count, NaN where nothing was observed."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, right / np.maximum(count, 1), np.nan)


def benchmark_means(per_query: np.ndarray, benchmarks: np.ndarray) -> np.ndarray:  # (M, Q) -> (M, K)
    """Mean of each row over each benchmark's queries (NaN cells skipped): Benchmarks.of(benchmarks).means."""
    return Benchmarks.of(benchmarks).means(per_query)


def draw_sets(scores: np.ndarray, n: int, rng: np.random.Generator, queries: np.ndarray | None = None) -> list:
    """n random evaluations of each row of scores (M, Q) among `queries` (default all; NaN cells skipped)."""
    queries = np.arange(scores.shape[1]) if queries is None else np.asarray(queries)
    sets = []
    for row in scores:
        have = queries[~np.isnan(row[queries])]
        take = np.sort(rng.choice(have, size=min(n, len(have)), replace=False))
        sets.append((take, row[take]))
    return sets


__all__ = ["LEVEL", "Benchmarks", "benchmark_means", "draw_sets", "observed_rate", "z_of"]

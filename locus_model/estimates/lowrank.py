"""The pool's low-rank prior: what the pool's answers say of a newcomer before its own, and how wrong that is.

``LowRank`` is a rank-r completion of the pool's item matrix (models x queries, NaN = not asked): a newcomer's
P(correct) on every query from its answers, by ridge projection onto the top components. Averaged over a benchmark's
queries it is the prior mean of the newcomer's rate there. How wrong that mean is at n answers (tau^2) is measured by
an inner split of the pool's models (``LowRankPrior``: each group onboarded from n random answers by the completion
of the other groups; ``simulate_prior_error``, ``prior_variance``): the 90% quantile of its absolute error over
z_90, so that the prior's own 90% interval holds 90% of the cases also where the errors are heavy-tailed, less the
finite-population part the unobserved queries add. None of the 1 + folds fits depends on n; tau^2 is measured once
per n and kept, so a pool's estimates at any n refit nothing.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
from scipy.sparse.linalg import svds

from locus_model.estimates.coding import LEVEL, Benchmarks, draw_sets, z_of
from locus_model.infer import EvaluationSet

MIN_PRIOR_VAR = 1e-4  # tau^2 floor: a prior is never trusted beyond 1 point of standard deviation
FLAT_VAR = 0.25  # tau^2 of a benchmark no pool model has answers on: nothing known


def prior_variance(prior: np.ndarray, truth: np.ndarray, benchmarks: np.ndarray, observed: np.ndarray) -> np.ndarray:
    """tau^2 (K,) of prior means (R, K) against the accuracy over all queries (R, K): the squared LEVEL quantile of the
    absolute error over z_LEVEL (so the prior's own LEVEL interval holds LEVEL of the cases, also where the errors are
    heavy-tailed, where their RMS would make it too wide for most), less the binomial part the unobserved queries add
    to that accuracy given the rate (mean U_b theta (1 - theta) / N_b^2; observed (R, K): answers seen per benchmark),
    floored at MIN_PRIOR_VAR (FLAT_VAR on a benchmark no model was asked)."""
    size = Benchmarks.of(benchmarks).size
    with warnings.catch_warnings():  # a benchmark no model has a cell on: NaN, then flat
        warnings.simplefilter("ignore", RuntimeWarning)
        finite = np.nanmean((size - observed) * truth * (1 - truth), axis=0) / size**2
        scale = np.nanquantile(np.abs(prior - truth), LEVEL, axis=0) / z_of(LEVEL)
    return np.nan_to_num(np.maximum(scale**2 - finite, MIN_PRIOR_VAR), nan=FLAT_VAR)  # no model known there


def simulate_prior_samples(
    prior_means: Callable[[np.ndarray, list], np.ndarray],
    scores: np.ndarray,
    benchmarks: np.ndarray,
    n: int,
    *,
    queries: np.ndarray | None = None,
    reps: int = 4,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(prior means (reps R, K), the accuracy they estimate (reps R, K), answers seen per benchmark (reps R, K)):
    ``reps`` times, n random answers (among ``queries``) of each model of scores (R, Q) with known answers,
    prior_means(rows, sets) -> (R, K) against each model's accuracy over all of each benchmark's queries. Give models
    the prior was not fitted on (or let prior_means leave each row out)."""
    rng = np.random.default_rng(seed)
    coding = Benchmarks.of(benchmarks)
    truth = coding.means(scores)
    rows = np.arange(len(scores))
    priors, seen = [], []
    for _ in range(reps):
        sets = draw_sets(scores, n, rng, queries)
        priors.append(prior_means(rows, sets))
        seen.append(np.stack([np.bincount(coding.codes[idx], minlength=coding.K) for idx, _ in sets]))
    return np.concatenate(priors), np.tile(truth, (reps, 1)), np.concatenate(seen)


def simulate_prior_error(
    prior_means: Callable[[np.ndarray, list], np.ndarray],
    scores: np.ndarray,
    benchmarks: np.ndarray,
    n: int,
    *,
    queries: np.ndarray | None = None,
    reps: int = 4,
    seed: int = 0,
) -> np.ndarray:
    """tau^2 (K,) of a prior at set size n: prior_variance of simulate_prior_samples."""
    prior, truth, seen = simulate_prior_samples(
        prior_means, scores, benchmarks, n, queries=queries, reps=reps, seed=seed
    )
    return prior_variance(prior, truth, benchmarks, seen)


def at_powers_of_two(n: int, at: Callable[[int], np.ndarray]) -> np.ndarray:
    """``at(n)`` from measures at the powers of two around n only: linear in log2 n between ``at(lo)`` and
    ``at(2 lo)``, lo the power of two at or below n (n < 1 reads as 1). The one interpolation of the measured errors
    (the prior's and the router's), so a session that grows by rounds measures once per doubling, not per round."""
    lo = 2 ** int(np.floor(np.log2(max(n, 1))))
    if lo == n:
        return at(n)
    t = np.log2(max(n, 1) / lo)
    return (1 - t) * at(lo) + t * at(2 * lo)


@dataclass(frozen=True)
class LowRank:
    """A rank-r completion of a pool's item matrix (models x queries, NaN = not asked; NaN filled by the query's
    mean): a new model's P(correct) on every query from its answers, by ridge projection onto the top components."""

    mean: np.ndarray  # (Q,)
    basis: np.ndarray  # (Q, r) components scaled by their singular value / sqrt(rows)
    alpha: float = 1.0

    @classmethod
    def fit(cls, scores: np.ndarray, rank: int = 16, alpha: float = 1.0) -> "LowRank":
        known = ~np.isnan(scores)
        with np.errstate(invalid="ignore", divide="ignore"):
            mu = np.where(known, scores, 0.0).sum(axis=0) / known.sum(axis=0)
        mu = np.where(np.isnan(mu), np.nanmean(mu), mu)  # a query no model was asked: the pool's mean
        filled = (np.where(np.isnan(scores), mu, scores) - mu).astype(np.float64)
        if min(filled.shape) > 4 * rank:  # the top components only (ARPACK, a fixed start: deterministic)
            _, sv, vt = svds(filled, k=rank, v0=np.ones(min(filled.shape)) / np.sqrt(min(filled.shape)))
            order = np.argsort(sv)[::-1]
            sv, vt = sv[order], vt[order]
        else:
            _, sv, vt = np.linalg.svd(filled, full_matrices=False)
        rank = min(rank, len(sv))
        return cls(mean=mu, basis=(vt[:rank] * sv[:rank, None] / np.sqrt(len(filled))).T, alpha=alpha)

    def weights(self, sets: Sequence[EvaluationSet]) -> np.ndarray:  # (M, r) each set's coordinates (pool: ~unit)
        out = np.empty((len(sets), self.basis.shape[1]))
        eye = self.alpha * np.eye(self.basis.shape[1])
        for m, (idx, s) in enumerate(sets):
            b = self.basis[np.asarray(idx)]
            out[m] = np.linalg.solve(b.T @ b + eye, b.T @ (np.asarray(s, dtype=np.float64) - self.mean[idx]))
        return out

    def proba(self, sets: Sequence[EvaluationSet]) -> np.ndarray:  # (M, Q)
        return np.clip(self.mean + self.weights(sets) @ self.basis.T, 0.005, 0.995)

    def extended(self, extra: int) -> "LowRank":
        """The completion over ``extra`` more queries no pool model answered: what ``fit`` gives them (the pool's
        mean, no component) without fitting again."""
        return LowRank(
            mean=np.concatenate([self.mean, np.full(extra, self.mean.mean())]),
            basis=np.concatenate([self.basis, np.zeros((extra, self.basis.shape[1]))]),
            alpha=self.alpha,
        )


@dataclass(frozen=True)
class LowRankPrior:
    """The low-rank prior of one pool, fitted once: the completion of all its answers (``full``: each new model's prior
    means) and the inner split that measures its error (``group``: each pool model's group; ``fits``: per group, the
    completion of the other groups' models). None of it depends on n; only tau^2 does, measured at each n on first
    use and kept (``errors``), so one pool's estimates at any n refit nothing."""

    scores: np.ndarray  # (P, Q) the pool's answers, NaN = not asked
    benchmarks: np.ndarray  # (Q,)
    full: LowRank
    group: np.ndarray  # (P,) in 0..len(fits)-1
    fits: tuple[LowRank, ...]
    rank: int
    seed: int
    errors: dict = field(default_factory=dict, compare=False, repr=False)  # (n, reps, queries) -> tau^2 (K,)
    draws: dict = field(default_factory=dict, compare=False, repr=False)  # (n, reps, queries) -> the split's draws

    @classmethod
    def fit(
        cls, pool_scores: np.ndarray, benchmarks: np.ndarray, *, rank: int = 16, folds: int = 10, seed: int = 0
    ) -> "LowRankPrior":
        """The pool's completion and its inner split into min(folds, P) seeded groups, each group's completion fitted
        on the others: 1 + folds LowRank fits, the only ones the pool's estimates need."""
        group = np.random.default_rng(seed).permutation(len(pool_scores)) % min(folds, len(pool_scores))
        fits = tuple(LowRank.fit(pool_scores[group != g], rank) for g in range(group.max() + 1))
        return cls(
            scores=pool_scores,
            benchmarks=np.asarray(benchmarks),
            full=LowRank.fit(pool_scores, rank),
            group=group,
            fits=fits,
            rank=rank,
            seed=seed,
        )

    def prior_error(self, n: int, *, queries: np.ndarray | None = None, reps: int = 4) -> np.ndarray:
        """tau^2 (K,) of the prior at n, by the inner split: each group's models onboarded from n random answers
        (among ``queries``; default all) by the completion fitted on the other groups (simulate_prior_samples,
        seeded by the prior's seed). Measured once per (n, queries, reps), then kept."""
        key = self._key(n, queries, reps)
        if key not in self.errors:
            prior, truth, seen = self._samples(n, queries, reps)
            tau = prior_variance(prior, truth, self.benchmarks, seen)
            tau.setflags(write=False)  # shared by every later call at this n
            self.errors[key] = tau
        return self.errors[key]

    def local_error(
        self, n: int, means: np.ndarray, share: float, *, queries: np.ndarray | None = None, reps: int = 4
    ) -> np.ndarray:
        """tau^2 (M, K) measured where each newcomer falls: the inner split's draws at n whose prior means (K,) are
        the ``share`` nearest to the newcomer's (means (M, K)), their error's prior_variance. A mid-pool newcomer
        is not given the width the pool's edge models set."""
        prior, truth, seen = self._samples(n, queries, reps)
        k = max(int(np.ceil(share * len(prior))), min(len(prior), 20))
        out = np.empty(np.shape(means))
        for m, mean in enumerate(np.asarray(means, np.float64)):
            dist = np.nansum((prior - mean) ** 2, axis=1)
            near = np.argsort(dist, kind="stable")[:k]
            out[m] = prior_variance(prior[near], truth[near], self.benchmarks, seen[near])
        return out

    def _key(self, n: int, queries: np.ndarray | None, reps: int) -> tuple:
        return (int(n), reps, None if queries is None else np.asarray(queries, dtype=np.int64).tobytes())

    def _samples(self, n: int, queries: np.ndarray | None, reps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        key = self._key(n, queries, reps)
        if key not in self.draws:
            self.draws[key] = simulate_prior_samples(
                self._split_means, self.scores, self.benchmarks, n, queries=queries, reps=reps, seed=self.seed
            )
        return self.draws[key]

    def error_at(
        self, n: int, *, queries: np.ndarray | None = None, means: np.ndarray | None = None, share: float | None = None
    ) -> np.ndarray:
        """tau^2 (K,) at any n from its measures at the powers of two around it (linear in log n between them; the
        error changes slowly with n): a session that grows by rounds measures it once per doubling, not per round.
        With ``means`` (M, K) and ``share``: local_error, (M, K). At n = 0 (no answer the completion can project):
        the error of the pool's mean, for the whole pool."""
        if n <= 0:
            return self.prior_error(0, queries=queries)

        def at(k: int) -> np.ndarray:
            if means is None or share is None:
                return self.prior_error(k, queries=queries)
            return self.local_error(k, means, share, queries=queries)

        return at_powers_of_two(n, at)

    def extended(self, benchmarks: np.ndarray) -> "LowRankPrior":
        """This prior over more queries no pool model answered (their ``benchmarks``, appended after the pool's):
        the same fits, their columns the pool's mean with no component (what a refit gives them), tau^2 measured
        afresh (the benchmarks changed)."""
        extra = len(benchmarks)
        if extra == 0:
            return self
        scores = np.concatenate([self.scores, np.full((len(self.scores), extra), np.nan, self.scores.dtype)], axis=1)
        return LowRankPrior(
            scores=scores,
            benchmarks=np.concatenate([self.benchmarks, np.asarray(benchmarks)]),
            full=self.full.extended(extra),
            group=self.group,
            fits=tuple(f.extended(extra) for f in self.fits),
            rank=self.rank,
            seed=self.seed,
        )

    def _split_means(self, rows: np.ndarray, sets: list) -> np.ndarray:  # (R, K)
        """Prior means of pool rows from their sets, each by the completion that left its group out."""
        coding = Benchmarks.of(self.benchmarks)
        out = np.empty((len(rows), coding.K))
        for g, fit in enumerate(self.fits):
            mine = np.flatnonzero(self.group[rows] == g)
            if len(mine):
                out[mine] = coding.means(fit.proba([sets[i] for i in mine]))
        return out


__all__ = [
    "FLAT_VAR",
    "MIN_PRIOR_VAR",
    "LowRank",
    "LowRankPrior",
    "prior_variance",
    "simulate_prior_error",
    "simulate_prior_samples",
]

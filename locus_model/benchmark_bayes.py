"""Per-benchmark accuracy by empirical Bayes: a prior from any scorer, as wide as that scorer is measured to be wrong.

A model's accuracy on benchmark b over all of b's N_b queries, from m_b observed answers (k_b right):

    acc_b = (k_b + S_b) / N_b,   S_b = the right answers among the U_b = N_b - m_b unobserved queries.

The model's rate theta_b on b gets a Beta prior whose mean is a scorer's mean P(correct) over b's queries (the
router's, the predictor's, a low-rank completion's: anything that reads the n answers and the pool) and whose
variance tau_b^2 is how wrong that mean is at this n, measured on models with known truth
(``simulate_prior_error``: n random answers of each, the prior against their accuracy over all of b's queries: the
90% quantile of its absolute error / 1.645, less the finite-population part). The observed k_b of m_b are a binomial
likelihood (Beta posterior), and S_b given theta_b is binomial (beta-binomial posterior), so the 90% interval follows
from the measured prior error and the answers rather than from a fitted factor. With many answers the estimate goes
to the observed accuracy; with none, to the prior. (The prior mean reads the same n answers, so they count a little
twice; the bench measures what it costs: docs/estimates.md.)
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import pandas as pd
from scipy import stats
from scipy.sparse.linalg import svds

from locus_model.infer import EvaluationSet

LEVEL = 0.90  # the intervals' nominal coverage
MIN_PRIOR_VAR = 1e-4  # tau^2 floor: a prior is never trusted beyond 1 point of standard deviation


@dataclass(frozen=True)
class Capability:
    """Per-benchmark accuracy estimates of M models: arrays (M, K), K = len(benchmarks)."""

    benchmarks: tuple[str, ...]
    estimate: np.ndarray  # (M, K) point estimate
    lo: np.ndarray  # (M, K) lower end of the LEVEL interval
    hi: np.ndarray  # (M, K)
    observed: np.ndarray  # (M, K) mean of the observed answers (NaN where none)
    n: np.ndarray  # (M, K) observed answers
    draws: np.ndarray  # (M, S, K) posterior draws of the accuracy (for maps of it: reference scores)

    def frame(self, row: int = 0) -> pd.DataFrame:
        """One model's estimates: benchmark, estimate, lo, hi, observed, n (what onboarding shows)."""
        return pd.DataFrame({"benchmark": list(self.benchmarks), "estimate": self.estimate[row], "lo": self.lo[row],
                             "hi": self.hi[row], "observed": self.observed[row], "n": self.n[row].astype(int)})


def observed_counts(sets: Sequence[EvaluationSet], codes: np.ndarray, K: int,
                    Q: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(M, Q) observed mask, (M, K) sum of observed scores, (M, K) observed counts."""
    M = len(sets)
    seen = np.zeros((M, Q), dtype=bool)
    total = np.zeros((M, K))
    count = np.zeros((M, K))
    for m, (idx, s) in enumerate(sets):
        idx = np.asarray(idx)
        seen[m, idx] = True
        np.add.at(total[m], codes[idx], np.asarray(s, dtype=np.float64))
        np.add.at(count[m], codes[idx], 1.0)
    return seen, total, count


def benchmark_codes(benchmarks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted benchmark names (K,), each query's code (Q,)): the order of every (.., K) array here."""
    return np.unique(np.asarray(benchmarks).astype(str), return_inverse=True)


def benchmark_means(proba: np.ndarray, benchmarks: np.ndarray) -> np.ndarray:  # (M, Q) -> (M, K)
    """Mean P(correct) of each model over each benchmark's queries (NaN cells skipped): the prior means."""
    names, codes = benchmark_codes(benchmarks)
    onehot = np.zeros((len(codes), len(names)))
    onehot[np.arange(len(codes)), codes] = 1.0
    known = ~np.isnan(proba)
    with np.errstate(invalid="ignore", divide="ignore"):  # NaN where a model has no cell on a benchmark
        return (np.where(known, proba, 0.0) @ onehot) / (known @ onehot)


def prior_variance(prior: np.ndarray, truth: np.ndarray, benchmarks: np.ndarray, observed: np.ndarray) -> np.ndarray:
    """tau^2 (K,) of prior means (R, K) against the accuracy over all queries (R, K): the squared LEVEL quantile of the
    absolute error over z_LEVEL (so the prior's own LEVEL interval holds LEVEL of the cases, also where the errors are
    heavy-tailed, where their RMS would make it too wide for most), less the binomial part the unobserved queries add
    to that accuracy given the rate (mean U_b theta (1 - theta) / N_b^2; observed (R, K): answers seen per benchmark),
    floored at MIN_PRIOR_VAR (0.25, a flat prior, on a benchmark no model was asked)."""
    size = np.bincount(benchmark_codes(benchmarks)[1]).astype(np.float64)
    with warnings.catch_warnings():  # a benchmark no model has a cell on: NaN, then flat
        warnings.simplefilter("ignore", RuntimeWarning)
        finite = np.nanmean((size - observed) * truth * (1 - truth), axis=0) / size**2
        scale = np.nanquantile(np.abs(prior - truth), LEVEL, axis=0) / stats.norm.ppf(0.5 + LEVEL / 2)
    return np.nan_to_num(np.maximum(scale**2 - finite, MIN_PRIOR_VAR), nan=0.25)  # no model known there: flat


def draw_sets(scores: np.ndarray, n: int, rng: np.random.Generator, queries: np.ndarray | None = None) -> list:
    """n random evaluations of each row of scores (M, Q) among `queries` (default all; NaN cells skipped)."""
    queries = np.arange(scores.shape[1]) if queries is None else np.asarray(queries)
    sets = []
    for row in scores:
        have = queries[~np.isnan(row[queries])]
        take = np.sort(rng.choice(have, size=min(n, len(have)), replace=False))
        sets.append((take, row[take]))
    return sets


def simulate_prior_error(prior_means: Callable[[np.ndarray, list], np.ndarray], scores: np.ndarray,
                         benchmarks: np.ndarray, n: int, *, queries: np.ndarray | None = None, reps: int = 4,
                         seed: int = 0) -> np.ndarray:
    """tau^2 (K,) of a prior at set size n: `reps` times, n random answers (among `queries`) of each model of
    scores (R, Q) with known answers, prior_means(rows, sets) -> (R, K) against each model's accuracy over all of
    each benchmark's queries. Give models the prior was not fitted on (or let prior_means leave each row out)."""
    rng = np.random.default_rng(seed)
    names, codes = benchmark_codes(benchmarks)
    truth = benchmark_means(scores, benchmarks)
    rows = np.arange(len(scores))
    priors, seen = [], []
    for _ in range(reps):
        sets = draw_sets(scores, n, rng, queries)
        priors.append(prior_means(rows, sets))
        seen.append(np.stack([np.bincount(codes[idx], minlength=len(names)) for idx, _ in sets]))
    return prior_variance(np.concatenate(priors), np.tile(truth, (reps, 1)), benchmarks, np.concatenate(seen))


def beta_binomial_capability(prior_mean: np.ndarray, prior_var: np.ndarray, sets: Sequence[EvaluationSet],
                             benchmarks: np.ndarray, *, samples: int = 64, seed: int = 0) -> Capability:
    """Capability (estimate, LEVEL interval, draws) from Beta priors (means (M, K), variances (K,) or (M, K)) and
    each model's observed answers (sets: query indices into benchmarks (Q,), scores in [0, 1])."""
    names, codes = benchmark_codes(benchmarks)
    K, Q = len(names), len(codes)
    _, right, count = observed_counts(sets, codes, K, Q)
    size = np.bincount(codes, minlength=K).astype(np.float64)
    unseen = np.rint(size - count).astype(np.int64)
    mu = np.clip(np.asarray(prior_mean, dtype=np.float64), 0.005, 0.995)
    strength = np.maximum(mu * (1 - mu) / np.broadcast_to(prior_var, mu.shape) - 1, 1.0)
    a, b = mu * strength + right, (1 - mu) * strength + (count - right)
    estimate = (right + unseen * a / (a + b)) / size
    tail = (1 - LEVEL) / 2
    lo = np.minimum((right + stats.betabinom.ppf(tail, unseen, a, b)) / size, estimate)  # a discrete quantile
    hi = np.maximum((right + stats.betabinom.ppf(1 - tail, unseen, a, b)) / size, estimate)  # may pass the mean
    rng = np.random.default_rng(seed)
    theta = rng.beta(a[:, None, :], b[:, None, :], size=(len(mu), samples, K))
    draws = (right[:, None, :] + rng.binomial(unseen[:, None, :], theta)) / size
    with np.errstate(invalid="ignore", divide="ignore"):
        observed = np.where(count > 0, right / np.maximum(count, 1), np.nan)
    return Capability(benchmarks=tuple(names), estimate=estimate, lo=lo, hi=hi, observed=observed, n=count,
                      draws=draws)


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

    @classmethod
    def fit(cls, pool_scores: np.ndarray, benchmarks: np.ndarray, *, rank: int = 16, folds: int = 10,
            seed: int = 0) -> "LowRankPrior":
        """The pool's completion and its inner split into min(folds, P) seeded groups, each group's completion fitted
        on the others: 1 + folds LowRank fits, the only ones the pool's estimates need."""
        group = np.random.default_rng(seed).permutation(len(pool_scores)) % min(folds, len(pool_scores))
        fits = tuple(LowRank.fit(pool_scores[group != g], rank) for g in range(group.max() + 1))
        return cls(scores=pool_scores, benchmarks=np.asarray(benchmarks), full=LowRank.fit(pool_scores, rank),
                   group=group, fits=fits, rank=rank, seed=seed)

    def prior_error(self, n: int, *, queries: np.ndarray | None = None, reps: int = 4) -> np.ndarray:
        """tau^2 (K,) of the prior at n, by the inner split: each group's models onboarded from n random answers
        (among ``queries``; default all) by the completion fitted on the other groups (simulate_prior_error, seeded
        by the prior's seed). Measured once per (n, queries, reps), then kept."""
        key = (int(n), reps, None if queries is None else np.asarray(queries, dtype=np.int64).tobytes())
        if key not in self.errors:
            tau = simulate_prior_error(self._split_means, self.scores, self.benchmarks, n, queries=queries, reps=reps,
                                       seed=self.seed)
            tau.setflags(write=False)  # shared by every later call at this n
            self.errors[key] = tau
        return self.errors[key]

    def _split_means(self, rows: np.ndarray, sets: list) -> np.ndarray:  # (R, K)
        """Prior means of pool rows from their sets, each by the completion that left its group out."""
        out = np.empty((len(rows), len(benchmark_codes(self.benchmarks)[0])))
        for g, fit in enumerate(self.fits):
            mine = np.flatnonzero(self.group[rows] == g)
            if len(mine):
                out[mine] = benchmark_means(fit.proba([sets[i] for i in mine]), self.benchmarks)
        return out

    def capability(self, sets: Sequence[EvaluationSet], *, samples: int = 64, seed: int = 0) -> Capability:
        """The empirical-Bayes estimate of each set's model: prior means from the pool's completion, their error
        tau^2 at the sets' median size (prior_error), the answers' likelihood (beta_binomial_capability)."""
        n = int(np.median([len(i) for i, _ in sets]))
        prior = benchmark_means(self.full.proba(sets), self.benchmarks)
        return beta_binomial_capability(prior, self.prior_error(n), sets, self.benchmarks, samples=samples, seed=seed)


__all__ = ["LEVEL", "MIN_PRIOR_VAR", "Capability", "LowRank", "LowRankPrior", "benchmark_codes", "benchmark_means",
           "observed_counts", "beta_binomial_capability", "draw_sets", "prior_variance", "simulate_prior_error"]

"""Per-benchmark accuracy over all of a benchmark's queries, from a posterior of the model's rate there.

A model's accuracy on benchmark b over the N_b queries of b the pool's data holds, from m_b observed answers
(k_b right):

    acc_b = (k_b + S_b) / N_b,   S_b = the right answers among the U_b = N_b - m_b unobserved queries.

Given the rate theta_b, S_b is binomial(U_b, theta_b); theta_b's posterior is the cell's robust Beta mixture
(``posterior.CellPosterior``: the prior's measured error, the flat part that lets contradicting answers win), so S_b
is a mixture of beta-binomials and the interval is its quantiles (``capability_of``). With many answers the
estimate goes to the observed accuracy (every query observed: the accuracy itself, exactly); with none, to the prior.
Where the pool's data hold no query of b beyond the model's own (a benchmark the pool never saw), there is no
finite population to complete: the estimate is of the rate itself, the cell's posterior mean and interval.
``accuracy_from_proba`` scores any method that gives P(correct) per query (the comparison methods of
evaluation/capability.py) the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd
from scipy import stats

from locus_model.estimates.coding import LEVEL, Benchmarks, observed_rate
from locus_model.estimates.posterior import ROBUST_WEIGHT, CellPosterior
from locus_model.infer import EvaluationSet

BINOMIAL_DRAWS = 64  # draws of the binomial part for a method without a spread of its own


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
        return pd.DataFrame(
            {
                "benchmark": list(self.benchmarks),
                "estimate": self.estimate[row],
                "lo": self.lo[row],
                "hi": self.hi[row],
                "observed": self.observed[row],
                "n": self.n[row].astype(int),
            }
        )

    def widest(self, row: int = 0) -> tuple[str, float]:
        """(the benchmark with the widest interval, its width in points)."""
        width = (self.hi[row] - self.lo[row]) * 100
        b = int(np.argmax(width))
        return self.benchmarks[b], float(width[b])


def _mixture_betabinom_quantile(
    w: np.ndarray, a: np.ndarray, b: np.ndarray, unseen: np.ndarray, q: float
) -> np.ndarray:
    """The smallest integer k in [0, U] with sum_j w_j BetaBinom(U, a_j, b_j).cdf(k) >= q, per cell (bisection)."""
    lo, hi = np.full(unseen.shape, -1, np.int64), unseen.astype(np.int64).copy()  # cdf(lo) < q <= cdf(hi)
    U = unseen[..., None]
    while np.any(hi - lo > 1):
        mid = (lo + hi) // 2
        below = (w * stats.betabinom.cdf(mid[..., None], U, a, b)).sum(axis=-1) < q
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return hi


def capability_of(
    post: CellPosterior,
    coding: Benchmarks,
    *,
    rate_only: np.ndarray | None = None,
    level: float = LEVEL,
    samples: int = 64,
    seed: int = 0,
) -> Capability:
    """Capability of the M models of a benchmark posterior (cells (M, K) in ``coding``'s order): the accuracy over
    each benchmark's N_b queries (module docstring); ``rate_only`` (K,) or (M, K): cells estimated as the rate itself
    (a benchmark the pool never saw)."""
    right, count, size = post.right, post.count, coding.size
    unseen = np.maximum(np.rint(size - count), 0).astype(np.int64)  # (M, K)
    w, a, b = post.components()  # (M, K, 2)
    rate = (w * a / (a + b)).sum(axis=-1)
    estimate = (right + unseen * rate) / size
    tail = (1 - level) / 2
    lo = (right + _mixture_betabinom_quantile(w, a, b, unseen, tail)) / size
    hi = (right + _mixture_betabinom_quantile(w, a, b, unseen, 1 - tail)) / size
    rng = np.random.default_rng(seed)
    M, K = rate.shape
    pick = (rng.random((M, samples, K)) < w[:, None, :, 1]).astype(np.int64)[..., None]
    theta = rng.beta(
        np.take_along_axis(np.broadcast_to(a[:, None], (M, samples, K, 2)), pick, -1)[..., 0],
        np.take_along_axis(np.broadcast_to(b[:, None], (M, samples, K, 2)), pick, -1)[..., 0],
    )
    draws = (right[:, None, :] + rng.binomial(unseen[:, None, :], theta)) / size
    if rate_only is not None:
        only = np.broadcast_to(np.asarray(rate_only, bool), rate.shape)
        r_lo, r_hi = post.interval(level)
        estimate, lo, hi = np.where(only, rate, estimate), np.where(only, r_lo, lo), np.where(only, r_hi, hi)
        draws = np.where(only[:, None, :], theta, draws)
    return Capability(
        benchmarks=tuple(coding.names),
        estimate=estimate,
        lo=np.minimum(lo, estimate),
        hi=np.maximum(hi, estimate),
        observed=observed_rate(right, count),
        n=count.copy(),
        draws=draws,
    )


def benchmark_posterior(
    prior_mean: np.ndarray,
    prior_var: np.ndarray | float,
    sets: Sequence[EvaluationSet],
    coding: Benchmarks,
    *,
    robust: float = ROBUST_WEIGHT,
) -> CellPosterior:
    """The (M, K) benchmark cells' posterior: prior means (M, K), their measured error (K,) or (M, K), and each
    set's observed answers (the sums and counts per benchmark: the update, all at once); its flat part centred on
    the prior mean (a benchmark never asked keeps the prior's mean)."""
    post = CellPosterior.from_prior(prior_mean, prior_var, robust=robust, centred=True)
    _, right, count = coding.counts(sets)
    post.right += right
    post.count += count
    return post


def beta_binomial_capability(
    prior_mean: np.ndarray,
    prior_var: np.ndarray | float,
    sets: Sequence[EvaluationSet],
    benchmarks: np.ndarray,
    *,
    samples: int = 64,
    seed: int = 0,
    robust: float = ROBUST_WEIGHT,
) -> Capability:
    """Capability from any scorer's Beta priors (means (M, K), variances (K,) or (M, K)) and each model's observed
    answers (sets: query indices into benchmarks (Q,), scores in [0, 1]): benchmark_posterior, then capability_of."""
    coding = Benchmarks.of(benchmarks)
    return capability_of(
        benchmark_posterior(prior_mean, prior_var, sets, coding, robust=robust), coding, samples=samples, seed=seed
    )


def accuracy_from_proba(
    proba_draws: np.ndarray,
    sets: Sequence[EvaluationSet],
    benchmarks: np.ndarray,
    *,
    level: float = LEVEL,
    seed: int = 0,
) -> Capability:
    """Capability from P(correct) draws (M, S, Q) over every pool query: observed answers count as themselves, the
    unobserved queries add their binomial sampling; the interval is the draws' central ``level`` share. Any method
    that gives P(correct) (S = 1 where it has no spread: then BINOMIAL_DRAWS of the binomial part) is scored so."""
    coding = Benchmarks.of(benchmarks)
    if proba_draws.shape[1] == 1:  # no spread of its own: draws of the binomial part alone
        proba_draws = np.repeat(proba_draws, BINOMIAL_DRAWS, axis=1)
    seen, total, count = coding.counts(sets)
    p = proba_draws.astype(np.float64) * (~seen)[:, None, :]  # (M, S, Q): the unobserved queries
    mean_part, var_part = p @ coding.onehot, (p * (1 - p)) @ coding.onehot  # (M, S, K)
    rng = np.random.default_rng(seed)
    draws = (total[:, None, :] + mean_part + np.sqrt(var_part) * rng.standard_normal(mean_part.shape)) / coding.size
    tail = (1 - level) / 2
    return Capability(
        benchmarks=tuple(coding.names),
        estimate=(total + mean_part.mean(axis=1)) / coding.size,
        lo=np.quantile(draws, tail, axis=1),
        hi=np.quantile(draws, 1 - tail, axis=1),
        observed=observed_rate(total, count),
        n=count,
        draws=draws,
    )


__all__ = [
    "BINOMIAL_DRAWS",
    "Capability",
    "accuracy_from_proba",
    "benchmark_posterior",
    "beta_binomial_capability",
    "capability_of",
]

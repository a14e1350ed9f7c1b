"""The pool's low-rank prior and empirical Bayes per benchmark on it (locus_model.estimates.lowrank, capability): on
pools with known truth, intervals whose prior width is measured by simulation cover near nominal, the estimate goes
from the prior to the observed accuracy as answers arrive, the low-rank completion recovers a low-rank pool and
takes queries no pool model answered without a refit, and the prior's error between two measured sizes is their
interpolation in log n."""

from __future__ import annotations

import numpy as np
import pytest

from locus_model.estimates import (
    LEVEL,
    LowRank,
    LowRankPrior,
    benchmark_means,
    beta_binomial_capability,
    draw_sets,
    simulate_prior_error,
)
from locus_model.estimates.lowrank import at_powers_of_two

BENCH = np.array(["a", "b", "c", "d"])[np.arange(400) % 4]  # 100 queries each


def pool(n_models: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(answers (M, 400), the models' rates (M, 4)): each model's rate per benchmark, answers drawn from it."""
    rate = np.clip(rng.beta(4, 4, size=(n_models, 1)) + rng.normal(scale=0.08, size=(n_models, 4)), 0.02, 0.98)
    codes = np.unique(BENCH, return_inverse=True)[1]
    return (rng.random((n_models, len(BENCH))) < rate[:, codes]).astype(np.float32), rate


def noisy_prior(rate: np.ndarray, scale: float, seed: int):
    """A scorer that knows each model's rate per benchmark up to N(0, scale^2) (not the luck of its answers)."""
    return lambda rows, sets: np.clip(
        rate[rows] + np.random.default_rng(seed + len(sets)).normal(scale=scale, size=(len(rows), 4)), 0.01, 0.99
    )


def test_intervals_from_a_measured_prior_error_cover_near_nominal():
    rng = np.random.default_rng(0)
    train, train_rate = pool(300, rng)
    test, test_rate = pool(400, rng)
    tau = simulate_prior_error(noisy_prior(train_rate, 0.06, 1), train, BENCH, 16, seed=2)
    assert np.all(np.abs(np.sqrt(tau) - 0.06) < 0.01)  # the scorer's error, the answers' luck taken out
    sets = draw_sets(test, 16, np.random.default_rng(3))
    cap = beta_binomial_capability(noisy_prior(test_rate, 0.06, 4)(np.arange(len(test)), sets), tau, sets, BENCH)
    truth = benchmark_means(test, BENCH)
    coverage = ((truth >= cap.lo - 1e-9) & (truth <= cap.hi + 1e-9)).mean()
    assert abs(coverage - LEVEL) < 0.04, coverage
    assert np.all(cap.lo <= cap.estimate) and np.all(cap.estimate <= cap.hi)
    assert cap.draws.shape == (len(test), 64, 4)


def test_with_more_answers_the_estimate_goes_to_the_observed_accuracy():
    rng = np.random.default_rng(5)
    answers, _ = pool(50, rng)
    prior = np.full((50, 4), 0.5)
    gaps, to_observed = [], []
    for n in (8, 80, 400):
        sets = draw_sets(answers, n, np.random.default_rng(6))
        cap = beta_binomial_capability(prior, np.full(4, 0.01), sets, BENCH)
        gaps.append(np.abs(cap.estimate - benchmark_means(answers, BENCH)).mean())
        to_observed.append(np.nanmean(np.abs(cap.estimate - cap.observed)))
    assert gaps[0] > gaps[1] > gaps[2] and gaps[2] < 1e-6  # every query observed: it is the observed accuracy
    assert to_observed[0] > to_observed[1] > to_observed[2]
    assert np.allclose(cap.hi - cap.lo, 0.0) and cap.frame(0)["n"].tolist() == [100, 100, 100, 100]


def test_a_benchmark_never_asked_gets_the_prior_with_its_width():
    sets = [(np.array([0, 4, 8]), np.array([1.0, 1.0, 0.0]))]  # only benchmark "a" asked
    cap = beta_binomial_capability(np.array([[0.5, 0.3, 0.7, 0.9]]), np.full(4, 0.0025), sets, BENCH)
    np.testing.assert_allclose(cap.estimate[0, 1:], [0.3, 0.7, 0.9], atol=1e-9)
    # about 2 x 1.645 x 0.05 = 0.16 from the informed part; the flat part's 5% widens the tails a little
    assert np.isnan(cap.observed[0, 1]) and 0.1 < (cap.hi - cap.lo)[0, 1] < 0.3


def test_low_rank_completes_a_low_rank_pool_and_its_prior_error_is_small():
    rng = np.random.default_rng(7)
    left, right = rng.normal(size=(120, 2)), rng.normal(size=(2, 400))
    scores = (1 / (1 + np.exp(-(left @ right)))).astype(np.float32)
    fit = LowRank.fit(scores[:100], rank=4, alpha=1e-3)
    sets = draw_sets(scores[100:], 30, rng)
    assert np.abs(fit.proba(sets) - scores[100:]).mean() < 0.03
    answers = (rng.random(scores.shape) < scores).astype(np.float32)
    tau = LowRankPrior.fit(answers, BENCH, rank=4, seed=8).prior_error(64)
    assert np.all(np.sqrt(tau) < 0.08)  # it reads every benchmark from answers on all of them


def test_a_query_no_pool_model_answered_joins_the_completion_as_a_refit_would_give_it() -> None:
    scores = np.array([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0], [1.0, 1.0, 0.0]], np.float32)
    wider = np.concatenate([scores, np.full((3, 1), np.nan, np.float32)], axis=1)
    fit, refit = LowRank.fit(scores, rank=2).extended(1), LowRank.fit(wider, rank=2)
    # the new column: the pool's mean of the query means (2/3 + 1/3 + 2/3) / 3 = 5/9, no component
    assert fit.mean[-1] == pytest.approx(5 / 9) and np.all(fit.basis[-1] == 0.0)
    np.testing.assert_allclose(fit.mean, refit.mean, atol=1e-12)
    np.testing.assert_allclose(np.abs(fit.basis), np.abs(refit.basis), atol=1e-9)  # up to each component's sign


def test_the_prior_error_between_two_powers_of_two_is_their_interpolation_in_log_n() -> None:
    rng = np.random.default_rng(9)
    answers, _ = pool(40, rng)
    prior = LowRankPrior.fit(answers, BENCH, rank=4, seed=2)
    e16, e32 = prior.error_at(16), prior.error_at(32)
    t = np.log2(24 / 16)  # 0.585: 24 answers are 58.5% of the way from 16 to 32 in log n
    np.testing.assert_allclose(prior.error_at(24), (1 - t) * e16 + t * e32)
    assert sorted(k[0] for k in prior.errors) == [16, 32]  # measured at the powers of two only


def test_errors_between_powers_of_two_are_linear_in_log2_n_and_measured_only_there():
    """at_powers_of_two, the one interpolation of the prior's and the router's measured errors."""
    asked: list[int] = []

    def at(k: int) -> np.ndarray:
        asked.append(k)
        return np.array([float(k)])

    assert at_powers_of_two(8, at).tolist() == [8.0] and asked == [8]  # a power of two: measured as is
    asked.clear()
    assert at_powers_of_two(12, at)[0] == pytest.approx(8 + (16 - 8) * np.log2(12 / 8))  # 0.585 of the way
    assert asked == [8, 16]
    asked.clear()
    assert at_powers_of_two(0, at).tolist() == [1.0] and set(asked) <= {1, 2}  # below 1 reads as 1

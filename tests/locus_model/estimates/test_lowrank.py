"""Per-benchmark accuracy by empirical Bayes (locus_model.benchmark_bayes): on pools with known truth, intervals whose
prior width is measured by simulation cover near nominal, the estimate goes from the prior to the observed accuracy as
answers arrive, the low-rank completion recovers a low-rank pool, and its prior fitted once estimates at any n
without fitting again."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from locus_model.benchmark_bayes import (LowRank, LowRankPrior, beta_binomial_capability, benchmark_means, draw_sets,
                                         simulate_prior_error)
from locus_model.estimates import LEVEL

BENCH = np.array(["a", "b", "c", "d"])[np.arange(400) % 4]  # 100 queries each


def pool(n_models: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(answers (M, 400), the models' rates (M, 4)): each model's rate per benchmark, answers drawn from it."""
    rate = np.clip(rng.beta(4, 4, size=(n_models, 1)) + rng.normal(scale=0.08, size=(n_models, 4)), 0.02, 0.98)
    codes = np.unique(BENCH, return_inverse=True)[1]
    return (rng.random((n_models, len(BENCH))) < rate[:, codes]).astype(np.float32), rate


def noisy_prior(rate: np.ndarray, scale: float, seed: int):
    """A scorer that knows each model's rate per benchmark up to N(0, scale^2) (not the luck of its answers)."""
    return lambda rows, sets: np.clip(rate[rows] + np.random.default_rng(seed + len(sets)).normal(
        scale=scale, size=(len(rows), 4)), 0.01, 0.99)


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
    assert np.isnan(cap.observed[0, 1]) and 0.1 < (cap.hi - cap.lo)[0, 1] < 0.25  # about 2 x 1.645 x 0.05


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


def test_a_low_rank_prior_fitted_once_gives_the_per_call_estimates_and_fits_nothing_more(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(9)
    answers, _ = pool(80, rng)
    answers[rng.random(answers.shape) < 0.1] = np.nan  # cells not asked
    small, large = draw_sets(answers[:3], 8, rng), draw_sets(answers[:3], 40, rng)
    expected = [LowRankPrior.fit(answers[3:], BENCH, rank=4, seed=2).capability(sets, seed=2)  # fitted afresh
                for sets in (small, large)]
    real, fits = LowRank.fit.__func__, []

    def counted(cls, *args, **kwargs):
        fits.append(1)
        return real(cls, *args, **kwargs)

    monkeypatch.setattr(LowRank, "fit", classmethod(counted))
    prior = LowRankPrior.fit(answers[3:], BENCH, rank=4, seed=2)
    got = [prior.capability(small, seed=2)]
    assert len(fits) == 11  # the pool's completion and the inner split's ten
    got += [prior.capability(large, seed=2), prior.capability(small, seed=2)]
    assert len(fits) == 11 and len(prior.errors) == 2  # another n: only its tau^2 measured, on the same fits
    for cap, want in zip(got, [*expected, expected[0]]):
        for row in range(3):
            pd.testing.assert_frame_equal(cap.frame(row), want.frame(row))
        np.testing.assert_array_equal(cap.draws, want.draws)
    afresh = LowRankPrior.fit(answers[3:], BENCH, rank=4, seed=2)
    np.testing.assert_array_equal(prior.prior_error(8), afresh.prior_error(8))

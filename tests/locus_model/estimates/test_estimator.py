"""The estimator of a newcomer (locus_model.estimates.Estimator) on small pools with known truth: answers that
contradict the pool's prior keep their plausible range inside the interval, no interval has zero width where
something is unknown, one answer at a time is the same posterior as all at once, and nothing after ``fit`` fits
again (estimates at any n, refreshes, queries the pool never answered)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from locus_model.estimates import Estimator, EstimatorConfig, LowRank, draw_sets

BENCH = np.array(["a", "b", "c", "d"])[np.arange(400) % 4]  # 100 queries each


def pool(n_models: int, seed: int) -> np.ndarray:
    """(M, 400) answers of middling models (rates 0.3-0.7 per benchmark)."""
    rng = np.random.default_rng(seed)
    rate = np.clip(rng.uniform(0.3, 0.7, size=(n_models, 1)) + rng.normal(scale=0.05, size=(n_models, 4)), 0.05, 0.95)
    return (rng.random((n_models, 400)) < rate[:, np.arange(400) % 4]).astype(np.float32)


@pytest.fixture(scope="module")
def estimator() -> Estimator:
    return Estimator(EstimatorConfig(rank=4, seed=1)).fit(pool(60, 0), BENCH)


@pytest.mark.parametrize("score", [1.0, 0.0])
def test_answers_that_contradict_the_pool_keep_their_plausible_range(estimator: Estimator, score: float) -> None:
    idx = np.sort(np.random.default_rng(2).choice(400, 128, replace=False))
    cap = estimator.estimate([(idx, np.full(128, score, np.float32))])
    n = cap.n[0]
    assert n.sum() == 128
    for k in range(4):  # the one-sided 95% Clopper-Pearson bound of all-right (all-wrong) answers of n: 0.05^(1/n)
        bound = 0.05 ** (1 / n[k])
        if score == 1.0:
            assert cap.hi[0, k] >= bound, (k, cap.hi[0, k], bound)
        else:
            assert cap.lo[0, k] <= 1 - bound, (k, cap.lo[0, k], 1 - bound)
    assert np.all(cap.hi - cap.lo > 0)


def test_a_benchmark_the_pool_never_saw_gets_the_rates_interval_not_zero_width(estimator: Estimator) -> None:
    wider = estimator.extended(np.array(["new"] * 10))
    assert wider.benchmarks == ("a", "b", "c", "d", "new")
    idx = np.concatenate([np.arange(0, 40, 4), 400 + np.arange(10)])  # 10 of "a", all 10 of "new"
    cap = wider.estimate([(idx, np.concatenate([np.ones(10), np.r_[np.ones(5), np.zeros(5)]]).astype(np.float32))])
    lo, hi = cap.lo[0, 4], cap.hi[0, 4]
    # its rate from 5 of 10 under a flat prior (the pool knows nothing there): Beta(6, 6)'s 90% interval 0.27-0.73
    assert cap.estimate[0, 4] == pytest.approx(0.5, abs=0.01)
    assert lo == pytest.approx(stats.beta.ppf(0.05, 6, 6), abs=0.05) and hi == pytest.approx(
        stats.beta.ppf(0.95, 6, 6), abs=0.05
    )
    assert np.all(cap.hi[0] - cap.lo[0] > 0.01)


def test_every_query_observed_is_the_accuracy_itself(estimator: Estimator) -> None:
    cap = estimator.estimate([(np.arange(400), np.tile(np.array([1, 0, 1, 1], np.float32), 100))])
    np.testing.assert_allclose(cap.estimate[0], [1.0, 0.0, 1.0, 1.0])
    np.testing.assert_allclose(cap.hi[0] - cap.lo[0], 0.0)  # known, not estimated


def test_one_answer_at_a_time_is_all_at_once(estimator: Estimator) -> None:
    ((idx, scores),) = draw_sets(pool(1, 3), 40, np.random.default_rng(4))
    batch = estimator.posterior([(idx, scores)])
    online = estimator.empty_posterior()
    for q, s in zip(idx, scores):
        estimator.observe(online, 0, int(q), float(s))
    estimator.refresh(online, 0, (idx, scores))
    for name in ("prior_mean", "prior_var", "right", "count"):
        np.testing.assert_allclose(getattr(online, name), getattr(batch, name), err_msg=name)
    np.testing.assert_allclose(estimator.capability(online).estimate, estimator.capability(batch).estimate)


def test_nothing_after_fit_fits_again(monkeypatch: pytest.MonkeyPatch) -> None:
    fitted = Estimator(EstimatorConfig(rank=4, folds=3, seed=1)).fit(pool(30, 5), BENCH)
    real, fits = vars(LowRank)["fit"].__func__, []  # the classmethod's function

    def counted(cls, *args, **kwargs):
        fits.append(1)
        return real(cls, *args, **kwargs)

    monkeypatch.setattr(LowRank, "fit", classmethod(counted))
    rng = np.random.default_rng(6)
    for n in (8, 20, 64):
        sets = draw_sets(pool(2, 7), n, rng)
        fitted.estimate(sets)
        post = fitted.posterior(sets[:1])
        fitted.refresh(post, 0, sets[0])
    fitted.extended(np.array(["new"])).estimate([(np.array([0, 400]), np.array([1.0, 0.0], np.float32))])
    assert fits == []


def test_off_the_pools_questions_the_prior_is_the_pools_mean_with_the_pools_spread(estimator: Estimator) -> None:
    wider = estimator.extended(np.array(["a"] * 10))  # ten more queries of "a" that no pool model answered
    post = wider.posterior([(np.arange(400, 410), np.ones(10, np.float32))])
    # nothing to project: the completion's mean, its error that of the pool's mean (measured at n = 0), not at n = 10
    np.testing.assert_allclose(post.prior_var[0], np.maximum(wider.prior_.prior_error(0), 1e-4))
    assert np.all(wider.prior_.prior_error(0) > wider.prior_.error_at(16))


def test_with_the_router_off_pool_a_newcomer_off_the_pools_questions_reads_the_routers_prior() -> None:
    from tests.locus_model.tiny_locus import D, one_group_router, tiny_model

    rng = np.random.default_rng(8)
    enc = rng.normal(size=(410, D)).astype(np.float32)
    est = Estimator(EstimatorConfig(rank=4, seed=1, reps=1, off_pool="router")).fit(
        pool(30, 9), BENCH, router=one_group_router(tiny_model()), encodings=enc[:400]
    )
    wider = est.extended(np.array(["a"] * 10), enc[400:])  # ten more queries of "a" that no pool model answered
    off = (np.arange(400, 410), np.ones(10, np.float32))
    on = (np.arange(0, 40, 4), np.ones(10, np.float32))
    assert wider.off_pool([off, on]).tolist() == [True, False]
    post = wider.posterior([off, on])
    np.testing.assert_allclose(post.prior_mean[0], np.clip(wider.router_means([off])[0], 0.005, 0.995))
    np.testing.assert_allclose(post.prior_var[0], np.maximum(wider.router_error_at(10), 1e-4))
    np.testing.assert_allclose(
        post.prior_var[1], np.maximum(wider.prior_.error_at(10, means=post.prior_mean[1:], share=0.25)[0], 1e-4)
    )
    assert sorted(wider.router_errors_) == [("router", 8), ("router", 16)]  # the powers of two around 10 only
    default = Estimator(EstimatorConfig(rank=4, seed=1)).fit(
        pool(30, 9), BENCH, router=one_group_router(tiny_model()), encodings=enc[:400]
    )
    assert default.extended(np.array(["a"] * 10), enc[400:]).off_pool([off]).tolist() == [False]  # off by default


@pytest.mark.parametrize("score", [1.0, 0.0])
def test_128_answers_over_14_categories_keep_their_plausible_range(score: float) -> None:
    # the hostile round's case: MMLU-Pro's 14 categories, 128 answers all right (all wrong), 4-12 per category
    bench = np.array([f"c{i:02d}" for i in range(14)])[np.arange(1400) % 14]
    rng = np.random.default_rng(0)
    rate = np.clip(rng.uniform(0.3, 0.7, size=(60, 1)) + rng.normal(scale=0.05, size=(60, 14)), 0.05, 0.95)
    answers = (rng.random((60, 1400)) < rate[:, np.arange(1400) % 14]).astype(np.float32)
    idx = np.sort(np.random.default_rng(2).choice(1400, 128, replace=False))
    cap = Estimator(EstimatorConfig(seed=1)).fit(answers, bench).estimate([(idx, np.full(128, score, np.float32))])
    bound = 0.05 ** (1 / cap.n[0])  # all right in n: the rate is above this with 95% confidence
    assert (cap.hi[0] >= bound).all() if score == 1.0 else (cap.lo[0] <= 1 - bound).all()


def test_the_ability_prior_shifts_the_pools_means_by_the_newcomers_accuracy(estimator: Estimator) -> None:
    est = Estimator(EstimatorConfig(rank=4, seed=1, off_pool="ability")).fit(pool(60, 0), BENCH)
    wider = est.extended(np.array(["a", "b", "c", "d"] * 5))  # 20 queries no pool model answered, 5 per benchmark
    off = (np.arange(400, 420), np.r_[np.ones(15), np.zeros(5)].astype(np.float32))  # 15 of 20 right
    base = wider.coding_.means(wider.prior_.full.mean[None].astype(np.float64))[0]  # its 20 at the pool mean
    expected = (wider.prior_.full.mean[400:420].sum() + 0.5) / 21  # the pool's mean on questions it never saw
    logit = lambda p: np.log(p / (1 - p))  # noqa: E731
    want = 1 / (1 + np.exp(-(logit(base) + logit(15.5 / 21) - logit(expected))))
    np.testing.assert_allclose(wider.ability_means([off])[0], want)
    assert np.all(want > base)  # 75% right against a pool at about 50%: above the pool's mean everywhere
    post = wider.posterior([off])
    np.testing.assert_allclose(post.prior_mean[0], np.clip(wider.ability_means([off])[0], 0.005, 0.995))

"""Adaptive query selection: the posterior over pool models, the information gain, and the choice of questions."""

from __future__ import annotations

import numpy as np
import pytest

from bench.adaptive import SelectionConfig, information_gain, next_queries, pool_posterior


def pool(seed: int = 0, M: int = 6, Q: int = 200) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0.02, 0.98, size=(M, Q))


def test_no_answers_give_the_uniform_posterior() -> None:
    assert np.allclose(pool_posterior(pool(), np.empty(0, int), np.empty(0)), 1 / 6)


def test_the_posterior_finds_the_model_that_answered() -> None:
    P = pool()
    rng = np.random.default_rng(1)
    asked = np.arange(120)
    scores = (rng.uniform(size=120) < P[3, asked]).astype(float)
    w = pool_posterior(P, asked, scores, uniform_mix=0.1)
    assert w.argmax() == 3 and w.sum() == pytest.approx(1.0) and w.min() >= 0.1 / 6 - 1e-12


def test_information_gain_is_zero_where_the_models_agree_and_largest_where_confident_models_disagree() -> None:
    P = np.array([[0.5, 0.99, 0.7], [0.5, 0.01, 0.7]])
    gain = information_gain(P, np.array([0.5, 0.5]))
    assert gain[0] == pytest.approx(0.0, abs=1e-9) and gain[2] == pytest.approx(0.0, abs=1e-9)
    assert gain[1] == pytest.approx(np.log(2), abs=0.1)


@pytest.mark.parametrize("strategy", ["adaptive", "fixed", "random"])
def test_next_queries_never_repeats_and_is_deterministic(strategy: str) -> None:
    P, config = pool(), SelectionConfig(strategy=strategy, seed=3)
    asked = np.array([0, 5, 7])
    scores = np.array([1.0, 0.0, 1.0])
    first = next_queries(P, asked, scores, 10, config)
    assert len(first) == 10 and not set(first) & set(asked) and len(set(first)) == 10
    assert np.array_equal(first, next_queries(P, asked, scores, 10, config))
    assert len(next_queries(P, np.arange(195), np.zeros(195), 10, config)) == 5  # only 5 left


def test_fixed_ignores_the_answers_and_adaptive_follows_them() -> None:
    P, asked = pool(), np.arange(40)
    right, wrong = np.ones(40), np.zeros(40)
    fixed = SelectionConfig(strategy="fixed")
    assert np.array_equal(next_queries(P, asked, right, 8, fixed), next_queries(P, asked, wrong, 8, fixed))
    adaptive = SelectionConfig(strategy="adaptive")
    assert not np.array_equal(next_queries(P, asked, right, 8, adaptive), next_queries(P, asked, wrong, 8, adaptive))


def test_an_unknown_strategy_is_refused() -> None:
    with pytest.raises(ValueError, match="adaptive, fixed, random"):
        SelectionConfig(strategy="greedy")

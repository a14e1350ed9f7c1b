"""The adaptive choice of onboarding questions (locus_model.estimates.questions) on cases small enough to check by
hand."""

from __future__ import annotations

import numpy as np
import pytest

from locus_model.estimates import Capability, z_of
from locus_model.estimates.questions import answer_gain, choose_adaptive, factor_gain, random_order, stop_reached

# two posterior draws of P(correct) on three queries: q0 and q1 of benchmark 0, q2 of benchmark 1. Only q0's
# probability differs between the draws (it is what the embedding's uncertainty is about).
DRAWS = np.array([[0.2, 0.5, 0.5], [0.8, 0.5, 0.5]])
CODES = np.array([0, 0, 1])


def test_the_gain_is_the_linear_update_of_each_benchmarks_variance() -> None:
    gain = answer_gain(DRAWS, np.zeros(3, dtype=bool), CODES, 2)
    # q0: Cov = Cov_s(p, A_0) 0.09 + its own binomial variance 0.16 / N_0 2 = 0.17; Var(y) = 0.25 -> 0.1156
    # q1: only its own variance: 0.25 / 2 = 0.125 -> 0.0625; q2 for benchmark 1 (N = 1): 0.25 -> 0.25
    np.testing.assert_allclose(gain, [[0.1156, 0.0], [0.0625, 0.0], [0.0, 0.25]], atol=1e-12)
    seen = answer_gain(DRAWS, np.array([True, False, False]), CODES, 2)
    assert seen[0].tolist() == [0.0, 0.0]  # an answered question narrows nothing more


def test_the_widest_benchmark_gets_its_most_informative_question_first() -> None:
    gain = answer_gain(DRAWS, np.zeros(3, dtype=bool), CODES, 2)
    z2 = 2 * z_of()
    widths = np.array([z2 * np.sqrt(0.3), z2 * np.sqrt(0.2)])  # variances 0.3 and 0.2: benchmark 0 is widest
    # benchmark 0 -> q0 (0.1156 > 0.0625); its variance drops to 0.184 < 0.2: benchmark 1 -> q2; then q1
    assert choose_adaptive(gain, widths, np.ones(3, dtype=bool), 3).tolist() == [0, 2, 1]
    assert choose_adaptive(gain, widths, np.array([False, True, True]), 1).tolist() == [1]
    assert choose_adaptive(gain, widths, np.zeros(3, dtype=bool), 2).tolist() == []


def test_random_order_is_one_seeded_order_without_the_asked_and_the_failed() -> None:
    first = random_order(10, np.empty(0), np.empty(0), 10)
    assert sorted(first.tolist()) == list(range(10))
    rest = random_order(10, first[:3], first[3:4], 10)
    assert rest.tolist() == first[4:].tolist()


def test_the_stopping_rule_needs_every_interval_narrower_than_the_points() -> None:
    cap = Capability(
        benchmarks=("a", "b"),
        estimate=np.array([[0.5, 0.5]]),
        lo=np.array([[0.45, 0.40]]),
        hi=np.array([[0.55, 0.60]]),
        observed=np.full((1, 2), np.nan),
        n=np.zeros((1, 2)),
        draws=np.zeros((1, 1, 2)),
    )
    assert cap.widest() == ("b", pytest.approx(20.0))
    assert stop_reached(cap, 20.5) and not stop_reached(cap, 19.5) and not stop_reached(cap, None)


def test_the_stratified_trial_takes_the_widest_benchmarks_next_question_in_the_random_order() -> None:
    gain = answer_gain(DRAWS, np.zeros(3, dtype=bool), CODES, 2)
    z2 = 2 * z_of()
    widths = np.array([z2 * np.sqrt(0.3), z2 * np.sqrt(0.2)])
    # the order puts q1 first: benchmark 0 -> q1 (variance 0.3 - 0.0625 = 0.2375, still widest) -> q0 -> then q2
    picks = choose_adaptive(gain, widths, np.ones(3, dtype=bool), 3, codes=CODES, rank=np.array([1, 0, 2]))
    assert picks.tolist() == [1, 0, 2]


def test_the_factor_gain_is_the_ridge_posteriors_linear_update() -> None:
    # one factor (r = 1), basis rows 1, 1, 0 for q0, q1 (benchmark 0) and q2 (benchmark 1); q0 asked; alpha 1;
    # every P = 0.5: v = 0.25, Sigma = 0.25 / (1 + 1) = 0.125
    basis, p, seen = np.array([[1.0], [1.0], [0.0]]), np.full(3, 0.5), np.array([True, False, False])
    gain = factor_gain(basis, p, seen, CODES, 2, alpha=1.0)
    # q1 on benchmark 0: Cov = B_1 Sigma (B_1 / N_0 = 1 / 2) + v / N_0 = 0.0625 + 0.125 = 0.1875; Var(y) = 0.125 +
    # 0.25 = 0.375 -> 0.09375; q2 tells nothing of benchmark 0 (no factor) and all of benchmark 1: 0.25^2 / 0.25
    np.testing.assert_allclose(gain, [[0.0, 0.0], [0.09375, 0.0], [0.0, 0.25]], atol=1e-12)

"""CellPosterior: the robust Beta posterior of per-cell rates, checked on hand-made cases."""

import numpy as np
import pytest

from locus_model.estimates import CellPosterior


def test_no_answers_is_the_prior_and_its_interval_has_width() -> None:
    post = CellPosterior.from_prior(np.array([[0.7]]), 0.01, robust=0.0)
    assert post.mean()[0, 0] == pytest.approx(0.7)
    lo, hi = post.interval(0.9)
    # Beta(0.7 s, 0.3 s), s = 0.21 / 0.01 - 1 = 20: sd = sqrt(0.21 / 21) = 0.1, the 90% interval about +-0.165
    assert hi[0, 0] - lo[0, 0] == pytest.approx(0.33, abs=0.02)


def test_answers_that_contradict_the_prior_win_through_the_flat_part() -> None:
    post = CellPosterior.from_prior(np.full((2, 1), 0.5), 0.0025)  # a confident prior: sd 0.05
    for _ in range(128):
        post.observe(0, 0, 1.0)
        post.observe(1, 0, 0.0)
    lo, hi = post.interval(0.9)
    assert hi[0, 0] > 0.99 and lo[0, 0] > 0.95  # 128 of 128 right: 1.0 is inside, 0.5 far outside
    assert lo[1, 0] < 0.01 and hi[1, 0] < 0.05
    confident = CellPosterior.from_prior(np.full((1, 1), 0.5), 0.0025, robust=0.0)
    for _ in range(128):
        confident.observe(0, 0, 1.0)
    assert confident.interval(0.9)[1][0, 0] < 0.9  # without the flat part the prior would exclude 1.0


def test_agreeing_answers_keep_the_informed_part_and_narrow_it() -> None:
    post = CellPosterior.from_prior(np.array([[0.6]]), 0.01)
    for i in range(100):
        post.observe(0, 0, float(i % 5 < 3))  # 60% right
    w, _, _ = post.components()
    assert w[0, 0, 0] > 0.95
    lo, hi = post.interval(0.9)
    assert lo[0, 0] < 0.6 < hi[0, 0] and hi[0, 0] - lo[0, 0] < 0.2


def test_one_by_one_equals_many_at_once_and_forgetting_discounts() -> None:
    a = CellPosterior.from_prior(np.full((2, 3), 0.5), 0.02)
    b = a.copy()
    m, k, s = np.array([0, 1, 1, 0]), np.array([2, 0, 0, 1]), np.array([1.0, 0.0, 0.5, 1.0])
    for i in range(4):
        a.observe(int(m[i]), int(k[i]), float(s[i]))
    b.observe_many(m, k, s)
    np.testing.assert_allclose(a.mean(), b.mean())
    c = CellPosterior.from_prior(np.full((1, 1), 0.5), 0.02)
    c.observe(0, 0, 1.0)
    c.observe(0, 0, 0.0, forget=0.5)
    assert c.count[0, 0] == pytest.approx(1.5) and c.right[0, 0] == pytest.approx(0.5)


def test_a_draw_follows_the_posterior() -> None:
    post = CellPosterior.from_prior(np.full((1, 1), 0.3), 0.01, robust=0.0)
    rng = np.random.default_rng(0)
    draws = np.array([post.sample(rng)[0, 0] for _ in range(4000)])
    assert draws.mean() == pytest.approx(0.3, abs=0.01) and draws.std() == pytest.approx(0.1, abs=0.01)

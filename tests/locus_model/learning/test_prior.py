"""The learner's prior per cell is what the estimator knows: wide from 32 answers, narrow from 512, the pool's prior
for a model with no evaluations; a model's graded answers become its pool row in one forward pass."""

from __future__ import annotations

import numpy as np
import pytest

from locus_model.learning import embed_graded, pool_prior, prior_variance
from tests.locus_model.tiny_locus import one_group_router, tiny_model, tiny_pool

PROFILES = np.array([[0.8, 0.6], [0.5, 0.4], [0.3, 0.7], [0.55, 0.55]])
SHARES = np.array([0.5, 0.5])


def test_wide_from_32_answers_narrow_from_512_and_the_pools_prior_without_any() -> None:
    var = prior_variance(PROFILES, np.array([32, 512, 10**6, 0]), SHARES, router_var=0.01)
    assert (var[0] > 1.7 * var[1]).all() and (var[1] < 0.012).all()  # 16 answers per group against 256
    assert var[2] == pytest.approx([0.01, 0.01], abs=1e-5)  # a trained model: the router's own error
    evaluated = np.array([True, True, True, False])
    mean_emb, mean_profile = pool_prior(PROFILES, np.eye(4), evaluated)
    np.testing.assert_allclose(mean_profile, PROFILES[:3].mean(axis=0))
    np.testing.assert_allclose(mean_emb, np.eye(4)[:3].mean(axis=0))
    assert (var[3] >= var[:3].mean(axis=0)).all()  # no evaluations: at least as wide as the pool's spread
    with pytest.raises(ValueError, match="one evaluation count per model"):
        prior_variance(PROFILES, np.array([1, 2]), SHARES, router_var=0.01)


def test_graded_answers_become_a_pool_row_in_one_forward_pass() -> None:
    model = tiny_model()
    router = one_group_router(model)
    encodings, _ = tiny_pool()
    scores = np.full(len(encodings), np.nan)
    scores[:40] = (np.arange(40) % 2).astype(float)
    embedding, profile = embed_graded(router, encodings, scores)
    rows = router.pool_rows(encodings, scores[None, :])
    np.testing.assert_allclose(embedding, rows[0][0])
    np.testing.assert_allclose(profile, rows[1][0])
    with pytest.raises(ValueError, match="no graded answer"):
        embed_graded(router, encodings, np.full(len(encodings), np.nan))

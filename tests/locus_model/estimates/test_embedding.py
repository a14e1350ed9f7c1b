"""The refined embedding (locus_model.estimates.embedding) on a tiny untrained LOCUS: the refinement raises the
likelihood of the observed answers, the router's estimates from its draws narrow as answers arrive and cover near
nominal where the answers are drawn from the predictor itself, a copy's source ranks first, and the Laplace spread's
memory grows linearly with the answers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from locus_model.estimates import (
    LEVEL,
    accuracy_from_proba,
    answer_likeness,
    embedding,
    fit_reference_map,
    reference_estimates,
    refine_embeddings,
)
from locus_model.evaluation.capability import router_capability
from locus_model.infer import embed_evaluation_sets, predict_proba
from tests.locus_model.tiny_locus import CFG, one_group_router, tiny_model, tiny_pool

pytestmark = pytest.mark.usefixtures("one_torch_thread")
BENCH = np.array(["a", "b", "c"])[np.arange(300) % 3]


def simulated(model, enc, n_models: int, scale: float, seed: int):
    """Models whose true embedding is drawn from N(centre, scale^2) and whose answers on all queries are drawn from
    the predictor there: the case the posterior is exact for, up to the Laplace approximation."""
    rng = np.random.default_rng(seed)
    centre = rng.normal(size=(n_models, CFG.d)).astype(np.float32)
    z_true = centre + scale * rng.normal(size=centre.shape).astype(np.float32)
    answers = (rng.random((n_models, len(enc))) < predict_proba(model, z_true, enc)).astype(np.float32)
    return centre, answers


def subsets(answers: np.ndarray, n: int, seed: int) -> list:
    rng = np.random.default_rng(seed)
    out = []
    for row in answers:
        idx = np.sort(rng.choice(len(row), n, replace=False))
        out.append((idx, row[idx]))
    return out


def test_refinement_raises_the_likelihood_of_the_observed_answers():
    model = tiny_model()
    enc, sets = tiny_pool()
    post = refine_embeddings(model, enc, sets, np.float32(1.0))
    assert post.mean.shape == (4, CFG.d) and post.chol.shape == (4, CFG.d, CFG.d)
    assert np.all(post.log_lik >= post.log_lik_prior - 1e-4)
    assert np.any(post.log_lik > post.log_lik_prior + 1e-3)
    np.testing.assert_array_equal(post.prior, embed_evaluation_sets(model, enc, sets))
    again = refine_embeddings(model, enc, sets, np.float32(1.0))
    np.testing.assert_array_equal(post.mean, again.mean)  # deterministic


def test_intervals_narrow_as_answers_arrive():
    model = tiny_model()
    enc, _ = tiny_pool()
    centre, answers = simulated(model, enc, 8, scale=1.0, seed=1)
    widths = []
    for n in (10, 150):
        sets = subsets(answers, n, seed=2)
        post = refine_embeddings(model, enc, sets, np.float32(1.0), z0=centre)
        cap = router_capability(one_group_router(model), enc, BENCH, post, sets, samples=64, seed=0)
        widths.append((cap.hi - cap.lo).mean())
        assert np.all(cap.lo <= cap.estimate + 1e-9) and np.all(cap.estimate <= cap.hi + 1e-9)
    assert widths[0] > 1.5 * widths[1]


def test_observed_answers_count_as_themselves():
    sets = [(np.arange(300), np.ones(300, np.float32))]  # every query observed: the estimate is the observed mean
    cap = accuracy_from_proba(np.full((1, 5, 300), 0.2), sets, BENCH)
    np.testing.assert_allclose(cap.estimate, 1.0)
    np.testing.assert_allclose(cap.hi - cap.lo, 0.0)
    assert list(cap.frame(0).columns) == ["benchmark", "estimate", "lo", "hi", "observed", "n"]
    assert cap.frame(0)["n"].tolist() == [100, 100, 100]


def test_intervals_cover_near_nominal_on_a_simulated_pool():
    model = tiny_model()
    enc, _ = tiny_pool()
    centre, answers = simulated(model, enc, 120, scale=1.5, seed=3)
    sets = subsets(answers, 30, seed=4)
    post = refine_embeddings(model, enc, sets, np.float32(1.5), z0=centre)
    cap = router_capability(one_group_router(model), enc, BENCH, post, sets, samples=200, seed=0)
    truth = np.stack([answers[:, BENCH == b].mean(axis=1) for b in cap.benchmarks], axis=1)
    coverage = ((truth >= cap.lo) & (truth <= cap.hi)).mean()
    assert abs(coverage - LEVEL) < 0.06, coverage


def test_a_copy_is_recognised_by_its_answers():
    model = tiny_model()
    enc, _ = tiny_pool()
    rng = np.random.default_rng(5)
    pool_scores = (rng.random((6, 300)) > 0.5).astype(np.float32)
    pool_z = embed_evaluation_sets(model, enc, [(np.arange(300), row) for row in pool_scores])
    copies = [(idx, pool_scores[3, idx]) for idx in [np.sort(rng.choice(300, 24, replace=False))]]
    post = refine_embeddings(model, enc, copies, np.float32(1.0))
    order, prob = answer_likeness(copies, pool_scores, pool_z, post, samples=32)
    assert order[0, 0] == 3
    np.testing.assert_allclose(prob.sum(axis=1), 1.0)


def test_reference_map_recovers_a_linear_score_and_widens_with_its_residuals():
    rng = np.random.default_rng(6)
    acc = rng.random((80, 3))
    ref = pd.DataFrame({"avg": acc.mean(axis=1) * 100, "noisy": acc[:, 0] * 50 + rng.normal(scale=2.0, size=80)})
    fitted = fit_reference_map(acc, ref)
    np.testing.assert_allclose(fitted.predict(acc)[:, 0], ref["avg"], atol=1.0)  # ridge: a little shrinkage
    assert fitted.residual_std[1] == pytest.approx(2.0, rel=0.3)
    cap = accuracy_from_proba(np.tile(acc[:1, None, None, 0], (1, 10, 300)), [(np.array([0]), np.array([1.0]))], BENCH)
    est, lo, hi = reference_estimates(cap, fitted)
    assert (hi - lo)[0, 1] > (hi - lo)[0, 0]
    with pytest.raises(ValueError, match="aligned rows without NaN"):
        fit_reference_map(acc, ref.assign(avg=np.nan))


def test_agreement_counts_only_the_questions_both_answered() -> None:
    from locus_model.estimates import answer_agreement

    pool = np.array([[1.0, 0.0, np.nan, np.nan], [np.nan, np.nan, np.nan, np.nan], [0.0, 0.0, 0.0, 1.0]])
    agree, shared = answer_agreement(pool, (np.array([0, 1, 2]), np.array([1.0, 0.0, 0.0])))
    assert shared.tolist() == [2, 0, 3]
    assert (
        agree[0] == 1.0 and np.isnan(agree[1]) and agree[2] == 2 / 3
    )  # a question one never answered is not agreement


def test_the_blocked_laplace_spread_is_the_whole_jacobians(monkeypatch: pytest.MonkeyPatch) -> None:
    model = tiny_model()
    enc, sets = tiny_pool()
    whole = refine_embeddings(model, enc, sets, np.float32(1.0))
    monkeypatch.setattr(embedding, "GN_BLOCK", 16 * 7 * 7)  # blocks of 7 queries, one model at a time
    blocked = refine_embeddings(model, enc, sets, np.float32(1.0))
    np.testing.assert_allclose(blocked.chol, whole.chol, rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(blocked.mean, whole.mean)

"""Baselines: interface, hand-checked predictions, onboarding that leaves the fitted model untouched."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from locus_model.evaluation.baselines import BestSingle, KNNConfig, KNNRouter, PerBenchmark, PerBenchmarkConfig
from locus_model.evaluation.latent import IRT, LatentConfig, MatrixFactorization
from locus_model.stats.metrics import roc_auc

FAST = LatentConfig(dim=8, hidden=16, noise=(0.05,), max_steps=400, eval_every=20, patience=100, onboard_iters=50)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def synthetic(n_models: int = 12, n_queries: int = 80, dim: int = 16, seed: int = 0):
    """Random unit encodings and 0/1 scores from a low-rank logistic model: sigmoid(theta_m . W phi_q)."""
    rng = np.random.default_rng(seed)
    enc = rng.normal(size=(n_queries, dim)).astype(np.float32)
    enc /= np.linalg.norm(enc, axis=1, keepdims=True)
    theta = rng.normal(size=(n_models, 3)) * 2.0
    w = rng.normal(size=(3, dim)) * 2.0
    logits = theta @ (w @ enc.T) + rng.normal(size=(n_models, 1))
    scores = (rng.random(logits.shape) < 1 / (1 + np.exp(-logits))).astype(np.float32)
    return enc, scores


def masked(scores: np.ndarray, cols: np.ndarray) -> np.ndarray:
    out = np.full_like(scores, np.nan)
    out[:, cols] = scores[:, cols]
    return out


def make(name: str):
    return {
        "mf": lambda: MatrixFactorization(FAST),
        "irt": lambda: IRT(FAST),
        "knn": lambda: KNNRouter(KNNConfig(ks=(3, 5))),
        "best": BestSingle,
        "bench": lambda: PerBenchmark(PerBenchmarkConfig(benchmarks=tuple("ab"[q % 2] for q in range(80)))),
    }[name]()


@pytest.mark.parametrize("name", ["mf", "irt", "knn", "best", "bench"])
def test_fit_onboard_predict_shapes(name):
    enc, scores = synthetic()
    train, val, test = np.arange(0, 50), np.arange(50, 60), np.arange(60, 80)
    method = make(name)
    method.fit(enc, masked(scores[:9], train), masked(scores[:9], val))
    assert method.n_fitted_models == 9
    rows = method.onboard(masked(scores[9:], train))
    np.testing.assert_array_equal(rows, [9, 10, 11])
    probs = method.predict_proba(np.arange(12), test)
    assert probs.shape == (12, 20) and probs.dtype == np.float32
    assert np.all((probs >= 0) & (probs <= 1))


@pytest.mark.parametrize("name", ["mf", "irt"])
def test_onboarding_freezes_everything_fitted(name):
    enc, scores = synthetic()
    train, val = np.arange(0, 60), np.arange(60, 70)
    method = make(name)
    method.fit(enc, masked(scores[:9], train), masked(scores[:9], val))
    shared = {k: v.clone() for k, v in method.net.state_dict().items()}
    vectors = method.vectors.clone()
    assert method.net.models.shape[0] == 9  # the held-out models are not in the trained network at all
    method.onboard(masked(scores[9:], train))
    for k, v in method.net.state_dict().items():
        assert torch.equal(v, shared[k]), f"onboarding changed the shared parameter {k}"
    assert torch.equal(method.vectors[:9], vectors)  # fitted models' vectors untouched
    assert method.vectors.shape == (12, method.config.dim)


@pytest.mark.parametrize("name", ["mf", "irt"])
def test_latent_baselines_learn_the_structure(name):
    enc, scores = synthetic(n_models=16, n_queries=120)
    train, val, test = np.arange(0, 80), np.arange(80, 95), np.arange(95, 120)
    method = make(name)
    method.fit(enc, masked(scores[:13], train), masked(scores[:13], val))
    rows = method.onboard(masked(scores[13:], train))
    assert roc_auc(method.predict_proba(np.arange(13), test), scores[:13, test]) > 0.7
    assert roc_auc(method.predict_proba(rows, test), scores[13:, test]) > 0.7  # onboarded models too


@pytest.mark.parametrize("name", ["mf", "irt"])
def test_onboarding_orders_strong_above_weak(name):
    enc, scores = synthetic()
    train = np.arange(0, 60)
    method = make(name)
    method.fit(enc, masked(scores, train), masked(scores, np.arange(60, 70)))
    new = np.full((2, len(enc)), np.nan, np.float32)
    new[0, train], new[1, train] = 1.0, 0.0  # always right / always wrong on its budget
    rows = method.onboard(new)
    probs = method.predict_proba(rows, np.arange(70, 80))
    assert np.all(probs[0] > probs[1])


def test_best_single_predicts_budget_mean_rates():
    enc = np.eye(4, dtype=np.float32)
    train = np.array([[1, 1, 0, np.nan], [1, 0, 0, np.nan], [np.nan, 1, 1, 1]], np.float32)
    method = BestSingle()
    method.fit(enc, train)
    np.testing.assert_allclose(method.rates, [2 / 3, 1 / 3, 1.0])
    np.testing.assert_allclose(method.predict_proba(np.array([0, 2]), np.array([0, 3])), [[2 / 3, 2 / 3], [1, 1]])
    assert method.best_row(np.arange(3)) == 2 and method.best_row(np.array([0, 1])) == 0
    rows = method.onboard(np.array([[0, 0, 0, 1]], np.float32))
    assert rows.tolist() == [3] and method.rates[3] == pytest.approx(0.25)
    with pytest.raises(ValueError, match="no evaluations"):
        method.onboard(np.full((1, 4), np.nan, np.float32))


def test_knn_hand_checked():
    # two clusters of anchor queries; with k=1 a test query sees only its nearest anchor
    enc = np.array([[1, 0], [0.99, 0.141], [0, 1], [0.141, 0.99], [0.98, 0.199], [0.2, 0.98]], np.float32)
    enc /= np.linalg.norm(enc, axis=1, keepdims=True)
    train = np.full((2, 6), np.nan, np.float32)
    train[:, :4] = [[1, 1, 0, 0], [0, 0, 1, 1]]  # model 0 good at cluster x, model 1 at cluster y
    method = KNNRouter(KNNConfig(ks=(1,), smoothing=1.0))
    method.fit(enc, train)
    probs = method.predict_proba(np.arange(2), np.array([4, 5]))
    # (hit + 1 * overall mean 0.5) / (1 + 1)
    np.testing.assert_allclose(probs, [[0.75, 0.25], [0.25, 0.75]])


def test_knn_chooses_k_on_validation():
    enc, scores = synthetic()
    method = KNNRouter(KNNConfig(ks=(1, 3, 7)))
    method.fit(enc, masked(scores, np.arange(60)), masked(scores, np.arange(60, 70)))
    assert method.k in (1, 3, 7)


def test_errors_say_what_to_do():
    enc, scores = synthetic()
    with pytest.raises(RuntimeError, match="call fit"):
        MatrixFactorization(FAST).predict_proba(np.arange(2), np.arange(3))
    with pytest.raises(ValueError, match="expected \\(models, 80\\)"):
        MatrixFactorization(FAST).fit(enc, scores[:, :10])


def test_latent_fit_is_deterministic():
    enc, scores = synthetic()
    cfg = LatentConfig(dim=8, noise=(0.05, 0.2), max_steps=60, eval_every=20, patience=100, onboard_iters=20)
    a, b = MatrixFactorization(cfg), MatrixFactorization(cfg)
    for m in (a, b):
        m.fit(enc, masked(scores, np.arange(60)), masked(scores, np.arange(60, 70)))
    np.testing.assert_array_equal(
        a.predict_proba(np.arange(12), np.arange(70, 80)), b.predict_proba(np.arange(12), np.arange(70, 80))
    )


def test_noise_level_is_chosen_on_validation():
    enc, scores = synthetic()
    cfg = LatentConfig(
        dim=8, hidden=16, noise=(0.0, 0.1, 0.3), max_steps=200, eval_every=20, patience=100, onboard_iters=20
    )
    method = IRT(cfg)
    method.fit(enc, masked(scores, np.arange(60)), masked(scores, np.arange(60, 70)))
    assert set(method.val_bce_by_noise) == {0.0, 0.1, 0.3}
    assert method.val_bce_by_noise[method.noise] == min(method.val_bce_by_noise.values())
    no_val = IRT(cfg)
    no_val.fit(enc, masked(scores, np.arange(60)))  # nothing to select on: the first level is used
    assert no_val.noise == 0.0


def test_per_benchmark_routes_each_benchmark_to_its_best_model():
    # model 0 is right on every "a" query, model 1 on every "b" query; model 2 is right on 60% of everything
    bench = np.array(["a", "b"] * 10)
    scores = np.zeros((3, 20), np.float32)
    scores[0, bench == "a"] = 1
    scores[1, bench == "b"] = 1
    scores[2, :12] = 1
    enc = np.eye(20, dtype=np.float32)
    train, test = np.arange(16), np.arange(16, 20)
    method = PerBenchmark(PerBenchmarkConfig(benchmarks=tuple(bench), smoothing=1.0))
    method.fit(enc, masked(scores, train))
    probs = method.predict_proba(np.arange(3), test)
    # smoothed benchmark means on the 8 training anchors of each benchmark: (hits + 1 * overall) / (8 + 1)
    np.testing.assert_allclose(probs[0], [(8 + 0.5) / 9, 0.5 / 9] * 2, rtol=1e-6)
    assert list(probs.argmax(axis=0)) == [0, 1, 0, 1]
    with pytest.raises(ValueError, match="benchmark labels"):
        PerBenchmark(PerBenchmarkConfig(benchmarks=("a",))).fit(enc, masked(scores, train))

"""bench/diag/: the routers of routing_headroom, the shortlists of routing_spread, the profile of embedding_profile."""

from __future__ import annotations

import numpy as np


def test_headroom_routers_find_a_planted_per_category_best_model():
    from bench.diag.routing_headroom import category_probs, logistic_probs
    from locus_model.stats.metrics import routing_accuracy

    rng = np.random.default_rng(0)
    q = 400
    bench = np.where(np.arange(q) % 2 == 0, "math", "law")
    # model 0 is right on every math query, model 1 on every law query, model 2 on 60% of all (the best single)
    scores = np.stack([(bench == "math"), (bench == "law"), rng.random(q) < 0.6]).astype(np.float32)
    scores[0, 5] = np.nan  # a missing cell is skipped, not counted as wrong
    encodings = np.where(bench[:, None] == "math", 1.0, -1.0) * np.ones((q, 4)) + rng.normal(0, 0.1, (q, 4))
    known, val, test = np.arange(0, 200), np.arange(200, 300), np.arange(300, q)
    single = np.repeat(np.nanmean(scores[:, known], axis=1)[:, None], len(test), axis=1)
    assert np.all(np.argmax(single, axis=0) == 2)  # model 2 is the best single model
    category = category_probs(scores, bench, known, test)
    assert routing_accuracy(category, scores[:, test]) == 1.0
    logistic = logistic_probs(scores, encodings.astype(np.float32), known, val, test)
    assert routing_accuracy(logistic, scores[:, test]) == 1.0
    assert routing_accuracy(single, scores[:, test]) < 0.75


def test_a_shortlist_routes_among_the_models_of_highest_mean_prediction_only():
    from bench.diag.routing_spread import shortlist_routing
    from locus_model.stats.metrics import routing_accuracy

    # model 0: the highest mean prediction, right on half the queries; model 1 predicted (and right) on the others
    labels = np.array([[1, 1, 0, 0], [0, 0, 1, 1], [0, 0, 0, 0]], np.float32)
    probs = np.array([[0.9, 0.9, 0.8, 0.8], [0.1, 0.1, 0.85, 0.85], [0.0, 0.0, 0.0, 0.0]])
    assert shortlist_routing(probs, labels, 1) == 0.5  # every query to model 0
    assert shortlist_routing(probs, labels, 2) == 1.0 == routing_accuracy(probs, labels)
    assert shortlist_routing(probs, labels, 3) == routing_accuracy(probs, labels)


def test_embedding_profile_measures_per_benchmark_deviation_and_ridge_recovers_a_linear_profile():
    from bench.diag.embedding_profile import loo_ridge, profile, r2

    bench = np.array(["a", "a", "b", "b"])
    scores = np.array([[1, 1, 0, 0], [1, 0, 1, np.nan]], dtype=np.float32)
    got = profile(scores, bench, np.arange(4))
    # model 0: 1.0 on a, 0.0 on b, 0.5 overall; model 1: 0.5 on a, 1.0 on b (its NaN skipped), 2/3 overall
    assert np.allclose(got, [[0.5, -0.5], [0.5 - 2 / 3, 1 - 2 / 3]])
    rng = np.random.default_rng(0)
    x = rng.normal(size=(30, 3))
    y = x @ rng.normal(size=(3, 4))
    assert r2(loo_ridge(x, y), y) > 0.95
    assert r2(loo_ridge(rng.normal(size=(30, 3)), y), y) < 0.2  # unrelated features predict nothing

"""bench/bench_accuracy.py's fit cache and bench/bench_onboarding_curve.py's nested onboarding sets."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import locus_model.evaluation.harness as harness  # noqa: E402
from bench.bench_accuracy import cached_fit_and_predict  # noqa: E402
from bench.bench_onboarding_curve import onboarding_scores  # noqa: E402
from tests.locus_model.evaluation.test_harness import make_table  # noqa: E402

METHODS = ("knn", "best_single", "oracle")  # no training: the test stays fast


def run(monkeypatch, cache: Path | None, only_folds) -> dict:
    if cache is not None:
        monkeypatch.setattr(harness, "fit_and_predict", cached_fit_and_predict(cache, ""))
    enc = np.random.default_rng(0).normal(size=(60, 8)).astype(np.float32)
    return harness.evaluate(make_table(), enc, budget=12, folds=3, holdout_models=0.2, methods=METHODS,
                            only_folds=only_folds, progress=False, n_boot=50)


def test_fit_cache_gives_the_uncached_result_and_folds_add_up(monkeypatch, tmp_path):
    plain = run(monkeypatch, None, None)
    run(monkeypatch, tmp_path, [0])  # fold 0 alone fills the cache for fold 0
    assert len(list(tmp_path.glob("*_f0_*.npz"))) == 2 and not list(tmp_path.glob("*_f1_*"))
    cached = run(monkeypatch, tmp_path, None)
    for name in METHODS:
        for group in ("all", "held_out"):
            for metric in ("routing_acc", "auc", "brier"):
                assert cached["methods"][name][group][metric] == pytest.approx(plain["methods"][name][group][metric])
    assert len(list(tmp_path.glob("*.npz"))) == 6  # 3 folds x 2 fitted methods, fold 0 not refitted


def test_onboarding_sets_are_nested_anchor_subsets():
    scores = np.random.default_rng(1).integers(0, 2, size=(4, 50)).astype(np.float32)
    scores[2, :10] = np.nan
    anchors = np.arange(0, 40)
    sets = onboarding_scores(scores, anchors, np.array([1, 2]), [4, 8, 40], np.random.default_rng(0))
    for i, h in enumerate([1, 2]):
        cells = [set(np.flatnonzero(~np.isnan(sets[n][i]))) for n in (4, 8, 40)]
        assert [len(c) for c in cells] == [4, 8, 40 - (10 if h == 2 else 0)]
        assert cells[0] <= cells[1] <= cells[2] <= set(anchors)
        assert np.array_equal(sets[40][i][sorted(cells[2])], scores[h, sorted(cells[2])])


def test_headroom_routers_find_a_planted_per_category_best_model():
    from bench.diag_routing_headroom import category_probs, logistic_probs
    from locus_model.evaluation.metrics import routing_accuracy

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
    from bench.diag_routing_spread import shortlist_routing
    from locus_model.evaluation.metrics import routing_accuracy

    # model 0: the highest mean prediction, right on half the queries; model 1 predicted (and right) on the others
    labels = np.array([[1, 1, 0, 0], [0, 0, 1, 1], [0, 0, 0, 0]], np.float32)
    probs = np.array([[0.9, 0.9, 0.8, 0.8], [0.1, 0.1, 0.85, 0.85], [0.0, 0.0, 0.0, 0.0]])
    assert shortlist_routing(probs, labels, 1) == 0.5  # every query to model 0
    assert shortlist_routing(probs, labels, 2) == 1.0 == routing_accuracy(probs, labels)
    assert shortlist_routing(probs, labels, 3) == routing_accuracy(probs, labels)


def test_embedding_profile_measures_per_benchmark_deviation_and_ridge_recovers_a_linear_profile():
    from bench.diag_embedding_profile import loo_ridge, profile, r2

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


def test_train_options_parse_optional_fields_as_numbers_or_none():
    from bench.bench_accuracy import apply_options

    from locus_model.train import TrainConfig

    cfg = apply_options(TrainConfig(), ["max_steps=600", "val_models=none", "epochs=24"])
    assert cfg.max_steps == 600 and cfg.val_models is None and cfg.epochs == 24
    assert apply_options(cfg, ["max_steps=None"]).max_steps is None


def test_suite_demo_is_a_deprecated_name_of_synthetic(capsys):
    from bench.bench_accuracy import parse_args, suite_name

    args = parse_args(["--suite", "demo", "ae1"])
    assert args.suite == ["synthetic", "ae1"]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--suite demo is deprecated: use --suite synthetic" in err
    assert parse_args(["--suite", "synthetic"]).suite == ["synthetic"] and capsys.readouterr().err == ""
    assert parse_args([]).suite == ["synthetic", "ae1"]
    assert suite_name("demo") == "synthetic" and suite_name("mmlu") == "mmlu"  # result files written before the rename

"""bench/common.py's fit cache and config options, and bench/bench_onboarding_curve.py's nested onboarding sets."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import locus_model.evaluation.protocol as protocol
from bench.bench_onboarding_curve import onboarding_scores
from bench.common import cached_fit_and_predict
from tests.locus_model.tables import make_table

METHODS = ("knn", "best_single", "oracle")  # no training: the test stays fast


def run(monkeypatch, cache: Path | None, only_folds) -> dict:
    if cache is not None:
        monkeypatch.setattr(protocol, "fit_and_predict", cached_fit_and_predict(cache, ""))
    enc = np.random.default_rng(0).normal(size=(60, 8)).astype(np.float32)
    return protocol.evaluate(
        make_table(),
        enc,
        budget=12,
        folds=3,
        holdout_models=0.2,
        methods=METHODS,
        only_folds=only_folds,
        progress=False,
        n_boot=50,
    )


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


def test_train_options_parse_optional_fields_as_numbers_or_none():
    from bench.common import apply_options
    from locus_model.training import TrainConfig

    cfg = apply_options(TrainConfig(), ["max_steps=600", "val_models=none", "epochs=24"])
    assert cfg.max_steps == 600 and cfg.val_models is None and cfg.epochs == 24
    assert apply_options(cfg, ["max_steps=None"]).max_steps is None

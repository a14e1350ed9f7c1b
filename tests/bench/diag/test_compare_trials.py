"""bench/diag/compare_trials.py: two LOCUS trials read from bench_accuracy's fit cache under their own keys and compared
on the same test queries, B minus A with a paired interval."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from bench.common import ProtocolSetup, fit_path
from bench.diag.compare_trials import compare
from locus_model.evaluation.splits import kfold_splits
from locus_model.model import LocusConfig
from locus_model.training import TrainConfig


def small_setup(seed: int = 0) -> ProtocolSetup:
    rng = np.random.default_rng(seed)
    scores = (rng.uniform(size=(10, 60)) < 0.5).astype(np.float32)
    return ProtocolSetup(
        matrix=None,  # type: ignore[arg-type]  # the comparison reads the scores, not the matrix
        encodings=rng.normal(size=(60, 8)).astype(np.float32),
        scores=scores,
        splits=kfold_splits(60, folds=3, budget=20, seed=seed),
        trained=np.arange(8),
        held=np.array([8, 9]),
        model_config=LocusConfig(query_dim=8),
        train_config=TrainConfig(device="cpu", seed=seed),
        seed=seed,
    )


def cache_probs(cache: Path, setup: ProtocolSetup, config: TrainConfig, probs_of) -> None:
    cache.mkdir(exist_ok=True)
    for fold in setup.splits:
        args = {**setup.fit_args("locus", fold), "train_config": config}
        np.savez(fit_path(cache, args, ""), probs=probs_of(fold), seconds=1.0)


def test_each_trial_reads_its_own_fits_and_b_minus_a_is_paired(tmp_path):
    setup = small_setup()
    a, b = replace(setup.train_config, max_steps=None), replace(setup.train_config, max_steps=600)
    flat = lambda fold: np.full((10, len(fold.test)), 0.5, np.float32)  # noqa: E731  every query to model 0
    oracle = lambda fold: setup.scores[:, fold.test]  # noqa: E731  a correct model whenever there is one
    cache_probs(tmp_path, setup, a, flat)
    cache_probs(tmp_path, setup, b, oracle)
    result = compare(setup, a, b, cache=tmp_path, n_boot=200)
    g = result["groups"]["all"]
    assert g["per_fold"]["a"]["routing_acc"] == [setup.scores[0, f.test].mean() for f in setup.splits]
    solvable = [setup.scores[:, f.test].max(axis=0).mean() for f in setup.splits]
    assert np.allclose(g["per_fold"]["b"]["routing_acc"], solvable)
    d = g["b_minus_a"]["routing_acc"]
    assert np.isclose(d["diff"], np.mean(solvable) - np.mean(g["per_fold"]["a"]["routing_acc"]))
    assert 0 < d["ci_low"] <= d["diff"] <= d["ci_high"]
    assert set(result["groups"]) == {"all", "in_training", "held_out"}


def test_the_same_trial_twice_is_a_tie_of_exactly_zero(tmp_path):
    setup = small_setup(1)
    rng = np.random.default_rng(3)
    cache_probs(tmp_path, setup, setup.train_config, lambda fold: rng.uniform(size=(10, len(fold.test))))
    d = compare(setup, setup.train_config, setup.train_config, cache=tmp_path, n_boot=100)["groups"]["all"]["b_minus_a"]
    assert d["routing_acc"] == {"diff": 0.0, "ci_low": 0.0, "ci_high": 0.0}


def test_branch_trains_once_and_caches_each_trial_as_a_separate_fit(tmp_path, monkeypatch):
    import locus_model.training.refit as refit
    from bench.common import cached_fit_and_predict

    monkeypatch.setattr(refit, "MODELS_PER_WEIGHT", 0.1)  # 8 training models: let the refit run

    setup = small_setup(2)
    setup.model_config = LocusConfig(query_dim=8, d=16, n_blocks=1, n_latents=4, n_heads=2, predictor_hidden=8)
    a = TrainConfig(
        device="cpu",
        seed=2,
        epochs=2,
        patience=2,
        select_from_epoch=0,
        latent_steps=20,
        latent_noise=(1.0,),
        finetune_steps=10,
        finetune_noise=(2.0,),
        batch_models=4,
        enc_min=4,
        enc_max=16,
        dec_batch=16,
        refit_alphas=(0.01,),
    )
    b = replace(a, refit_alphas=(1.0,))
    branched = compare(setup, a, b, cache=tmp_path / "branched", folds=[0], n_boot=50, branch=True)
    # the same fold trained alone per trial, through bench_accuracy's fit cache
    alone = tmp_path / "alone"
    for config in (a, b):
        cached_fit_and_predict(alone, "")(
            **{**setup.fit_args("locus", setup.splits[0]), "train_config": config, "progress": False}
        )
    again = compare(setup, a, b, cache=alone, folds=[0], n_boot=50)  # reads the fits trained alone
    assert branched["groups"]["all"]["per_fold"] == again["groups"]["all"]["per_fold"]
    assert len(list((tmp_path / "branched").glob("locus_f0_*.npz"))) == 2
    with np.load(next((tmp_path / "branched").glob("locus_f0_*.npz"))) as z:
        assert z["probs"].shape == (10, len(setup.splits[0].test))


def test_a_trial_with_its_own_locus_config_reads_the_fits_cached_under_that_config(tmp_path):
    setup = small_setup(4)
    wide = replace(setup.model_config, predictor_hidden=2 * setup.model_config.predictor_hidden)
    oracle = lambda fold: setup.scores[:, fold.test]  # noqa: E731
    cache_probs(tmp_path, setup, setup.train_config, lambda fold: np.full((10, len(fold.test)), 0.5, np.float32))
    tmp_path.mkdir(exist_ok=True)
    for fold in setup.splits:  # trial B: same TrainConfig, another LocusConfig: another key
        args = {**setup.fit_args("locus", fold), "model_config": wide}
        np.savez(fit_path(tmp_path, args, ""), probs=oracle(fold), seconds=1.0)
    result = compare(setup, setup.train_config, setup.train_config, cache=tmp_path, n_boot=100, models={"b": wide})
    g = result["groups"]["all"]["per_fold"]
    assert g["a"]["routing_acc"] == [setup.scores[0, f.test].mean() for f in setup.splits]
    assert np.allclose(g["b"]["routing_acc"], [setup.scores[:, f.test].max(axis=0).mean() for f in setup.splits])
    with pytest.raises(SystemExit, match="--branch"):
        compare(setup, setup.train_config, setup.train_config, cache=tmp_path, branch=True, models={"b": wide})

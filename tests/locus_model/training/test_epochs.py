"""The end-to-end epochs: draws per step, EMA, running permutations, early stopping and the kept epoch."""

import numpy as np
import pytest
import torch

from locus_model.training import TrainConfig, train_locus
from tests.locus_model.training.tiny_train import FAST, MODEL_CFG

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_draws_put_several_evaluation_sets_of_each_model_in_a_step(tiny_pool, monkeypatch):
    from locus_model.model import Locus

    enc, train, val = tiny_pool
    batch_sizes = []
    real_embed = Locus.embed_from_parts

    def spy(self, parts, y, mask):
        if self.training:
            batch_sizes.append(parts.shape[0])
        return real_embed(self, parts, y, mask)

    monkeypatch.setattr(Locus, "embed_from_parts", spy)
    cfg = TrainConfig(**{**FAST, "epochs": 1, "patience": 1, "batch_models": 4}, draws=3)
    train_locus(enc, train, val, model_config=MODEL_CFG, train_config=cfg, progress=False)
    assert batch_sizes == [12, 12, 12]  # 12 models / 4 per step, each drawn 3 times


def test_ema_returns_the_average_of_the_trained_weights(tiny_pool):
    enc, train, val = tiny_pool
    base = dict(**{**FAST, "epochs": 6, "patience": 6}, seed=3)
    plain = train_locus(
        enc, train, val, model_config=MODEL_CFG, train_config=TrainConfig(**base, ema_decay=0.0), progress=False
    )
    ema = train_locus(
        enc, train, val, model_config=MODEL_CFG, train_config=TrainConfig(**base, ema_decay=0.9), progress=False
    )
    # the same optimisation path (same seed, same draws), but the returned weights are an average of it
    assert [h["train_loss"] for h in ema.history] == [h["train_loss"] for h in plain.history]
    w_plain, w_ema = plain.model.hidden.weight, ema.model.hidden.weight
    assert not torch.equal(w_plain, w_ema) and torch.isfinite(w_ema).all()
    first = min(TrainConfig().select_from_epoch, len(ema.history) - 1)  # earlier epochs are never kept
    assert ema.best_metrics["val_loss"] == min(h["val_loss"] for h in ema.history[first:])
    with pytest.raises(ValueError, match="ema_decay"):
        TrainConfig(ema_decay=1.0)
    with pytest.raises(ValueError, match="draws"):
        TrainConfig(draws=0)


def test_a_pool_larger_than_epoch_models_is_visited_evenly_in_shorter_epochs(tiny_pool, monkeypatch):
    import locus_model.training.epochs as epochs

    enc, train, val = tiny_pool
    visits, original = [], epochs._batch_loss

    def counting(net, batch, data, latents, cfg, std):
        visits.append(np.unique(batch))
        return original(net, batch, data, latents, cfg, std)

    monkeypatch.setattr(epochs, "_batch_loss", counting)
    cfg = TrainConfig(**{**FAST, "epochs": 6, "patience": 6, "batch_models": 2}, epoch_models=4, seed=0)
    res = train_locus(enc, train, val, model_config=MODEL_CFG, train_config=cfg, progress=False)
    assert len(res.history) == 6 and len(visits) == 6 * 2  # 4 of the 12 models per epoch, 2 per step
    counts = np.bincount(np.concatenate(visits), minlength=12)
    assert counts.tolist() == [2] * 12  # 24 visits: each model twice, in a running permutation


def test_early_stopping_stops_after_patience(tiny_pool):
    enc, train, val = tiny_pool
    res = train_locus(
        enc,
        train,
        val,
        model_config=MODEL_CFG,
        train_config=TrainConfig(**{**FAST, "epochs": 50, "patience": 2, "lr_encoder": 0.0, "lr_predictor": 0.0}),
        progress=False,
    )
    assert len(res.history) == res.best_epoch + 3  # stopped 2 epochs after the last improvement


def test_epochs_before_select_from_epoch_are_never_kept(tiny_pool):
    enc, train, val = tiny_pool
    cfg = TrainConfig(**{**FAST, "epochs": 6, "patience": 1}, seed=4, select_from_epoch=4)
    res = train_locus(enc, train, val, model_config=MODEL_CFG, train_config=cfg, progress=False)
    assert res.best_epoch >= 4 and len(res.history) == 6  # patience counts only from epoch 4 on
    late = res.history[4:]
    assert res.best_metrics["val_loss"] == min(h["val_loss"] for h in late)
    short = TrainConfig(**{**FAST, "epochs": 3, "patience": 3}, select_from_epoch=30)  # clipped to the last epoch
    assert train_locus(enc, train, val, model_config=MODEL_CFG, train_config=short, progress=False).best_epoch == 2
    with pytest.raises(ValueError, match="select_from_epoch"):
        TrainConfig(select_from_epoch=-1)


def test_the_kept_epoch_is_the_one_of_lowest_val_loss(tiny_pool):
    enc, train, val = tiny_pool
    cfg = TrainConfig(**{**FAST, "epochs": 8}, select_from_epoch=0, seed=2)
    res = train_locus(enc, train, val, model_config=MODEL_CFG, train_config=cfg, progress=False)
    losses = [row["val_loss"] for row in res.history]
    assert res.best_epoch == int(np.argmin(losses))


def test_training_stops_at_max_steps_and_is_otherwise_the_same_run(tiny_pool):
    enc, train, val = tiny_pool
    base = {**FAST, "epochs": 6, "patience": 6, "batch_models": 2, "epoch_models": 4, "seed": 0}
    full = train_locus(enc, train, val, model_config=MODEL_CFG, train_config=TrainConfig(**base), progress=False)
    # 2 steps per epoch: 7 steps round up to 4 epochs, which are the first 4 of the unbounded run
    bounded = train_locus(
        enc, train, val, model_config=MODEL_CFG, train_config=TrainConfig(**base, max_steps=7), progress=False
    )
    assert len(bounded.history) == 4
    assert [h["train_loss"] for h in bounded.history] == [h["train_loss"] for h in full.history[:4]]

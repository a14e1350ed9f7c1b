"""End-to-end training on a tiny synthetic pool with planted structure."""

import numpy as np
import pytest
import torch

from locus_model.evaluation.metrics import routing_accuracy
from locus_model.infer import embed_evaluation_sets, predict_proba
from locus_model.training import TrainConfig, train_locus
from tests.locus_model.training.tiny_train import FAST, MODEL_CFG, tiny_train_pool

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tiny_pool():
    return tiny_train_pool()


@pytest.fixture(scope="module")
def trained(tiny_pool):
    enc, train, val = tiny_pool
    calls = []
    res = train_locus(enc, train, val, model_config=MODEL_CFG, train_config=TrainConfig(**FAST, seed=1),
                      on_epoch=calls.append, progress=False)
    return res, calls


def test_training_beats_a_constant_predictor(tiny_pool, trained):
    enc, train, val = tiny_pool
    res, _ = trained
    sets = [(np.flatnonzero(~np.isnan(r)), r[~np.isnan(r)]) for r in train]
    # fp32, as validation scores (a CPU with bf16 units would score in bf16 by default)
    probs = predict_proba(res.model, embed_evaluation_sets(res.model, enc, sets, low_precision=False), enc,
                          low_precision=False)
    constant = np.full_like(probs, 0.5)  # a constant predictor routes every query to model 0
    assert routing_accuracy(probs, val) > routing_accuracy(constant, val) + 0.15
    assert res.best_metrics["val_routing_acc"] == pytest.approx(routing_accuracy(probs, val))
    base_rate = np.nanmean(val) if np.nanmean(val) > 0.5 else 1 - np.nanmean(val)  # best constant answer
    assert res.best_metrics["val_correctness_acc"] > base_rate + 0.1


def test_on_epoch_is_called_every_epoch_with_the_history(trained):
    res, calls = trained
    assert len(calls) == len(res.history) and [c["epoch"] for c in calls] == list(range(len(calls)))
    assert set(calls[0]) == {"epoch", "train_loss", "val_loss", "val_routing_acc", "val_correctness_acc", "noise",
                             "seconds"}
    best = res.history[res.best_epoch]
    eligible = res.history[TrainConfig().select_from_epoch :]  # earlier epochs are never kept
    assert all((h["val_routing_acc"], -h["val_loss"]) <= (best["val_routing_acc"], -best["val_loss"])
               for h in eligible)
    assert res.best_metrics == best
    # FAST: no warm-up nor fine-tuning; the refit is called and records why it skipped (no warm-up latents)
    assert list(res.seconds) == ["epochs", "output_refit", "calibration"] and "skipped" in res.refit
    assert res.seconds["epochs"] >= sum(h["seconds"] for h in res.history)


def test_same_seed_same_result_and_caller_rng_untouched(tiny_pool):
    enc, train, val = tiny_pool
    cfg = TrainConfig(**{**FAST, "epochs": 2, "finetune_steps": 30}, seed=7)  # fine-tuning is seeded too
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = train_locus(enc, train, val, model_config=MODEL_CFG, train_config=cfg, progress=False)
    after = torch.rand(1)
    b = train_locus(enc, train, val, model_config=MODEL_CFG, train_config=cfg, progress=False)
    assert torch.equal(before, after)  # training ran in a forked RNG
    assert [h["train_loss"] for h in a.history] == [h["train_loss"] for h in b.history] and a.finetune == b.finetune
    for (k, v), w in zip(a.model.state_dict().items(), b.model.state_dict().values()):
        assert torch.equal(v, w), k
    c = train_locus(enc, train, val, model_config=MODEL_CFG, train_config=TrainConfig(**{**FAST, "epochs": 2}, seed=8),
                    progress=False)
    assert a.history[0]["train_loss"] != c.history[0]["train_loss"]


def test_the_kept_epoch_has_the_best_validation_routing_and_calibration(tiny_pool):
    enc, train, val = tiny_pool
    cfg = TrainConfig(**{**FAST, "epochs": 8, "patience": 8}, seed=2, calibration="platt", select_from_epoch=2)
    res = train_locus(enc, train, val, model_config=MODEL_CFG, train_config=cfg, progress=False)
    eligible = res.history[2:]
    best = max(eligible, key=lambda h: (h["val_routing_acc"], -h["val_loss"]))
    assert res.best_epoch == best["epoch"] >= 2
    assert res.best_metrics["val_routing_acc"] == best["val_routing_acc"]
    assert res.calibration["temperature"] > 0
    assert float(res.model.temperature) == pytest.approx(res.calibration["temperature"])
    assert float(res.model.logit_bias) == pytest.approx(res.calibration["logit_bias"])

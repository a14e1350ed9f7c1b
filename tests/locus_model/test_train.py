"""End-to-end training on a tiny synthetic pool with planted structure."""

import numpy as np
import pytest
import torch

from locus_model.evaluation.metrics import routing_accuracy
from locus_model.infer import embed_evaluation_sets, predict_proba
from locus_model.model import LocusConfig
from locus_model.train import TrainConfig, train_locus
from locus_model.train_config import noise_ratio

D = 16
MODEL_CFG = LocusConfig(query_dim=D, d=32, n_blocks=1, n_latents=8, n_heads=4, predictor_hidden=32)
FAST = dict(epochs=25, batch_models=4, enc_min=8, enc_max=64, dec_batch=64, lr_encoder=2e-3, lr_predictor=4e-3,
            patience=25, device="cpu", finetune_steps=0, latent_steps=0,
            select_on="routing")  # end-to-end epochs alone; the latent warm-up and the fine-tuning have their own tests


@pytest.fixture(scope="module")
def tiny_pool():
    """12 models x 200 queries in 4 clusters; each model is good at some clusters (planted skill)."""
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(4, D))
    cluster = rng.integers(0, 4, 200)
    enc = centres[cluster] + 0.3 * rng.normal(size=(200, D))
    enc = (enc / np.linalg.norm(enc, axis=1, keepdims=True)).astype(np.float32)
    skill = rng.choice([-3.0, 3.0], size=(12, 4))
    p = 1 / (1 + np.exp(-skill[:, cluster]))
    scores = (rng.random((12, 200)) < p).astype(np.float32)
    is_val = rng.random(200) < 0.3
    train = np.where(is_val[None], np.nan, scores)
    val = np.where(is_val[None], scores, np.nan)
    return enc, train, val


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
    probs = predict_proba(res.model, embed_evaluation_sets(res.model, enc, sets), enc)
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


def test_early_stopping_stops_after_patience(tiny_pool):
    enc, train, val = tiny_pool
    res = train_locus(enc, train, val, model_config=MODEL_CFG,
                      train_config=TrainConfig(**{**FAST, "epochs": 50, "patience": 2, "lr_encoder": 0.0,
                                                  "lr_predictor": 0.0}),
                      progress=False)
    assert len(res.history) == res.best_epoch + 3  # stopped 2 epochs after the last improvement


def test_noise_schedule_is_a_cosine_from_start_to_end():
    cfg = TrainConfig(noise_start=0.4, noise_end=0.1, noise_anneal_epochs=10)
    assert noise_ratio(0, cfg) == pytest.approx(0.4)
    assert noise_ratio(5, cfg) == pytest.approx(0.25)
    assert noise_ratio(10, cfg) == noise_ratio(99, cfg) == pytest.approx(0.1)


def test_rejects_models_without_train_cells(tiny_pool):
    enc, train, val = tiny_pool
    train = train.copy()
    train[3] = np.nan
    with pytest.raises(ValueError, match=r"rows \[3\] have no train cells"):
        train_locus(enc, train, val, model_config=MODEL_CFG, train_config=TrainConfig(**FAST), progress=False)


def test_fit_temperature_recovers_the_scale_of_overconfident_logits():
    from locus_model.train_predictor import fit_temperature

    g = torch.Generator().manual_seed(0)
    true_logits = 2 * torch.randn(20000, generator=g)
    labels = (torch.rand(20000, generator=g) < torch.sigmoid(true_logits)).float()
    t, b = fit_temperature(3 * true_logits, labels)
    assert t == pytest.approx(3.0, rel=0.1) and b == 0
    t, b = fit_temperature(3 * true_logits - 1.5, labels, bias=True)  # logits shifted by -1.5 = -0.5 * T
    assert t == pytest.approx(3.0, rel=0.1) and b == pytest.approx(0.5, abs=0.1)


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
    base = dict(**{**FAST, "epochs": 6, "patience": 6}, seed=3, calibration="none")
    plain = train_locus(enc, train, val, model_config=MODEL_CFG, train_config=TrainConfig(**base, ema_decay=0.0),
                        progress=False)
    ema = train_locus(enc, train, val, model_config=MODEL_CFG, train_config=TrainConfig(**base, ema_decay=0.9),
                      progress=False)
    # the same optimisation path (same seed, same draws), but the returned weights are an average of it
    assert [h["train_loss"] for h in ema.history] == [h["train_loss"] for h in plain.history]
    w_plain, w_ema = plain.model.hidden.weight, ema.model.hidden.weight
    assert not torch.equal(w_plain, w_ema) and torch.isfinite(w_ema).all()
    first = min(TrainConfig().select_from_epoch, len(ema.history) - 1)  # earlier epochs are never kept
    assert ema.best_metrics["val_routing_acc"] == max(h["val_routing_acc"] for h in ema.history[first:])
    with pytest.raises(ValueError, match="ema_decay"):
        TrainConfig(ema_decay=1.0)
    with pytest.raises(ValueError, match="draws"):
        TrainConfig(draws=0)


def test_epochs_before_select_from_epoch_are_never_kept(tiny_pool):
    enc, train, val = tiny_pool
    cfg = TrainConfig(**{**FAST, "epochs": 6, "patience": 1}, seed=4, select_from_epoch=4)
    res = train_locus(enc, train, val, model_config=MODEL_CFG, train_config=cfg, progress=False)
    assert res.best_epoch >= 4 and len(res.history) == 6  # patience counts only from epoch 4 on
    late = res.history[4:]
    assert res.best_metrics["val_routing_acc"] == max(h["val_routing_acc"] for h in late)
    short = TrainConfig(**{**FAST, "epochs": 3, "patience": 3}, select_from_epoch=30)  # clipped to the last epoch
    assert train_locus(enc, train, val, model_config=MODEL_CFG, train_config=short, progress=False).best_epoch == 2
    with pytest.raises(ValueError, match="select_from_epoch"):
        TrainConfig(select_from_epoch=-1)


def test_predictor_finetuning_changes_only_the_predictor_and_lowers_val_loss(tiny_pool):
    from locus_model.evaluation.metrics import bce

    enc, train, val = tiny_pool
    base = dict(**{**FAST, "epochs": 6, "patience": 6, "finetune_steps": 0}, seed=5, calibration="none")
    plain = train_locus(enc, train, val, model_config=MODEL_CFG, train_config=TrainConfig(**base), progress=False)
    tuned = train_locus(enc, train, val, model_config=MODEL_CFG,
                        train_config=TrainConfig(**{**base, "finetune_steps": 60}), progress=False)
    assert plain.finetune == {} and tuned.best_epoch == plain.best_epoch
    predictor = {n for n, _ in tuned.model.named_parameters() if n.split(".")[0] in ("query_proj", "hidden", "head")}
    changed = {n for (n, a), (_, b) in zip(plain.model.named_parameters(), tuned.model.named_parameters())
               if not torch.equal(a, b)}
    assert changed <= predictor  # the encoder is untouched: onboarding gives the same embeddings
    sets = [(np.flatnonzero(~np.isnan(r)), r[~np.isnan(r)]) for r in train]
    z_plain, z_tuned = embed_evaluation_sets(plain.model, enc, sets), embed_evaluation_sets(tuned.model, enc, sets)
    np.testing.assert_array_equal(z_plain, z_tuned)
    info = tuned.finetune
    ratios = TrainConfig().finetune_noise
    assert len(ratios) >= 2  # the default tries several noise ratios and keeps the lowest val BCE
    assert set(info) == {"noise", "step", "steps_run", "val_loss_before", "val_loss_after", "val_routing_acc",
                         *(f"val_loss_at_noise_{r:g}" for r in ratios)}
    assert 0 <= info["step"] <= info["steps_run"] <= 60 and info["noise"] in ratios
    assert info["val_loss_after"] == min(info[f"val_loss_at_noise_{r:g}"] for r in ratios)
    assert info["val_loss_after"] == info[f"val_loss_at_noise_{info['noise']:g}"]
    first = train_locus(enc, train, val, model_config=MODEL_CFG, progress=False,  # the grid's first run, alone
                        train_config=TrainConfig(**{**base, "finetune_steps": 60, "finetune_noise": ratios[0]}))
    assert first.finetune["val_loss_after"] == info[f"val_loss_at_noise_{ratios[0]:g}"]
    assert info["val_loss_after"] <= info["val_loss_before"]
    assert (info["step"] > 0) == bool(changed)  # step 0 = the selected checkpoint as it was
    # the recorded val loss is the val BCE of the returned model, embedding every model from all its train cells
    cols = np.flatnonzero((~np.isnan(val)).any(axis=0))
    probs = predict_proba(tuned.model, z_tuned, enc[cols])
    assert bce(probs, val[:, cols]) == pytest.approx(info["val_loss_after"], abs=1e-4)
    assert routing_accuracy(probs, val[:, cols]) == pytest.approx(info["val_routing_acc"])
    assert TrainConfig().finetune_steps > 0  # on by default
    with pytest.raises(ValueError, match="finetune_steps"):
        TrainConfig(finetune_steps=-1)
    with pytest.raises(ValueError, match="finetune_patience"):
        TrainConfig(finetune_patience=0)
    assert TrainConfig(finetune_noise=2).finetune_noise == (2.0,)  # one number = one ratio
    with pytest.raises(ValueError, match="finetune_noise"):
        TrainConfig(finetune_noise=())


def test_predictor_finetuning_stops_after_patience_steps_without_a_lower_val_loss(tiny_pool):
    from locus_model.train_predictor import FINETUNE_EVERY

    enc, train, val = tiny_pool
    base = dict(**{**FAST, "epochs": 4, "patience": 4}, seed=3, calibration="none")
    long = train_locus(enc, train, val, model_config=MODEL_CFG, progress=False,
                       train_config=TrainConfig(**{**base, "finetune_steps": 400, "finetune_patience": 400,
                                                   "finetune_noise": 2.0}))
    short = train_locus(enc, train, val, model_config=MODEL_CFG, progress=False,
                        train_config=TrainConfig(**{**base, "finetune_steps": 400, "finetune_patience": 10,
                                                    "finetune_noise": 2.0}))
    assert long.finetune["steps_run"] == 400
    stopped = short.finetune
    assert stopped["steps_run"] < 400  # stopped early, and only after 10 steps without a better val BCE
    assert 10 <= stopped["steps_run"] - stopped["step"] < 10 + FINETUNE_EVERY
    # up to the stop the two runs are the same run: same kept step while it falls before the stop
    if long.finetune["step"] <= stopped["steps_run"]:
        assert long.finetune["step"] == stopped["step"]
        assert long.finetune["val_loss_after"] == pytest.approx(stopped["val_loss_after"])


def test_a_pool_larger_than_epoch_models_is_visited_evenly_in_shorter_epochs(tiny_pool, monkeypatch):
    import locus_model.train_epochs as train_epochs

    enc, train, val = tiny_pool
    visits, original = [], train_epochs._batch_loss

    def counting(net, batch, data, cfg, std):
        visits.append(np.unique(batch))
        return original(net, batch, data, cfg, std)

    monkeypatch.setattr(train_epochs, "_batch_loss", counting)
    cfg = TrainConfig(**{**FAST, "epochs": 6, "patience": 6, "batch_models": 2}, epoch_models=4, seed=0)
    res = train_locus(enc, train, val, model_config=MODEL_CFG, train_config=cfg, progress=False)
    assert len(res.history) == 6 and len(visits) == 6 * 2  # 4 of the 12 models per epoch, 2 per step
    counts = np.bincount(np.concatenate(visits), minlength=12)
    assert counts.tolist() == [2] * 12  # 24 visits: each model twice, in a running permutation


def test_select_on_loss_keeps_the_epoch_of_lowest_val_loss(tiny_pool):
    enc, train, val = tiny_pool
    cfg = TrainConfig(**{**FAST, "epochs": 8, "select_on": "loss"}, select_from_epoch=0, calibration="none", seed=2)
    res = train_locus(enc, train, val, model_config=MODEL_CFG, train_config=cfg, progress=False)
    losses = [row["val_loss"] for row in res.history]
    assert res.best_epoch == int(np.argmin(losses))
    with pytest.raises(ValueError, match="select_on"):
        TrainConfig(select_on="auc")



def test_validation_scores_at_most_val_models_models_of_a_larger_pool(tiny_pool):
    from locus_model.train_inputs import build_validation

    enc, train, val = tiny_pool
    avail = [np.flatnonzero(~np.isnan(row)) for row in train]
    for cap, expected in ((5, 5), (None, 12), (50, 12)):
        v = build_validation(train, val, avail, TrainConfig(val_models=cap), np.random.default_rng(0),
                             torch.device("cpu"))
        assert len(v.sets) == len(v.rows) == v.labels.shape[0] == expected
        np.testing.assert_array_equal(v.labels, val[v.rows.numpy()][:, v.cols.numpy()])
    cfg = TrainConfig(**{**FAST, "epochs": 3, "finetune_steps": 20}, val_models=5, seed=0)
    res = train_locus(enc, train, val, model_config=MODEL_CFG, train_config=cfg, progress=False)
    assert len(res.history) == 3 and res.finetune["steps_run"] >= 10


LATENT = {**FAST, "epochs": 10, "patience": 10, "latent_steps": 200, "select_on": "loss", "calibration": "none"}


@pytest.fixture(scope="module")
def warmed(tiny_pool):
    enc, train, val = tiny_pool
    return train_locus(enc, train, val, model_config=MODEL_CFG, train_config=TrainConfig(**LATENT, seed=3),
                       progress=False)


def test_latent_warmup_routes_and_keeps_the_lowest_val_bce_of_its_noise_ratios(tiny_pool, warmed, monkeypatch):
    import locus_model.train_predictor as train_predictor

    enc, train, val = tiny_pool
    sets = [(np.flatnonzero(~np.isnan(r)), r[~np.isnan(r)]) for r in train]
    probs = predict_proba(warmed.model, embed_evaluation_sets(warmed.model, enc, sets), enc)
    assert routing_accuracy(probs, val) > routing_accuracy(np.full_like(probs, 0.5), val) + 0.15
    assert warmed.latent["noise"] in TrainConfig().latent_noise and set(warmed.latent["steps_run"]) == {
        f"{r:g}" for r in TrainConfig().latent_noise}
    seen = []  # every warm-up validation (they pass the free vectors as z)
    original = train_predictor.validate

    def record(model, enc_t, v, z=None):
        out = original(model, enc_t, v, z)
        if z is not None:
            seen.append(out[0])
        return out

    monkeypatch.setattr(train_predictor, "validate", record)
    again = train_locus(enc, train, val, model_config=MODEL_CFG, train_config=TrainConfig(**LATENT, seed=3),
                        progress=False)
    assert again.latent["val_loss"] == pytest.approx(min(seen)) and len(seen) > len(TrainConfig().latent_noise)


def test_latent_warmup_trains_the_encoder_towards_the_latents_through_a_frozen_predictor(tiny_pool, monkeypatch):
    import locus_model.train as train_mod

    enc, train, val = tiny_pool
    kept = {}
    original = train_mod.fit_latents

    def capture(net, data, train_np, v, cfg):
        info = original(net, data, train_np, v, cfg)
        kept["predictor"] = {n: p.detach().clone() for n, p in net.named_parameters()
                             if n.split(".")[0] in ("query_proj", "hidden", "head")}
        kept["latents"] = data.latents.clone()
        kept["encoder"] = {n: p.detach().clone() for n, p in net.named_parameters() if n not in kept["predictor"]}
        return info

    monkeypatch.setattr(train_mod, "fit_latents", capture)
    res = train_locus(enc, train, val, model_config=MODEL_CFG, train_config=TrainConfig(**LATENT, seed=3),
                      progress=False)
    params = dict(res.model.named_parameters())
    for name, value in kept["predictor"].items():  # the predictor is the warm-up's, untouched by the epochs
        torch.testing.assert_close(params[name], value, rtol=0, atol=0)
    assert any(not torch.equal(params[n], v) for n, v in kept["encoder"].items())
    sets = [(np.flatnonzero(~np.isnan(r)), r[~np.isnan(r)]) for r in train]
    z = torch.from_numpy(embed_evaluation_sets(res.model, enc, sets))
    target = kept["latents"]
    err = (z - target).pow(2).sum(1).mean() / target.var(0).sum()  # the squared error the epochs minimise
    assert err < 0.8  # far below the 1 + ... of an embedding that ignores the latents


def test_latent_config_is_checked():
    assert TrainConfig(latent_noise=2).latent_noise == (2.0,)
    assert TrainConfig().latent_steps > 0 and TrainConfig().select_on == "loss"  # the defaults
    for bad in (dict(latent_noise=()), dict(latent_steps=-1), dict(latent_lr=0.0), dict(latent_weight=-1.0)):
        with pytest.raises(ValueError, match="latent"):
            TrainConfig(**bad)


def test_max_steps_bounds_the_epochs_and_none_leaves_them():
    from locus_model.train_config import epochs_to_run

    # a pool of 2,001 models: epochs of min(2001, 200) / 8 = 25 steps; 600 steps = 24 epochs
    assert epochs_to_run(TrainConfig(epochs=120, max_steps=600), 2001) == 24
    # a pool of 23 models: 3 steps per epoch, 120 epochs = 360 steps, under the bound: unchanged
    assert epochs_to_run(TrainConfig(epochs=120, max_steps=600), 23) == 120
    # rounded up to a whole epoch, never below one
    assert epochs_to_run(TrainConfig(epochs=120, max_steps=601), 2001) == 25
    assert epochs_to_run(TrainConfig(epochs=120, max_steps=1), 2001) == 1
    assert epochs_to_run(TrainConfig(epochs=120, max_steps=None), 2001) == 120
    with pytest.raises(ValueError, match="max_steps"):
        TrainConfig(max_steps=0)


def test_training_stops_at_max_steps_and_is_otherwise_the_same_run(tiny_pool):
    enc, train, val = tiny_pool
    base = {**FAST, "epochs": 6, "patience": 6, "batch_models": 2, "epoch_models": 4, "seed": 0}
    full = train_locus(enc, train, val, model_config=MODEL_CFG, train_config=TrainConfig(**base), progress=False)
    # 2 steps per epoch: 7 steps round up to 4 epochs, which are the first 4 of the unbounded run
    bounded = train_locus(enc, train, val, model_config=MODEL_CFG, train_config=TrainConfig(**base, max_steps=7),
                          progress=False)
    assert len(bounded.history) == 4
    assert [h["train_loss"] for h in bounded.history] == [h["train_loss"] for h in full.history[:4]]

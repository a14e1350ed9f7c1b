"""The predictor-only stages: the predictor fine-tuning, the latent warm-up."""

import numpy as np
import pytest
import torch

from locus_model.infer import embed_evaluation_sets, predict_proba
from locus_model.stats.metrics import routing_accuracy
from locus_model.training import TrainConfig, train_locus
from tests.locus_model.training.tiny_train import FAST, MODEL_CFG

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_predictor_finetuning_changes_only_the_predictor_and_lowers_val_loss(tiny_pool):
    from locus_model.stats.metrics import bce

    enc, train, val = tiny_pool
    base = dict(**{**FAST, "epochs": 6, "patience": 6, "finetune_steps": 0}, seed=5)
    plain = train_locus(enc, train, val, model_config=MODEL_CFG, train_config=TrainConfig(**base), progress=False)
    tuned = train_locus(
        enc,
        train,
        val,
        model_config=MODEL_CFG,
        train_config=TrainConfig(**{**base, "finetune_steps": 60}),
        progress=False,
    )
    assert plain.finetune == {} and tuned.best_epoch == plain.best_epoch
    predictor = {n for n, _ in tuned.model.named_parameters() if n.split(".")[0] in ("query_proj", "hidden", "head")}
    changed = {
        n
        for (n, a), (_, b) in zip(plain.model.named_parameters(), tuned.model.named_parameters())
        if not torch.equal(a, b)
    }
    assert changed <= predictor  # the encoder is untouched: onboarding gives the same embeddings
    sets = [(np.flatnonzero(~np.isnan(r)), r[~np.isnan(r)]) for r in train]
    z_plain = embed_evaluation_sets(plain.model, enc, sets, low_precision=False)  # fp32, as validation embeds
    z_tuned = embed_evaluation_sets(tuned.model, enc, sets, low_precision=False)
    np.testing.assert_array_equal(z_plain, z_tuned)
    info = tuned.finetune
    ratios = TrainConfig().finetune_noise
    assert len(ratios) >= 2  # the default tries several noise ratios and keeps the lowest val BCE
    assert set(info) == {
        "noise",
        "step",
        "steps_run",
        "val_loss_before",
        "val_loss_after",
        "val_routing_acc",
        *(f"val_loss_at_noise_{r:g}" for r in ratios),
    }
    assert 0 <= info["step"] <= info["steps_run"] <= 60 and info["noise"] in ratios
    assert info["val_loss_after"] == min(info[f"val_loss_at_noise_{r:g}"] for r in ratios)
    assert info["val_loss_after"] == info[f"val_loss_at_noise_{info['noise']:g}"]
    first = train_locus(
        enc,
        train,
        val,
        model_config=MODEL_CFG,
        progress=False,  # the grid's first run, alone
        train_config=TrainConfig(**{**base, "finetune_steps": 60, "finetune_noise": ratios[0]}),
    )
    assert first.finetune["val_loss_after"] == info[f"val_loss_at_noise_{ratios[0]:g}"]
    assert info["val_loss_after"] <= info["val_loss_before"]
    assert (info["step"] > 0) == bool(changed)  # step 0 = the selected checkpoint as it was
    # the recorded val loss is the val BCE of the returned model, embedding every model from all its train cells
    cols = np.flatnonzero((~np.isnan(val)).any(axis=0))
    probs = predict_proba(tuned.model, z_tuned, enc[cols], low_precision=False)
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
    from locus_model.training.predictor import FINETUNE_EVERY

    enc, train, val = tiny_pool
    base = dict(**{**FAST, "epochs": 4, "patience": 4}, seed=3)
    long = train_locus(
        enc,
        train,
        val,
        model_config=MODEL_CFG,
        progress=False,
        train_config=TrainConfig(**{**base, "finetune_steps": 400, "finetune_patience": 400, "finetune_noise": 2.0}),
    )
    short = train_locus(
        enc,
        train,
        val,
        model_config=MODEL_CFG,
        progress=False,
        train_config=TrainConfig(**{**base, "finetune_steps": 400, "finetune_patience": 10, "finetune_noise": 2.0}),
    )
    assert long.finetune["steps_run"] == 400
    stopped = short.finetune
    assert stopped["steps_run"] < 400  # stopped early, and only after 10 steps without a better val BCE
    assert 10 <= stopped["steps_run"] - stopped["step"] < 10 + FINETUNE_EVERY
    # up to the stop the two runs are the same run: same kept step while it falls before the stop
    if long.finetune["step"] <= stopped["steps_run"]:
        assert long.finetune["step"] == stopped["step"]
        assert long.finetune["val_loss_after"] == pytest.approx(stopped["val_loss_after"])


LATENT = {**FAST, "epochs": 10, "patience": 10, "latent_steps": 200}


@pytest.fixture(scope="module")
def warmed(tiny_pool):
    enc, train, val = tiny_pool
    return train_locus(
        enc, train, val, model_config=MODEL_CFG, train_config=TrainConfig(**LATENT, seed=3), progress=False
    )


def test_latent_warmup_routes_and_keeps_the_lowest_val_bce_of_its_noise_ratios(tiny_pool, warmed, monkeypatch):
    import locus_model.training.predictor as predictor

    enc, train, val = tiny_pool
    sets = [(np.flatnonzero(~np.isnan(r)), r[~np.isnan(r)]) for r in train]
    probs = predict_proba(warmed.model, embed_evaluation_sets(warmed.model, enc, sets), enc)
    assert routing_accuracy(probs, val) > routing_accuracy(np.full_like(probs, 0.5), val) + 0.15
    assert warmed.latent["noise"] in TrainConfig().latent_noise and set(warmed.latent["steps_run"]) == {
        f"{r:g}" for r in TrainConfig().latent_noise
    }
    seen = []  # every warm-up validation (they pass the free vectors as z)
    original = predictor.validate

    def record(model, enc_t, v, z=None):
        out = original(model, enc_t, v, z)
        if z is not None:
            seen.append(out[0])
        return out

    monkeypatch.setattr(predictor, "validate", record)
    again = train_locus(
        enc, train, val, model_config=MODEL_CFG, train_config=TrainConfig(**LATENT, seed=3), progress=False
    )
    assert again.latent["val_loss"] == pytest.approx(min(seen)) and len(seen) > len(TrainConfig().latent_noise)


def test_latent_warmup_trains_the_encoder_towards_the_latents_through_a_frozen_predictor(tiny_pool, monkeypatch):
    import locus_model.training.train as train_mod

    enc, train, val = tiny_pool
    kept = {}
    original = train_mod.fit_latents

    def capture(net, data, train_np, v, cfg):
        info, latents = original(net, data, train_np, v, cfg)
        kept["predictor"] = {
            n: p.detach().clone()
            for n, p in net.named_parameters()
            if n.split(".")[0] in ("query_proj", "hidden", "head")
        }
        kept["latents"] = latents.vectors.clone()
        kept["encoder"] = {n: p.detach().clone() for n, p in net.named_parameters() if n not in kept["predictor"]}
        return info, latents

    monkeypatch.setattr(train_mod, "fit_latents", capture)
    res = train_locus(
        enc, train, val, model_config=MODEL_CFG, train_config=TrainConfig(**LATENT, seed=3), progress=False
    )
    params = dict(res.model.named_parameters())
    for name, value in kept["predictor"].items():  # the predictor is the warm-up's, untouched by the epochs
        torch.testing.assert_close(params[name], value, rtol=0, atol=0)
    assert any(not torch.equal(params[n], v) for n, v in kept["encoder"].items())
    sets = [(np.flatnonzero(~np.isnan(r)), r[~np.isnan(r)]) for r in train]
    z = torch.from_numpy(embed_evaluation_sets(res.model, enc, sets))
    target = kept["latents"]
    err = (z - target).pow(2).sum(1).mean() / target.var(0).sum()  # the squared error the epochs minimise
    assert err < 0.8  # far below the 1 + ... of an embedding that ignores the latents


def test_a_predictor_step_takes_at_most_its_cell_budget_and_every_cell_below_it(monkeypatch):  # predictor_step_cells=64
    import locus_model.training.predictor as predictor
    from locus_model.model import Locus, LocusConfig

    monkeypatch.setattr(predictor, "FINETUNE_MAX_MODELS", 8)
    model = Locus(LocusConfig(query_dim=6, d=8, n_heads=2, n_latents=4, predictor_hidden=8))
    enc = torch.randn(40, 6)
    gen, rng = torch.Generator().manual_seed(0), np.random.default_rng(0)

    def step(models: int, queries: int):
        z = torch.randn(models, 8)
        known = torch.zeros(models, 40, dtype=torch.bool)
        known[:, :queries] = True
        scores = known.float()
        return predictor._predictor_batch(model, z, enc, scores, known, np.arange(queries), 64, 0.0, gen, rng)

    logits, _, mask, rows = step(4, 10)  # 40 cells: all of them
    assert logits.shape == (4, 10) and bool(mask.all()) and rows == slice(None)
    logits, _, _, _ = step(4, 30)  # 120 cells: 4 models x 16 queries
    assert logits.shape == (4, 16)
    logits, _, _, rows = step(20, 30)  # 8 of the 20 models x 8 queries
    assert logits.shape == (8, 8) and len(rows) == 8
    assert predictor.step_columns(1, 64) == 64
    assert predictor.step_columns(1, 10**6) == predictor.FINETUNE_MAX_COLUMNS
    with pytest.raises(ValueError, match="predictor_step_cells"):
        TrainConfig(predictor_step_cells=0)

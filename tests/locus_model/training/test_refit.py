"""The encoder's output refit: ridge onto the warm-up latents, chosen by val BCE, one forward pass kept."""

import numpy as np
import pytest
import torch

from locus_model.infer import embed_evaluation_sets
from locus_model.training import TrainConfig, train_locus
from locus_model.training.refit import ridge
from tests.locus_model.training.tiny_train import FAST, MODEL_CFG

pytestmark = pytest.mark.usefixtures("one_torch_thread")

LATENT = {**FAST, "epochs": 4, "patience": 4, "latent_steps": 100, "finetune_steps": 0}


def test_ridge_recovers_a_linear_map_and_shrinks_with_alpha():
    g = torch.Generator().manual_seed(0)
    h = torch.randn(400, 6, generator=g)
    w_true, b_true = torch.randn(3, 6, generator=g), torch.randn(3, generator=g)
    w, b = ridge(h, h @ w_true.T + b_true, alpha=1e-9)
    assert torch.allclose(w, w_true, atol=1e-4) and torch.allclose(b, b_true, atol=1e-4)
    w_big, _ = ridge(h, h @ w_true.T + b_true, alpha=100.0)
    assert w_big.norm() < 0.1 * w_true.norm()


@pytest.fixture
def few_models_allowed(monkeypatch):  # the tiny pool has 12 training models, under 2 (d + 1) = 66
    import locus_model.training.refit as refit

    monkeypatch.setattr(refit, "MODELS_PER_WEIGHT", 0.25)


def test_refit_keeps_the_lowest_val_bce_and_embedding_stays_one_forward_pass(tiny_pool, monkeypatch):
    import locus_model.training.refit as refit_module

    enc, train, val = tiny_pool
    plain = train_locus(
        enc,
        train,
        val,
        model_config=MODEL_CFG,
        progress=False,  # 12 models: left as trained
        train_config=TrainConfig(**LATENT, seed=2),
    )
    monkeypatch.setattr(refit_module, "MODELS_PER_WEIGHT", 0.25)  # now the refit runs
    refit = train_locus(
        enc, train, val, model_config=MODEL_CFG, train_config=TrainConfig(**LATENT, seed=2), progress=False
    )
    assert plain.refit["alpha"] is None and refit.best_epoch == plain.best_epoch
    info = refit.refit
    tried = [v for k, v in info.items() if k.startswith("val_loss_at_alpha_")]
    assert len(tried) == len(TrainConfig().refit_alphas)
    assert info["val_loss_after"] == pytest.approx(min([info["val_loss_before"], *tried]))
    assert (info["alpha"] is None) == (info["val_loss_after"] == info["val_loss_before"])
    # only the encoder's output layer moved; the predictor is the one the same epochs produced
    changed = {k for k, v in refit.model.state_dict().items() if not torch.equal(v, plain.model.state_dict()[k])}
    assert changed <= {"out.weight", "out.bias"}
    if info["alpha"] is not None:
        assert changed == {"out.weight", "out.bias"} and info["latent_r2_after"] > info["latent_r2_before"]
    sets = [(np.flatnonzero(~np.isnan(r)), r[~np.isnan(r)]) for r in train[:5]]
    z = embed_evaluation_sets(refit.model, enc, sets)
    assert np.allclose(z, embed_evaluation_sets(refit.model, enc, sets))


def test_without_the_warmup_nothing_is_refitted(tiny_pool):
    enc, train, val = tiny_pool
    result = train_locus(
        enc,
        train,
        val,
        model_config=MODEL_CFG,
        progress=False,
        train_config=TrainConfig(**{**LATENT, "latent_steps": 0}),
    )
    assert result.refit["alpha"] is None and "no latent warm-up" in result.refit["skipped"]


def test_a_pool_with_too_few_models_per_weight_is_left_as_trained(tiny_pool):
    enc, train, val = tiny_pool
    refit = train_locus(
        enc, train, val, model_config=MODEL_CFG, train_config=TrainConfig(**LATENT, seed=2), progress=False
    )
    assert refit.refit["alpha"] is None and "12 training models, fewer than 66" in refit.refit["skipped"]
    assert refit.refit.keys() == {"alpha", "skipped"}  # nothing tried: the layer is the trained one


def test_branches_share_the_epochs_and_equal_separate_runs(tiny_pool, few_models_allowed):
    from locus_model.training import train_branches
    from locus_model.training.train import STAGES

    enc, train, val = tiny_pool
    a = TrainConfig(**{**LATENT, "finetune_steps": 30}, seed=4, refit_alphas=(0.01,))
    b = TrainConfig(**{**LATENT, "finetune_steps": 30}, seed=4, refit_alphas=(1.0, 10.0), finetune_noise=(1.0,))
    branched = train_branches(enc, train, val, model_config=MODEL_CFG, train_configs=[a, b], progress=False)
    for config, got in zip((a, b), branched):
        alone = train_locus(enc, train, val, model_config=MODEL_CFG, train_config=config, progress=False)
        assert got.refit.keys() == alone.refit.keys() and got.finetune == alone.finetune
        # every stage is timed; the shared ones are the same for both branches
        assert list(got.seconds) == list(STAGES)
        assert all(v > 0 for v in got.seconds.values())
        assert {k: branched[0].seconds[k] for k in ("latent_warmup", "epochs")} == {
            k: got.seconds[k] for k in ("latent_warmup", "epochs")
        }
        for k, v in alone.model.state_dict().items():
            assert torch.equal(v, got.model.state_dict()[k]), k
    with pytest.raises(ValueError, match="lr_encoder"):
        train_branches(
            enc, train, val, model_config=MODEL_CFG, train_configs=[a, TrainConfig(**{**LATENT, "lr_encoder": 1e-3})]
        )

"""End-to-end training on a tiny synthetic pool with planted structure: the default path (every stage, the
default rules), shrunk to the tiny pool."""

import numpy as np
import pytest
import torch

from locus_model.infer import embed_evaluation_sets, predict_proba
from locus_model.query_groups import Blend
from locus_model.stats.metrics import routing_accuracy
from locus_model.training import TrainConfig, train_locus
from locus_model.training.train import STAGES
from tests.locus_model.training.tiny_train import FAST, MODEL_CFG, SMALL

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def trained(tiny_pool):
    enc, train, val = tiny_pool
    calls = []
    res = train_locus(
        enc,
        train,
        val,
        model_config=MODEL_CFG,
        train_config=TrainConfig(**SMALL, seed=1),
        on_epoch=calls.append,
        progress=False,
    )
    return res, calls


def test_training_beats_a_constant_predictor(tiny_pool, trained):
    enc, train, val = tiny_pool
    res, _ = trained
    sets = [(np.flatnonzero(~np.isnan(r)), r[~np.isnan(r)]) for r in train]
    # fp32, as validation scores (a CPU with bf16 units would score in bf16 by default)
    probs = predict_proba(
        res.model, embed_evaluation_sets(res.model, enc, sets, low_precision=False), enc, low_precision=False
    )
    constant = np.full_like(probs, 0.5)  # a constant predictor routes every query to model 0
    assert routing_accuracy(probs, val) > routing_accuracy(constant, val) + 0.15
    # the fine-tuning's figures are the returned model's (every model embedded from all its train cells)
    assert res.finetune["val_routing_acc"] == pytest.approx(routing_accuracy(probs, val))
    base_rate = np.nanmean(val) if np.nanmean(val) > 0.5 else 1 - np.nanmean(val)  # best constant answer
    assert res.best_metrics["val_correctness_acc"] > base_rate + 0.1


def test_on_epoch_is_called_every_epoch_with_the_history(trained):
    res, calls = trained
    assert len(calls) == len(res.history) and [c["epoch"] for c in calls] == list(range(len(calls)))
    assert set(calls[0]) == {
        "epoch",
        "train_loss",
        "val_loss",
        "val_routing_acc",
        "val_correctness_acc",
        "noise",
        "seconds",
    }
    best = res.history[res.best_epoch]
    eligible = res.history[TrainConfig().select_from_epoch :]  # earlier epochs are never kept
    assert all((-h["val_loss"], h["val_routing_acc"]) <= (-best["val_loss"], best["val_routing_acc"]) for h in eligible)
    assert res.best_metrics == best
    # every stage ran; the refit records why it left the encoder as trained (12 training models, under 2 (d + 1))
    assert list(res.seconds) == list(STAGES) and "skipped" in res.refit
    assert res.seconds["epochs"] >= sum(h["seconds"] for h in res.history)


def test_same_seed_same_result_and_caller_rng_untouched(tiny_pool):
    enc, train, val = tiny_pool
    cfg = TrainConfig(**{**SMALL, "epochs": 2, "latent_steps": 20, "finetune_steps": 30}, seed=7)  # every stage
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = train_locus(enc, train, val, model_config=MODEL_CFG, train_config=cfg, progress=False)
    after = torch.rand(1)
    b = train_locus(enc, train, val, model_config=MODEL_CFG, train_config=cfg, progress=False)
    assert torch.equal(before, after)  # training ran in a forked RNG
    assert [h["train_loss"] for h in a.history] == [h["train_loss"] for h in b.history]
    assert a.latent == b.latent and a.finetune == b.finetune and a.router.blend == b.router.blend
    for (k, v), w in zip(a.model.state_dict().items(), b.model.state_dict().values()):
        assert torch.equal(v, w), k
    c = train_locus(
        enc,
        train,
        val,
        model_config=MODEL_CFG,
        train_config=TrainConfig(**{**FAST, "epochs": 2}, seed=8),
        progress=False,
    )
    assert a.history[0]["train_loss"] != c.history[0]["train_loss"]


def test_training_returns_the_trained_router_and_says_each_stage_after_the_epochs(tiny_pool):
    enc, train, val = tiny_pool
    labels = np.array(["maths", "law"] * (len(enc) // 2))
    lines: list[str] = []
    cfg = TrainConfig(**{**SMALL, "epochs": 2, "latent_steps": 20, "finetune_steps": 20}, seed=2)
    res = train_locus(
        enc,
        train,
        val,
        model_config=MODEL_CFG,
        train_config=cfg,
        benchmarks=labels,
        on_stage=lines.append,
        progress=False,
    )
    router = res.router
    assert router.groups.names == ("law", "maths") and router.model is res.model
    # the predictor's own calibration is the identity: the blend, fitted on the validation cells, is the only one
    assert float(router.model.temperature) == 1.0 and float(router.model.logit_bias) == 0.0
    assert router.blend != Blend()  # fitted: 12 models x ~60 validation queries
    # one line when each stage after the epochs starts and one when it ends, in the order they run
    assert [line.split()[2] for line in lines] == [s for s in STAGES if s != "epochs" for _ in (0, 1)]
    assert all(line.endswith(" s") for line in lines[1::2])
    # the in-training models' rows are those a pool gets from the same evaluations
    z, profiles = router.pool_rows(enc, train, labels)
    np.testing.assert_array_equal(res.embeddings, z)
    np.testing.assert_allclose(router.scorer((z, profiles)).proba(enc[:3]), router.proba(z, profiles, enc[:3]))


class RecordingConfig:
    """A TrainConfig that records the names of the fields read from it into ``seen``."""

    def __init__(self, config: TrainConfig, seen: set[str]) -> None:
        self.config, self.seen = config, seen

    def __getattr__(self, name: str):
        self.seen.add(name)
        return getattr(self.config, name)


def test_each_stage_reads_only_the_config_fields_it_declares(tiny_pool, monkeypatch):
    import dataclasses

    import locus_model.training.refit as refit
    import locus_model.training.train as train_module

    enc, train, val = tiny_pool
    monkeypatch.setattr(refit, "MODELS_PER_WEIGHT", 0.25)  # the tiny pool's 12 models: let the refit run too
    stages = {
        "prepare_inputs": train_module.INPUTS,
        "fit_latents": train_module.LATENT_WARMUP,
        "train_epochs": train_module.EPOCHS,
        "refit_output": train_module.OUTPUT_REFIT,
        "finetune_predictor": train_module.PREDICTOR_FINETUNING,
        "fit_router": train_module.ROUTER,
    }
    read: dict[str, set[str]] = {}
    for function, stage in stages.items():  # each stage gets its own recording view of the config

        def recording(*args, _run=getattr(train_module, function), _seen=read.setdefault(stage.name, set()), **kw):
            return _run(
                *(
                    RecordingConfig(getattr(a, "config", a), _seen)
                    if isinstance(a, (TrainConfig, RecordingConfig))
                    else a
                    for a in args
                ),
                **kw,
            )

        monkeypatch.setattr(train_module, function, recording)
    # every path of every stage: with the warm-up (run into its patience, as the fine-tuning; the refit runs) and
    # without it (the epochs train the predictor too)
    full = TrainConfig(**{**SMALL, "epochs": 3, "latent_steps": 200, "finetune_steps": 200}, finetune_patience=10)
    outside: set[str] = set()  # what train_branches itself reads: the seed of torch and the stages' switches
    for cfg in (full, dataclasses.replace(full, latent_steps=0)):
        train_locus(enc, train, val, model_config=MODEL_CFG, train_config=RecordingConfig(cfg, outside), progress=False)
    switches: set[str] = set()
    for stage in stages.values():
        on: set[str] = set()
        assert stage.on(RecordingConfig(full, on)), f"{stage.name} is off in the test's config"
        seen = read[stage.name] | on
        assert seen <= stage.reads, f"{stage.name} reads {sorted(seen - stage.reads)} without declaring them"
        assert seen == stage.reads, f"{stage.name} declares {sorted(stage.reads - seen)} but did not read them"
        switches |= on
    assert outside <= train_module.INPUTS.reads | switches, sorted(outside)
    # every field is read by some stage: a field no stage reads would be a knob that changes nothing
    assert {f.name for f in dataclasses.fields(TrainConfig)} == set().union(*(s.reads for s in stages.values()))


def test_branches_may_differ_only_in_fields_no_shared_stage_reads(tiny_pool):
    from locus_model.training import train_branches
    from locus_model.training.train import BRANCH_FIELDS

    # finetune_patience is the fine-tuning's and the warm-up's patience: branches that differ in it cannot share
    assert BRANCH_FIELDS == {"refit_alphas", "finetune_steps", "finetune_noise"}
    enc, train, val = tiny_pool
    with pytest.raises(ValueError, match="finetune_patience"):
        train_branches(
            enc,
            train,
            val,
            model_config=MODEL_CFG,
            train_configs=[TrainConfig(**FAST), TrainConfig(**FAST, finetune_patience=7)],
        )

"""How LOCUS is trained: TrainConfig (every knob with its default and meaning, written once: the launchpad shows
these docstrings), the schedule it sets (the query-noise annealing, the number of epochs a step budget allows) and
the stage contract (Stage: the fields each stage of locus_model.training reads). No torch here: the pipeline builds
its launchpad config from these fields when its code location loads."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

GRAD_CLIP = 1.0  # maximum global gradient norm of every optimiser step (a constant: no run ever set another)


@dataclass(frozen=True)
class TrainConfig:
    """How to train LOCUS: epochs and batches, encoder-subset sizes, query noise, EMA, checkpoint selection,
    the latent warm-up, the output refit and the predictor fine-tuning (the router's query groups and blend read no
    field).

    The defaults are the best setting of 5-fold sweeps (bench/diag/README.md, sweep_locus); the config
    holds defaults only, trials that did not become one leave it. Query noise is relative: noise_* is the ratio
    ||noise|| / ||encoding||, so one setting means the same for 384-d and 768-d encoders. On one CPU thread an epoch
    costs ~5 s for ~100 models x 1,024 anchors; lower epochs (e.g. 40) for a quick run. Each field's docstring is
    its one description (the pipeline's launchpad shows it).
    """

    epochs: int = 120
    """Max epochs; one epoch = one pass over all models in mini-batches (at most epoch_models of them). Paper: 2500."""
    max_steps: int | None = 600
    """Also at most this many encoder optimiser steps (rounded up to whole epochs); None (empty) = epochs alone bound
    training. The encoder's work does not grow with the pool, so a schedule in steps keeps a pool of thousands of
    models (25 steps per epoch: 24 epochs) as long as one of a few hundred; pools up to ~40 training models
    (MMLU-Pro's 23: 360 steps) never reach it."""
    epoch_models: int = 200
    """An epoch visits at most this many models (the next ones of a running permutation, so every model is visited
    equally often): a pool of 2,000 models gets an epoch of 25 optimiser steps and a validation after it, like a pool
    of 200, instead of one per 250 steps; pools up to this size visit every model once per epoch."""
    batch_models: int = 8
    """Models per optimiser step (small: more optimiser steps per CPU second)."""
    draws: int = 4
    """Independent (encoder subset, decoder batch) draws per model per step: the step's batch holds
    batch_models * draws evaluation sets; more set sizes and targets per model per step."""
    enc_min: int = 16
    """Smallest encoder subset (clipped to the model's number of train cells)."""
    enc_max: int = 256
    """Largest encoder subset."""
    dec_batch: int = 512
    """Decoder targets per model per step (fewer if the model has fewer train cells)."""
    val_models: int | None = 200
    """Validation scores at most this many models (a fixed seeded subset of a larger pool); None (empty) = all of
    them. Bounds epoch cost on pools of thousands of models."""
    val_set_max: int | None = 256
    """Validation embeds each model from at most this many of its train cells (a fixed seeded subset); None (empty)
    = all of them (the paper: all N anchors). Bounds epoch cost."""
    lr_encoder: float = 2e-4
    """AdamW learning rate of the set encoder (tokenizer, ISAB blocks, PMA, output layer)."""
    lr_predictor: float = 8e-4
    """AdamW learning rate of the correctness predictor G (also in the latent warm-up and the fine-tuning)."""
    weight_decay: float = 0.05
    """AdamW weight decay (both groups)."""
    noise_start: float = 2.0
    """Query-noise ratio ||noise|| / ||phi|| at epoch 0."""
    noise_end: float = 1.0
    """Query-noise ratio after noise_anneal_epochs (cosine schedule), constant afterwards."""
    noise_anneal_epochs: int = 30
    """Epochs of the cosine annealing of the query noise."""
    latent_steps: int = 1500
    """0 = off; else the latent warm-up runs first, up to this many steps: the correctness predictor is fitted with
    one free vector per training model (an auto-decoder, as matrix factorisation fits its model vectors), keeping the
    step of minimum val BCE; the set encoder is then trained to produce those vectors from evaluation subsets
    (epochs.LATENT_WEIGHT) through the fitted predictor, which stays frozen. End to end, the predictor first learns the
    accuracy, and the encoder only what the predictor already reads; the latents carry each model's whole profile
    from the first encoder step."""
    latent_noise: tuple[float, ...] = (1.0, 2.0, 4.0)
    """Query-noise ratios of the latent warm-up: it runs once per ratio and the lowest val BCE is kept (as the
    matrix-factorisation baseline chooses its noise)."""
    refit_alphas: tuple[float, ...] = (0.01, 0.1, 1.0)
    """After the epochs (with the warm-up), the encoder's output layer is solved by ridge regression from the pooled
    features of every training model, embedded from all its train cells without noise (as at test time), onto its
    warm-up latent (locus_model.training.refit; pools of fewer than 2 (d + 1) training models are left as
    trained); these are the ridge strengths tried, relative to the mean eigenvalue of the features' Gram matrix, and
    val BCE chooses one or no change."""
    patience: int = 120
    """Stop after this many epochs without a better validation checkpoint. Paper: 500."""
    select_from_epoch: int = 10
    """Epochs before this one are never kept (nor counted by patience); clipped to epochs - 1: on small validation
    sets an almost untrained epoch can win on a couple of queries."""
    seed: int = 0
    """Seeds init, subsets, noise and dropout: same seed -> same result on CPU."""
    device: str = "auto"
    """"auto" = CUDA when present, else CPU; or "cpu", "cuda", "cuda:1", ..."""
    ema_decay: float = 0.995
    """0 = off; else validation, checkpoint selection and the returned model use an exponential moving average of
    the weights (decay per optimiser step, warmed up as min(decay, (1 + t) / (10 + t))), which smooths the
    step-to-step jitter of small-batch training."""
    finetune_steps: int = 2000
    """0 = off; else, after checkpoint selection, the predictor alone is trained up to this many full-batch steps on
    fixed embeddings of the training models from all their train cells (as they are embedded at test time, where
    training embedded random subsets), keeping the step of minimum val BCE (checked every 10 steps; step 0 = no
    change). The encoder is untouched: onboarding stays one forward pass."""
    finetune_patience: int = 300
    """Stop the latent warm-up (at each of its noise ratios) and the predictor fine-tuning after this many steps
    without a lower val BCE."""
    finetune_noise: tuple[float, ...] = (2.0, 3.0)
    """Query-noise ratios of the predictor fine-tuning: it is run once per ratio from the same selected checkpoint
    and the one with the lowest val BCE is kept (a number = one ratio)."""
    predictor_step_cells: int = 32_768
    """At most this many (model, query) cells per step of the latent warm-up and the fine-tuning (at most 256 models
    x 2,048 queries a step in any case): with more training models x train queries, a step takes a random subset of
    the queries, so its cost stays that of 128 anchors at any budget. Pools and budgets under the cap are unchanged;
    1_000_000 = no cap."""

    def __post_init__(self) -> None:
        for name in ("finetune_noise", "latent_noise", "refit_alphas"):
            ratios = getattr(self, name)
            ratios = (ratios,) if isinstance(ratios, (int, float)) else ratios
            object.__setattr__(self, name, tuple(float(r) for r in ratios))
            if not getattr(self, name) or min(getattr(self, name)) < 0:
                raise ValueError(
                    f"TrainConfig: {name}={getattr(self, name)} must hold at least one noise ratio >= 0, e.g. (2.0,)."
                )
        if self.latent_steps < 0:
            raise ValueError(f"TrainConfig: latent_steps={self.latent_steps} must be >= 0 (0 turns the warm-up off).")
        if not 1 <= self.enc_min <= self.enc_max:
            raise ValueError(f"TrainConfig: need 1 <= enc_min ({self.enc_min}) <= enc_max ({self.enc_max}).")
        if self.select_from_epoch < 0:
            raise ValueError(f"TrainConfig: select_from_epoch={self.select_from_epoch} must be >= 0.")
        if self.finetune_steps < 0 or min(self.finetune_noise) < 0:
            raise ValueError(
                f"TrainConfig: finetune_steps={self.finetune_steps} and finetune_noise={self.finetune_noise} "
                "must be >= 0 (finetune_steps=0 turns the predictor fine-tuning off)."
            )
        if self.val_models is not None and self.val_models < 1:
            raise ValueError(f"TrainConfig: val_models={self.val_models} must be >= 1 (None = every model).")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"TrainConfig: max_steps={self.max_steps} must be >= 1 (None = no step bound).")
        for name in (
            "epochs",
            "epoch_models",
            "predictor_step_cells",
            "batch_models",
            "draws",
            "dec_batch",
            "patience",
            "finetune_patience",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"TrainConfig: {name}={getattr(self, name)} must be >= 1.")
        if self.noise_start < 0 or self.noise_end < 0:
            raise ValueError("TrainConfig: noise_start and noise_end are ratios and must be >= 0.")
        if not 0.0 <= self.ema_decay < 1.0:
            raise ValueError(f"TrainConfig: ema_decay={self.ema_decay} must be in [0, 1) (0 = off).")


@dataclass(frozen=True)
class Stage:
    """A stage of training and its contract: the TrainConfig fields it reads, its on-switch included. train_branches
    shares the stages before the kept epoch's selection between configs that differ only in fields that none of
    them reads (locus_model.training.train.BRANCH_FIELDS); a test runs every stage with a config that records what
    it reads."""

    name: str  # its key in TrainResult.seconds
    reads: frozenset[str]
    on: Callable[[TrainConfig], bool] = lambda cfg: True  # whether cfg runs it (reading only fields of reads)


def noise_ratio(epoch: int, cfg: TrainConfig) -> float:
    """Cosine annealing from noise_start (epoch 0) to noise_end (epoch noise_anneal_epochs and later)."""
    if epoch >= cfg.noise_anneal_epochs:
        return cfg.noise_end
    w = 0.5 * (1 + math.cos(math.pi * epoch / cfg.noise_anneal_epochs))
    return cfg.noise_end + (cfg.noise_start - cfg.noise_end) * w


def epochs_to_run(cfg: TrainConfig, n_models: int) -> int:
    """cfg.epochs, or fewer when cfg.max_steps is reached first (an epoch is ceil(min(n_models, epoch_models) /
    batch_models) optimiser steps)."""
    if cfg.max_steps is None:
        return cfg.epochs
    per_epoch = math.ceil(min(n_models, cfg.epoch_models) / cfg.batch_models)
    return max(1, min(cfg.epochs, math.ceil(cfg.max_steps / per_epoch)))

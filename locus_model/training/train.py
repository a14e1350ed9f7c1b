"""Training of LOCUS (arXiv 2601.21082): set encoder + correctness predictor, end to end, with BCE.

Each step takes a mini-batch of models. For every model an encoder subset S_enc of random size in
[enc_min, enc_max] is drawn from its train cells (training on varying sizes is what lets the encoder work
at any n later) and an independent decoder batch S_dec of dec_batch train cells supplies the targets.
Gaussian noise is added to the query encodings of both. Early stopping watches the validation figure of
TrainConfig.select_on (val BCE by default; or routing accuracy, val BCE breaking ties) and the best state is
kept; by default a Platt scaling of its logits (logit / T + b, one T and b for all pairs) is then fitted on the
validation cells and stored in the model.

This module is the order of the stages; each lives in its own module of locus_model.training and declares the
TrainConfig fields it reads (a Stage): the inputs (inputs), the latent warm-up (predictor), the end-to-end epochs
(epochs), then, from the kept epoch, the encoder's output refit (refit), the predictor fine-tuning (predictor) and the
calibration (calibration). A stage takes its inputs and returns what it makes; the model it is given is the one it
trains.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field, fields
from typing import Any, Callable

import numpy as np
import torch

from locus_model.model import Locus, LocusConfig
from locus_model.training.calibration import CALIBRATION, calibrate
from locus_model.training.config import Stage, TrainConfig
from locus_model.training.epochs import EPOCHS, train_epochs
from locus_model.training.inputs import INPUTS, prepare_inputs
from locus_model.training.predictor import LATENT_WARMUP, PREDICTOR_FINETUNING, finetune_predictor, fit_latents
from locus_model.training.refit import OUTPUT_REFIT, refit_output


@dataclass
class TrainResult:
    model: Locus  # best validation state, on CPU, eval mode
    history: list[dict] = field(default_factory=list)  # one dict per epoch (as passed to on_epoch)
    best_epoch: int = -1  # epoch of the kept state
    best_metrics: dict = field(default_factory=dict)  # that epoch's dict
    calibration: dict = field(default_factory=dict)  # {"temperature", "logit_bias"} fitted on val; {} if none
    finetune: dict = field(default_factory=dict)  # the predictor fine-tuning that was kept: {"noise", "step" (kept),
    #   "steps_run", "val_loss_before", "val_loss_after", "val_routing_acc"} (val embeddings from all train cells),
    #   plus "val_loss_at_noise_<ratio>" for every ratio tried; {} if off. best_metrics stay those of the
    #   selected epoch, before it
    latent: dict = field(default_factory=dict)  # the latent warm-up that was kept: {"noise", "step", "val_loss" (of
    #   the predictor with the free model vectors), "steps_run" per noise ratio}; {} if off
    refit: dict = field(default_factory=dict)  # the encoder's output refit (TrainConfig.refit_output): {"alpha" (None =
    #   the trained layer kept), "val_loss_before", "val_loss_after", "latent_r2_before", "latent_r2_after"}; {} if off
    seconds: dict = field(default_factory=dict)  # wall seconds of each stage that ran, in STAGES order (of
    #   train_branches: the shared warm-up and epochs, then this branch's own stages)


SHARED_STAGES = (INPUTS, LATENT_WARMUP, EPOCHS)  # up to the kept epoch: run once by train_branches
BRANCH_STAGES = (OUTPUT_REFIT, PREDICTOR_FINETUNING, CALIBRATION)  # from the kept epoch: run once per branch
STAGES = tuple(s.name for s in (LATENT_WARMUP, EPOCHS, *BRANCH_STAGES))  # TrainResult.seconds' keys
# the fields branches of train_branches may differ in: read after the selection and by no shared stage (derived from
# the stages' declarations, so a field a shared stage reads -- finetune_patience: the warm-up's patience too -- is not)
BRANCH_FIELDS = frozenset().union(*(s.reads for s in BRANCH_STAGES)) - frozenset().union(
    *(s.reads for s in SHARED_STAGES))


def train_locus(
    encodings: np.ndarray,  # (Q, D) query encodings
    train_scores: np.ndarray,  # (M, Q) scores in [0, 1], NaN = not a train cell
    val_scores: np.ndarray,  # (M, Q) scores in [0, 1], NaN = not a val cell
    *,
    model_config: LocusConfig,
    train_config: TrainConfig,
    on_epoch: Callable[[dict], None] | None = None,
    progress: bool = True,
) -> TrainResult:
    """Train LOCUS; returns the state with the best validation figure (TrainConfig.select_on: val BCE, or routing
    accuracy with val BCE breaking ties), after the encoder's output refit (when on), the predictor fine-tuning and
    the calibration.

    Validation embeds each model from its train cells (at most val_set_max, a fixed subset) and scores its
    val cells. on_epoch receives {epoch, train_loss, val_loss, val_routing_acc, val_correctness_acc, noise,
    seconds} after every epoch. Seeds torch inside a forked RNG, so the caller's global RNG is untouched.
    """
    return train_branches(encodings, train_scores, val_scores, model_config=model_config,
                          train_configs=[train_config], on_epoch=on_epoch, progress=progress)[0]


def train_branches(
    encodings: np.ndarray,
    train_scores: np.ndarray,
    val_scores: np.ndarray,
    *,
    model_config: LocusConfig,
    train_configs: list[TrainConfig],
    on_epoch: Callable[[dict], None] | None = None,
    progress: bool = True,
) -> list[TrainResult]:
    """train_locus for each of train_configs, which differ only in BRANCH_FIELDS: the inputs, the warm-up and the
    epochs run once (with the first config), and every config's later stages start from the same selected state and
    the same random state, so each result is the one train_locus gives for that config alone."""
    cfg = train_configs[0]
    for other in train_configs[1:]:
        differ = [f.name for f in fields(TrainConfig)
                  if getattr(cfg, f.name) != getattr(other, f.name) and f.name not in BRANCH_FIELDS]
        if differ:
            raise ValueError(f"train_branches: the configs differ in {differ}, which the shared stages read; only "
                             f"{sorted(BRANCH_FIELDS)} may differ between branches (train them apart otherwise).")
    data, val, train_np = prepare_inputs(encodings, train_scores, val_scores, model_config.query_dim, cfg)
    device = data.enc.device
    results = []
    with torch.random.fork_rng(devices=[] if device.type == "cpu" else [device]):
        torch.manual_seed(cfg.seed)  # init and dropout
        net = Locus(model_config).to(device)  # the weights the optimiser moves
        shared: dict[str, float] = {}
        latent, latents = _timed(shared, LATENT_WARMUP, cfg, fit_latents, net, data, train_np, val) or ({}, None)
        best, model = _timed(shared, EPOCHS, cfg, lambda c: train_epochs(net, data, val, latents, c,
                                                                          on_epoch=on_epoch, progress=progress))
        cuda = device.type == "cuda"
        states = (torch.get_rng_state(), data.gen.get_state(), copy.deepcopy(data.rng.bit_generator.state),
                  torch.cuda.get_rng_state(device) if cuda else None)
        for branch in train_configs:
            torch.set_rng_state(states[0])
            if cuda:
                torch.cuda.set_rng_state(states[3], device)
            data.gen.set_state(states[1])
            data.rng.bit_generator.state = copy.deepcopy(states[2])
            kept = copy.deepcopy(model) if len(train_configs) > 1 else model
            kept.load_state_dict(best.state)
            seconds = dict(shared)
            refit = _timed(seconds, OUTPUT_REFIT, branch, refit_output, kept, train_np, data, val, latents) or {}
            finetune = _timed(seconds, PREDICTOR_FINETUNING, branch, finetune_predictor, kept, train_np, data,
                              val) or {}
            calibration = _timed(seconds, CALIBRATION, branch, calibrate, kept, data.enc, val) or {}
            kept.cpu().eval()
            results.append(TrainResult(model=kept, history=best.history, best_epoch=best.epoch,
                                       best_metrics=best.metrics, calibration=calibration, finetune=finetune,
                                       latent=latent, refit=refit, seconds=seconds))
    return results


def _timed(seconds: dict[str, float], stage: Stage, cfg: TrainConfig, run: Callable[..., Any], *args) -> Any:
    """run(*args, cfg) when cfg turns the stage on, its wall seconds into seconds[stage.name]; None when off."""
    if not stage.on(cfg):
        return None
    clock = time.perf_counter()
    out = run(*args, cfg)
    seconds[stage.name] = time.perf_counter() - clock
    return out

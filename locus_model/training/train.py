"""Training of LOCUS (arXiv 2601.21082): set encoder + correctness predictor, end to end, with BCE.

Each step takes a mini-batch of models. For every model an encoder subset S_enc of random size in
[enc_min, enc_max] is drawn from its train cells (training on varying sizes is what lets the encoder work
at any n later) and an independent decoder batch S_dec of dec_batch train cells supplies the targets.
Gaussian noise is added to the query encodings of both. Early stopping watches the validation figure of
TrainConfig.select_on (val BCE by default; or routing accuracy, val BCE breaking ties) and the best state is
kept; by default a Platt scaling of its logits (logit / T + b, one T and b for all pairs) is then fitted on the
validation cells and stored in the model.

This module is the order of the stages; each lives in its own module: the knobs in train_config, the inputs,
validation and selection in train_inputs, the end-to-end epochs in train_epochs, the latent warm-up, the
predictor fine-tuning and the calibration in train_predictor, the encoder's output refit in train_refit.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch

from locus_model.model import Locus, LocusConfig
from locus_model.training.config import TrainConfig
from locus_model.training.epochs import train_epochs
from locus_model.training.inputs import prepare_inputs
from locus_model.training.predictor import calibrate, finetune_predictor, fit_latents
from locus_model.training.refit import refit_output


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


STAGES = ("latent_warmup", "epochs", "output_refit", "predictor_finetuning", "calibration")  # TrainResult.seconds' keys


# the TrainConfig fields read only after the kept epoch is selected: trials that differ in these alone can share
# everything before (train_branches)
AFTER_SELECTION = ("refit_output", "refit_alphas", "finetune_steps", "finetune_patience", "finetune_noise", "calibration")


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
    """train_locus for each of train_configs, which differ only in AFTER_SELECTION fields: the warm-up and the epochs
    run once (with the first config), and every config's later stages start from the same selected state and the
    same random state, so each result is the one train_locus gives for that config alone."""
    cfg = train_configs[0]
    for other in train_configs[1:]:
        differ = [f for f in cfg.__dataclass_fields__ if getattr(cfg, f) != getattr(other, f) and f not in AFTER_SELECTION]
        if differ:
            raise ValueError(f"train_branches: the configs differ in {differ}, which the shared stages read; only "
                             f"{list(AFTER_SELECTION)} may differ between branches (train them apart otherwise).")
    data, val, train_np = prepare_inputs(encodings, train_scores, val_scores, model_config.query_dim, cfg)
    device = data.enc.device
    results = []
    with torch.random.fork_rng(devices=[] if device.type == "cpu" else [device]):
        torch.manual_seed(cfg.seed)  # init and dropout
        net = Locus(model_config).to(device)  # the weights the optimiser moves
        if cfg.profile_weight > 0:
            data.readout = torch.nn.Linear(model_config.d, cfg.splice_clusters).to(device)
        shared: dict[str, float] = {}
        latent = _timed(shared, "latent_warmup", cfg.latent_steps > 0, fit_latents, net, data, train_np, val, cfg)
        # the weights that are validated, selected and returned: net itself, or its moving average
        model = copy.deepcopy(net) if cfg.ema_decay > 0 else net
        best = _timed(shared, "epochs", True, train_epochs, net, model, data, val, cfg, on_epoch, progress)
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
            refit = _timed(seconds, "output_refit", branch.refit_output, refit_output, kept, train_np, data, val, branch)
            finetune = _timed(seconds, "predictor_finetuning", branch.finetune_steps > 0, finetune_predictor, kept,
                              train_np, data, val, branch)
            calibration = _timed(seconds, "calibration", branch.calibration != "none", calibrate, kept, data.enc, val,
                                 branch)
            kept.cpu().eval()
            results.append(TrainResult(model=kept, history=best.history, best_epoch=best.epoch,
                                       best_metrics=best.metrics, calibration=calibration, finetune=finetune,
                                       latent=latent, refit=refit, seconds=seconds))
    return results


def _timed(seconds: dict[str, float], stage: str, on: bool, run: Callable[..., Any], *args) -> Any:
    """run(*args) when the stage is on, its wall seconds into seconds[stage]; {} when off."""
    if not on:
        return {}
    clock = time.perf_counter()
    out = run(*args)
    seconds[stage] = time.perf_counter() - clock
    return out


__all__ = ["AFTER_SELECTION", "STAGES", "TrainConfig", "TrainResult", "train_branches", "train_locus"]

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
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from locus_model.model import Locus, LocusConfig
from locus_model.train_config import TrainConfig
from locus_model.train_epochs import train_epochs
from locus_model.train_inputs import prepare_inputs
from locus_model.train_predictor import calibrate, finetune_predictor, fit_latents
from locus_model.train_refit import refit_output


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
    accuracy with val BCE breaking ties), after the predictor fine-tuning and the calibration.

    Validation embeds each model from its train cells (at most val_set_max, a fixed subset) and scores its
    val cells. on_epoch receives {epoch, train_loss, val_loss, val_routing_acc, val_correctness_acc, noise,
    seconds} after every epoch. Seeds torch inside a forked RNG, so the caller's global RNG is untouched.
    """
    cfg = train_config
    data, val, train_np = prepare_inputs(encodings, train_scores, val_scores, model_config.query_dim, cfg)
    device = data.enc.device
    with torch.random.fork_rng(devices=[] if device.type == "cpu" else [device]):
        torch.manual_seed(cfg.seed)  # init and dropout
        net = Locus(model_config).to(device)  # the weights the optimiser moves
        if cfg.profile_weight > 0:
            data.readout = torch.nn.Linear(model_config.d, cfg.splice_clusters).to(device)
        latent = fit_latents(net, data, train_np, val, cfg) if cfg.latent_steps > 0 else {}
        # the weights that are validated, selected and returned: net itself, or its moving average
        model = copy.deepcopy(net) if cfg.ema_decay > 0 else net
        best = train_epochs(net, model, data, val, cfg, on_epoch, progress)
        model.load_state_dict(best.state)
        refit = refit_output(model, train_np, data, val, cfg) if cfg.refit_output else {}
        finetune = finetune_predictor(model, train_np, data, val, cfg) if cfg.finetune_steps > 0 else {}
        calibration = calibrate(model, data.enc, val, cfg) if cfg.calibration != "none" else {}
    model.cpu().eval()
    return TrainResult(model=model, history=best.history, best_epoch=best.epoch, best_metrics=best.metrics,
                       calibration=calibration, finetune=finetune, latent=latent,
                       refit=refit)


__all__ = ["TrainConfig", "TrainResult", "train_locus"]

"""Training of LOCUS (arXiv 2601.21082): set encoder + correctness predictor, end to end, with BCE.

Each step takes a mini-batch of models. For every model an encoder subset S_enc of random size in
[enc_min, enc_max] is drawn from its train cells (training on varying sizes is what lets the encoder work
at any n later) and an independent decoder batch S_dec of dec_batch train cells supplies the targets.
Gaussian noise is added to the query encodings of both. Early stopping watches the validation figure of
val BCE (higher routing accuracy breaking ties) and the best state is kept. The last stage makes the trained router
(locus_model.router): the query groups and the blend of the predictor with the group table, fitted on the
validation cells -- the one calibration of P(correct).

This module is the order of the stages; each lives in its own module of locus_model.training and declares the
TrainConfig fields it reads (a Stage): the inputs (inputs), the latent warm-up (predictor), the end-to-end epochs
(epochs), then, from the kept epoch, the encoder's output refit (refit), the predictor fine-tuning (predictor) and the
router (locus_model.router.fit_router). A stage takes its inputs and returns what it makes; the model it is given is the
one it trains.
"""

from __future__ import annotations

import copy
import sys
import time
from dataclasses import dataclass, field, fields
from typing import Any, Callable

import numpy as np
import torch

from locus_model.model import Locus, LocusConfig
from locus_model.router import Router, fit_router
from locus_model.training.config import Stage, TrainConfig
from locus_model.training.epochs import EPOCHS, train_epochs
from locus_model.training.inputs import INPUTS, prepare_inputs
from locus_model.training.predictor import LATENT_WARMUP, PREDICTOR_FINETUNING, finetune_predictor, fit_latents
from locus_model.training.refit import OUTPUT_REFIT, refit_output

ROUTER = Stage("router", frozenset())  # the query groups and the blend (locus_model.router.fit_router): no field


@dataclass
class TrainResult:
    router: Router  # the trained router: the best validation state (on CPU, eval mode), its groups and blend
    embeddings: np.ndarray  # (M, d) the in-training models' embeddings from all their train cells (the router's)
    history: list[dict] = field(default_factory=list)  # one dict per epoch (as passed to on_epoch)
    best_epoch: int = -1  # epoch of the kept state
    best_metrics: dict = field(default_factory=dict)  # that epoch's dict
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

    @property
    def model(self) -> Locus:
        """The set encoder + correctness predictor of the router."""
        return self.router.model


SHARED_STAGES = (INPUTS, LATENT_WARMUP, EPOCHS)  # up to the kept epoch: run once by train_branches
BRANCH_STAGES = (OUTPUT_REFIT, PREDICTOR_FINETUNING, ROUTER)  # from the kept epoch: run once per branch
STAGES = tuple(s.name for s in (LATENT_WARMUP, EPOCHS, *BRANCH_STAGES))  # TrainResult.seconds' keys
# the fields branches of train_branches may differ in: read after the selection and by no shared stage (derived from
# the stages' declarations, so a field a shared stage reads -- finetune_patience: the warm-up's patience too -- is not)
BRANCH_FIELDS = frozenset().union(*(s.reads for s in BRANCH_STAGES)) - frozenset().union(
    *(s.reads for s in SHARED_STAGES)
)


def train_locus(
    encodings: np.ndarray,  # (Q, D) query encodings
    train_scores: np.ndarray,  # (M, Q) scores in [0, 1], NaN = not a train cell
    val_scores: np.ndarray,  # (M, Q) scores in [0, 1], NaN = not a val cell
    *,
    model_config: LocusConfig,
    train_config: TrainConfig,
    benchmarks: np.ndarray | None = None,  # (Q,) query labels for the query groups, "" where unread, or None
    on_epoch: Callable[[dict], None] | None = None,
    on_stage: Callable[[str], None] | None = None,
    progress: bool = True,
) -> TrainResult:
    """Train LOCUS; returns the trained router: the state with the lowest val BCE, after the encoder's output refit
    (when on) and the predictor fine-tuning, with its query groups and blend (the router stage).

    Validation embeds each model from its train cells (at most val_set_max, a fixed subset) and scores its
    val cells. on_epoch receives {epoch, train_loss, val_loss, val_routing_acc, val_correctness_acc, noise,
    seconds} after every epoch; on_stage a line when each later stage starts and ends (without it, progress prints
    them). Seeds torch inside a forked RNG, so the caller's global RNG is untouched.
    """
    return train_branches(
        encodings,
        train_scores,
        val_scores,
        model_config=model_config,
        benchmarks=benchmarks,
        train_configs=[train_config],
        on_epoch=on_epoch,
        on_stage=on_stage,
        progress=progress,
    )[0]


def train_branches(
    encodings: np.ndarray,
    train_scores: np.ndarray,
    val_scores: np.ndarray,
    *,
    model_config: LocusConfig,
    train_configs: list[TrainConfig],
    benchmarks: np.ndarray | None = None,
    on_epoch: Callable[[dict], None] | None = None,
    on_stage: Callable[[str], None] | None = None,
    progress: bool = True,
) -> list[TrainResult]:
    """train_locus for each of train_configs, which differ only in BRANCH_FIELDS: the inputs, the warm-up and the
    epochs run once (with the first config), and every config's later stages start from the same selected state and
    the same random state, so each result is the one train_locus gives for that config alone."""
    cfg = train_configs[0]
    for other in train_configs[1:]:
        differ = [
            f.name
            for f in fields(TrainConfig)
            if getattr(cfg, f.name) != getattr(other, f.name) and f.name not in BRANCH_FIELDS
        ]
        if differ:
            raise ValueError(
                f"train_branches: the configs differ in {differ}, which the shared stages read; only "
                f"{sorted(BRANCH_FIELDS)} may differ between branches (train them apart otherwise)."
            )
    data, val, train_np = prepare_inputs(encodings, train_scores, val_scores, model_config.query_dim, cfg)
    device = data.enc.device
    say = on_stage or (_print if progress else _silent)
    results = []
    with torch.random.fork_rng(devices=[] if device.type == "cpu" else [device]):
        torch.manual_seed(cfg.seed)  # init and dropout
        net = Locus(model_config).to(device)  # the weights the optimiser moves
        shared: dict[str, float] = {}
        latent, latents = _timed(say, shared, LATENT_WARMUP, cfg, fit_latents, net, data, train_np, val) or ({}, None)
        best, model = _timed(
            say,
            shared,
            EPOCHS,
            cfg,
            lambda c: train_epochs(net, data, val, latents, c, on_epoch=on_epoch, progress=progress),
        )
        cuda = device.type == "cuda"
        states = (
            torch.get_rng_state(),
            data.gen.get_state(),
            copy.deepcopy(data.rng.bit_generator.state),
        )
        cuda_state = torch.cuda.get_rng_state(device) if cuda else None
        for branch in train_configs:
            torch.set_rng_state(states[0])
            if cuda_state is not None:
                torch.cuda.set_rng_state(cuda_state, device)
            data.gen.set_state(states[1])
            data.rng.bit_generator.state = copy.deepcopy(states[2])
            kept = copy.deepcopy(model) if len(train_configs) > 1 else model
            kept.load_state_dict(best.state)
            seconds = dict(shared)
            refit = _timed(say, seconds, OUTPUT_REFIT, branch, refit_output, kept, train_np, data, val, latents) or {}
            finetune = (
                _timed(say, seconds, PREDICTOR_FINETUNING, branch, finetune_predictor, kept, train_np, data, val) or {}
            )
            kept.eval()
            router, embeddings = _timed(
                say,
                seconds,
                ROUTER,
                branch,
                lambda c: fit_router(kept, encodings, train_np, val_scores, benchmarks, device=str(device)),
            )
            router.model.cpu()
            results.append(
                TrainResult(
                    router=router,
                    embeddings=embeddings,
                    history=best.history,
                    best_epoch=best.epoch,
                    best_metrics=best.metrics,
                    finetune=finetune,
                    latent=latent,
                    refit=refit,
                    seconds=seconds,
                )
            )
    return results


def _timed(
    say: Callable[[str], None],
    seconds: dict[str, float],
    stage: Stage,
    cfg: TrainConfig,
    run: Callable[..., Any],
    *args,
) -> Any:
    """run(*args, cfg) when cfg turns the stage on, its wall seconds into seconds[stage.name]; None when off. Says
    when a stage after the epochs starts and ends (the epochs report themselves)."""
    if not stage.on(cfg):
        return None
    talk = stage.name != EPOCHS.name
    if talk:
        say(f"LOCUS training: {stage.name} ...")
    clock = time.perf_counter()
    out = run(*args, cfg)
    seconds[stage.name] = time.perf_counter() - clock
    if talk:
        say(f"LOCUS training: {stage.name} done in {seconds[stage.name]:.1f} s")
    return out


def _print(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _silent(line: str) -> None:
    pass

"""The predictor-only stages of LOCUS training, around the end-to-end epochs: the latent warm-up before them
(fit_latents) and the predictor fine-tuning on fixed embeddings after them (finetune_predictor). Both draw one
step's cells the same way (_predictor_batch)."""

from __future__ import annotations

import copy
import math
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from locus_model.model import Locus
from locus_model.training.config import GRAD_CLIP, Stage, TrainConfig
from locus_model.training.inputs import Inputs, Latents, Validation, embed_sets, projected_noise, validate

FINETUNE_EVERY = 10  # steps between validations of the predictor fine-tuning
FINETUNE_MAX_COLUMNS = 2048  # train queries per predictor-only step (a random subset when there are more)
FINETUNE_MAX_MODELS = 256  # models per predictor-only step (a random subset when there are more)
LATENT_LR = 1e-2  # Adam learning rate of the warm-up's free model vectors (a constant: no run ever set another)

# what both stages read: the predictor's optimiser, a step's cells and the patience (finetune_patience stops the
# warm-up too, so configs that differ in it cannot share a warm-up: train.BRANCH_FIELDS)
_PREDICTOR_STEPS = {"lr_predictor", "weight_decay", "predictor_step_cells", "finetune_patience"}
LATENT_WARMUP = Stage(
    "latent_warmup", frozenset({"latent_steps", "latent_noise", *_PREDICTOR_STEPS}), on=lambda cfg: cfg.latent_steps > 0
)
PREDICTOR_FINETUNING = Stage(
    "predictor_finetuning",
    frozenset({"finetune_steps", "finetune_noise", *_PREDICTOR_STEPS}),
    on=lambda cfg: cfg.finetune_steps > 0,
)


def step_columns(rows: int, step_cells: int) -> int:
    """The most train queries a predictor-only step of ``rows`` models takes (FINETUNE_MAX_COLUMNS, fewer when
    rows x FINETUNE_MAX_COLUMNS exceeds step_cells, TrainConfig.predictor_step_cells)."""
    return max(1, min(FINETUNE_MAX_COLUMNS, step_cells // max(rows, 1)))


def _predictor_batch(
    model: Locus,
    z: torch.Tensor,  # (M, d) model vectors (fixed embeddings, or the warm-up's free vectors)
    enc_t: torch.Tensor,  # (Q, D)
    scores_t: torch.Tensor,  # (M, Q) train scores, 0 where unknown
    known_t: torch.Tensor,  # (M, Q) bool train cells
    cols_all: np.ndarray,  # the queries with a train cell
    step_cells: int,  # TrainConfig.predictor_step_cells
    std: float,
    gen: torch.Generator,
    rng: np.random.Generator,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | slice]:
    """One predictor-only step's cells: at most FINETUNE_MAX_MODELS models and FINETUNE_MAX_COLUMNS train queries, at
    most step_cells cells (random subsets when there are more), noisy query projections; (logits (R, C),
    targets, known, the rows)."""
    n_cols = step_columns(min(len(z), FINETUNE_MAX_MODELS), step_cells)
    cols = cols_all if len(cols_all) <= n_cols else rng.choice(cols_all, n_cols, replace=False)
    cols_t = torch.from_numpy(np.asarray(cols)).to(enc_t.device)
    u = model.query_projection(enc_t[cols_t])  # (C, d)
    if std > 0:
        u = u + projected_noise(model.query_proj.weight, std, u.shape, gen)
    rows_t = (
        slice(None)
        if len(z) <= FINETUNE_MAX_MODELS
        else torch.from_numpy(np.sort(rng.choice(len(z), FINETUNE_MAX_MODELS, replace=False))).to(z.device)
    )
    logits = model.predict_logits_projected(z[rows_t], u)  # (R, C)
    return logits, scores_t[rows_t][:, cols_t], known_t[rows_t][:, cols_t], rows_t


def fit_latents(
    net: Locus, data: Inputs, train_np: np.ndarray, val: Validation, cfg: TrainConfig
) -> tuple[dict, Latents]:
    """The latent warm-up: net's predictor and one free vector per training model, fitted on the train cells
    (MAP, a N(0, I) prior on each vector) once per cfg.latent_noise ratio from the same initial predictor; the
    predictor of minimum val BCE over steps and ratios is loaded into net. Returns ({"noise", "step", "val_loss",
    "steps_run"}, that state's vectors)."""
    device = data.enc.device
    known_t = torch.from_numpy(~np.isnan(train_np)).to(device)
    cols_all = np.flatnonzero(known_t.any(dim=0).cpu().numpy())
    params = net.predictor_parameters()
    initial = [p.detach().clone() for p in params]
    best: dict = {"val_loss": math.inf}
    steps_run: dict[str, int] = {}
    for ratio in cfg.latent_noise:
        with torch.no_grad():
            for p, p0 in zip(params, initial):
                p.copy_(p0)
        z = torch.nn.Parameter(0.1 * torch.randn(len(train_np), net.config.d, generator=data.gen, device=device))
        opt = torch.optim.AdamW(
            [
                {"params": params, "lr": cfg.lr_predictor, "weight_decay": cfg.weight_decay},
                {"params": [z], "lr": LATENT_LR, "weight_decay": 0.0},
            ]
        )
        std, ratio_best, ratio_step = data.noise_std(ratio), math.inf, 0
        for step in range(1, cfg.latent_steps + 1):
            net.train()
            logits, targets, mask, rows_t = _predictor_batch(
                net, z, data.enc, data.scores, known_t, cols_all, cfg.predictor_step_cells, std, data.gen, data.rng
            )
            bce = F.binary_cross_entropy_with_logits(logits[mask], targets[mask], reduction="sum")
            loss = (bce + 0.5 * z[rows_t].pow(2).sum()) / mask.sum().clamp(min=1)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, GRAD_CLIP)
            opt.step()
            if step % FINETUNE_EVERY == 0 or step == cfg.latent_steps:
                current = validate(net, data.enc, val, z.detach()[val.rows])[0]
                if current < ratio_best:
                    ratio_best, ratio_step = current, step
                    if current < best["val_loss"]:
                        best = {
                            "val_loss": current,
                            "noise": ratio,
                            "step": step,
                            "latents": z.detach().clone(),
                            "predictor": [p.detach().clone() for p in params],
                        }
                elif step - ratio_step >= cfg.finetune_patience:
                    break
        steps_run[f"{ratio:g}"] = step
    with torch.no_grad():
        for p, kept in zip(params, best["predictor"]):
            p.copy_(kept)
    latents = Latents(vectors=best["latents"], var=float(best["latents"].var(dim=0).sum().clamp(min=1e-8)))
    return {"noise": best["noise"], "step": best["step"], "val_loss": best["val_loss"], "steps_run": steps_run}, latents


def finetune_predictor(model: Locus, train_np: np.ndarray, data: Inputs, val: Validation, cfg: TrainConfig) -> dict:
    """The predictor fine-tuning at each of cfg.finetune_noise from the selected state; the lowest val BCE is kept."""
    sets = [(idx, train_np[m, idx]) for m, idx in enumerate(data.avail)]
    z_all = embed_sets(model, data.enc, sets)  # from all train cells, as at test time
    known_t = torch.from_numpy(~np.isnan(train_np)).to(data.enc.device)
    selected, kept_state, by_noise, finetune = copy.deepcopy(model.state_dict()), None, {}, {}
    for ratio in cfg.finetune_noise:
        model.load_state_dict(selected)
        info = _finetune_run(
            model,
            z_all,
            data.enc,
            data.scores,
            known_t,
            lambda: validate(model, data.enc, val, z_all[val.rows]),
            cfg=cfg,
            std=data.noise_std(ratio),
            gen=data.gen,
            rng=data.rng,
        )
        by_noise[f"val_loss_at_noise_{ratio:g}"] = info["val_loss_after"]
        if kept_state is None or info["val_loss_after"] < finetune["val_loss_after"]:
            finetune, kept_state = {**info, "noise": ratio}, copy.deepcopy(model.state_dict())
    assert kept_state is not None  # TrainConfig holds at least one finetune_noise ratio
    model.load_state_dict(kept_state)
    finetune.update(by_noise)
    return finetune


def _finetune_run(
    model: Locus,
    z: torch.Tensor,  # (M, d) fixed embeddings
    enc_t: torch.Tensor,  # (Q, D)
    scores_t: torch.Tensor,  # (M, Q) train scores, 0 where unknown
    known_t: torch.Tensor,  # (M, Q) bool train cells
    validate: Callable[[], tuple[float, float, float]],  # (val loss, routing, correctness) with the same z
    *,
    cfg: TrainConfig,
    std: float,
    gen: torch.Generator,
    rng: np.random.Generator,
) -> dict:
    """Train only the predictor on fixed embeddings (TrainConfig.finetune_steps); keep the min val BCE state."""
    params = model.predictor_parameters()
    opt = torch.optim.AdamW(params, lr=cfg.lr_predictor, weight_decay=cfg.weight_decay)
    cols_all = np.flatnonzero(known_t.any(dim=0).cpu().numpy())
    before = best = validate()[0]
    best_step, best_state = 0, copy.deepcopy(model.state_dict())
    for step in range(1, cfg.finetune_steps + 1):
        model.train()
        logits, targets, mask, _ = _predictor_batch(
            model, z, enc_t, scores_t, known_t, cols_all, cfg.predictor_step_cells, std, gen, rng
        )
        loss = F.binary_cross_entropy_with_logits(logits[mask], targets[mask])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, GRAD_CLIP)
        opt.step()
        if step % FINETUNE_EVERY == 0 or step == cfg.finetune_steps:
            current = validate()[0]
            if current < best:
                best, best_step, best_state = current, step, copy.deepcopy(model.state_dict())
            elif step - best_step >= cfg.finetune_patience:
                break
    model.load_state_dict(best_state)
    routing = validate()[1]  # unchanged by the calibration after
    return {
        "step": best_step,
        "steps_run": step,
        "val_loss_before": before,
        "val_loss_after": best,
        "val_routing_acc": routing,
    }

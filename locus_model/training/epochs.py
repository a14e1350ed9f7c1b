"""The end-to-end epochs of LOCUS training: each step draws encoder subsets and decoder targets per model (and the
latent objective after the warm-up), takes an AdamW step and moves the EMA; each epoch is validated and the best one
kept (train_epochs)."""

from __future__ import annotations

import copy
import time
from typing import Callable, Iterator

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from locus_model.model import Locus
from locus_model.training.config import GRAD_CLIP, Stage, TrainConfig, epochs_to_run, noise_ratio
from locus_model.training.inputs import Inputs, Latents, Selected, Validation, projected_noise, validate

EPOCHS = Stage(
    "epochs",
    frozenset(
        {
            "epochs",
            "max_steps",
            "epoch_models",
            "batch_models",
            "draws",
            "enc_min",
            "enc_max",
            "dec_batch",
            "lr_encoder",
            "lr_predictor",
            "weight_decay",
            "noise_start",
            "noise_end",
            "noise_anneal_epochs",
            "patience",
            "select_from_epoch",
            "ema_decay",
        }
    ),
)
# the weight of the encoder's squared error to the model's latent vector (relative to the latents' total variance),
# beside the BCE through the frozen predictor, when the latent warm-up ran (a constant: no run ever set another)
LATENT_WEIGHT = 1.0


def _draw_sets(
    a: np.ndarray, cfg: TrainConfig, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:  # (encoder subset (k,), decoder targets (T,)) of one model's train cells a
    n = len(a)
    k = int(rng.integers(min(cfg.enc_min, n), min(cfg.enc_max, n) + 1))
    return rng.choice(a, k, replace=False), rng.choice(a, min(cfg.dec_batch, n), replace=False)


def _epoch_orders(n: int, epoch_models: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """The models of each epoch: a permutation of all of them, or the next epoch_models of a running permutation
    when the pool is larger (every model is visited equally often)."""
    pending: list[int] = []
    while True:
        if n <= epoch_models:
            yield rng.permutation(n)
            continue
        while len(pending) < epoch_models:
            pending.extend(rng.permutation(n).tolist())
        order, pending = pending[:epoch_models], pending[epoch_models:]
        yield np.asarray(order, dtype=np.int64)


def _pad(rows: list[np.ndarray], fill: float | int, dtype) -> tuple[np.ndarray, np.ndarray]:
    n = max(len(r) for r in rows)
    out = np.full((len(rows), n), fill, dtype=dtype)
    mask = np.zeros((len(rows), n), dtype=bool)
    for i, r in enumerate(rows):
        out[i, : len(r)], mask[i, : len(r)] = r, True
    return out, mask


def _batch_loss(
    net: Locus, batch: np.ndarray, data: Inputs, latents: Latents | None, cfg: TrainConfig, std: float
) -> tuple[torch.Tensor, int]:
    """BCE of one step (batch: model rows, each repeated cfg.draws times), plus the squared error to the warm-up's
    latents when there are some, and its number of decoder targets."""
    device = data.enc.device
    enc_rows, dec_rows = [], []
    for m in batch:
        enc_row, dec_row = _draw_sets(data.avail[m], cfg, data.rng)
        enc_rows.append(enc_row)
        dec_rows.append(dec_row)
    enc_idx, enc_mask = _pad(enc_rows, 0, np.int64)  # (B, n)
    dec_idx, dec_mask = _pad(dec_rows, 0, np.int64)  # (B, T)
    b_t = torch.from_numpy(batch).to(device)[:, None]
    enc_idx_t, dec_idx_t = torch.from_numpy(enc_idx).to(device), torch.from_numpy(dec_idx).to(device)
    enc_mask_t, dec_mask_t = torch.from_numpy(enc_mask).to(device), torch.from_numpy(dec_mask).to(device)
    # query-only work once per distinct query of the step, the noise added after the projection
    enc_used, enc_local = np.unique(enc_idx, return_inverse=True)
    dec_used, dec_local = np.unique(dec_idx, return_inverse=True)
    parts = net.token_parts(data.enc[torch.from_numpy(enc_used).to(device)])  # (U, 2d)
    # index_select: its backward (index_add_) sums repeated rows in a fixed order; indexing's does not
    parts = parts.index_select(0, torch.from_numpy(enc_local.ravel()).to(device)).view(*enc_idx.shape, -1)
    u = net.query_projection(data.enc[torch.from_numpy(dec_used).to(device)])  # (U', d)
    u = u.index_select(0, torch.from_numpy(dec_local.ravel()).to(device)).view(*dec_idx.shape, -1)
    if std > 0:
        parts = parts + projected_noise(net.token_weight(), std, parts.shape, data.gen)
        u = u + projected_noise(net.query_proj.weight, std, u.shape, data.gen)
    y_enc, y_dec = data.scores[b_t, enc_idx_t], data.scores[b_t, dec_idx_t]  # (B, n), (B, T)
    z = net.embed_from_parts(parts, y_enc, enc_mask_t)  # (B, d)
    logits = net.pair_logits(z, u)  # (B, T)
    loss = F.binary_cross_entropy_with_logits(logits[dec_mask_t], y_dec[dec_mask_t])
    if latents is not None:  # the embedding of a subset -> the model's latent vector
        err = (z - latents.vectors[b_t[:, 0]]).pow(2).sum(dim=1).mean() / latents.var
        loss = loss + LATENT_WEIGHT * err
    return loss, int(dec_mask.sum())


@torch.no_grad()
def _ema_update(pairs: list[tuple[torch.Tensor, torch.Tensor]], decay: float, step: int) -> None:
    decay = min(decay, (1 + step) / (10 + step))  # warm-up: early steps follow the weights closely
    for avg, cur in pairs:
        avg.lerp_(cur, 1 - decay)


def _train_epoch(
    net: Locus,
    opt: torch.optim.Optimizer,
    ema_pairs: list,
    step: int,
    order: np.ndarray,
    data: Inputs,
    latents: Latents | None,
    cfg: TrainConfig,
    std: float,
) -> tuple[float, int]:
    """One pass over the epoch's models (order) in mini-batches; (target-weighted mean train loss, optimiser steps
    so far)."""
    net.train()
    losses, weights = [], []
    for start in range(0, len(order), cfg.batch_models):
        batch = np.repeat(order[start : start + cfg.batch_models], cfg.draws)  # draws rows per model
        loss, n_targets = _batch_loss(net, batch, data, latents, cfg, std)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), GRAD_CLIP)
        opt.step()
        if ema_pairs:
            _ema_update(ema_pairs, cfg.ema_decay, step)
        step += 1
        losses.append(loss.item())
        weights.append(n_targets)
    return float(np.average(losses, weights=weights)), step


def train_epochs(
    net: Locus,
    data: Inputs,
    val: Validation,
    latents: Latents | None,
    cfg: TrainConfig,
    *,
    on_epoch: Callable[[dict], None] | None = None,
    progress: bool = False,
) -> tuple[Selected, Locus]:
    """Train ``net`` end to end (its predictor frozen when the warm-up fitted it: latents given); validate the
    returned model (net itself, or with cfg.ema_decay a moving average of its weights) after every epoch and keep the
    best (the returned Selected holds its state, which the model has not loaded)."""
    model = copy.deepcopy(net) if cfg.ema_decay > 0 else net
    groups = [{"params": net.encoder_parameters(), "lr": cfg.lr_encoder}]
    frozen = net.predictor_parameters() if latents is not None else []  # the warm-up's predictor stays as fitted
    if not frozen:
        groups.append({"params": net.predictor_parameters(), "lr": cfg.lr_predictor})
    for p in frozen:
        p.requires_grad_(False)
    opt = torch.optim.AdamW(groups, weight_decay=cfg.weight_decay)
    ema_pairs = list(zip(model.parameters(), net.parameters())) if model is not net else []
    epochs = epochs_to_run(cfg, len(data.avail))
    first_eligible = min(cfg.select_from_epoch, epochs - 1)
    best, step = Selected(), 0
    orders = _epoch_orders(len(data.avail), cfg.epoch_models, data.rng)
    bar = tqdm(range(epochs), desc="train LOCUS", disable=not progress)
    for epoch in bar:
        t0 = time.perf_counter()
        ratio = noise_ratio(epoch, cfg)
        train_loss, step = _train_epoch(
            net, opt, ema_pairs, step, next(orders), data, latents, cfg, data.noise_std(ratio)
        )
        val_loss, val_routing, val_correct = validate(model, data.enc, val)
        row = {
            "epoch": epoch,
            "train_loss": train_loss,
            "val_loss": val_loss,
            "val_routing_acc": val_routing,
            "val_correctness_acc": val_correct,
            "noise": ratio,
            "seconds": time.perf_counter() - t0,
        }
        best.history.append(row)
        if epoch >= first_eligible:
            best.consider(row, model)
        if on_epoch is not None:
            on_epoch(dict(row))
        bar.set_postfix(loss=f"{train_loss:.4f}", val_route=f"{val_routing:.4f}", best=best.epoch)
        if epoch >= first_eligible and epoch - best.epoch >= cfg.patience:
            break
    bar.close()
    for p in frozen:
        p.requires_grad_(True)
    return best, model

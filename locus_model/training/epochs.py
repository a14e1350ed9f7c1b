"""The end-to-end epochs of LOCUS training: each step draws encoder subsets and decoder targets per model
(optionally spliced models, the latent and profile objectives), takes an AdamW step and moves the EMA; each
epoch is validated and the best one kept (train_epochs)."""

from __future__ import annotations

import time
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from locus_model.model import Locus
from locus_model.training.config import TrainConfig, epochs_to_run, noise_ratio
from locus_model.training.inputs import Inputs, Selected, Validation, projected_noise, validate


def _draw_sets(
    a: np.ndarray, cfg: TrainConfig, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:  # (encoder subset (k,), decoder targets (T,)) of one model's train cells a
    n = len(a)
    if cfg.disjoint and n > 1:  # k of a permutation for the encoder, targets from the rest
        k = int(rng.integers(min(cfg.enc_min, n - 1), min(cfg.enc_max, n - 1) + 1))
        order = rng.permutation(a)
        return order[:k], order[k : k + cfg.dec_batch]
    k = int(rng.integers(min(cfg.enc_min, n), min(cfg.enc_max, n) + 1))
    return rng.choice(a, k, replace=False), rng.choice(a, min(cfg.dec_batch, n), replace=False)


def _pad(rows: list[np.ndarray], fill: float | int, dtype) -> tuple[np.ndarray, np.ndarray]:
    n = max(len(r) for r in rows)
    out = np.full((len(rows), n), fill, dtype=dtype)
    mask = np.zeros((len(rows), n), dtype=bool)
    for i, r in enumerate(rows):
        out[i, : len(r)], mask[i, : len(r)] = r, True
    return out, mask


def _batch_loss(net: Locus, batch: np.ndarray, data: Inputs, cfg: TrainConfig, std: float) -> tuple[torch.Tensor, int]:
    """BCE of one step (batch: model rows, each repeated cfg.draws times) and its number of decoder targets."""
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
        if cfg.encoder_noise_scale > 0:
            parts = parts + projected_noise(net.token_weight(), std * cfg.encoder_noise_scale, parts.shape, data.gen)
        u = u + projected_noise(net.query_proj.weight, std, u.shape, data.gen)
    y_enc, y_dec = data.scores[b_t, enc_idx_t], data.scores[b_t, dec_idx_t]  # (B, n), (B, T)
    if cfg.splice > 0:
        y_enc, y_dec = _splice(data, cfg, len(batch), (enc_idx_t, y_enc), (dec_idx_t, y_dec))
    z = net.embed_from_parts(parts, y_enc, enc_mask_t)  # (B, d)
    logits = net.pair_logits(z, u)  # (B, T)
    loss = F.binary_cross_entropy_with_logits(logits[dec_mask_t], y_dec[dec_mask_t])
    if data.latents is not None and cfg.latent_weight > 0:  # the embedding of a subset -> the model's latent vector
        err = (z - data.latents[b_t[:, 0]]).pow(2).sum(dim=1).mean() / data.latent_var
        loss = loss + cfg.latent_weight * err
    if cfg.profile_weight > 0:  # the embedding of a subset should tell the profile on all of the model's cells
        known = data.profile_known[b_t[:, 0]]  # (B, K)
        err = (data.readout(z) - data.profile[b_t[:, 0]])[known]
        loss = loss + cfg.profile_weight * err.pow(2).mean()
    return loss, int(dec_mask.sum())


def _splice(data: Inputs, cfg: TrainConfig, rows: int,
            *sets: tuple[torch.Tensor, torch.Tensor]) -> list[torch.Tensor]:  # ((B, n) query indices, scores) each
    """The scores of virtual models: in a cfg.splice share of the rows, the clusters drawn for a row take a random
    donor model's scores where the donor has the cell; encoder set and decoder targets of a row splice alike."""
    device = data.enc.device
    spliced = data.rng.random(rows) < cfg.splice  # (B,)
    donors = torch.from_numpy(data.rng.integers(0, len(data.avail), rows)).to(device)[:, None]  # (B, 1)
    takes = (data.rng.random((rows, cfg.splice_clusters)) < 0.5) & spliced[:, None]  # (B, K) clusters from the donor
    takes_t = torch.from_numpy(takes).to(device)
    out = []
    for idx, y in sets:
        from_donor = takes_t.gather(1, data.clusters[idx]) & data.known[donors, idx]  # (B, n)
        out.append(torch.where(from_donor, data.scores[donors, idx], y))
    return out


@torch.no_grad()
def _ema_update(pairs: list[tuple[torch.Tensor, torch.Tensor]], decay: float, step: int) -> None:
    decay = min(decay, (1 + step) / (10 + step))  # warm-up: early steps follow the weights closely
    for avg, cur in pairs:
        avg.lerp_(cur, 1 - decay)


def _train_epoch(net: Locus, opt: torch.optim.Optimizer, ema_pairs: list, step: int, data: Inputs,
                 cfg: TrainConfig, std: float) -> tuple[float, int]:
    """One pass over all models in mini-batches; (target-weighted mean train loss, optimiser steps so far)."""
    net.train()
    order = data.epoch_order(cfg.epoch_models)
    losses, weights = [], []
    for start in range(0, len(order), cfg.batch_models):
        batch = np.repeat(order[start : start + cfg.batch_models], cfg.draws)  # draws rows per model
        loss, n_targets = _batch_loss(net, batch, data, cfg, std)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), cfg.grad_clip)
        opt.step()
        if ema_pairs:
            _ema_update(ema_pairs, cfg.ema_decay, step)
        step += 1
        losses.append(loss.item())
        weights.append(n_targets)
    return float(np.average(losses, weights=weights)), step


def train_epochs(net: Locus, model: Locus, data: Inputs, val: Validation, cfg: TrainConfig,
                 on_epoch: Callable[[dict], None] | None, progress: bool) -> Selected:
    """Train ``net``; validate ``model`` (net itself or its moving average) after every epoch, keep the best."""
    groups = [{"params": net.encoder_parameters() + ([] if data.readout is None else list(data.readout.parameters())),
               "lr": cfg.lr_encoder}]
    frozen = net.predictor_parameters() if data.latents is not None else []  # the warm-up's predictor stays as fitted
    if not frozen:
        groups.append({"params": net.predictor_parameters(), "lr": cfg.lr_predictor})
    for p in frozen:
        p.requires_grad_(False)
    opt = torch.optim.AdamW(groups, weight_decay=cfg.weight_decay)
    ema_pairs = list(zip(model.parameters(), net.parameters())) if model is not net else []
    epochs = epochs_to_run(cfg, len(data.avail))
    first_eligible = min(cfg.select_from_epoch, epochs - 1)
    best, step = Selected(), 0
    bar = tqdm(range(epochs), desc="train LOCUS", disable=not progress)
    for epoch in bar:
        t0 = time.perf_counter()
        ratio = noise_ratio(epoch, cfg)
        train_loss, step = _train_epoch(net, opt, ema_pairs, step, data, cfg, data.noise_std(ratio))
        val_loss, val_routing, val_correct = validate(model, data.enc, val)
        row = {"epoch": epoch, "train_loss": train_loss, "val_loss": val_loss, "val_routing_acc": val_routing,
               "val_correctness_acc": val_correct, "noise": ratio, "seconds": time.perf_counter() - t0}
        best.history.append(row)
        if epoch >= first_eligible:
            best.consider(row, model, cfg.select_on)
        if on_epoch is not None:
            on_epoch(dict(row))
        bar.set_postfix(loss=f"{train_loss:.4f}", val_route=f"{val_routing:.4f}", best=best.epoch)
        if epoch >= first_eligible and epoch - best.epoch >= cfg.patience:
            break
    bar.close()
    for p in frozen:
        p.requires_grad_(True)
    return best

"""Training of LOCUS (arXiv 2601.21082): set encoder + correctness predictor, end to end, with BCE.

Each step takes a mini-batch of models. For every model an encoder subset S_enc of random size in
[enc_min, enc_max] is drawn from its train cells (training on varying sizes is what lets the encoder work
at any n later) and an independent decoder batch S_dec of dec_batch train cells supplies the targets.
Gaussian noise is added to the query encodings of both. Early stopping watches validation routing
accuracy (validation loss breaks ties) and the best state is kept; that state is usually overconfident
(validation BCE bottoms out long before routing peaks), so by default a Platt scaling of its logits
(logit / T + b, one T and b for all pairs) is then fitted on the validation cells and stored in the model.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from locus_model.evaluation.metrics import correctness_accuracy, routing_accuracy
from locus_model.infer import default_max_tokens, distinct_queries, embed_batches, resolve_device
from locus_model.model import Locus, LocusConfig


@dataclass(frozen=True)
class TrainConfig:
    """How to train LOCUS: epochs and batches, encoder-subset sizes, query noise, EMA, checkpoint selection,
    the predictor fine-tuning and the calibration.

    The defaults are the best setting of a 5-fold sweep on the demo pool (docs/experiments.md says
    how each was chosen). Query noise is relative: noise_* is the ratio ||noise|| / ||encoding||, so one
    setting means the same for 384-d and 768-d encoders. On one CPU thread an epoch costs ~5 s for ~100 models
    x 1,024 anchors; lower epochs (the demo job uses 40) for a quick run.
    """

    epochs: int = 120  # max epochs; one epoch = one pass over all models in mini-batches (at most epoch_models)
    max_steps: int | None = None  # None = epochs alone bound training; else also at most this many encoder
    #   optimiser steps (rounded up to whole epochs): the encoder's work does not grow with the pool, so a schedule
    #   in steps keeps a pool of thousands of models (25 steps per epoch) as long as one of a few hundred
    epoch_models: int = 200  # an epoch visits at most this many models (the next ones of a running permutation,
    #   so every model is visited equally often): a pool of 2,000 models gets an epoch of 25 optimiser steps
    #   and a validation after it, like a pool of 200, instead of one per 250 steps; pools up to this size
    #   visit every model once per epoch
    batch_models: int = 8  # models per step (small: more optimiser steps per CPU second)
    draws: int = 4  # independent (encoder subset, decoder batch) draws per model per step: the step's batch
    #   holds batch_models * draws evaluation sets; more set sizes and targets per model per step
    enc_min: int = 16  # smallest encoder subset (clipped to the model's number of train cells)
    enc_max: int = 256  # largest encoder subset
    dec_batch: int = 512  # decoder targets per model per step (fewer if the model has fewer train cells)
    splice: float = 0.0  # share of a step's evaluation sets drawn from a virtual model: the model's own scores, with
    #   those of another random model on a random half of the query clusters (model-level augmentation: in a
    #   real pool profiles go with accuracy -- merges of one base --, in spliced models they vary apart from it)
    splice_clusters: int = 8  # k-means clusters of the train queries' encodings that splicing and the profile
    #   objective use (no benchmark labels are read)
    profile_weight: float = 0.0  # > 0: an auxiliary loss, this times the mean squared error of a linear read-out
    #   of the embedding (of a random subset) against the model's mean score per query cluster on all its train
    #   cells: it rewards the embedding for carrying the model's profile, not only its accuracy; the read-out is
    #   used in training only (checkpoints are unchanged)
    disjoint: bool = False  # True = the decoder targets of a draw are cells its encoder subset does not hold (a
    #   context / target split, as queries at test time are never in the set); False = drawn independently from
    #   all train cells, so a target's own (query, score) is often in the set being embedded
    val_models: int | None = 200  # validation scores at most this many models (a fixed seeded subset of a larger
    #   pool); None = all of them. Bounds epoch cost on pools of thousands of models
    val_set_max: int | None = 256  # validation embeds each model from at most this many of its train
    #   cells (a fixed seeded subset); None = all of them (the paper: all N anchors). Bounds epoch cost.
    lr_encoder: float = 2e-4  # AdamW lr of tokenizer, ISAB blocks, PMA, output layer
    lr_predictor: float = 8e-4  # AdamW lr of the correctness predictor G
    weight_decay: float = 0.05  # AdamW weight decay (both groups)
    grad_clip: float = 1.0  # max global gradient norm
    noise_start: float = 2.0  # query-noise ratio ||noise|| / ||phi|| at epoch 0
    noise_end: float = 1.0  # ... after noise_anneal_epochs (cosine schedule), constant afterwards
    noise_anneal_epochs: int = 30  # length of the cosine annealing
    encoder_noise_scale: float = 1.0  # the encoder's query noise is this times the decoder's (the ratio above): the
    #   decoder's noise keeps the predictor from overfitting the few distinct anchor queries; on the encoder side
    #   the same noise blurs which query (which benchmark) each score belongs to
    latent_steps: int = 1500  # 0 = off; else the latent warm-up runs first, up to this many steps: the correctness
    #   predictor is fitted with one free vector per training model (an auto-decoder, as matrix factorisation fits
    #   its model vectors), keeping the step of minimum val BCE; the set encoder is then trained to produce those
    #   vectors from evaluation subsets (latent_weight) through the fitted predictor, which stays frozen. End to
    #   end, the predictor first learns the accuracy, and the encoder only what the predictor already reads; the
    #   latents carry each model's whole profile from the first encoder step
    latent_noise: tuple[float, ...] = (1.0, 2.0, 4.0)  # query-noise ratios of the warm-up: it runs once per ratio
    #   and the lowest val BCE is kept (as the matrix-factorisation baseline chooses its noise)
    latent_lr: float = 1e-2  # Adam learning rate of the free model vectors (the predictor's is lr_predictor)
    latent_weight: float = 1.0  # weight of the encoder's squared error to the model's latent vector, relative to
    #   the latents' total variance, beside the BCE through the frozen predictor
    patience: int = 120  # stop after this many epochs without a better validation checkpoint
    select_on: str = "loss"  # the validation figure that picks the kept epoch: "loss" = val BCE over every (model,
    #   val query) cell; "routing" = routing accuracy (ties: lower val BCE), a hit rate over the few val queries that
    #   swings by a query between epochs
    select_from_epoch: int = 10  # epochs before this one are never kept (nor counted by patience); clipped to
    #   epochs - 1: on small validation sets an almost untrained epoch can win on a couple of queries
    seed: int = 0  # seeds init, subsets, noise and dropout: same seed -> same result on CPU
    device: str = "auto"  # "auto" -> cuda if available else cpu; or "cpu", "cuda", "cuda:1", ...
    ema_decay: float = 0.995  # 0 = off; else validation, checkpoint selection and the returned model use an
    #   exponential moving average of the weights (decay per optimiser step, warmed up as
    #   min(decay, (1 + t) / (10 + t))), which smooths the step-to-step jitter of small-batch training
    finetune_steps: int = 2000  # 0 = off; else, after checkpoint selection, the predictor alone is trained up to
    #   this many full-batch steps on fixed embeddings of the training models from all their train cells (as
    #   they are embedded at test time, where training embedded random subsets), keeping the step of minimum
    #   val BCE (checked every 10 steps; step 0 = no change). The encoder is untouched: onboarding stays one
    #   forward pass
    finetune_patience: int = 300  # stop the fine-tuning after this many steps without a lower val BCE
    finetune_noise: tuple[float, ...] = (2.0, 3.0)  # query-noise ratios of that fine-tuning: it is run once per
    #   ratio from the same selected checkpoint and the one with the lowest val BCE is kept (a number = one ratio)
    calibration: str = "platt"  # after training, fit on the validation cells (minimum val BCE) and store
    #   in the model: "temperature" = logit / T; "platt" = logit / T + b; "none". Same increasing map for
    #   every model, so routing is unchanged; "temperature" keeps every P > 0.5 decision, "platt" may move them

    def __post_init__(self) -> None:
        for name in ("finetune_noise", "latent_noise"):
            ratios = getattr(self, name)
            ratios = (ratios,) if isinstance(ratios, (int, float)) else ratios
            object.__setattr__(self, name, tuple(float(r) for r in ratios))
            if not getattr(self, name) or min(getattr(self, name)) < 0:
                raise ValueError(f"TrainConfig: {name}={getattr(self, name)} must hold at least one noise ratio >= 0, "
                                 "e.g. (2.0,).")
        if self.latent_steps < 0 or self.latent_lr <= 0 or self.latent_weight < 0:
            raise ValueError(f"TrainConfig: latent_steps={self.latent_steps} and latent_weight={self.latent_weight} "
                             f"must be >= 0 and latent_lr={self.latent_lr} > 0 (latent_steps=0 turns the warm-up off).")
        if not 1 <= self.enc_min <= self.enc_max:
            raise ValueError(f"TrainConfig: need 1 <= enc_min ({self.enc_min}) <= enc_max ({self.enc_max}).")
        if self.select_from_epoch < 0:
            raise ValueError(f"TrainConfig: select_from_epoch={self.select_from_epoch} must be >= 0.")
        if self.finetune_steps < 0 or min(self.finetune_noise) < 0:
            raise ValueError(f"TrainConfig: finetune_steps={self.finetune_steps} and finetune_noise={self.finetune_noise} "
                             "must be >= 0 (finetune_steps=0 turns the predictor fine-tuning off).")
        if self.profile_weight < 0:
            raise ValueError(f"TrainConfig: profile_weight={self.profile_weight} must be >= 0 (0 = off).")
        if not 0.0 <= self.splice <= 1.0 or self.splice_clusters < 2:
            raise ValueError(f"TrainConfig: splice={self.splice} must be in [0, 1] and splice_clusters="
                             f"{self.splice_clusters} >= 2.")
        if self.val_models is not None and self.val_models < 1:
            raise ValueError(f"TrainConfig: val_models={self.val_models} must be >= 1 (None = every model).")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"TrainConfig: max_steps={self.max_steps} must be >= 1 (None = no step bound).")
        for name in ("epochs", "epoch_models", "batch_models", "draws", "dec_batch", "patience", "finetune_patience"):
            if getattr(self, name) < 1:
                raise ValueError(f"TrainConfig: {name}={getattr(self, name)} must be >= 1.")
        if self.noise_start < 0 or self.noise_end < 0 or self.encoder_noise_scale < 0:
            raise ValueError("TrainConfig: noise_start and noise_end are ratios and must be >= 0.")
        if self.select_on not in ("routing", "loss"):
            raise ValueError(f"TrainConfig: select_on={self.select_on!r}; use 'routing' or 'loss'.")
        if self.calibration not in ("none", "temperature", "platt"):
            raise ValueError(f"TrainConfig: calibration={self.calibration!r}; use 'none', 'temperature' or 'platt'.")
        if not 0.0 <= self.ema_decay < 1.0:
            raise ValueError(f"TrainConfig: ema_decay={self.ema_decay} must be in [0, 1) (0 = off).")


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


def noise_ratio(epoch: int, cfg: TrainConfig) -> float:
    """Cosine annealing from noise_start (epoch 0) to noise_end (epoch noise_anneal_epochs and later)."""
    if epoch >= cfg.noise_anneal_epochs:
        return cfg.noise_end
    w = 0.5 * (1 + math.cos(math.pi * epoch / cfg.noise_anneal_epochs))
    return cfg.noise_end + (cfg.noise_start - cfg.noise_end) * w


def _check_inputs(encodings: np.ndarray, train_scores: np.ndarray, val_scores: np.ndarray, D: int) -> None:
    Q = encodings.shape[0]
    if encodings.ndim != 2 or encodings.shape[1] != D:
        raise ValueError(
            f"train_locus: encodings must be (Q, {D}) to match model_config.query_dim, got {encodings.shape}."
        )
    for name, s in (("train_scores", train_scores), ("val_scores", val_scores)):
        if s.ndim != 2 or s.shape[1] != Q:
            raise ValueError(f"train_locus: {name} must be (M, {Q}) (models x queries), got {s.shape}.")
        known = s[~np.isnan(s)]
        if known.size and (known.min() < 0 or known.max() > 1):
            raise ValueError(f"train_locus: {name} must be in [0, 1] (NaN = no cell).")
    if train_scores.shape != val_scores.shape:
        raise ValueError(f"train_locus: train_scores {train_scores.shape} != val_scores {val_scores.shape}.")
    empty = np.flatnonzero((~np.isnan(train_scores)).sum(axis=1) == 0)
    if empty.size:
        raise ValueError(
            f"train_locus: models at rows {empty[:10].tolist()} have no train cells. How to fix: drop them or "
            "give each model at least one train evaluation."
        )
    if not (~np.isnan(val_scores)).any():
        raise ValueError("train_locus: val_scores has no cells; early stopping needs validation cells.")


def fit_temperature(
    logits: torch.Tensor,  # (n,) validation logits, uncalibrated
    targets: torch.Tensor,  # (n,) labels in [0, 1]
    *,
    bias: bool = False,
) -> tuple[float, float]:
    """(T, b) minimising BCE(logits / T + b, targets): temperature scaling (Guo et al. 2017), with bias=True
    Platt scaling; b = 0 when bias is False. T is clamped to [0.05, 20]."""
    log_t = torch.zeros((), dtype=torch.float64, requires_grad=True)
    b = torch.zeros((), dtype=torch.float64, requires_grad=bias)
    x, y = logits.detach().double().cpu(), targets.detach().double().cpu()
    opt = torch.optim.LBFGS([log_t, b] if bias else [log_t], lr=0.5, max_iter=100, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = F.binary_cross_entropy_with_logits(x / log_t.exp() + b, y)
        loss.backward()
        return loss

    opt.step(closure)
    return float(log_t.detach().exp().clamp(0.05, 20.0)), float(b.detach())


def projected_noise(
    weight: torch.Tensor,  # (k, D) a linear map W applied to query encodings
    std: float,
    shape: tuple[int, ...],  # (..., k)
    gen: torch.Generator,
) -> torch.Tensor:  # (..., k) distributed as W eps with eps ~ N(0, std^2 I_D), drawn in k dimensions
    """W eps for Gaussian query noise eps, without drawing D-dimensional noise or projecting it.

    W eps ~ N(0, std^2 W W^T) = N(0, std^2 R^T R) for the QR factorisation W^T = Q R (Q: D x k' orthonormal,
    k' = min(k, D)), so xi R with xi ~ N(0, std^2 I_k') has exactly its distribution; R is differentiable in W,
    so the gradient is an unbiased estimate of the same expected loss. For the 768-d encodings this draws 128 (predictor) or 256
    (tokens) numbers per query instead of 768, and multiplies by a k x k matrix instead of k x 768.
    """
    r = torch.linalg.qr(weight.T)[1]  # (min(k, D), k) upper triangular
    xi = torch.randn((*shape[:-1], r.shape[0]), generator=gen, device=weight.device, dtype=weight.dtype)
    return std * (xi @ r)


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


@dataclass
class _Inputs:
    """The training inputs on the device, and the two random streams every draw comes from."""

    enc: torch.Tensor  # (Q, D) query encodings
    scores: torch.Tensor  # (M, Q) train scores, 0 where unknown
    avail: list[np.ndarray]  # per model: its train cells (query indices)
    mean_norm: float  # mean encoding norm: noise ratios are relative to it
    rng: np.random.Generator  # permutations, evaluation sets, fine-tuning columns
    gen: torch.Generator  # query noise
    pending: list[int] = field(default_factory=list)  # the rest of the running permutation of the models
    known: torch.Tensor | None = None  # (M, Q) bool train cells (for splicing)
    clusters: torch.Tensor | None = None  # (Q,) k-means cluster of each query (for splicing), 0 where no train cell
    profile: torch.Tensor | None = None  # (M, K) each model's mean train score per query cluster (profile objective)
    profile_known: torch.Tensor | None = None  # (M, K) bool: the model has train cells in the cluster
    readout: torch.nn.Linear | None = None  # (d -> K) the profile objective's read-out of the embedding
    latents: torch.Tensor | None = None  # (M, d) the latent warm-up's model vectors: the encoder's targets
    latent_var: float = 1.0  # their total variance (sum over dimensions): the squared error is relative to it

    def epoch_order(self, epoch_models: int) -> np.ndarray:
        """The models of the next epoch: a permutation of all of them, or the next epoch_models of a running
        permutation when the pool is larger."""
        n = len(self.avail)
        if n <= epoch_models:
            return self.rng.permutation(n)
        while len(self.pending) < epoch_models:
            self.pending.extend(self.rng.permutation(n).tolist())
        order, self.pending = self.pending[:epoch_models], self.pending[epoch_models:]
        return np.asarray(order, dtype=np.int64)

    def noise_std(self, ratio: float) -> float:  # per-dimension std of a noise ratio ||noise|| / ||phi||
        return ratio * self.mean_norm / math.sqrt(self.enc.shape[1])


@dataclass
class _Validation:
    """What validation scores: each model embedded from a fixed subset of its train cells, on its val cells."""

    sets: list[tuple[np.ndarray, np.ndarray]]  # per validated model: (train-cell query indices, scores)
    rows: torch.Tensor  # (Mv,) the validated models (all, or TrainConfig.val_models of them)
    cols: torch.Tensor  # (Qv,) queries with a val cell
    labels: np.ndarray  # (Mv, Qv) NaN = no val cell
    known: torch.Tensor  # (Mv, Qv) bool
    targets: torch.Tensor  # (Mv, Qv) labels, 0 where unknown


@dataclass
class _Selected:
    """The epochs run and the one kept: best validation routing (ties: lower val loss)."""

    history: list[dict] = field(default_factory=list)
    epoch: int = -1
    metrics: dict = field(default_factory=dict)
    state: dict | None = None
    key: tuple[float, float] | None = None

    def consider(self, row: dict, model: Locus, select_on: str = "routing") -> None:
        """Keep ``row``'s epoch (already in history) if it is the best so far."""
        key = (row["val_routing_acc"], -row["val_loss"]) if select_on == "routing" else (-row["val_loss"], row["val_routing_acc"])
        if self.key is None or key > self.key:
            self.key, self.epoch, self.metrics = key, row["epoch"], dict(row)
            self.state = copy.deepcopy(model.state_dict())


def _validation(train_np: np.ndarray, val_np: np.ndarray, avail: list[np.ndarray], cfg: TrainConfig,
                rng: np.random.Generator, device: torch.device) -> _Validation:
    sets = []
    for m, idx in enumerate(avail):  # a fixed subset of each model's train cells -> its val cells
        if cfg.val_set_max is not None and len(idx) > cfg.val_set_max:
            idx = np.sort(rng.choice(idx, cfg.val_set_max, replace=False))
        sets.append((idx, train_np[m, idx]))
    rows = np.arange(len(avail))
    if cfg.val_models is not None and len(avail) > cfg.val_models:
        rows = np.sort(rng.choice(len(avail), cfg.val_models, replace=False))
        sets = [sets[r] for r in rows]
    cols = np.flatnonzero((~np.isnan(val_np[rows])).any(axis=0))
    labels = val_np[rows][:, cols]
    return _Validation(sets, torch.from_numpy(rows).to(device), torch.from_numpy(cols).to(device), labels,
                       torch.from_numpy(~np.isnan(labels)).to(device), torch.from_numpy(np.nan_to_num(labels)).to(device))


@torch.no_grad()
def _embed(model: Locus, enc: torch.Tensor, sets: list[tuple[np.ndarray, np.ndarray]]) -> torch.Tensor:  # (M, d)
    model.eval()
    used, local = distinct_queries(sets)
    parts = model.token_parts(enc[torch.from_numpy(used).to(enc.device)])  # (U, 2d)
    return embed_batches(model, parts, local, batch_size=64, max_tokens=default_max_tokens(enc.device))


def _val_logits(model: Locus, enc: torch.Tensor, val: _Validation, z: torch.Tensor | None = None) -> torch.Tensor:
    model.eval()  # (M, Qv); z: embeddings, by default from val.sets
    z = _embed(model, enc, val.sets) if z is None else z
    return model.predict_logits(z, enc[val.cols])


@torch.no_grad()
def _validate(model: Locus, enc: torch.Tensor, val: _Validation,
              z: torch.Tensor | None = None) -> tuple[float, float, float]:  # val loss, routing, correctness
    logits = _val_logits(model, enc, val, z)  # (M, Qv)
    loss = F.binary_cross_entropy_with_logits(logits[val.known], val.targets[val.known]).item()
    probs = torch.sigmoid(logits).cpu().numpy()
    return loss, routing_accuracy(probs, val.labels), correctness_accuracy(probs, val.labels)


def _batch_loss(net: Locus, batch: np.ndarray, data: _Inputs, cfg: TrainConfig, std: float) -> tuple[torch.Tensor, int]:
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


def _splice(data: _Inputs, cfg: TrainConfig, rows: int,
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


def _query_clusters(enc: np.ndarray, train_np: np.ndarray, k: int, seed: int) -> np.ndarray:  # (Q,) int64
    """k-means clusters of the encodings of the queries with a train cell (0 for the others)."""
    from sklearn.cluster import KMeans

    cells = np.flatnonzero((~np.isnan(train_np)).any(axis=0))
    out = np.zeros(len(enc), np.int64)
    k = min(k, len(cells))
    if k >= 2:
        out[cells] = KMeans(n_clusters=k, n_init=4, random_state=seed).fit_predict(enc[cells])
    return out


@torch.no_grad()
def _ema_update(pairs: list[tuple[torch.Tensor, torch.Tensor]], decay: float, step: int) -> None:
    decay = min(decay, (1 + step) / (10 + step))  # warm-up: early steps follow the weights closely
    for avg, cur in pairs:
        avg.lerp_(cur, 1 - decay)


def _train_epoch(net: Locus, opt: torch.optim.Optimizer, ema_pairs: list, step: int, data: _Inputs,
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


def epochs_to_run(cfg: TrainConfig, n_models: int) -> int:
    """cfg.epochs, or fewer when cfg.max_steps is reached first (an epoch is ceil(min(n_models, epoch_models) /
    batch_models) optimiser steps)."""
    if cfg.max_steps is None:
        return cfg.epochs
    per_epoch = math.ceil(min(n_models, cfg.epoch_models) / cfg.batch_models)
    return max(1, min(cfg.epochs, math.ceil(cfg.max_steps / per_epoch)))


def _train_epochs(net: Locus, model: Locus, data: _Inputs, val: _Validation, cfg: TrainConfig,
                  on_epoch: Callable[[dict], None] | None, progress: bool) -> _Selected:
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
    best, step = _Selected(), 0
    bar = tqdm(range(epochs), desc="train LOCUS", disable=not progress)
    for epoch in bar:
        t0 = time.perf_counter()
        ratio = noise_ratio(epoch, cfg)
        train_loss, step = _train_epoch(net, opt, ema_pairs, step, data, cfg, data.noise_std(ratio))
        val_loss, val_routing, val_correct = _validate(model, data.enc, val)
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


def _fit_latents(net: Locus, data: _Inputs, train_np: np.ndarray, val: _Validation, cfg: TrainConfig) -> dict:
    """The latent warm-up: net's predictor and one free vector per training model, fitted on the train cells
    (MAP, a N(0, I) prior on each vector) once per cfg.latent_noise ratio from the same initial predictor; the
    state of minimum val BCE over steps and ratios is loaded into net and its vectors set as data.latents."""
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
        opt = torch.optim.AdamW([{"params": params, "lr": cfg.lr_predictor, "weight_decay": cfg.weight_decay},
                                 {"params": [z], "lr": cfg.latent_lr, "weight_decay": 0.0}])
        std, ratio_best, ratio_step = data.noise_std(ratio), math.inf, 0
        for step in range(1, cfg.latent_steps + 1):
            net.train()
            logits, targets, mask, rows_t = _predictor_batch(net, z, data.enc, data.scores, known_t, cols_all, std,
                                                             data.gen, data.rng)
            bce = F.binary_cross_entropy_with_logits(logits[mask], targets[mask], reduction="sum")
            loss = (bce + 0.5 * z[rows_t].pow(2).sum()) / mask.sum().clamp(min=1)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
            opt.step()
            if step % FINETUNE_EVERY == 0 or step == cfg.latent_steps:
                current = _validate(net, data.enc, val, z.detach()[val.rows])[0]
                if current < ratio_best:
                    ratio_best, ratio_step = current, step
                    if current < best["val_loss"]:
                        best = {"val_loss": current, "noise": ratio, "step": step, "latents": z.detach().clone(),
                                "predictor": [p.detach().clone() for p in params]}
                elif step - ratio_step >= cfg.finetune_patience:
                    break
        steps_run[f"{ratio:g}"] = step
    with torch.no_grad():
        for p, kept in zip(params, best["predictor"]):
            p.copy_(kept)
    data.latents = best["latents"]
    data.latent_var = float(data.latents.var(dim=0).sum().clamp(min=1e-8))
    return {"noise": best["noise"], "step": best["step"], "val_loss": best["val_loss"], "steps_run": steps_run}


def _finetune(model: Locus, train_np: np.ndarray, data: _Inputs, val: _Validation, cfg: TrainConfig) -> dict:
    """The predictor fine-tuning at each of cfg.finetune_noise from the selected state; the lowest val BCE is kept."""
    z_all = _embed(model, data.enc, [(idx, train_np[m, idx]) for m, idx in enumerate(data.avail)])  # as at test time
    known_t = torch.from_numpy(~np.isnan(train_np)).to(data.enc.device)
    selected, kept_state, by_noise, finetune = copy.deepcopy(model.state_dict()), None, {}, {}
    for ratio in cfg.finetune_noise:
        model.load_state_dict(selected)
        info = _finetune_predictor(
            model, z_all, data.enc, data.scores, known_t, lambda: _validate(model, data.enc, val, z_all[val.rows]), cfg=cfg,
            std=data.noise_std(ratio), gen=data.gen, rng=data.rng,
        )
        by_noise[f"val_loss_at_noise_{ratio:g}"] = info["val_loss_after"]
        if kept_state is None or info["val_loss_after"] < finetune["val_loss_after"]:
            finetune, kept_state = {**info, "noise": ratio}, copy.deepcopy(model.state_dict())
    model.load_state_dict(kept_state)
    finetune.update(by_noise)
    return finetune


def _calibrate(model: Locus, enc: torch.Tensor, val: _Validation, cfg: TrainConfig) -> dict:
    """Fit the temperature (and bias, "platt") on the validation cells and store them in the model."""
    with torch.no_grad():
        logits = _val_logits(model, enc, val)  # (M, Qv), uncalibrated (temperature 1, bias 0)
    t, b = fit_temperature(logits[val.known], val.targets[val.known], bias=cfg.calibration == "platt")
    model.temperature.fill_(t)
    model.logit_bias.fill_(b)
    return {"temperature": t, "logit_bias": b}


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
    """Train LOCUS; returns the state with the best validation routing accuracy (ties: lower val loss).

    Validation embeds each model from its train cells (at most val_set_max, a fixed subset) and scores its
    val cells. on_epoch receives {epoch, train_loss, val_loss, val_routing_acc, val_correctness_acc, noise,
    seconds} after every epoch. Seeds torch inside a forked RNG, so the caller's global RNG is untouched.
    """
    cfg = train_config
    enc_np = np.asarray(encodings, dtype=np.float32)
    train_np = np.asarray(train_scores, dtype=np.float32)
    val_np = np.asarray(val_scores, dtype=np.float32)
    _check_inputs(enc_np, train_np, val_np, model_config.query_dim)
    device = resolve_device(cfg.device)
    rng = np.random.default_rng(cfg.seed)
    avail = [np.flatnonzero(~np.isnan(row)) for row in train_np]  # train cells per model
    val = _validation(train_np, val_np, avail, cfg, rng, device)
    data = _Inputs(enc=torch.from_numpy(enc_np).to(device), scores=torch.from_numpy(np.nan_to_num(train_np)).to(device),
                   avail=avail, mean_norm=float(np.linalg.norm(enc_np, axis=1).mean()), rng=rng,
                   gen=torch.Generator(device=device).manual_seed(cfg.seed))
    if cfg.splice > 0 or cfg.profile_weight > 0:
        data.known = torch.from_numpy(~np.isnan(train_np)).to(device)
        data.clusters = torch.from_numpy(_query_clusters(enc_np, train_np, cfg.splice_clusters, cfg.seed)).to(device)
    if cfg.profile_weight > 0:
        onehot = F.one_hot(data.clusters, cfg.splice_clusters).float()  # (Q, K)
        counts = data.known.float() @ onehot  # (M, K)
        data.profile = (data.scores @ onehot) / counts.clamp(min=1)
        data.profile_known = counts > 0

    with torch.random.fork_rng(devices=[] if device.type == "cpu" else [device]):
        torch.manual_seed(cfg.seed)  # init and dropout
        net = Locus(model_config).to(device)  # the weights the optimiser moves
        if cfg.profile_weight > 0:
            data.readout = torch.nn.Linear(model_config.d, cfg.splice_clusters).to(device)
        latent = _fit_latents(net, data, train_np, val, cfg) if cfg.latent_steps > 0 else {}
        # the weights that are validated, selected and returned: net itself, or its moving average
        model = copy.deepcopy(net) if cfg.ema_decay > 0 else net
        best = _train_epochs(net, model, data, val, cfg, on_epoch, progress)
        model.load_state_dict(best.state)
        finetune = _finetune(model, train_np, data, val, cfg) if cfg.finetune_steps > 0 else {}
        calibration = _calibrate(model, data.enc, val, cfg) if cfg.calibration != "none" else {}
    model.cpu().eval()
    return TrainResult(model=model, history=best.history, best_epoch=best.epoch, best_metrics=best.metrics,
                       calibration=calibration, finetune=finetune, latent=latent)


FINETUNE_EVERY = 10  # steps between validations of the predictor fine-tuning
FINETUNE_MAX_COLUMNS = 2048  # train queries per fine-tuning step (a random subset when there are more)
FINETUNE_MAX_MODELS = 256  # models per fine-tuning step (a random subset when there are more)


def _predictor_batch(
    model: Locus,
    z: torch.Tensor,  # (M, d) model vectors (fixed embeddings, or the warm-up's free vectors)
    enc_t: torch.Tensor,  # (Q, D)
    scores_t: torch.Tensor,  # (M, Q) train scores, 0 where unknown
    known_t: torch.Tensor,  # (M, Q) bool train cells
    cols_all: np.ndarray,  # the queries with a train cell
    std: float,
    gen: torch.Generator,
    rng: np.random.Generator,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | slice]:
    """One predictor-only step's cells: at most FINETUNE_MAX_COLUMNS train queries and FINETUNE_MAX_MODELS models
    (random subsets when there are more), noisy query projections; (logits (R, C), targets, known, the rows)."""
    cols = cols_all if len(cols_all) <= FINETUNE_MAX_COLUMNS else rng.choice(cols_all, FINETUNE_MAX_COLUMNS, replace=False)
    cols_t = torch.from_numpy(np.asarray(cols)).to(enc_t.device)
    u = model.query_projection(enc_t[cols_t])  # (C, d)
    if std > 0:
        u = u + projected_noise(model.query_proj.weight, std, u.shape, gen)
    rows_t = (slice(None) if len(z) <= FINETUNE_MAX_MODELS else
              torch.from_numpy(np.sort(rng.choice(len(z), FINETUNE_MAX_MODELS, replace=False))).to(z.device))
    logits = model.predict_logits_projected(z[rows_t], u)  # (R, C)
    return logits, scores_t[rows_t][:, cols_t], known_t[rows_t][:, cols_t], rows_t


def _finetune_predictor(
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
        logits, targets, mask, _ = _predictor_batch(model, z, enc_t, scores_t, known_t, cols_all, std, gen, rng)
        loss = F.binary_cross_entropy_with_logits(logits[mask], targets[mask])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        opt.step()
        if step % FINETUNE_EVERY == 0 or step == cfg.finetune_steps:
            current = validate()[0]
            if current < best:
                best, best_step, best_state = current, step, copy.deepcopy(model.state_dict())
            elif step - best_step >= cfg.finetune_patience:
                break
    model.load_state_dict(best_state)
    routing = validate()[1]  # unchanged by the calibration after
    return {"step": best_step, "steps_run": step, "val_loss_before": before, "val_loss_after": best,
            "val_routing_acc": routing}


__all__ = ["TrainConfig", "TrainResult", "train_locus", "noise_ratio", "fit_temperature", "projected_noise"]

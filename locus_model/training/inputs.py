"""What every stage of LOCUS training works on: the inputs on the device and their random streams (Inputs), the
warm-up's model vectors (Latents), the query noise drawn in projection space, the validation cells (Validation) and
how they are scored, and the selection of the kept epoch (Selected)."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from locus_model.infer import default_max_tokens, distinct_queries, embed_batches, resolve_device
from locus_model.model import Locus
from locus_model.stats.metrics import correctness_accuracy, routing_accuracy
from locus_model.training.config import Stage, TrainConfig

# the preparation of the inputs (and the seed of torch's init and dropout, set beside it by train_branches)
INPUTS = Stage("inputs", frozenset({"seed", "device", "val_set_max", "val_models"}))


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


@dataclass(frozen=True)
class Inputs:
    """The training inputs on the device, and the two random streams every draw comes from (the only state the
    stages share: each stage draws from them in turn, in the order train_branches runs the stages)."""

    enc: torch.Tensor  # (Q, D) query encodings
    scores: torch.Tensor  # (M, Q) train scores, 0 where unknown
    avail: list[np.ndarray]  # per model: its train cells (query indices)
    mean_norm: float  # mean encoding norm: noise ratios are relative to it
    rng: np.random.Generator  # permutations, evaluation sets, fine-tuning columns
    gen: torch.Generator  # query noise

    def noise_std(self, ratio: float) -> float:  # per-dimension std of a noise ratio ||noise|| / ||phi||
        return ratio * self.mean_norm / math.sqrt(self.enc.shape[1])


@dataclass(frozen=True)
class Latents:
    """The latent warm-up's model vectors: the encoder's targets in the epochs and the output refit."""

    vectors: torch.Tensor  # (M, d) one per training model
    var: float  # their total variance (sum over dimensions): the encoder's squared error is relative to it


@dataclass
class Validation:
    """What validation scores: each model embedded from a fixed subset of its train cells, on its val cells."""

    sets: list[tuple[np.ndarray, np.ndarray]]  # per validated model: (train-cell query indices, scores)
    rows: torch.Tensor  # (Mv,) the validated models (all, or TrainConfig.val_models of them)
    cols: torch.Tensor  # (Qv,) queries with a val cell
    labels: np.ndarray  # (Mv, Qv) NaN = no val cell
    known: torch.Tensor  # (Mv, Qv) bool
    targets: torch.Tensor  # (Mv, Qv) labels, 0 where unknown


@dataclass
class Selected:
    """The epochs run and the one kept: the lowest val BCE over every (model, val query) cell (ties: higher routing
    accuracy)."""

    history: list[dict] = field(default_factory=list)
    epoch: int = -1
    metrics: dict = field(default_factory=dict)
    state: dict | None = None
    key: tuple[float, float] | None = None

    def consider(self, row: dict, model: Locus) -> None:
        """Keep ``row``'s epoch (already in history) if it is the best so far."""
        key = (-row["val_loss"], row["val_routing_acc"])
        if self.key is None or key > self.key:
            self.key, self.epoch, self.metrics = key, row["epoch"], dict(row)
            self.state = copy.deepcopy(model.state_dict())


def prepare_inputs(
    encodings: np.ndarray, train_scores: np.ndarray, val_scores: np.ndarray, query_dim: int, cfg: TrainConfig
) -> tuple[Inputs, Validation, np.ndarray]:
    """The checked inputs on cfg.device, the validation cells and the train scores as float32 (M, Q): the
    validation subsets are the first draws of the seeded stream."""
    enc_np = np.asarray(encodings, dtype=np.float32)
    train_np = np.asarray(train_scores, dtype=np.float32)
    val_np = np.asarray(val_scores, dtype=np.float32)
    _check_inputs(enc_np, train_np, val_np, query_dim)
    device = resolve_device(cfg.device)
    rng = np.random.default_rng(cfg.seed)
    avail = [np.flatnonzero(~np.isnan(row)) for row in train_np]  # train cells per model
    val = build_validation(train_np, val_np, avail, cfg, rng, device)
    data = Inputs(
        enc=torch.from_numpy(enc_np).to(device),
        scores=torch.from_numpy(np.nan_to_num(train_np)).to(device),
        avail=avail,
        mean_norm=float(np.linalg.norm(enc_np, axis=1).mean()),
        rng=rng,
        gen=torch.Generator(device=device).manual_seed(cfg.seed),
    )
    return data, val, train_np


def build_validation(
    train_np: np.ndarray,
    val_np: np.ndarray,
    avail: list[np.ndarray],
    cfg: TrainConfig,
    rng: np.random.Generator,
    device: torch.device,
) -> Validation:
    """Each model's validation set: at most cfg.val_set_max of its train cells (a seeded subset), scored on its
    val cells; at most cfg.val_models models (a seeded subset)."""
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
    return Validation(
        sets,
        torch.from_numpy(rows).to(device),
        torch.from_numpy(cols).to(device),
        labels,
        torch.from_numpy(~np.isnan(labels)).to(device),
        torch.from_numpy(np.nan_to_num(labels)).to(device),
    )


def projected_noise(
    weight: torch.Tensor,  # (k, D) a linear map W applied to query encodings
    std: float,
    shape: tuple[int, ...],  # (..., k)
    gen: torch.Generator,
) -> torch.Tensor:  # (..., k) distributed as W eps with eps ~ N(0, std^2 I_D), drawn in k dimensions
    """W eps for Gaussian query noise eps, without drawing D-dimensional noise or projecting it.

    W eps ~ N(0, std^2 W W^T) = N(0, std^2 R^T R) for the QR factorisation W^T = Q R (Q: D x k' orthonormal,
    k' = min(k, D)), so xi R with xi ~ N(0, std^2 I_k') has exactly its distribution; R is differentiable in W,
    so the gradient is an unbiased estimate of the same expected loss. For the 768-d encodings this draws 128
    (predictor) or 256 (tokens) numbers per query instead of 768, and multiplies by a k x k matrix instead of k x 768.
    """
    r = torch.linalg.qr(weight.T)[1]  # (min(k, D), k) upper triangular
    xi = torch.randn((*shape[:-1], r.shape[0]), generator=gen, device=weight.device, dtype=weight.dtype)
    return std * (xi @ r)


@torch.no_grad()
def embed_sets(model: Locus, enc: torch.Tensor, sets: list[tuple[np.ndarray, np.ndarray]]) -> torch.Tensor:  # (M, d)
    """The model embeddings of evaluation sets (query indices into enc, scores), on enc's device."""
    model.eval()
    used, local = distinct_queries(sets)
    parts = model.token_parts(enc[torch.from_numpy(used).to(enc.device)])  # (U, 2d)
    return embed_batches(model, parts, local, batch_size=64, max_tokens=default_max_tokens(enc.device))


def val_logits(model: Locus, enc: torch.Tensor, val: Validation, z: torch.Tensor | None = None) -> torch.Tensor:
    model.eval()  # (M, Qv); z: embeddings, by default from val.sets
    z = embed_sets(model, enc, val.sets) if z is None else z
    return model.predict_logits(z, enc[val.cols])


@torch.no_grad()
def validate(
    model: Locus, enc: torch.Tensor, val: Validation, z: torch.Tensor | None = None
) -> tuple[float, float, float]:  # val loss, routing, correctness
    logits = val_logits(model, enc, val, z)  # (M, Qv)
    loss = F.binary_cross_entropy_with_logits(logits[val.known], val.targets[val.known]).item()
    probs = torch.sigmoid(logits).cpu().numpy()
    return loss, routing_accuracy(probs, val.labels), correctness_accuracy(probs, val.labels)

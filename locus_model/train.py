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

from locus_model.metrics import correctness_accuracy, routing_accuracy
from locus_model.model import Locus, LocusConfig, _embed_batches, default_max_tokens, resolve_device


@dataclass(frozen=True)
class TrainConfig:
    """How to train LOCUS.

    The defaults are the best setting of a 5-fold sweep (bench/README.md "Training sweep", measured on a GPU,
    bench/sweep_locus.py): noise ratio 2.0 -> 1.0, 4 draws per model per step, an EMA of the weights (0.995), 120
    epochs with the best validation epoch from epoch 10 on kept. On the demo pool it took LOCUS from routing 79.0 / 79.1 (the
    earlier defaults: noise 0.3 -> 0.1, 1 draw, no EMA, 60 epochs) to 81.3 / 83.7 at budgets 256 / 1024.
    Then the predictor alone is fine-tuned on the embeddings of the training models from all their train
    cells, as they are embedded at test time, keeping the step of minimum val BCE: training embeds random
    subsets, so the predictor had never seen those embeddings. With the same trained encoder it raised AUC by
    0.2-1.4 points and lowered Brier on AlpacaEval and the demo pool (bench/README.md "Second CPU session":
    predictor fine-tuning). It runs at noise ratios 2 and 3 and keeps the lower val BCE: on the demo pool 3 is
    better (it matched IRT's correctness, AUC and Brier on two folds at budget 256), on AlpacaEval mostly 2, and
    on the folds tried the lower val BCE of the two went with the better test AUC (bench/README.md "Third CPU
    session", bench/diag_finetune.py).
    On CPU this costs ~5 s per epoch for ~100 models x 1,024 anchors on one thread, i.e. ~10 min for a
    full run; for a quick run lower epochs (the demo job uses 40) or draws, at some accuracy cost (60 epochs:
    81.6 at 1024). The paper's setting (GPU) is epochs=2500, patience=500, batch_models=128, encoder subsets
    of all N anchors (256 / 512 / 1024), noise 0.10 -> 0.05 per dimension on 768-d mpnet encodings over 500
    epochs (noise_start ~2.8, noise_end ~1.4 in this file's relative units), validation embedding from all
    anchors.

    Query noise is relative: noise_* is the ratio ||noise|| / ||encoding||, i.e. the per-dimension std is
    ratio * (mean encoding norm) / sqrt(D), so one setting means the same thing for 384-d and 768-d
    encoders. Training draws the decoder targets from the same anchors the encoder subset comes from, so a
    target's own (query, label) is often inside the set being embedded; strong noise keeps the model from
    memorising labels by query identity (with a ratio of 0.3 -> 0.1 instead of 1.0 -> 0.5, train BCE fell far
    below val BCE and correctness accuracy was 0.6-2.2 points lower on the demo pool and AlpacaEval).
    Calibration (default "platt") leaves routing untouched and, on the demo pool (budget 256, fold 0,
    bench/README.md "LOCUS training diagnostics"), lowered Brier from 25.2 to 23.3; disjoint_targets and
    select_loss_tolerance=0.02 cost 8-9 routing points there and are off by default.
    """

    epochs: int = 120  # max epochs; one epoch = one pass over all models in mini-batches
    batch_models: int = 8  # models per step (small: more optimiser steps per CPU second)
    draws: int = 4  # independent (encoder subset, decoder batch) draws per model per step: the step's batch
    #   holds batch_models * draws evaluation sets; more set sizes and targets per model per step
    enc_min: int = 16  # smallest encoder subset (clipped to the model's number of train cells)
    enc_max: int = 256  # largest encoder subset
    dec_batch: int = 512  # decoder targets per model per step (fewer if the model has fewer train cells)
    val_set_max: int | None = 256  # validation embeds each model from at most this many of its train
    #   cells (a fixed seeded subset); None = all of them (the paper: all N anchors). Bounds epoch cost.
    lr_encoder: float = 2e-4  # AdamW lr of tokenizer, ISAB blocks, PMA, output layer
    lr_predictor: float = 8e-4  # AdamW lr of the correctness predictor G
    weight_decay: float = 0.05  # AdamW weight decay (both groups)
    grad_clip: float = 1.0  # max global gradient norm
    noise_start: float = 2.0  # query-noise ratio ||noise|| / ||phi|| at epoch 0
    noise_end: float = 1.0  # ... after noise_anneal_epochs (cosine schedule), constant afterwards
    noise_anneal_epochs: int = 30  # length of the cosine annealing
    patience: int = 120  # stop after this many epochs without a better validation checkpoint
    select_from_epoch: int = 10  # epochs before this one are never kept (nor counted by patience); clipped to
    #   epochs - 1. On small validation sets routing is saturated and noisy from the first epochs on, and an
    #   almost untrained epoch can win on a couple of queries (AlpacaEval, 64 validation queries: one fold of
    #   five kept epoch 2 and the mean AUC at budget 64 fell to 76.0 +- 6.2; with 10: 79.0 +- 1.5)
    seed: int = 0  # seeds init, subsets, noise and dropout: same seed -> same result on CPU
    device: str = "auto"  # "auto" -> cuda if available else cpu; or "cpu", "cuda", "cuda:1", ...
    disjoint_targets: bool = False  # decoder targets drawn only from the model's train cells outside its
    #   encoder subset (the encoder subset then leaves at least one cell out), so labels cannot be copied
    select_loss_tolerance: float | None = None  # checkpoint = best val routing among epochs whose val loss
    #   is within this much (nats) of the minimum val loss; None = best val routing over all epochs
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
        ratios = (self.finetune_noise,) if isinstance(self.finetune_noise, (int, float)) else self.finetune_noise
        object.__setattr__(self, "finetune_noise", tuple(float(r) for r in ratios))
        if not self.finetune_noise:
            raise ValueError("TrainConfig: finetune_noise is empty; give at least one noise ratio, e.g. (2.0,).")
        if not 1 <= self.enc_min <= self.enc_max:
            raise ValueError(f"TrainConfig: need 1 <= enc_min ({self.enc_min}) <= enc_max ({self.enc_max}).")
        if self.select_from_epoch < 0:
            raise ValueError(f"TrainConfig: select_from_epoch={self.select_from_epoch} must be >= 0.")
        if self.finetune_steps < 0 or min(self.finetune_noise) < 0:
            raise ValueError(f"TrainConfig: finetune_steps={self.finetune_steps} and finetune_noise={self.finetune_noise} "
                             "must be >= 0 (finetune_steps=0 turns the predictor fine-tuning off).")
        for name in ("epochs", "batch_models", "draws", "dec_batch", "patience", "finetune_patience"):
            if getattr(self, name) < 1:
                raise ValueError(f"TrainConfig: {name}={getattr(self, name)} must be >= 1.")
        if self.noise_start < 0 or self.noise_end < 0:
            raise ValueError("TrainConfig: noise_start and noise_end are ratios and must be >= 0.")
        if self.calibration not in ("none", "temperature", "platt"):
            raise ValueError(f"TrainConfig: calibration={self.calibration!r}; use 'none', 'temperature' or 'platt'.")
        if not 0.0 <= self.ema_decay < 1.0:
            raise ValueError(f"TrainConfig: ema_decay={self.ema_decay} must be in [0, 1) (0 = off).")
        if self.select_loss_tolerance is not None and self.select_loss_tolerance < 0:
            raise ValueError(f"TrainConfig: select_loss_tolerance={self.select_loss_tolerance} must be >= 0 or None.")


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
    if cfg.disjoint_targets and n >= 2:
        k = int(rng.integers(min(cfg.enc_min, n - 1), min(cfg.enc_max, n - 1) + 1))
        perm = rng.permutation(a)
        return perm[:k], perm[k : k + cfg.dec_batch]
    k = int(rng.integers(min(cfg.enc_min, n), min(cfg.enc_max, n) + 1))
    return rng.choice(a, k, replace=False), rng.choice(a, min(cfg.dec_batch, n), replace=False)


def _pad(rows: list[np.ndarray], fill: float | int, dtype) -> tuple[np.ndarray, np.ndarray]:
    n = max(len(r) for r in rows)
    out = np.full((len(rows), n), fill, dtype=dtype)
    mask = np.zeros((len(rows), n), dtype=bool)
    for i, r in enumerate(rows):
        out[i, : len(r)], mask[i, : len(r)] = r, True
    return out, mask


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

    M, Q = train_np.shape
    D = enc_np.shape[1]
    avail = [np.flatnonzero(~np.isnan(row)) for row in train_np]  # train cells per model
    # validation inputs: a fixed subset of each model's train cells -> its val cells
    val_sets = []
    for m in range(M):
        idx = avail[m]
        if cfg.val_set_max is not None and len(idx) > cfg.val_set_max:
            idx = np.sort(rng.choice(idx, cfg.val_set_max, replace=False))
        val_sets.append((idx, train_np[m, idx]))
    val_cols = np.flatnonzero((~np.isnan(val_np)).any(axis=0))  # queries with a val cell
    val_labels = val_np[:, val_cols]  # (M, Qv)
    val_known = torch.from_numpy(~np.isnan(val_labels)).to(device)
    val_targets = torch.from_numpy(np.nan_to_num(val_labels)).to(device)

    enc_t = torch.from_numpy(enc_np).to(device)  # (Q, D)
    scores_t = torch.from_numpy(np.nan_to_num(train_np)).to(device)  # (M, Q)
    mean_norm = float(np.linalg.norm(enc_np, axis=1).mean())
    gen = torch.Generator(device=device).manual_seed(cfg.seed)

    with torch.random.fork_rng(devices=[] if device.type == "cpu" else [device]):
        torch.manual_seed(cfg.seed)  # init and dropout
        net = Locus(model_config).to(device)  # the weights the optimiser moves
        opt = torch.optim.AdamW(
            [
                {"params": net.encoder_parameters(), "lr": cfg.lr_encoder},
                {"params": net.predictor_parameters(), "lr": cfg.lr_predictor},
            ],
            weight_decay=cfg.weight_decay,
        )
        # the weights that are validated, selected and returned: net itself, or its moving average
        model = copy.deepcopy(net) if cfg.ema_decay > 0 else net
        ema_pairs = list(zip(model.parameters(), net.parameters())) if cfg.ema_decay > 0 else []
        step = 0

        @torch.no_grad()
        def embed(sets: list[tuple[np.ndarray, np.ndarray]]) -> torch.Tensor:  # (M, d)
            model.eval()
            used, inverse = np.unique(np.concatenate([i for i, _ in sets]), return_inverse=True)
            parts = model.token_parts(enc_t[torch.from_numpy(used).to(device)])  # (U, 2d)
            offsets = np.cumsum([0] + [len(i) for i, _ in sets])
            local = [(inverse[offsets[m] : offsets[m + 1]], s) for m, (_, s) in enumerate(sets)]
            return _embed_batches(model, parts, local, batch_size=64, max_tokens=default_max_tokens(device))

        def val_logits(z: torch.Tensor | None = None) -> torch.Tensor:  # (M, Qv); z: embeddings, default from val_sets
            model.eval()
            z = embed(val_sets) if z is None else z
            return model.predict_logits(z, enc_t[torch.from_numpy(val_cols).to(device)])

        @torch.no_grad()
        def validate(z: torch.Tensor | None = None) -> tuple[float, float, float]:  # val loss, routing, correctness
            logits = val_logits(z)  # (M, Qv)
            loss = F.binary_cross_entropy_with_logits(logits[val_known], val_targets[val_known]).item()
            probs = torch.sigmoid(logits).cpu().numpy()
            return loss, routing_accuracy(probs, val_labels), correctness_accuracy(probs, val_labels)

        history: list[dict] = []
        best_key: tuple[float, float] | None = None
        best_state, best_epoch, best_metrics = None, -1, {}
        tol = cfg.select_loss_tolerance
        first_eligible = min(cfg.select_from_epoch, cfg.epochs - 1)
        calibration: dict = {}
        min_loss = math.inf
        candidates: dict[int, dict] = {}  # epoch -> state of epochs still within tol of the minimum val loss
        bar = tqdm(range(cfg.epochs), desc="train LOCUS", disable=not progress)
        for epoch in bar:
            t0 = time.perf_counter()
            net.train()
            ratio = noise_ratio(epoch, cfg)
            std = ratio * mean_norm / math.sqrt(D)
            order = rng.permutation(M)
            losses, weights = [], []
            for start in range(0, M, cfg.batch_models):
                batch = np.repeat(order[start : start + cfg.batch_models], cfg.draws)  # draws rows per model
                enc_rows, dec_rows = [], []
                for m in batch:
                    enc_row, dec_row = _draw_sets(avail[m], cfg, rng)
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
                parts = net.token_parts(enc_t[torch.from_numpy(enc_used).to(device)])  # (U, 2d)
                # index_select: its backward (index_add_) sums repeated rows in a fixed order; indexing's does not
                parts = parts.index_select(0, torch.from_numpy(enc_local.ravel()).to(device)).view(*enc_idx.shape, -1)
                u = net.query_projection(enc_t[torch.from_numpy(dec_used).to(device)])  # (U', d)
                u = u.index_select(0, torch.from_numpy(dec_local.ravel()).to(device)).view(*dec_idx.shape, -1)
                if std > 0:
                    parts = parts + projected_noise(net.token_weight(), std, parts.shape, gen)
                    u = u + projected_noise(net.query_proj.weight, std, u.shape, gen)
                z = net.embed_from_parts(parts, scores_t[b_t, enc_idx_t], enc_mask_t)  # (B, d)
                logits = net.pair_logits(z, u)  # (B, T)
                loss = F.binary_cross_entropy_with_logits(logits[dec_mask_t], scores_t[b_t, dec_idx_t][dec_mask_t])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(net.parameters(), cfg.grad_clip)
                opt.step()
                if ema_pairs:
                    decay = min(cfg.ema_decay, (1 + step) / (10 + step))
                    with torch.no_grad():
                        for avg, cur in ema_pairs:
                            avg.lerp_(cur, 1 - decay)
                step += 1
                losses.append(loss.item())
                weights.append(int(dec_mask.sum()))

            val_loss, val_routing, val_correct = validate()
            row = {
                "epoch": epoch,
                "train_loss": float(np.average(losses, weights=weights)),
                "val_loss": val_loss,
                "val_routing_acc": val_routing,
                "val_correctness_acc": val_correct,
                "noise": ratio,
                "seconds": time.perf_counter() - t0,
            }
            history.append(row)
            key = (val_routing, -val_loss)
            if epoch < first_eligible:
                pass
            elif tol is None:
                if best_key is None or key > best_key:
                    best_key, best_epoch, best_metrics = key, epoch, dict(row)
                    best_state = copy.deepcopy(model.state_dict())
            else:
                min_loss = min(min_loss, val_loss)
                if val_loss <= min_loss + tol:
                    candidates[epoch] = copy.deepcopy(model.state_dict())
                eligible = [h for h in history if h["epoch"] in candidates and h["val_loss"] <= min_loss + tol]
                candidates = {h["epoch"]: candidates[h["epoch"]] for h in eligible}
                best = max(eligible, key=lambda h: (h["val_routing_acc"], -h["val_loss"]))
                best_key, best_epoch, best_metrics = (best["val_routing_acc"], -best["val_loss"]), best["epoch"], dict(best)
                best_state = candidates[best_epoch]
            if on_epoch is not None:
                on_epoch(dict(row))
            bar.set_postfix(loss=f"{row['train_loss']:.4f}", val_route=f"{val_routing:.4f}", best=best_epoch)
            if epoch >= first_eligible and epoch - best_epoch >= cfg.patience:
                break
        bar.close()

        model.load_state_dict(best_state)
        finetune: dict = {}
        if cfg.finetune_steps > 0:
            z_all = embed([(idx, train_np[m, idx]) for m, idx in enumerate(avail)])  # (M, d), as at test time
            known_t = torch.from_numpy(~np.isnan(train_np)).to(device)
            selected, kept_state, by_noise = copy.deepcopy(model.state_dict()), None, {}
            for ratio in cfg.finetune_noise:  # each from the selected checkpoint; the lowest val BCE is kept
                model.load_state_dict(selected)
                info = _finetune_predictor(
                    model, z_all, enc_t, scores_t, known_t, lambda: validate(z_all), cfg=cfg,
                    std=ratio * mean_norm / math.sqrt(D), gen=gen, rng=rng,
                )
                by_noise[f"val_loss_at_noise_{ratio:g}"] = info["val_loss_after"]
                if kept_state is None or info["val_loss_after"] < finetune["val_loss_after"]:
                    finetune, kept_state = {**info, "noise": ratio}, copy.deepcopy(model.state_dict())
            model.load_state_dict(kept_state)
            finetune.update(by_noise)
        if cfg.calibration != "none":
            with torch.no_grad():
                logits = val_logits()  # (M, Qv), uncalibrated (temperature 1, bias 0)
            t, b = fit_temperature(logits[val_known], val_targets[val_known], bias=cfg.calibration == "platt")
            model.temperature.fill_(t)
            model.logit_bias.fill_(b)
            calibration = {"temperature": t, "logit_bias": b}
    model.cpu().eval()
    return TrainResult(
        model=model, history=history, best_epoch=best_epoch, best_metrics=best_metrics, calibration=calibration,
        finetune=finetune,
    )


FINETUNE_EVERY = 10  # steps between validations of the predictor fine-tuning
FINETUNE_MAX_COLUMNS = 2048  # train queries per fine-tuning step (a random subset when there are more)


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
        cols = cols_all if len(cols_all) <= FINETUNE_MAX_COLUMNS else rng.choice(cols_all, FINETUNE_MAX_COLUMNS, replace=False)
        cols_t = torch.from_numpy(np.asarray(cols)).to(enc_t.device)
        u = model.query_projection(enc_t[cols_t])  # (C, d)
        if std > 0:
            u = u + projected_noise(model.query_proj.weight, std, u.shape, gen)
        logits = model.predict_logits_projected(z, u)  # (M, C)
        mask = known_t[:, cols_t]
        loss = F.binary_cross_entropy_with_logits(logits[mask], scores_t[:, cols_t][mask])
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

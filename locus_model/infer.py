"""Batched inference with a trained LOCUS: model embeddings from evaluation sets, P(correct) for all pairs.

numpy in, numpy out; no autograd (inference_mode); deterministic: a set's embedding is the same bit for bit
whether it is embedded alone or with any other sets (length_bucket, modules.rowwise). The device and batch
heuristics (resolve_device, default_max_tokens; torch_threads is locus_model.threads') live here; the model itself
(Locus, the tiles of its all-pairs scoring, checkpoints) is in locus_model.model.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from locus_model.model import Locus
from locus_model.modules import MIN_ROWS, rowwise
from locus_model.threads import torch_threads  # re-exported: callers import it from here too


def resolve_device(device: str | torch.device) -> torch.device:
    """ "auto" -> CUDA when available, else CPU; anything else is passed to torch.device."""
    if isinstance(device, str) and device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def placed(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """``model`` on ``device`` in eval mode, moved only when it is not there: ``Module.to`` walks every parameter, a
    cost a server scoring each micro-batch would pay per batch (a tenth of its routing time, profiled)."""
    first = next(model.parameters(), None)
    if first is None or first.device != device:  # "cuda" against "cuda:0" moves again: a no-op walk, still right
        model.to(device)
    if model.training:
        model.eval()
    return model


def default_max_tokens(device: torch.device) -> int:
    """Set elements per encoder forward pass: 8k on CPU (measured fastest, bench/README.md), 128k on GPU."""
    return 1 << 17 if device.type == "cuda" else 1 << 13


EvaluationSet = tuple[np.ndarray, np.ndarray]  # (query indices (n,), scores (n,))


def _validate_sets(sets: Sequence[EvaluationSet], n_queries: int) -> list[tuple[np.ndarray, np.ndarray]]:
    out = []
    for m, (idx, scores) in enumerate(sets):
        idx = np.asarray(idx)
        scores = np.asarray(scores, dtype=np.float32)
        where = f"embed_evaluation_sets: evaluation set {m}"
        if idx.ndim != 1 or scores.shape != idx.shape:
            raise ValueError(f"{where}: indices {idx.shape} and scores {scores.shape} must be 1-D of equal length.")
        if idx.size == 0:
            raise ValueError(f"{where} is empty. How to fix: give every model at least one evaluation.")
        if not np.issubdtype(idx.dtype, np.integer) or idx.min() < 0 or idx.max() >= n_queries:
            raise ValueError(f"{where}: query indices must be integers in [0, {n_queries}).")
        if not np.all((scores >= 0) & (scores <= 1)):
            raise ValueError(f"{where}: scores must be finite and in [0, 1] (drop NaN cells before embedding).")
        # canonical order: the same evaluation set in any order gives bit-identical inputs and embedding
        order = np.lexsort((scores, idx))
        out.append((idx[order].astype(np.int64), scores[order]))
    return out


def length_bucket(n: int) -> int:
    """The padded length a set of n elements is always embedded at, alone or with any other sets.

    n rounded up to a multiple of 2^(floor(log2 n) - 3) (at most 1/8 padding), at least MIN_ROWS. A set's
    bits then never depend on what it is batched with: its attention runs at one length, and the row-wise
    products see enough rows to take the same code path (modules.rowwise).
    """
    if n <= MIN_ROWS:
        return MIN_ROWS
    step = 1 << max(0, n.bit_length() - 4)
    return -(-n // step) * step


def distinct_queries(sets: Sequence[EvaluationSet]) -> tuple[np.ndarray, list[EvaluationSet]]:
    """(the distinct queries U of all sets (U,), each set re-indexed into them): the query part of the
    tokens is then computed once per distinct query, however many sets share it."""
    used, inverse = np.unique(np.concatenate([i for i, _ in sets]), return_inverse=True)
    offsets = np.cumsum([0] + [len(i) for i, _ in sets])
    return used, [(inverse[offsets[m] : offsets[m + 1]], s) for m, (_, s) in enumerate(sets)]


def embed_batches(
    model: Locus,
    parts: torch.Tensor,  # (U, 2d) token parts of the queries the sets refer to
    sets: list[tuple[np.ndarray, np.ndarray]],  # indices into parts, scores
    *,
    batch_size: int,
    max_tokens: int,
) -> torch.Tensor:  # (M, d)
    """Embed sets in batches of one padded length (length_bucket) of at most batch_size sets and ~max_tokens
    tokens (longest first); the result of a set does not depend on the other sets (bit for bit).

    The loop under embed_evaluation_sets, on tensors already on the device and without its validation;
    training embeds its validation sets with it (train.py).
    """
    device = parts.device
    lengths = np.array([length_bucket(len(i)) for i, _ in sets])
    order = np.argsort(-lengths, kind="stable")
    z = torch.empty(len(sets), model.config.d, device=device)
    start = 0
    while start < len(order):
        n_max = int(lengths[order[start]])
        same = int(np.searchsorted(-lengths[order], -n_max, side="right"))  # end of this bucket in order
        take = max(1, min(batch_size, max_tokens // n_max, same - start))
        batch = order[start : start + take]
        idx = np.zeros((len(batch), n_max), dtype=np.int64)
        y = np.zeros((len(batch), n_max), dtype=np.float32)
        mask = np.zeros((len(batch), n_max), dtype=bool)
        for row, m in enumerate(batch):
            i, s = sets[m]
            idx[row, : len(i)], y[row, : len(i)], mask[row, : len(i)] = i, s, True
        idx_t = torch.from_numpy(idx).to(device)
        z[torch.from_numpy(batch).to(device)] = model.embed_from_parts(
            parts[idx_t], torch.from_numpy(y).to(device), torch.from_numpy(mask).to(device)
        ).to(z.dtype)
        start += take
    return z


BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo flags of CPUs with bf16 matrix units


@functools.cache
def cpu_has_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this CPU has bf16 matrix units (a flag of BF16_CPU_FLAGS in /proc/cpuinfo; False where unreadable)."""
    try:
        flags = Path(cpuinfo).read_text().split()
    except OSError:
        return False
    return any(f in flags for f in BF16_CPU_FLAGS)


def inference_precision(device: str | torch.device = "cpu", low_precision: bool | str | None = None) -> str:
    """The precision of embed_evaluation_sets and predict_proba: "fp32", "bf16" (CPU) or "fp16" (GPU).

    low_precision None (the default) = fp32: bf16's error (0.014 on embeddings, 3.5e-4 on P(correct), bench/README.md
    "Speed") reorders models whose P(correct) are close and hides near-duplicates, which are told apart at cosine
    1e-5 (the pipeline's tests failed with bf16 as the default); "auto" = chosen from the hardware: bf16 on a CPU
    with bf16 units (cpu_has_bf16; about 1.8x faster there), fp32 on other CPUs and on GPU; True forces bf16 (CPU)
    / fp16 (GPU), False forces fp32.
    """
    dev = resolve_device(device)
    if low_precision == "auto":
        low_precision = dev.type == "cpu" and cpu_has_bf16()
    elif low_precision is None:
        low_precision = False
    if not low_precision:
        return "fp32"
    return "fp16" if dev.type == "cuda" else "bf16"


def _autocast(device: torch.device, precision: str) -> torch.autocast:
    """autocast to bf16 / fp16 unless fp32 (matrix products and attention; norms stay fp32)."""
    dtype = torch.float16 if precision == "fp16" else torch.bfloat16
    return torch.autocast(device_type=device.type, dtype=dtype, enabled=precision != "fp32")


@torch.inference_mode()
def embed_evaluation_sets(
    model: Locus,
    encodings: np.ndarray,  # (Q, D) query encodings
    sets: Sequence[EvaluationSet],  # per model: (query indices (n,), scores (n,))
    *,
    batch_size: int = 64,
    max_tokens: int | None = None,
    device: str | torch.device = "cpu",
    low_precision: bool | str | None = None,
) -> np.ndarray:  # (M, d) float32 model embeddings
    """Model embeddings from evaluation sets: one forward pass, no autograd (inference_mode), deterministic.

    Each set is put in a canonical order first (so any permutation gives the same bytes), the query part
    of the tokens is computed once per distinct query, and sets are batched by padded length with masks (at
    most batch_size sets and about max_tokens set elements per forward pass, to bound memory at any n; None =
    default_max_tokens(device): small on CPU, where cache-sized batches are fastest, large on GPU).
    A set's embedding is the same bit for bit whether it is embedded alone or with any other sets.
    low_precision: None = fp32; "auto" = bf16 products on a CPU with bf16 units, fp32 elsewhere; True / False force
    bf16 (CPU) or fp16 (GPU) / fp32 (inference_precision; bf16 is not bit-identical to fp32, bench/README.md "Speed").
    The model is moved to `device` and left in eval mode.
    """
    enc = np.asarray(encodings, dtype=np.float32)
    if enc.ndim != 2 or enc.shape[1] != model.config.query_dim:
        raise ValueError(
            f"embed_evaluation_sets: encodings must be (Q, {model.config.query_dim}), got {enc.shape}. "
            "How to fix: encode queries with the sentence encoder the model was trained with."
        )
    if len(sets) == 0:
        return np.zeros((0, model.config.d), dtype=np.float32)
    sets = _validate_sets(sets, enc.shape[0])
    dev = resolve_device(device)
    placed(model, dev)
    used, local = distinct_queries(sets)
    with _autocast(dev, inference_precision(dev, low_precision)):
        parts = rowwise(model.token_parts, torch.from_numpy(enc[used]).to(dev))  # (U, 2d), once per query
        max_tokens = max_tokens or default_max_tokens(dev)
        z = embed_batches(model, parts, local, batch_size=batch_size, max_tokens=max_tokens)
    return z.float().cpu().numpy()


def embed_evaluation_set(
    model: Locus,
    phi: np.ndarray,  # (n, D) encodings of the queries the model was evaluated on
    y: np.ndarray,  # (n,) its scores in [0, 1]
    *,
    device: str | torch.device = "cpu",
    low_precision: bool | str | None = None,
) -> np.ndarray:  # (d,)
    """Onboard one model: its embedding from its evaluation set, a single forward pass (the same bits as in
    embed_evaluation_sets with any other sets)."""
    phi = np.asarray(phi, dtype=np.float32)
    y = np.asarray(y, dtype=np.float32)
    if phi.ndim != 2 or y.shape != (phi.shape[0],):
        raise ValueError(f"embed_evaluation_set: phi must be (n, D) and y (n,), got {phi.shape} and {y.shape}.")
    return embed_evaluation_sets(model, phi, [(np.arange(len(y)), y)], device=device, low_precision=low_precision)[0]


@torch.inference_mode()
def predict_proba(
    model: Locus,
    embeddings: np.ndarray,  # (M, d) model embeddings
    encodings: np.ndarray,  # (Q, D) query encodings
    *,
    batch_size: int = 1024,
    device: str | torch.device = "cpu",
    low_precision: bool | str | None = None,
) -> np.ndarray:  # (M, Q) float32 P(correct)
    """P(model m answers query q correctly) for all pairs, batch_size queries at a time.

    Each query is projected once per call (not once per model); the pairs are scored in cache-sized tiles
    (model.score_blocks), so memory beyond the (M, Q) result stays bounded at any M. low_precision as in
    embed_evaluation_sets. The model is moved to `device` and left in eval mode.
    """
    z_np = np.asarray(embeddings, dtype=np.float32)
    enc = np.asarray(encodings, dtype=np.float32)
    cfg = model.config
    if z_np.ndim != 2 or z_np.shape[1] != cfg.d or enc.ndim != 2 or enc.shape[1] != cfg.query_dim:
        raise ValueError(
            f"predict_proba: embeddings must be (M, {cfg.d}) and encodings (Q, {cfg.query_dim}), got "
            f"{z_np.shape} and {enc.shape}."
        )
    dev = resolve_device(device)
    placed(model, dev)
    z = torch.from_numpy(z_np).to(dev)
    out = np.empty((z_np.shape[0], enc.shape[0]), dtype=np.float32)
    with _autocast(dev, inference_precision(dev, low_precision)):
        for start in range(0, enc.shape[0], batch_size):
            u = model.query_projection(torch.from_numpy(enc[start : start + batch_size]).to(dev))  # (q, d)
            logits = model.predict_logits_projected(z, u)  # (M, q)
            out[:, start : start + batch_size] = torch.sigmoid_(logits).cpu().numpy()
    return out


__all__ = [
    "EvaluationSet",
    "resolve_device",
    "cpu_has_bf16",
    "inference_precision",
    "default_max_tokens",
    "torch_threads",
    "length_bucket",
    "distinct_queries",
    "embed_batches",
    "embed_evaluation_sets",
    "embed_evaluation_set",
    "predict_proba",
]

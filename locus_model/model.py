"""The LOCUS model: a set encoder that turns a model's evaluation set into a model embedding, and a
correctness predictor that scores (model embedding, query) pairs.

LOCUS, arXiv 2601.21082. Encoder (Set Transformer, Lee et al. 2019):
  token_i = W [phi_i, y_i, phi_i * (2 y_i - 1)] + b      (the public reference's linear tokenizer)
  L ISAB blocks (r learned latents), PMA with one learned seed, a final linear  -> z in R^d
Correctness predictor G: u = U phi + c;  logit = MLP([z, u, z * u])  (two layers, hidden 64).

The tokenizer is linear, so W [phi, y, phi (2y - 1)] = A phi + (2y - 1) B phi + w y + b: the query part
[A phi, B phi] (2d numbers) is computed once per query and shared by every model that was evaluated on
it. Likewise the predictor's first layer splits into a model part, a query part and a bilinear part, so
scoring M models x Q queries never builds the (M, Q, 3d) feature tensor nor reprojects a query per model.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from locus_model.modules import ISAB, MIN_ROWS, PMA, rowwise


@dataclass(frozen=True)
class LocusConfig:
    query_dim: int = 768  # D, width of the query encodings phi (768 all-mpnet-base-v2, 384 MiniLM)
    d: int = 128  # width of tokens and of the model embedding z
    n_blocks: int = 2  # L, ISAB blocks in the set encoder
    n_latents: int = 64  # r, learned latents per ISAB block
    n_heads: int = 4  # attention heads (must divide d)
    predictor_hidden: int = 64  # hidden width of the correctness predictor's two-layer MLP
    predictor_dropout: float = 0.1  # dropout on that hidden layer during training (the reference's 0.1)

    def __post_init__(self) -> None:
        if self.d % self.n_heads != 0:
            raise ValueError(f"LocusConfig: d={self.d} must be a multiple of n_heads={self.n_heads}.")
        for name in ("query_dim", "d", "n_blocks", "n_latents", "n_heads", "predictor_hidden"):
            if getattr(self, name) < 1:
                raise ValueError(f"LocusConfig: {name}={getattr(self, name)} must be >= 1.")


class Locus(nn.Module):
    """Set encoder (evaluation set -> model embedding) plus correctness predictor G."""

    def __init__(self, config: LocusConfig) -> None:
        super().__init__()
        self.config = config
        D, d = config.query_dim, config.d
        # encoder
        self.tokenizer = nn.Linear(2 * D + 1, d)  # on [phi, y, phi * (2y - 1)], as in the reference
        self.blocks = nn.ModuleList(
            ISAB(d=d, n_heads=config.n_heads, n_latents=config.n_latents) for _ in range(config.n_blocks)
        )
        self.pool = PMA(d=d, n_heads=config.n_heads, n_seeds=1)
        self.out = nn.Linear(d, d)
        # correctness predictor G
        self.query_proj = nn.Linear(D, d)
        self.hidden = nn.Linear(3 * d, config.predictor_hidden)  # on [z, u, z * u]
        self.dropout = nn.Dropout(config.predictor_dropout)
        self.head = nn.Linear(config.predictor_hidden, 1)
        # post-hoc calibration of every logit: logit / temperature + logit_bias (1 and 0 = off; train_locus
        # fits them on the validation cells, TrainConfig.calibration). The same increasing map for every
        # model, so the ranking of models on a query, hence routing, is unchanged.
        self.register_buffer("temperature", torch.ones(()))
        self.register_buffer("logit_bias", torch.zeros(()))

    # ---- parameter groups (separate learning rates in training) ----
    def encoder_parameters(self) -> list[nn.Parameter]:
        mods = [self.tokenizer, self.blocks, self.pool, self.out]
        return [p for m in mods for p in m.parameters()]

    def predictor_parameters(self) -> list[nn.Parameter]:
        mods = [self.query_proj, self.hidden, self.head]
        return [p for m in mods for p in m.parameters()]

    # ---- encoder ----
    def token_weight(self) -> torch.Tensor:  # (2d, D)
        """[A; B]: the tokenizer's weight on phi and on phi * (2y - 1), stacked."""
        D = self.config.query_dim
        w = self.tokenizer.weight  # (d, 2D + 1)
        return torch.cat([w[:, :D], w[:, D + 1 :]], dim=0)  # (2d, D)

    def token_parts(self, phi: torch.Tensor) -> torch.Tensor:  # (..., D) -> (..., 2d)
        """The query-only part of the tokens, [A phi, B phi]; compute once per query and gather."""
        return phi @ self.token_weight().T  # (..., 2d)

    def embed_from_parts(
        self,
        parts: torch.Tensor,  # (B, n, 2d) from token_parts
        y: torch.Tensor,  # (B, n) scores in [0, 1]
        mask: torch.Tensor,  # (B, n) bool, True = real
    ) -> torch.Tensor:  # (B, d)
        d, D = self.config.d, self.config.query_dim
        y = y.to(parts.dtype)[..., None]  # (B, n, 1)
        a, b = parts[..., :d], parts[..., d:]  # (B, n, d) each
        w_y = self.tokenizer.weight[:, D]  # (d,)
        tokens = torch.addcmul(a, 2 * y - 1, b).add_(self.tokenizer.bias).addcmul_(y, w_y)  # (B, n, d)
        tokens = tokens.mul_(mask[..., None])  # padding rows are exactly zero
        for block in self.blocks:
            tokens = block(tokens, mask)  # (B, n, d)
        return rowwise(self.out, self.pool(tokens, mask)[:, 0])  # (B, d)

    def embed(
        self,
        phi: torch.Tensor,  # (B, n, D) query encodings
        y: torch.Tensor,  # (B, n) scores in [0, 1]
        mask: torch.Tensor,  # (B, n) bool, True = real
    ) -> torch.Tensor:  # (B, d) model embeddings
        _check_set_batch(phi, y, mask, self.config.query_dim)
        return self.embed_from_parts(self.token_parts(phi), y, mask)

    # ---- correctness predictor G ----
    def query_projection(self, phi: torch.Tensor) -> torch.Tensor:  # (..., D) -> (..., d)
        """u = U phi + c; depends only on the query, so compute it once per query."""
        return self.query_proj(phi)

    def _predictor_split(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The hidden layer on [z, u, z * u] as one product per model: pre[j] = left[j] . u + left_bias[j].

        hidden([z, u, z u])_j = w_z[j] . z + w_u[j] . u + w_zu[j] . (z u) + b_j = (z * w_zu[j] + w_u[j]) . u
        + (w_z[j] . z + b_j): a d-wide product per (model, query, unit) instead of a 3d-wide one.
        """
        d = self.config.d
        w = self.hidden.weight  # (hidden, 3d) split into the z, u and z*u columns
        w_z, w_u, w_zu = w[:, :d], w[:, d : 2 * d], w[:, 2 * d :]
        left = torch.addcmul(w_u, z[:, None, :], w_zu)  # (M, hidden, d)
        left_bias = F.linear(z, w_z, self.hidden.bias)  # (M, hidden)
        return left, left_bias

    def _head(self, h: torch.Tensor) -> torch.Tensor:  # (M, hidden, Q) after ReLU -> (M, Q) calibrated logits
        logits = (self.head.weight @ self.dropout(h))[:, 0] + self.head.bias  # (M, Q)
        return logits / self.temperature + self.logit_bias

    def pair_logits(
        self,
        z: torch.Tensor,  # (B, d) model embeddings
        u: torch.Tensor,  # (B, T, d) projected queries, T per model
    ) -> torch.Tensor:  # (B, T) logits of P(correct)
        left, left_bias = self._predictor_split(z)  # (B, hidden, d), (B, hidden)
        h = F.relu(torch.baddbmm(left_bias[:, :, None], left, u.transpose(1, 2)))  # (B, hidden, T)
        return self._head(h)

    def predict_logits_projected(
        self,
        z: torch.Tensor,  # (M, d) model embeddings
        u: torch.Tensor,  # (Q, d) projected queries
        *,
        block_models: int | None = None,
        block_queries: int | None = None,
    ) -> torch.Tensor:  # (M, Q) logits for all pairs
        """All pairs, in tiles of block_models x block_queries: the (M, hidden, Q) hidden layer is never built
        whole (None = the cache-sized defaults of score_blocks; under autograd, one tile)."""
        if torch.is_grad_enabled() and (z.requires_grad or u.requires_grad or self.hidden.weight.requires_grad):
            left, left_bias = self._predictor_split(z)  # (M, hidden, d), (M, hidden)
            pre = (left.reshape(-1, left.shape[-1]) @ u.T).view(*left.shape[:2], -1)  # (M, hidden, Q)
            return self._head(F.relu(pre + left_bias[:, :, None]))
        bm, bq = score_blocks(z.device)
        bm, bq = block_models or bm, block_queries or bq
        M, Q = z.shape[0], u.shape[0]
        out = torch.empty(M, Q, dtype=z.dtype, device=z.device)
        u_t = u.T  # (d, Q)
        for m0 in range(0, M, bm):
            left, left_bias = self._predictor_split(z[m0 : m0 + bm])  # (m, hidden, d), (m, hidden)
            flat = left.reshape(-1, left.shape[-1])  # (m hidden, d)
            for q0 in range(0, Q, bq):
                pre = (flat @ u_t[:, q0 : q0 + bq]).view(left.shape[0], left.shape[1], -1)  # (m, hidden, q)
                out[m0 : m0 + bm, q0 : q0 + bq] = self._head(pre.add_(left_bias[:, :, None]).relu_())
        return out

    def predict_logits(
        self,
        z: torch.Tensor,  # (M, d)
        phi: torch.Tensor,  # (Q, D)
    ) -> torch.Tensor:  # (M, Q)
        return self.predict_logits_projected(z, self.query_projection(phi))

    def forward(
        self,
        phi_enc: torch.Tensor,  # (B, n, D) encoder evaluation set: query encodings
        y_enc: torch.Tensor,  # (B, n) encoder evaluation set: scores
        mask_enc: torch.Tensor,  # (B, n) bool
        phi_dec: torch.Tensor,  # (B, T, D) decoder target queries
    ) -> torch.Tensor:  # (B, T) logits
        z = self.embed(phi_enc, y_enc, mask_enc)
        return self.pair_logits(z, self.query_projection(phi_dec))


def _check_set_batch(phi: torch.Tensor, y: torch.Tensor, mask: torch.Tensor, query_dim: int) -> None:
    if phi.dim() != 3 or phi.shape[-1] != query_dim:
        raise ValueError(
            f"Locus.embed: phi must have shape (B, n, {query_dim}), got {tuple(phi.shape)}. How to fix: "
            "batch the evaluation sets and use encodings of the width the model was built with (query_dim)."
        )
    if y.shape != phi.shape[:2] or mask.shape != phi.shape[:2] or mask.dtype != torch.bool:
        raise ValueError(
            f"Locus.embed: y and mask must have shape {tuple(phi.shape[:2])} (mask bool), got y "
            f"{tuple(y.shape)}, mask {mask.dtype} {tuple(mask.shape)}."
        )


# ---------------------------------------------------------------------------------------------------
# checkpoints


def save_checkpoint(path: str | Path, model: Locus, **extra: Any) -> None:
    """Write {"config": asdict(config), "state_dict": ..., **extra}; extra must be plain data/tensors."""
    clash = {"config", "state_dict"} & extra.keys()
    if clash:
        raise ValueError(f"save_checkpoint: extra keys {sorted(clash)} are reserved; rename them.")
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    torch.save({"config": asdict(model.config), "state_dict": state, **extra}, path)


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> tuple[Locus, dict]:
    """Rebuild Locus from a checkpoint (weights_only=True); returns (model in eval mode, the extra dict)."""
    ckpt = torch.load(path, map_location=map_location, weights_only=True)
    if not isinstance(ckpt, dict) or "config" not in ckpt or "state_dict" not in ckpt:
        raise ValueError(
            f"{path}: not a LOCUS checkpoint (expected a dict with 'config' and 'state_dict'). "
            "How to fix: write it with locus_model.model.save_checkpoint."
        )
    model = Locus(LocusConfig(**ckpt["config"]))
    state = dict(ckpt["state_dict"])
    state.setdefault("temperature", torch.ones(()))  # checkpoints from before calibration existed
    state.setdefault("logit_bias", torch.zeros(()))
    model.load_state_dict(state)
    model.to(map_location).eval()
    extra = {k: v for k, v in ckpt.items() if k not in ("config", "state_dict")}
    return model, extra


# ---------------------------------------------------------------------------------------------------
# inference helpers (numpy in, numpy out; no grad; deterministic)


def resolve_device(device: str | torch.device) -> torch.device:
    """"auto" -> CUDA when available, else CPU; anything else is passed to torch.device."""
    if isinstance(device, str) and device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def default_max_tokens(device: torch.device) -> int:
    """Set elements per encoder forward pass: 8k on CPU (measured fastest, bench/README.md), 128k on GPU."""
    return 1 << 17 if device.type == "cuda" else 1 << 13


def score_blocks(device: torch.device) -> tuple[int, int]:
    """(models, queries) per scoring tile: 16 x 512 on CPU (a 2 MiB hidden-layer tile stays in cache; measured
    fastest, bench/README.md "Speed"), 4096 x 4096 on GPU."""
    return (4096, 4096) if device.type == "cuda" else (16, 512)


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


def _embed_batches(
    model: Locus,
    parts: torch.Tensor,  # (U, 2d) token parts of the queries the sets refer to
    sets: list[tuple[np.ndarray, np.ndarray]],  # indices into parts, scores
    *,
    batch_size: int,
    max_tokens: int,
) -> torch.Tensor:  # (M, d)
    """Embed sets in batches of one padded length (length_bucket) of at most batch_size sets and ~max_tokens
    tokens (longest first); the result of a set does not depend on the other sets (bit for bit)."""
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


def _low_precision(device: torch.device, enabled: bool):
    """autocast to bf16 on CPU / fp16 on GPU when enabled (matrix products and attention; norms stay fp32)."""
    dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
    return torch.autocast(device_type=device.type, dtype=dtype, enabled=enabled)


@torch.inference_mode()
def embed_evaluation_sets(
    model: Locus,
    encodings: np.ndarray,  # (Q, D) query encodings
    sets: Sequence[EvaluationSet],  # per model: (query indices (n,), scores (n,))
    *,
    batch_size: int = 64,
    max_tokens: int | None = None,
    device: str | torch.device = "cpu",
    low_precision: bool = False,
) -> np.ndarray:  # (M, d) float32 model embeddings
    """Model embeddings from evaluation sets: one forward pass, no autograd (inference_mode), deterministic.

    Each set is put in a canonical order first (so any permutation gives the same bytes), the query part
    of the tokens is computed once per distinct query, and sets are batched by padded length with masks (at
    most batch_size sets and about max_tokens set elements per forward pass, to bound memory at any n; None =
    default_max_tokens(device): small on CPU, where cache-sized batches are fastest, large on GPU).
    A set's embedding is the same bit for bit whether it is embedded alone or with any other sets.
    low_precision=True runs the products in bf16 (CPU) / fp16 (GPU): faster where the hardware has such
    units, not bit-identical to fp32 (bench/README.md "Speed" gives the measured deviation); off by default.
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
    model.to(dev).eval()
    used, local = distinct_queries(sets)
    with _low_precision(dev, low_precision):
        parts = rowwise(model.token_parts, torch.from_numpy(enc[used]).to(dev))  # (U, 2d), once per query
        max_tokens = max_tokens or default_max_tokens(dev)
        z = _embed_batches(model, parts, local, batch_size=batch_size, max_tokens=max_tokens)
    return z.float().cpu().numpy()


def embed_evaluation_set(
    model: Locus,
    phi: np.ndarray,  # (n, D) encodings of the queries the model was evaluated on
    y: np.ndarray,  # (n,) its scores in [0, 1]
    *,
    device: str | torch.device = "cpu",
) -> np.ndarray:  # (d,)
    """Onboard one model: its embedding from its evaluation set, a single forward pass (the same bits as in
    embed_evaluation_sets with any other sets)."""
    phi = np.asarray(phi, dtype=np.float32)
    y = np.asarray(y, dtype=np.float32)
    if phi.ndim != 2 or y.shape != (phi.shape[0],):
        raise ValueError(f"embed_evaluation_set: phi must be (n, D) and y (n,), got {phi.shape} and {y.shape}.")
    return embed_evaluation_sets(model, phi, [(np.arange(len(y)), y)], device=device)[0]


@torch.inference_mode()
def predict_proba(
    model: Locus,
    embeddings: np.ndarray,  # (M, d) model embeddings
    encodings: np.ndarray,  # (Q, D) query encodings
    *,
    batch_size: int = 1024,
    device: str | torch.device = "cpu",
    low_precision: bool = False,
) -> np.ndarray:  # (M, Q) float32 P(correct)
    """P(model m answers query q correctly) for all pairs, batch_size queries at a time.

    Each query is projected once per call (not once per model); the pairs are scored in cache-sized tiles
    (score_blocks), so memory beyond the (M, Q) result stays bounded at any M. low_precision as in
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
    model.to(dev).eval()
    z = torch.from_numpy(z_np).to(dev)
    out = np.empty((z_np.shape[0], enc.shape[0]), dtype=np.float32)
    with _low_precision(dev, low_precision):
        for start in range(0, enc.shape[0], batch_size):
            u = model.query_projection(torch.from_numpy(enc[start : start + batch_size]).to(dev))  # (q, d)
            logits = model.predict_logits_projected(z, u)  # (M, q)
            out[:, start : start + batch_size] = torch.sigmoid_(logits).cpu().numpy()
    return out


__all__ = [
    "LocusConfig",
    "Locus",
    "save_checkpoint",
    "load_checkpoint",
    "embed_evaluation_sets",
    "embed_evaluation_set",
    "predict_proba",
    "resolve_device",
]

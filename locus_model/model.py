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

from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from locus_model.model_config import LocusConfig
from locus_model.modules import ISAB, PMA, rowwise


class Locus(nn.Module):
    """Set encoder (evaluation set -> model embedding) plus correctness predictor G."""

    temperature: torch.Tensor  # () buffers, registered in __init__
    logit_bias: torch.Tensor

    def __init__(self, config: LocusConfig) -> None:
        super().__init__()
        self.config = config
        D, d = config.query_dim, config.d
        # encoder
        self.tokenizer = nn.Linear(2 * D + 1, d)  # on [phi, y, phi * (2y - 1)], as in the authors' code release
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
        # one (1, hidden) x (hidden, Q) product per model; a plain `weight @ h` would first copy each tile into
        # a (M Q, hidden) matrix (22% of all-pairs scoring, bench/README.md "Speed")
        w = self.head.weight.expand(h.shape[0], 1, h.shape[1])  # (M, 1, hidden), no copy
        return self._calibrated(torch.bmm(w, self.dropout(h))[:, 0] + self.head.bias)  # (M, Q)

    def _calibrated(self, logits: torch.Tensor) -> torch.Tensor:
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
        whole. None = score_blocks(device) (cache-sized on CPU) without autograd; with autograd, one tile of
        everything (autograd keeps every tile's hidden layer for the backward pass anyway, so tiles would only
        add copies). The same code in training and in inference, except for fewer queries than models without
        autograd and without given blocks (serving: one query against a pool of 100,000), scored by query
        (``_logits_by_query``, the same numbers up to float rounding)."""
        M, Q = z.shape[0], u.shape[0]
        grad = torch.is_grad_enabled() and (z.requires_grad or u.requires_grad or self.hidden.weight.requires_grad)
        if not grad and Q < M and block_models is None and block_queries is None:
            return self._logits_by_query(z, u)
        bm, bq = (M, Q) if grad else score_blocks(z.device)
        bm, bq = block_models or bm, block_queries or bq
        if bm >= M and bq >= Q:  # one tile: no copy into an output
            return self._tile_logits(*self._predictor_split(z), u.T)
        out = torch.empty(M, Q, dtype=z.dtype, device=z.device)
        u_t = u.T  # (d, Q)
        for m0 in range(0, M, bm):
            left, left_bias = self._predictor_split(z[m0 : m0 + bm])  # (m, hidden, d), (m, hidden)
            for q0 in range(0, Q, bq):
                out[m0 : m0 + bm, q0 : q0 + bq] = self._tile_logits(left, left_bias, u_t[:, q0 : q0 + bq])
        return out

    def _logits_by_query(self, z: torch.Tensor, u: torch.Tensor) -> torch.Tensor:  # (M, d), (Q, d) -> (M, Q)
        """The hidden layer split by query instead of by model: pre[m, q] = (w_z + w_zu * u_q) z_m + (w_u u_q + b),
        one (d, hidden) matrix per query and one product per tile of models. Splitting by model builds a
        (hidden, d) matrix per model, M of them for every call: at one query that is the whole cost (bench/README.md
        "Scaling")."""
        d, hidden = self.config.d, self.hidden.out_features
        w = self.hidden.weight
        w_z, w_u, w_zu = w[:, :d], w[:, d : 2 * d], w[:, 2 * d :]
        per_query = torch.addcmul(w_z, u[:, None, :], w_zu).reshape(-1, d).T  # (d, Q hidden)
        bias = F.linear(u, w_u, self.hidden.bias)  # (Q, hidden)
        bm, bq = score_blocks(z.device)
        rows = max(1, bm * bq // u.shape[0])  # models per tile: a tile as large as score_blocks' tiles
        out = torch.empty(z.shape[0], u.shape[0], dtype=z.dtype, device=z.device)
        for m0 in range(0, z.shape[0], rows):
            h = (z[m0 : m0 + rows] @ per_query).view(-1, u.shape[0], hidden).add_(bias).relu_()  # (m, Q, hidden)
            out[m0 : m0 + rows] = self._calibrated(self.dropout(h) @ self.head.weight[0] + self.head.bias)
        return out

    def _tile_logits(self, left: torch.Tensor, left_bias: torch.Tensor, u_t: torch.Tensor) -> torch.Tensor:
        """(m, hidden, d), (m, hidden), (d, q) -> (m, q) logits of one tile."""
        pre = (left.reshape(-1, left.shape[-1]) @ u_t).view(left.shape[0], left.shape[1], -1)  # (m, hidden, q)
        # in place on the fresh product (its backward needs only its inputs; relu's needs its output)
        return self._head(pre.add_(left_bias[:, :, None]).relu_())

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
# the tiles of the all-pairs scoring (here, not in infer.py: Locus.predict_logits_projected defaults to them)


def score_blocks(device: torch.device) -> tuple[int, int]:
    """(models, queries) per scoring tile: 16 x 512 on CPU (a 2 MiB hidden-layer tile stays in cache; measured
    fastest, bench/README.md "Speed"), 4096 x 4096 on GPU."""
    return (4096, 4096) if device.type == "cuda" else (16, 512)


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


__all__ = ["LocusConfig", "Locus", "save_checkpoint", "load_checkpoint"]

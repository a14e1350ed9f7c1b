"""A plain LOCUS reimplementation for speed comparisons only: no masks, no batching, no shared work.

It reuses a Locus model's weights so both compute the same function, but evaluates it the obvious way:
one model at a time, the tokenizer applied to the concatenated [phi, y, phi * (2y - 1)], and the
correctness predictor called on (z, query) pairs with every query reprojected for every model
(as the public reference's evaluation does).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from locus_model.model import Locus


def _mab(mab, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:  # (nx, d), (ny, d) -> (nx, d)
    h = mab.n_heads
    d = x.shape[-1]
    dh = d // h
    q = mab.w_q(x).view(-1, h, dh).transpose(0, 1)  # (h, nx, dh)
    k = mab.w_k(y).view(-1, h, dh).transpose(0, 1)  # (h, ny, dh)
    v = mab.w_v(y).view(-1, h, dh).transpose(0, 1)  # (h, ny, dh)
    att = F.softmax(q @ k.transpose(-2, -1) / math.sqrt(dh), dim=-1) @ v  # (h, nx, dh)
    hid = mab.ln_attn(x + mab.w_o(att.transpose(0, 1).reshape(-1, d)))
    return mab.ln_ff(hid + mab.ff(hid))


@torch.no_grad()
def naive_embed(model: Locus, phi: torch.Tensor, y: torch.Tensor) -> torch.Tensor:  # (n, D), (n,) -> (d,)
    y = y[:, None]
    tokens = model.tokenizer(torch.cat([phi, y, phi * (2 * y - 1)], dim=-1))  # (n, d)
    for block in model.blocks:
        summary = _mab(block.compress, block.latents[0], tokens)  # (r, d)
        tokens = _mab(block.broadcast, tokens, summary)  # (n, d)
    return model.out(_mab(model.pool.mab, model.pool.seeds[0], tokens)[0])  # (d,)


@torch.no_grad()
def naive_embed_all(model: Locus, encodings: torch.Tensor, sets) -> torch.Tensor:  # -> (M, d)
    return torch.stack([naive_embed(model, encodings[idx], y) for idx, y in sets])


@torch.no_grad()
def naive_predict_proba(model: Locus, z: torch.Tensor, encodings: torch.Tensor) -> torch.Tensor:  # (M, Q)
    rows = []
    for m in range(z.shape[0]):  # per model: reproject every query, build (Q, 3d) pair features
        u = model.query_proj(encodings)  # (Q, d)
        zm = z[m].expand_as(u)
        h = F.relu(model.hidden(torch.cat([zm, u, zm * u], dim=-1)))
        rows.append(torch.sigmoid(model.head(h)[:, 0]))
    return torch.stack(rows)

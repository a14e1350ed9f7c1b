"""Set Transformer blocks with key masks: MAB, ISAB, PMA.

Lee et al., "Set Transformer: A Framework for Attention-based Permutation-Invariant Neural Networks",
ICML 2019 (arXiv 1810.00825), as used by LOCUS (arXiv 2601.21082) to encode a model's evaluation set.

Every block takes a boolean mask over the keys (True = a real set element, False = padding), so that
evaluation sets of different sizes batch together and the padding changes nothing. Masked keys get an
attention weight of exactly zero; a query whose keys are all masked (an all-padding row) attends to
nothing and gets a zero attention output instead of NaN.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn


def masked_softmax(scores: torch.Tensor, key_mask: torch.Tensor | None) -> torch.Tensor:
    """Softmax over the last axis that gives masked keys weight 0 and all-masked rows all zeros.

    Args:
        scores: (..., n_keys) attention scores.
        key_mask: (..., n_keys) bool, broadcastable to scores; True = real key. None = no masking.
    """
    if key_mask is None:
        return scores.softmax(dim=-1)
    # A finite fill (not -inf) keeps all-masked rows finite in the forward AND backward pass; the final
    # multiplication zeroes them (exp(min - max) is already exactly 0 for masked keys in other rows).
    filled = scores.masked_fill(~key_mask, torch.finfo(scores.dtype).min)
    return filled.softmax(dim=-1) * key_mask


class MAB(nn.Module):
    """Multihead attention block: MAB(X, Y) = LN(H + rFF(H)), H = LN(X + Multihead(X, Y, Y)).

    Args:
        d: model width (input and output).
        n_heads: attention heads; must divide d.
        ff_hidden: hidden width of the row-wise feed-forward layer rFF (default 2 * d).
    """

    def __init__(self, *, d: int, n_heads: int, ff_hidden: int | None = None) -> None:
        super().__init__()
        if d % n_heads != 0:
            raise ValueError(f"MAB: d={d} is not divisible by n_heads={n_heads}; choose d a multiple of n_heads.")
        self.n_heads = n_heads
        self.w_q = nn.Linear(d, d)
        self.w_k = nn.Linear(d, d)
        self.w_v = nn.Linear(d, d)
        self.w_o = nn.Linear(d, d)
        self.ln_attn = nn.LayerNorm(d)
        self.ln_ff = nn.LayerNorm(d)
        hidden = ff_hidden or 2 * d
        self.ff = nn.Sequential(nn.Linear(d, hidden), nn.ReLU(), nn.Linear(hidden, d))

    def forward(
        self,
        x: torch.Tensor,  # (B, nx, d) queries
        y: torch.Tensor,  # (B, ny, d) keys and values
        key_mask: torch.Tensor | None = None,  # (B, ny) bool, True = real
        query_mask: torch.Tensor | None = None,  # (B, nx) bool; padded query rows are zeroed in the output
    ) -> torch.Tensor:  # (B, nx, d)
        B, nx, d = x.shape
        ny = y.shape[1]
        h, dh = self.n_heads, d // self.n_heads
        q = self.w_q(x).view(B, nx, h, dh).transpose(1, 2)  # (B, h, nx, dh)
        k = self.w_k(y).view(B, ny, h, dh).transpose(1, 2)  # (B, h, ny, dh)
        v = self.w_v(y).view(B, ny, h, dh).transpose(1, 2)  # (B, h, ny, dh)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(dh)  # (B, h, nx, ny)
        mask = None if key_mask is None else key_mask[:, None, None, :]  # (B, 1, 1, ny)
        att = masked_softmax(scores, mask) @ v  # (B, h, nx, dh)
        att = att.transpose(1, 2).reshape(B, nx, d)  # (B, nx, d)
        hid = self.ln_attn(x + self.w_o(att))  # (B, nx, d)
        out = self.ln_ff(hid + self.ff(hid))  # (B, nx, d)
        if query_mask is not None:
            out = out * query_mask[..., None]
        return out


class ISAB(nn.Module):
    """Induced set attention block: r learned latents summarise the set, the set reads them back.

    ISAB(X) = MAB(X, MAB(I, X)); cost O(n * r) instead of O(n^2).

    Args:
        d: model width.
        n_heads: attention heads.
        n_latents: number r of learned latents (inducing points).
    """

    def __init__(self, *, d: int, n_heads: int, n_latents: int) -> None:
        super().__init__()
        self.latents = nn.Parameter(torch.empty(1, n_latents, d))
        nn.init.xavier_uniform_(self.latents)
        self.compress = MAB(d=d, n_heads=n_heads)  # latents <- set
        self.broadcast = MAB(d=d, n_heads=n_heads)  # set <- latents

    def forward(
        self,
        x: torch.Tensor,  # (B, n, d)
        mask: torch.Tensor | None = None,  # (B, n) bool, True = real
    ) -> torch.Tensor:  # (B, n, d), padded rows zero
        latents = self.latents.expand(x.shape[0], -1, -1)  # (B, r, d)
        summary = self.compress(latents, x, key_mask=mask)  # (B, r, d)
        return self.broadcast(x, summary, query_mask=mask)  # (B, n, d)


class PMA(nn.Module):
    """Pooling by multihead attention: k learned seed vectors attend over the set.

    Args:
        d: model width.
        n_heads: attention heads.
        n_seeds: number k of seed vectors (outputs per set); LOCUS uses 1.
    """

    def __init__(self, *, d: int, n_heads: int, n_seeds: int = 1) -> None:
        super().__init__()
        self.seeds = nn.Parameter(torch.empty(1, n_seeds, d))
        nn.init.xavier_uniform_(self.seeds)
        self.mab = MAB(d=d, n_heads=n_heads)

    def forward(
        self,
        x: torch.Tensor,  # (B, n, d)
        mask: torch.Tensor | None = None,  # (B, n) bool, True = real
    ) -> torch.Tensor:  # (B, k, d)
        seeds = self.seeds.expand(x.shape[0], -1, -1)  # (B, k, d)
        return self.mab(seeds, x, key_mask=mask)


__all__ = ["MAB", "ISAB", "PMA", "masked_softmax"]

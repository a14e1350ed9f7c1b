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
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

MIN_ROWS = 64  # row-wise work runs on at least this many rows (see rowwise)


class MAB(nn.Module):
    """Multihead attention block: MAB(X, Y) = LN(H + rFF(H)), H = LN(X + Multihead(X, Y, Y)).

    The attention itself runs in torch.nn.functional.scaled_dot_product_attention (fused on CPU and GPU) with
    the key mask; the key and value projections run as one matrix product.

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

    def finish(self, x: torch.Tensor, att: torch.Tensor) -> torch.Tensor:  # (..., d) each -> (..., d)
        """The row-wise rest of the block once the attention output is known: LN(H + rFF(H))."""
        # in place on fresh products (autograd-safe: a linear layer does not keep its output); on CPU a fresh
        # tensor costs page faults, and these are the largest tensors of the encoder
        out = self.w_o(att)
        hid = self.ln_attn(out.add_(x))
        out = self.ff[2](F.relu_(self.ff[0](hid)))
        return self.ln_ff(out.add_(hid))

    def forward(
        self,
        x: torch.Tensor,  # (B, nx, d) queries; (1, nx, d) = the same queries for every set (learned latents)
        y: torch.Tensor,  # (B, ny, d) keys and values
        key_mask: torch.Tensor | None = None,  # (B, ny) bool, True = real
        query_mask: torch.Tensor | None = None,  # (B, nx) bool; padded query rows are zeroed in the output
    ) -> torch.Tensor:  # (B, nx, d)
        B, ny, d = y.shape
        nx = x.shape[1]
        h, dh = self.n_heads, d // self.n_heads
        q = self.w_q(x).view(x.shape[0], nx, h, dh).transpose(1, 2).expand(B, h, nx, dh)  # (B, h, nx, dh)
        # when the keys are the larger side (latents <- set), no biases on the (B ny, 2d) keys and values, the
        # largest product of the encoder (addmm copies a bias into each fresh output first): the key bias adds
        # q . b_k to every score of a query, which cancels in the softmax; the value bias adds b_v to every
        # attention output that has a real key (its weights sum to 1), on nx < ny rows
        late_bias = ny > nx
        w_kv = torch.cat([self.w_k.weight, self.w_v.weight])  # (2d, d)
        b_kv = None if late_bias else torch.cat([self.w_k.bias, self.w_v.bias])
        k, v = F.linear(y, w_kv, b_kv).view(B, ny, 2, h, dh).permute(2, 0, 3, 1, 4)  # (B, h, ny, dh) each
        mask = None if key_mask is None else key_mask[:, None, None, :]  # (B, 1, 1, ny)
        # masked keys get weight exactly 0; a query whose keys are all masked gets 0 (not NaN) from SDPA
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2).reshape(B, nx, d)
        if late_bias:
            real = 1.0 if key_mask is None else key_mask.any(dim=1).to(att.dtype)[:, None, None]  # (B, 1, 1)
            att = att + self.w_v.bias * real
        out = self.finish(x, att)  # (B, nx, d)
        if query_mask is not None:
            out = out.mul_(query_mask[..., None])  # layer norm keeps its input, not its output
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
        summary = self.compress(self.latents, x, key_mask=mask)  # (B, r, d); latents projected once, not per set
        return self.broadcast(x, summary, query_mask=mask)  # (B, n, d)


class PMA(nn.Module):
    """Pooling by multihead attention: k learned seed vectors attend over the set.

    The seeds are fixed, so the key projection is folded into them: q_h . (W_k,h x + b_k,h) =
    (W_k,h^T q_h) . x + const, and the constant cancels in the softmax; likewise the value projection is applied
    after pooling (sum_j p_j (W_v x_j + b_v) = W_v (sum_j p_j x_j) + b_v, the weights summing to 1). The same
    function as MAB(seeds, X) at (k * n_heads) * d instead of 2 d^2 multiply-adds per set element.

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
        mab = self.mab
        B, n, d = x.shape
        k = self.seeds.shape[1]
        h, dh = mab.n_heads, d // mab.n_heads
        q = mab.w_q(self.seeds[0]).view(k, h, 1, dh)  # (k, h, 1, dh)
        folded = (q @ mab.w_k.weight.view(h, dh, d)).reshape(1, 1, k * h, d)  # (1, 1, k h, d): W_k,h^T q_h
        attn_mask = None if mask is None else mask[:, None, None, :]  # (B, 1, 1, n)
        xs = x[:, None]  # (B, 1, n, d): one "head" of width d whose k * h query rows are the seed-heads
        pooled = F.scaled_dot_product_attention(
            folded.expand(B, 1, k * h, d), xs, xs, attn_mask=attn_mask, scale=1 / math.sqrt(dh)
        ).view(B * k, h, d)  # sum_j p_j x_j
        real = torch.ones(B, 1, device=x.device, dtype=x.dtype) if mask is None else mask.any(dim=1, keepdim=True)
        real = real.to(x.dtype).repeat_interleave(k, dim=0)  # (B k, 1): an all-padding set pools to 0, as in MAB

        def tail(pooled: torch.Tensor, real: torch.Tensor) -> torch.Tensor:  # (R, h, d), (R, 1) -> (R, d)
            att = torch.einsum("rhd,hed->rhe", pooled, mab.w_v.weight.view(h, dh, d)).reshape(-1, d)
            seeds = self.seeds[0][torch.arange(len(real), device=x.device) % k]  # (R, d), row b k + s is seed s
            return mab.finish(seeds, att + mab.w_v.bias * real)

        return rowwise(tail, pooled, real).view(B, k, d)


def rowwise(fn: Callable[..., torch.Tensor], *xs: torch.Tensor, min_rows: int = MIN_ROWS) -> torch.Tensor:
    """fn(*xs) for a row-wise fn, run on at least min_rows rows (zero rows appended, cut off after).

    CPU matrix products take another code path for a handful of rows, so a set's embedding would differ
    in the last bits between embedding it alone and in a batch; with at least min_rows rows every row is
    computed the same way (tests/locus_model/test_infer.py checks the bits).
    """
    n = xs[0].shape[0]
    if n >= min_rows:
        return fn(*xs)
    padded = [torch.cat([x, x.new_zeros((min_rows - n, *x.shape[1:]))]) for x in xs]
    return fn(*padded)[:n]


__all__ = ["MAB", "ISAB", "PMA", "rowwise", "MIN_ROWS"]

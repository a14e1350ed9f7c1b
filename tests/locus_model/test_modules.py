"""Shapes, masking and NaN-safety of the Set Transformer blocks."""

import pytest
import torch

from locus_model.modules import ISAB, MAB, PMA


@pytest.mark.parametrize(
    "block, out_len",
    [
        (MAB(d=16, n_heads=4), 5),  # queries x: (B, 5, d)
        (ISAB(d=16, n_heads=4, n_latents=3), 7),  # one output per set element
        (PMA(d=16, n_heads=4, n_seeds=2), 2),  # one output per seed
    ],
)
def test_shapes(block, out_len):
    torch.manual_seed(0)
    x, y = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    mask = torch.ones(2, 7, dtype=torch.bool)
    out = block(x, y, key_mask=mask) if isinstance(block, MAB) else block(y, mask)
    assert out.shape == (2, out_len, 16)


def masked_softmax(scores: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
    """The plain masked attention weights the blocks' SDPA must equal: masked keys weight 0, all-masked rows 0."""
    filled = scores.masked_fill(~key_mask, torch.finfo(scores.dtype).min)
    return filled.softmax(dim=-1) * key_mask


@pytest.mark.parametrize("block", [ISAB(d=8, n_heads=2, n_latents=4), PMA(d=8, n_heads=2)])
def test_padding_changes_nothing(block):
    torch.manual_seed(0)
    x = torch.randn(1, 6, 8)
    padded = torch.cat([x, torch.randn(1, 4, 8) * 100], dim=1)  # garbage in the padding
    mask = torch.tensor([[True] * 6 + [False] * 4])
    ref = block(x, torch.ones(1, 6, dtype=torch.bool))
    out = block(padded, mask)
    torch.testing.assert_close(out[:, : ref.shape[1]], ref, atol=1e-6, rtol=1e-5)


def test_isab_zeroes_padded_rows_and_survives_fully_masked_set():
    block = ISAB(d=8, n_heads=2, n_latents=4)
    x = torch.randn(2, 3, 8, requires_grad=True)
    mask = torch.tensor([[True, False, False], [False, False, False]])
    out = block(x, mask)
    assert torch.isfinite(out).all() and torch.equal(out[0, 1:], torch.zeros(2, 8))
    out.sum().backward()
    assert torch.isfinite(x.grad).all()


def test_mab_rejects_heads_not_dividing_width():
    with pytest.raises(ValueError, match="divisible"):
        MAB(d=10, n_heads=4)


@pytest.mark.parametrize("n_seeds", [1, 3])
def test_folded_pma_equals_attention_of_the_seeds(n_seeds):
    torch.manual_seed(0)
    block = PMA(d=16, n_heads=4, n_seeds=n_seeds)
    with torch.no_grad():
        for lin in (block.mab.w_q, block.mab.w_k, block.mab.w_v):
            lin.bias.normal_()  # the fold must handle the biases too
    x = torch.randn(3, 9, 16)
    mask = torch.ones(3, 9, dtype=torch.bool)
    mask[1, 5:] = False
    plain = block.mab(block.seeds.expand(3, -1, -1), x, key_mask=mask)  # MAB(S, X) computed the plain way
    torch.testing.assert_close(block(x, mask), plain, atol=1e-5, rtol=1e-5)


def test_mab_equals_the_plain_masked_softmax_attention():
    torch.manual_seed(0)
    mab = MAB(d=16, n_heads=4)
    x, y = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    mask = torch.tensor([[True] * 7, [True] * 3 + [False] * 4])
    q = mab.w_q(x).view(2, 5, 4, 4).transpose(1, 2)
    k = mab.w_k(y).view(2, 7, 4, 4).transpose(1, 2)
    v = mab.w_v(y).view(2, 7, 4, 4).transpose(1, 2)
    att = masked_softmax(q @ k.transpose(-2, -1) / 2.0, mask[:, None, None, :]) @ v
    hid = mab.ln_attn(x + mab.w_o(att.transpose(1, 2).reshape(2, 5, 16)))
    torch.testing.assert_close(mab(x, y, key_mask=mask), mab.ln_ff(hid + mab.ff(hid)), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("nx, ny", [(3, 9), (9, 3)])
def test_mab_with_its_key_and_value_biases_after_the_attention_equals_the_plain_one(nx, ny):
    """MAB moves the k/v biases after the attention when the keys are more than the queries; the same function
    as the plain projections, all-padding sets included."""
    torch.manual_seed(1)
    mab = MAB(d=16, n_heads=4)
    with torch.no_grad():
        for lin in (mab.w_k, mab.w_v):
            lin.bias.normal_()
    x, y = torch.randn(3, nx, 16), torch.randn(3, ny, 16)
    mask = torch.ones(3, ny, dtype=torch.bool)
    mask[1, 2:] = False
    mask[2] = False  # an all-padding set
    q = mab.w_q(x).view(3, nx, 4, 4).transpose(1, 2)
    k, v = (lin(y).view(3, ny, 4, 4).transpose(1, 2) for lin in (mab.w_k, mab.w_v))
    att = masked_softmax(q @ k.transpose(-2, -1) / 2, mask[:, None, None, :]) @ v
    plain = mab.finish(x, att.transpose(1, 2).reshape(3, nx, 16))
    torch.testing.assert_close(mab(x, y, key_mask=mask), plain, atol=1e-5, rtol=1e-5)

"""Behaviour of the LOCUS model (locus_model.model): shapes, invariances, the plain implementation, tiled
scoring, checkpoints."""

import numpy as np
import pytest
import torch

from locus_model.infer import embed_evaluation_sets, predict_proba
from locus_model.model import Locus, load_checkpoint, save_checkpoint
from locus_model.modules import ISAB
from tests.locus_model.tiny_locus import CFG, D, tiny_model, tiny_pool


@pytest.fixture(scope="module")
def model() -> Locus:
    return tiny_model()


@pytest.fixture(scope="module")
def pool():
    return tiny_pool()


@pytest.mark.parametrize("B, n, Q", [(1, 1, 1), (3, 17, 5), (2, 64, 40)])
def test_shapes(model, B, n, Q):
    phi, y = torch.randn(B, n, D), torch.rand(B, n)
    z = model.embed(phi, y, torch.ones(B, n, dtype=torch.bool))
    assert z.shape == (B, CFG.d)
    assert model.query_projection(torch.randn(Q, D)).shape == (Q, CFG.d)
    assert model.predict_logits(z, torch.randn(Q, D)).shape == (B, Q)
    assert model(phi, y, torch.ones(B, n, dtype=torch.bool), torch.randn(B, Q, D)).shape == (B, Q)


def test_tokenizer_is_the_reference_linear_layer(model):
    phi, y = torch.randn(2, 9, D), (torch.rand(2, 9) > 0.5).float()
    x = torch.cat([phi, y[..., None], phi * (2 * y[..., None] - 1)], dim=-1)
    parts = model.token_parts(phi)
    d = CFG.d
    separable = parts[..., :d] + (2 * y[..., None] - 1) * parts[..., d:] + y[..., None] * model.tokenizer.weight[:, D]
    torch.testing.assert_close(separable + model.tokenizer.bias, model.tokenizer(x), atol=1e-5, rtol=1e-5)


def test_all_pairs_predictor_equals_per_pair_predictor(model):
    z, phi = torch.randn(4, CFG.d), torch.randn(6, D)
    u = model.query_projection(phi)
    per_pair = model.pair_logits(z, u[None].expand(4, -1, -1))
    torch.testing.assert_close(model.predict_logits(z, phi), per_pair, atol=1e-5, rtol=1e-5)


def test_permutation_invariance(model, pool):
    enc, sets = pool
    idx, y = sets[3]
    phi = torch.from_numpy(enc[idx])[None]
    mask = torch.ones(1, len(idx), dtype=torch.bool)
    perm = torch.randperm(len(idx))
    z = model.embed(phi, torch.from_numpy(y)[None], mask)
    z_perm = model.embed(phi[:, perm], torch.from_numpy(y)[None, perm], mask)
    torch.testing.assert_close(z, z_perm, atol=1e-5, rtol=0)


def test_padding_invariance(model):
    # garbage in padded positions changes nothing
    phi = torch.randn(2, 10, D)
    y = torch.rand(2, 10)
    mask = torch.ones(2, 10, dtype=torch.bool)
    mask[1, 4:] = False
    z = model.embed(phi, y, mask)
    z1 = model.embed(phi[1:, :4], y[1:, :4], mask[1:, :4])
    torch.testing.assert_close(z[1:], z1, atol=1e-5, rtol=0)


def test_fully_masked_rows_are_finite(model):
    phi, y = torch.randn(2, 5, D), torch.rand(2, 5)
    mask = torch.tensor([[True] * 5, [False] * 5])
    m = Locus(CFG).train()
    z = m.embed(phi, y, mask)
    assert torch.isfinite(z).all()
    z.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in m.parameters() if p.grad is not None)


def _plain_embed(model: Locus, phi: torch.Tensor, y: torch.Tensor) -> torch.Tensor:  # (n, D), (n,) -> (d,)
    """The encoder written out the plain way (the implementation before the speed work): one set, no masks,
    the tokenizer on [phi, y, phi (2y - 1)], every attention with explicit q, k, v and a softmax."""

    def mab(m, x, ys):
        h, d = m.n_heads, x.shape[-1]
        q, k, v = (lin(t).view(-1, h, d // h).transpose(0, 1) for lin, t in ((m.w_q, x), (m.w_k, ys), (m.w_v, ys)))
        att = torch.softmax(q @ k.transpose(-2, -1) / (d // h) ** 0.5, dim=-1) @ v
        hid = m.ln_attn(x + m.w_o(att.transpose(0, 1).reshape(-1, d)))
        return m.ln_ff(hid + m.ff(hid))

    tokens = model.tokenizer(torch.cat([phi, y[:, None], phi * (2 * y[:, None] - 1)], dim=-1))
    for block in model.blocks:
        assert isinstance(block, ISAB)
        tokens = mab(block.broadcast, tokens, mab(block.compress, block.latents[0], tokens))
    return model.out(mab(model.pool.mab, model.pool.seeds[0], tokens)[0])


def test_embeddings_equal_the_plain_implementation(model, pool):
    enc, sets = pool
    z = embed_evaluation_sets(model, enc, sets, low_precision=False)
    with torch.no_grad():
        plain = torch.stack([_plain_embed(model, torch.from_numpy(enc[i]), torch.from_numpy(s)) for i, s in sets])
    np.testing.assert_allclose(z, plain.numpy(), atol=1e-5, rtol=0)


def test_tiled_scoring_equals_one_tile(model, pool):
    enc, sets = pool
    z = torch.from_numpy(embed_evaluation_sets(model, enc, sets))
    u = model.query_projection(torch.from_numpy(enc)).detach()
    with torch.inference_mode():
        whole = model.predict_logits_projected(z, u, block_models=len(z), block_queries=len(u))
        tiled = model.predict_logits_projected(z, u, block_models=3, block_queries=7)
    torch.testing.assert_close(tiled, whole, atol=1e-6, rtol=1e-6)
    plain = torch.stack([model.pair_logits(z[m : m + 1], u[None])[0] for m in range(len(z))]).detach()
    torch.testing.assert_close(whole, plain, atol=1e-5, rtol=1e-5)


def test_fewer_queries_than_models_are_scored_by_query_with_the_same_numbers(model, pool):
    """Serving scores one query against the whole pool: split by query, the numbers of the tiles split by model."""
    enc, sets = pool
    z = torch.from_numpy(embed_evaluation_sets(model, enc, sets))
    z = z.repeat(750, 1) + 0.1 * torch.randn(3000, z.shape[1], generator=torch.Generator().manual_seed(0))
    # 3,000 models: one tile at one query, two at three (score_blocks' 16 x 512 pairs = 2,730 models x 3 queries)
    with torch.inference_mode():
        for q in (1, 3):
            u = model.query_projection(torch.from_numpy(enc[:q]))
            by_query = model.predict_logits_projected(z, u)
            by_model = model.predict_logits_projected(z, u, block_models=16, block_queries=512)
            torch.testing.assert_close(by_query, by_model, atol=1e-6, rtol=1e-6)
    probs = predict_proba(model, z.numpy(), enc[:1])
    np.testing.assert_allclose(probs[:, 0], torch.sigmoid(by_model[:, 0]).numpy(), atol=1e-6)


def test_training_and_inference_score_all_pairs_with_the_same_code(model, pool):
    """Under autograd predict_logits_projected is one tile (the same numbers as the tiles of inference) and its
    gradient is the gradient of the plain per-pair predictor."""
    enc, sets = pool
    z = torch.from_numpy(embed_evaluation_sets(model, enc, sets, low_precision=False)).requires_grad_()
    u = model.query_projection(torch.from_numpy(enc[:40])).detach()
    logits = model.predict_logits_projected(z, u)
    with torch.inference_mode():
        tiled = model.predict_logits_projected(z.detach(), u, block_models=3, block_queries=7)
    torch.testing.assert_close(logits.detach(), tiled, atol=1e-6, rtol=1e-6)
    logits.sum().backward()
    z_plain = z.detach().clone().requires_grad_()
    model.pair_logits(z_plain, u[None].expand(len(z), -1, -1)).sum().backward()
    torch.testing.assert_close(z.grad, z_plain.grad, atol=1e-5, rtol=1e-5)
    model.zero_grad()


def test_checkpoint_round_trip(model, pool, tmp_path):
    enc, sets = pool
    save_checkpoint(tmp_path / "m.pt", model, epoch=3, note="x")
    loaded, extra = load_checkpoint(tmp_path / "m.pt")
    assert extra == {"epoch": 3, "note": "x"} and loaded.config == model.config
    z, z2 = embed_evaluation_sets(model, enc, sets), embed_evaluation_sets(loaded, enc, sets)
    assert z.tobytes() == z2.tobytes()
    assert predict_proba(model, z, enc).tobytes() == predict_proba(loaded, z2, enc).tobytes()

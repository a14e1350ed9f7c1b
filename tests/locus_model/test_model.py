"""Behaviour of the LOCUS model: shapes, invariances, determinism, any n, checkpoints."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from locus_model.model import (
    Locus,
    LocusConfig,
    embed_evaluation_set,
    embed_evaluation_sets,
    load_checkpoint,
    predict_proba,
    save_checkpoint,
)

D = 32
CFG = LocusConfig(query_dim=D, d=32, n_blocks=2, n_latents=8, n_heads=4, predictor_hidden=16)


@pytest.fixture(scope="module")
def model() -> Locus:
    torch.manual_seed(0)
    return Locus(CFG).eval()


@pytest.fixture(scope="module")
def pool():
    rng = np.random.default_rng(0)
    enc = rng.normal(size=(300, D)).astype(np.float32)
    enc /= np.linalg.norm(enc, axis=1, keepdims=True)
    sets = []
    for n in (1, 7, 50, 120):
        idx = rng.choice(300, n, replace=False)
        sets.append((idx, (rng.random(n) > 0.5).astype(np.float32)))
    return enc, sets


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
    # the numpy API puts sets in a canonical order: shuffling gives the same bytes
    p = np.random.default_rng(1).permutation(len(idx))
    a = embed_evaluation_sets(model, enc, [(idx, y)])
    b = embed_evaluation_sets(model, enc, [(idx[p], y[p])])
    assert a.tobytes() == b.tobytes()


def test_padding_invariance(model, pool):
    enc, sets = pool
    together = embed_evaluation_sets(model, enc, sets)  # padded to the longest set
    alone = np.stack([embed_evaluation_sets(model, enc, [s])[0] for s in sets])  # no padding
    np.testing.assert_allclose(together, alone, atol=1e-5, rtol=0)
    # garbage in padded positions changes nothing either
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


@pytest.mark.parametrize("n", [1, 10_000])
def test_any_set_size(model, n):
    rng = np.random.default_rng(n)
    phi = rng.normal(size=(n, D)).astype(np.float32)
    y = (rng.random(n) > 0.5).astype(np.float32)
    z = embed_evaluation_set(model, phi, y)
    assert z.shape == (CFG.d,) and np.isfinite(z).all()


def test_onboarding_equals_batch_embedding(model, pool):
    enc, sets = pool
    idx, y = sets[2]
    one = embed_evaluation_set(model, enc[idx], y)
    np.testing.assert_allclose(one, embed_evaluation_sets(model, enc, [(idx, y)])[0], atol=1e-6)


def test_determinism_in_process_and_across_processes(model, pool, tmp_path):
    enc, sets = pool
    save_checkpoint(tmp_path / "ckpt.pt", model)
    np.save(tmp_path / "enc.npy", enc)
    idx, y = sets[3]
    np.save(tmp_path / "idx.npy", idx)
    np.save(tmp_path / "y.npy", y)
    loaded, _ = load_checkpoint(tmp_path / "ckpt.pt")
    first = embed_evaluation_sets(loaded, enc, [(idx, y)])
    assert first.tobytes() == embed_evaluation_sets(loaded, enc, [(idx, y)]).tobytes()
    script = textwrap.dedent(
        f"""
        import numpy as np, torch
        from locus_model.model import load_checkpoint, embed_evaluation_sets
        torch.set_num_threads({torch.get_num_threads()})
        m, _ = load_checkpoint(r"{tmp_path / 'ckpt.pt'}")
        d = r"{tmp_path}"
        z = embed_evaluation_sets(m, np.load(d + "/enc.npy"), [(np.load(d + "/idx.npy"), np.load(d + "/y.npy"))])
        np.save(d + "/z_sub.npy", z)
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    assert np.load(tmp_path / "z_sub.npy").tobytes() == first.tobytes()


def test_checkpoint_round_trip(model, pool, tmp_path):
    enc, sets = pool
    save_checkpoint(tmp_path / "m.pt", model, epoch=3, note="x")
    loaded, extra = load_checkpoint(tmp_path / "m.pt")
    assert extra == {"epoch": 3, "note": "x"} and loaded.config == model.config
    z, z2 = embed_evaluation_sets(model, enc, sets), embed_evaluation_sets(loaded, enc, sets)
    assert z.tobytes() == z2.tobytes()
    assert predict_proba(model, z, enc).tobytes() == predict_proba(loaded, z2, enc).tobytes()


def test_predict_proba_projects_each_query_once(model, pool):
    enc, sets = pool
    z = embed_evaluation_sets(model, enc, sets)
    rows = []
    handle = model.query_proj.register_forward_hook(lambda mod, inp, out: rows.append(inp[0].shape[0]))
    try:
        probs = predict_proba(model, z, enc, batch_size=128)
    finally:
        handle.remove()
    assert sum(rows) == len(enc)  # not len(enc) * number of models
    assert probs.shape == (len(sets), len(enc)) and probs.dtype == np.float32
    assert ((probs >= 0) & (probs <= 1)).all()
    logits = model.predict_logits(torch.from_numpy(z), torch.from_numpy(enc))
    np.testing.assert_allclose(probs, torch.sigmoid(logits).detach().numpy(), atol=1e-6)


def test_errors_say_how_to_fix(model, pool):
    enc, _ = pool
    with pytest.raises(ValueError, match="empty"):
        embed_evaluation_sets(model, enc, [(np.array([], dtype=int), np.array([]))])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        embed_evaluation_sets(model, enc, [(np.array([0]), np.array([np.nan]))])
    with pytest.raises(ValueError, match="encodings must be"):
        embed_evaluation_sets(model, enc[:, :5], [(np.array([0]), np.array([1.0]))])


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
        tokens = mab(block.broadcast, tokens, mab(block.compress, block.latents[0], tokens))
    return model.out(mab(model.pool.mab, model.pool.seeds[0], tokens)[0])


def test_embeddings_equal_the_plain_implementation(model, pool):
    enc, sets = pool
    z = embed_evaluation_sets(model, enc, sets)
    with torch.no_grad():
        plain = torch.stack([_plain_embed(model, torch.from_numpy(enc[i]), torch.from_numpy(s)) for i, s in sets])
    np.testing.assert_allclose(z, plain.numpy(), atol=1e-5, rtol=0)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_set_gets_the_same_bits_alone_and_in_any_batch(model, threads):
    """The pipeline checks that re-embedding reproduces the pool bit for bit, whatever else is embedded."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        rng = np.random.default_rng(threads)
        enc = rng.normal(size=(2000, D)).astype(np.float32)
        sets = [(rng.choice(2000, n, replace=False), (rng.random(n) > 0.5).astype(np.float32))
                for n in (1, 2, 5, 63, 64, 65, 100, 300, 301, 1000, 300)]
        together = embed_evaluation_sets(model, enc, sets)
        small_batches = embed_evaluation_sets(model, enc, sets, batch_size=3, max_tokens=700)
        for m, (idx, y) in enumerate(sets):
            alone = embed_evaluation_sets(model, enc, [(idx, y)])[0]
            assert alone.tobytes() == together[m].tobytes() == small_batches[m].tobytes(), m
            order = np.argsort(idx)  # embed_evaluation_set knows no query ids: its canonical order is phi's
            assert embed_evaluation_set(model, enc[idx[order]], y[order]).tobytes() == alone.tobytes()
    finally:
        torch.set_num_threads(before)


def test_inference_runs_in_inference_mode(model, pool, monkeypatch):
    enc, sets = pool
    seen = []
    real = Locus.embed_from_parts

    def spy(self, parts, y, mask):
        seen.append(torch.is_inference_mode_enabled())
        return real(self, parts, y, mask)

    monkeypatch.setattr(Locus, "embed_from_parts", spy)
    z = embed_evaluation_sets(model, enc, sets)
    real_split = Locus._predictor_split
    monkeypatch.setattr(Locus, "_predictor_split", lambda self, z: (seen.append(torch.is_inference_mode_enabled()),
                                                                     real_split(self, z))[1])
    predict_proba(model, z, enc)
    assert seen and all(seen)


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


def test_low_precision_stays_close_to_fp32(model, pool):
    """bf16 on CPU: embeddings within 0.1 (their entries are O(1)), probabilities within 0.02."""
    enc, sets = pool
    z, z_lp = embed_evaluation_sets(model, enc, sets), embed_evaluation_sets(model, enc, sets, low_precision=True)
    assert z_lp.dtype == np.float32 and np.abs(z_lp - z).max() < 0.1 and np.abs(z).max() > 0.3
    p, p_lp = predict_proba(model, z, enc), predict_proba(model, z, enc, low_precision=True)
    assert p_lp.dtype == np.float32 and np.abs(p_lp - p).max() < 0.02
    assert embed_evaluation_sets(model, enc, sets).tobytes() == z.tobytes()  # fp32 is the default

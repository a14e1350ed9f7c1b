"""Batched inference (locus_model.infer): canonical order, any n, the same bits alone and in any batch and
across processes, one projection per query, inference mode, low precision, errors."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from locus_model import infer
from locus_model.infer import (
    cpu_has_bf16,
    embed_evaluation_set,
    embed_evaluation_sets,
    inference_precision,
    predict_proba,
)
from locus_model.model import Locus, load_checkpoint, save_checkpoint
from tests.locus_model.tiny_locus import CFG, D, tiny_model, tiny_pool


@pytest.fixture(scope="module")
def model() -> Locus:
    return tiny_model()


@pytest.fixture(scope="module")
def pool():
    return tiny_pool()


def test_any_order_of_a_set_gives_the_same_bytes(model, pool):
    # the numpy API puts sets in a canonical order: shuffling gives the same bytes
    enc, sets = pool
    idx, y = sets[3]
    p = np.random.default_rng(1).permutation(len(idx))
    a = embed_evaluation_sets(model, enc, [(idx, y)])
    b = embed_evaluation_sets(model, enc, [(idx[p], y[p])])
    assert a.tobytes() == b.tobytes()


def test_padding_to_the_longest_set_changes_nothing(model, pool):
    enc, sets = pool
    together = embed_evaluation_sets(model, enc, sets)  # padded to the longest set
    alone = np.stack([embed_evaluation_sets(model, enc, [s])[0] for s in sets])  # no padding
    np.testing.assert_allclose(together, alone, atol=1e-5, rtol=0)


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


@pytest.mark.parametrize("threads, low_precision", [(1, False), (2, False), (1, True)])
def test_a_set_gets_the_same_bits_alone_and_in_any_batch(model, threads, low_precision):
    """The pipeline checks that re-embedding reproduces the pool bit for bit, whatever else is embedded."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        rng = np.random.default_rng(threads)
        enc = rng.normal(size=(2000, D)).astype(np.float32)
        sets = [
            (rng.choice(2000, n, replace=False), (rng.random(n) > 0.5).astype(np.float32))
            for n in (1, 2, 5, 63, 64, 65, 100, 300, 301, 1000, 300)
        ]
        lp = {"low_precision": low_precision}
        together = embed_evaluation_sets(model, enc, sets, **lp)
        small_batches = embed_evaluation_sets(model, enc, sets, batch_size=3, max_tokens=700, **lp)
        for m, (idx, y) in enumerate(sets):
            alone = embed_evaluation_sets(model, enc, [(idx, y)], **lp)[0]
            assert alone.tobytes() == together[m].tobytes() == small_batches[m].tobytes(), m
            order = np.argsort(idx)  # embed_evaluation_set knows no query ids: its canonical order is phi's
            assert embed_evaluation_set(model, enc[idx[order]], y[order], **lp).tobytes() == alone.tobytes()
    finally:
        torch.set_num_threads(before)


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
        from locus_model.infer import embed_evaluation_sets
        from locus_model.model import load_checkpoint
        torch.set_num_threads({torch.get_num_threads()})
        m, _ = load_checkpoint(r"{tmp_path / "ckpt.pt"}")
        d = r"{tmp_path}"
        z = embed_evaluation_sets(m, np.load(d + "/enc.npy"), [(np.load(d + "/idx.npy"), np.load(d + "/y.npy"))])
        np.save(d + "/z_sub.npy", z)
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    assert np.load(tmp_path / "z_sub.npy").tobytes() == first.tobytes()


def test_predict_proba_projects_each_query_once(model, pool):
    enc, sets = pool
    z = embed_evaluation_sets(model, enc, sets)
    rows = []
    handle = model.query_proj.register_forward_hook(lambda mod, inp, out: rows.append(inp[0].shape[0]))
    try:
        probs = predict_proba(model, z, enc, batch_size=128, low_precision=False)
    finally:
        handle.remove()
    assert sum(rows) == len(enc)  # not len(enc) * number of models
    assert probs.shape == (len(sets), len(enc)) and probs.dtype == np.float32
    assert ((probs >= 0) & (probs <= 1)).all()
    logits = model.predict_logits(torch.from_numpy(z), torch.from_numpy(enc))
    np.testing.assert_allclose(probs, torch.sigmoid(logits).detach().numpy(), atol=1e-6)


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
    monkeypatch.setattr(
        Locus,
        "_predictor_split",
        lambda self, z: (seen.append(torch.is_inference_mode_enabled()), real_split(self, z))[1],
    )
    predict_proba(model, z, enc)
    assert seen and all(seen)


def test_low_precision_stays_close_to_fp32(model, pool):
    """bf16 on CPU: embeddings within 0.1 (their entries are O(1)), probabilities within 0.02."""
    enc, sets = pool
    z, z_lp = embed_evaluation_sets(model, enc, sets), embed_evaluation_sets(model, enc, sets, low_precision=True)
    assert z_lp.dtype == np.float32 and np.abs(z_lp - z).max() < 0.1 and np.abs(z).max() > 0.3
    p, p_lp = predict_proba(model, z, enc, low_precision=False), predict_proba(model, z, enc, low_precision=True)
    assert p_lp.dtype == np.float32 and np.abs(p_lp - p).max() < 0.02


def test_auto_precision_follows_the_cpu_flags_and_the_default_is_fp32(model, pool, tmp_path, monkeypatch):
    """bf16 on a CPU with bf16 units, fp32 elsewhere; low_precision=True / False force either."""
    flags = {"avx512_bf16": True, "amx_bf16": True, "avx2 avx512f avx512_vnni": False}
    for cpu_flags, has in flags.items():
        info = tmp_path / cpu_flags.replace(" ", "_")
        info.write_text(f"processor\t: 0\nflags\t\t: fpu sse2 {cpu_flags} fma\n")
        assert cpu_has_bf16(str(info)) is has
    assert cpu_has_bf16(str(tmp_path / "absent")) is False
    enc, sets = pool
    fp32 = embed_evaluation_sets(model, enc, sets, low_precision=False)
    bf16 = embed_evaluation_sets(model, enc, sets, low_precision=True)
    for has, expected in ((True, bf16), (False, fp32)):
        monkeypatch.setattr(infer, "cpu_has_bf16", lambda has=has: has)
        assert inference_precision("cpu", low_precision="auto") == ("bf16" if has else "fp32")
        assert inference_precision("cpu") == "fp32"  # the default: bf16 is opt-in
        assert embed_evaluation_sets(model, enc, sets, low_precision="auto").tobytes() == expected.tobytes()
        assert embed_evaluation_sets(model, enc, sets).tobytes() == fp32.tobytes()
        assert (
            predict_proba(model, fp32, enc, low_precision="auto").tobytes()
            == predict_proba(model, fp32, enc, low_precision=has).tobytes()
        )
    assert inference_precision("cpu", low_precision=True) == "bf16"
    assert inference_precision("cpu", low_precision=False) == "fp32"


def test_errors_say_how_to_fix(model, pool):
    enc, _ = pool
    with pytest.raises(ValueError, match="empty"):
        embed_evaluation_sets(model, enc, [(np.array([], dtype=int), np.array([]))])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        embed_evaluation_sets(model, enc, [(np.array([0]), np.array([np.nan]))])
    with pytest.raises(ValueError, match="encodings must be"):
        embed_evaluation_sets(model, enc[:, :5], [(np.array([0]), np.array([1.0]))])


def test_torch_threads_sets_the_count_inside_and_restores_it_even_on_error() -> None:
    before = torch.get_num_threads()
    inside = 2 if before == 1 else 1
    with infer.torch_threads(inside):
        assert torch.get_num_threads() == inside
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError, match="boom"), infer.torch_threads(inside):
        raise RuntimeError("boom")
    assert torch.get_num_threads() == before

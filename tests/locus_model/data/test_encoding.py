"""Query encodings: offline encoders by name, the content-addressed cache encodes only new text."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from locus_model.data.encoding import encode_queries, encode_queries_with_report, resolve_encoder

TEXTS = ["Solve for x: 3x + 5 = 20.", "Which organ produces insulin?", "Solve for x: 3x + 5 = 20."]


def test_cache_encodes_only_new_text(tmp_path: Path) -> None:
    first, report = encode_queries_with_report(TEXTS, encoder="hashing-256", cache_dir=tmp_path, progress=False)
    assert first.shape == (3, 256) and report.unique == 2 and report.encoded == 2
    np.testing.assert_array_equal(first[0], first[2])
    again, report = encode_queries_with_report(TEXTS + ["A new question?"], encoder="hashing-256", cache_dir=tmp_path, progress=False)
    assert report.encoded == 1
    np.testing.assert_array_equal(again[:3], first)
    assert len(list(tmp_path.glob("shard-*.npz"))) == 2


def test_unknown_encoder_lists_the_choices() -> None:
    with pytest.raises(ValueError, match="all-mpnet-base-v2"):
        resolve_encoder("bert-large")
    assert resolve_encoder("mpnet").dim == 768 and resolve_encoder("minilm").dim == 384


def test_minilm_loads_offline_and_separates_topics(tmp_path: Path) -> None:
    texts = ["What is 12 times 7?", "Compute 15 divided by 3.", "Which bone is in the thigh?", "Name the largest artery."]
    x = encode_queries(texts, encoder="all-MiniLM-L6-v2", cache_dir=tmp_path, progress=False)
    assert x.shape == (4, 384)
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    sims = x @ x.T
    assert sims[0, 1] > sims[0, 2] and sims[2, 3] > sims[1, 3]

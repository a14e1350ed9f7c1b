"""Query encodings kept on disk for reuse, keyed by sha256 of the text, one folder per (encoder, runtime)
(EncodingCache: append-only shards; open_cache): an encoding of one runtime is never returned for another. The
in-memory cache of `locus serve` is locus_model.data.encoding.EncodingLRU.
"""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path

import numpy as np

from locus_model.data.encoders import resolve_encoder, resolve_runtime, user_cache_dir


def text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class EncodingCache:
    """Encodings of one (encoder, runtime) keyed by sha256(text), stored as append-only ``shard-*.npz`` files in
    ``folder``; each shard names its encoder and runtime, and a shard of another is refused."""

    def __init__(self, folder: Path, dim: int, *, encoder: str, runtime: str) -> None:
        self.folder, self.dim, self.encoder, self.runtime = Path(folder), dim, encoder, runtime
        self.folder.mkdir(parents=True, exist_ok=True)
        self._index: dict[str, np.ndarray] = {}
        for shard in sorted(self.folder.glob("shard-*.npz")):
            with np.load(shard) as data:
                found = (str(data["encoder"]), str(data["runtime"])) if "runtime" in data.files else None
                if found != (encoder, runtime):
                    raise ValueError(
                        f"encoding cache {self.folder} holds {shard.name} of {found}, not of "
                        f"({encoder}, {runtime}). How to fix: delete {shard}"
                    )
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
        np.savez(
            tmp,
            keys=np.array(keys),
            vectors=vectors.astype(np.float32),
            encoder=np.array(self.encoder),
            runtime=np.array(self.runtime),
        )
        tmp.rename(self.folder / f"shard-{uuid.uuid4().hex}.npz")  # atomic: readers see all or nothing
        self._index.update(zip(keys, vectors))


def open_cache(encoder: str, runtime: str | None = None, cache_dir: Path | None = None) -> EncodingCache:
    """The on-disk cache of (encoder, runtime): ``<cache_dir or user cache>/<runtime>/``."""
    spec = resolve_encoder(encoder)
    runtime = resolve_runtime(spec.name, runtime)
    root = Path(cache_dir) if cache_dir else user_cache_dir("encodings", spec.name)
    return EncodingCache(root / runtime, spec.dim, encoder=spec.name, runtime=runtime)

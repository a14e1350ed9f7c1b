"""LOCUS checkpoints under the home: ``checkpoints/locus-<id>.pt``, named by the sha256 prefix of their bytes, kept
(an older pool still loads its own), staged and published by the home, loaded once per process."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    import pandas as pd

from locus_pipeline.storage.files import StorageError, checkpoint_id, is_remote, put_file


@dataclass(frozen=True)
class CheckpointRecord:
    """The current LOCUS checkpoint as the pipeline recorded it (warehouse/locus_checkpoint.parquet)."""

    checkpoint_id: str
    path: str  # relative to LOCUS_HOME
    encoder: str


@dataclass(frozen=True)
class PoolCheckpoint:
    """A loaded checkpoint: the trained router, its id and its sentence encoder."""

    router: Any  # locus_model.router.Router
    checkpoint_id: str
    encoder: str
    runtime: str = "torch"  # the encoder runtime its training encodings came from (older checkpoints: torch)

    @property
    def model(self) -> Any:
        """The router's set encoder + correctness predictor (locus_model.model.Locus)."""
        return self.router.model


@dataclass(frozen=True)
class SavedCheckpoint:
    """A checkpoint the home has stored: its id, its stored path (relative to the home) and a local copy of the
    file (the same file on a local home) to log as an MLflow artifact."""

    checkpoint_id: str
    stored: str
    local: Path


@lru_cache(maxsize=4)
def _load_checkpoint(path: str, mtime_ns: int):
    # why: torch stays out of the code location's load (test_the_code_location_loads_without_torch)
    from locus_model.router import Router

    return Router.load(path)


class Checkpoints:
    """The checkpoint half of LocusHome (a mixin: it uses the home's ``path``, ``dir`` and ``read_table``)."""

    if TYPE_CHECKING:  # the home's, which LocusHome gives its mixins

        @property
        def path(self) -> Any: ...
        def dir(self, *parts: str) -> Path: ...
        def relative(self, path: Any) -> str: ...
        def read_table(
            self, name: str, *, partition: str | None = None, columns: list[str] | None = None
        ) -> pd.DataFrame: ...

    def checkpoint_file(self, checkpoint_id: str) -> Any:
        folder = self.path / "checkpoints"
        if not is_remote(folder):
            folder.mkdir(parents=True, exist_ok=True)
        return folder / f"locus-{checkpoint_id}.pt"

    def save_checkpoint(self, write: Callable[[Path], object]) -> SavedCheckpoint:
        """Store a new checkpoint: ``write(path)`` writes it to a local staging file, which is named by its bytes
        and published whole (a rename on a local home, one upload to an object store)."""
        staging = self.dir("checkpoints") / f".{uuid.uuid4().hex}.pt"
        try:
            write(staging)
            ckpt_id = checkpoint_id(staging)
            target = self.checkpoint_file(ckpt_id)
            put_file(staging, target)
            local = target if not is_remote(target) else self._cached_checkpoint(ckpt_id, staging)
        finally:
            staging.unlink(missing_ok=True)
        return SavedCheckpoint(ckpt_id, self.relative(target), local)

    def _cached_checkpoint(self, ckpt_id: str, source: Path | None = None) -> Path:
        """The local copy of a remote home's checkpoint (ids name the bytes, so a cached copy never goes stale)."""
        local = self.dir("checkpoints") / f"locus-{ckpt_id}.pt"
        if not local.exists():
            tmp = local.with_name(f".{local.name}.{uuid.uuid4().hex}.tmp")
            if source is not None:
                tmp.write_bytes(source.read_bytes())
            else:
                remote = self.checkpoint_file(ckpt_id)
                remote.fs.get_file(remote.path, str(tmp))
            tmp.replace(local)
        return local

    def current_checkpoint(self) -> CheckpointRecord:
        row = self.read_table("locus_checkpoint").iloc[0]
        return CheckpointRecord(str(row["checkpoint_id"]), str(row["path"]), str(row["encoder"]))

    def load_checkpoint(self, checkpoint_id: str) -> PoolCheckpoint:
        """The checkpoint with this id (cached per process); checkpoints are kept, so an older pool still loads."""
        path = self.checkpoint_file(checkpoint_id)
        if not path.exists():
            raise StorageError(
                f"checkpoint {checkpoint_id} is not at {path}. How to fix: materialize "
                "locus_checkpoint, then model_embeddings (the pool is re-embedded with the new one)"
            )
        local = self._cached_checkpoint(checkpoint_id) if is_remote(path) else path
        router, extra = _load_checkpoint(str(local), local.stat().st_mtime_ns)
        encoder = str(extra.get("encoder", ""))
        if not encoder:
            raise StorageError(
                f"checkpoint {path} does not name its sentence encoder. How to fix: materialize locus_checkpoint"
            )
        return PoolCheckpoint(router, checkpoint_id, encoder, str(extra.get("encoder_runtime", "torch")))

"""LOCUS_HOME: the one owner of every path, lock and read-modify-write of the pipeline's data.

Layout (every stored path is relative to the home, so a home can be copied or moved):

| where | what |
|---|---|
| ``warehouse/<asset>.parquet`` | asset outputs (``<asset>/<partition>.parquet`` for partitioned ones); the pool is ``warehouse/model_embeddings.parquet`` |
| ``checkpoints/locus-<id>.pt`` | LOCUS checkpoints, named by the sha256 prefix of their bytes |
| ``onboarded/<model_key>.parquet`` | every evaluation of an onboarded model so far (its store) |
| ``incoming/`` | the drop folder, with ``accepted/`` and ``rejected/`` |
| ``encodings/<encoder>/`` | the query-encoding cache |
| ``reports/`` | analysis reports, ``atlas.html`` |
| ``mlflow/``, ``dagster/`` | MLflow database and artifacts; the Dagster instance (DAGSTER_HOME) |
| ``.locks/`` | the lock files (``pool``, ``model-<key>``, ``intake``) |

The library (``locus_model``) never sees this layout: it gets frames, arrays and models from here.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterator

import dagster as dg
import pandas as pd
from pydantic import Field

from locus_pipeline.home import REPO_ROOT, default_home  # noqa: F401  (REPO_ROOT: re-exported for the assets)

POOL = "model_embeddings"


class StorageError(RuntimeError):
    """A stored table or file is missing or unreadable; the message says which and how to fix it."""


@dataclass(frozen=True)
class CheckpointRecord:
    """The current LOCUS checkpoint as the pipeline recorded it (warehouse/locus_checkpoint.parquet)."""

    checkpoint_id: str
    path: str  # relative to LOCUS_HOME
    encoder: str


@dataclass(frozen=True)
class PoolCheckpoint:
    """A checkpoint loaded for embedding: the model, its id and its sentence encoder."""

    model: object  # locus_model.model.Locus
    checkpoint_id: str
    encoder: str
    runtime: str = "torch"  # the encoder runtime its training encodings came from (older checkpoints: torch)


@lru_cache(maxsize=4)
def _load_checkpoint(path: str, mtime_ns: int):
    from locus_model.model import load_checkpoint

    return load_checkpoint(path)


def write_parquet_atomic(frame: pd.DataFrame, path: Path) -> None:
    """Temporary file + rename: readers see the old or the new file, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        frame.to_parquet(tmp, index=False)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def read_parquet(path: Path, *, what: str, fix: str, columns: list[str] | None = None) -> pd.DataFrame:
    """A Parquet file, or a StorageError naming it and the fix (missing, or unreadable)."""
    if not path.exists():
        raise StorageError(f"{what} does not exist at {path}. How to fix: {fix}")
    try:
        return pd.read_parquet(path, columns=columns)
    except Exception as err:  # pyarrow raises several types for a damaged file; name the file, keep the cause
        raise StorageError(f"{what} at {path} cannot be read ({type(err).__name__}: {err}). How to fix: {fix}") from err


class LocusHome(dg.ConfigurableResource):
    """The one root the project writes under (``$LOCUS_HOME``, default ``data/`` in the repository): every
    path, lock and read-modify-write of the pipeline's data goes through this resource."""

    root: str = Field(default="", description="Folder for all outputs; empty = $LOCUS_HOME or <repo>/data.")

    # ------------------------------------------------------------------ paths

    @property
    def path(self) -> Path:
        return Path(self.root).expanduser().resolve() if self.root else default_home()

    def dir(self, *parts: str) -> Path:
        """A folder under the home, created on first use."""
        folder = self.path.joinpath(*parts)
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def relative(self, path: Path | str) -> str:
        """How a path under the home is stored in tables: relative, with '/' separators."""
        return Path(path).resolve().relative_to(self.path).as_posix()

    def resolve(self, stored: str) -> Path:
        """A stored path back to a file: relative paths are under the home (absolute ones are kept as they are)."""
        path = Path(stored)
        return path if path.is_absolute() else self.path / path

    def table_path(self, name: str, partition: str | None = None) -> Path:
        base = self.path / "warehouse" / name
        return base / f"{partition}.parquet" if partition is not None else base.with_suffix(".parquet")

    def read_table(self, name: str, *, partition: str | None = None, columns: list[str] | None = None) -> pd.DataFrame:
        return read_parquet(self.table_path(name, partition), what=f"the {name} table", columns=columns,
                            fix=f"materialize {name} (make demo runs the whole graph)")

    def write_table(self, name: str, frame: pd.DataFrame, *, partition: str | None = None) -> Path:
        path = self.table_path(name, partition)
        with self.lock(f"table-{name}" if partition is None else f"table-{name}-{partition}"):
            write_parquet_atomic(frame, path)
        return path

    # ------------------------------------------------------------------ locks

    @contextmanager
    def lock(self, name: str, *, blocking: bool = True) -> Iterator[bool]:
        """An exclusive lock across processes (``.locks/<name>.lock``); yields False when ``blocking`` is off
        and another process holds it."""
        path = self.dir(".locks") / f"{name}.lock"
        with open(path, "w") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    # ------------------------------------------------------------------ checkpoints

    def checkpoint_file(self, checkpoint_id: str) -> Path:
        return self.dir("checkpoints") / f"locus-{checkpoint_id}.pt"

    def current_checkpoint(self) -> CheckpointRecord:
        row = self.read_table("locus_checkpoint").iloc[0]
        return CheckpointRecord(str(row["checkpoint_id"]), str(row["path"]), str(row["encoder"]))

    def load_checkpoint(self, checkpoint_id: str) -> PoolCheckpoint:
        """The checkpoint with this id (cached per process); checkpoints are kept, so an older pool still loads."""
        path = self.checkpoint_file(checkpoint_id)
        if not path.exists():
            raise StorageError(f"checkpoint {checkpoint_id} is not at {path}. How to fix: materialize "
                               "locus_checkpoint, then model_embeddings (the pool is re-embedded with the new one)")
        model, extra = _load_checkpoint(str(path), path.stat().st_mtime_ns)
        encoder = str(extra.get("encoder", ""))
        if not encoder:
            raise StorageError(f"checkpoint {path} does not name its sentence encoder. How to fix: materialize locus_checkpoint")
        return PoolCheckpoint(model, checkpoint_id, encoder, str(extra.get("encoder_runtime", "torch")))

    # ------------------------------------------------------------------ the pool

    @property
    def pool_path(self) -> Path:
        return self.table_path(POOL)

    def has_pool(self) -> bool:
        return self.pool_path.exists()

    def read_pool(self) -> pd.DataFrame:
        return self.read_table(POOL)

    def pool_checkpoint(self, pool: pd.DataFrame | None = None) -> PoolCheckpoint:
        """The checkpoint the pool was embedded with (every row carries its id; one id per pool)."""
        from locus_model.pool import checkpoints_of

        pool = self.read_table(POOL, columns=["checkpoint_id"]) if pool is None else pool
        ids = checkpoints_of(pool)
        if len(ids) != 1:
            raise StorageError(f"the pool {self.pool_path} holds checkpoints {ids}, not one. How to fix: materialize "
                               "model_embeddings (it re-embeds every model with the current checkpoint)")
        return self.load_checkpoint(ids[0])

    def update_pool(self, change: Callable[[pd.DataFrame | None], pd.DataFrame]) -> pd.DataFrame:
        """The pool's one read-modify-write: under the pool lock, ``change(current pool or None)`` returns the
        new pool, which is checked (one checkpoint, unique models and keys) and written atomically. Whatever
        ``change`` reads (stores, checkpoint) it reads under the same lock, so no update is lost."""
        from locus_model.pool import check_pool

        with self.lock("pool"):
            current = self.read_pool() if self.has_pool() else None
            new = change(current)
            check_pool(new)
            write_parquet_atomic(new, self.pool_path)
        return new

    # ------------------------------------------------------------------ onboarded models: their evaluation stores

    def store_path(self, model_key: str) -> Path:
        return self.path / "onboarded" / f"{model_key}.parquet"

    def read_store(self, model_key: str) -> pd.DataFrame:
        return read_parquet(self.store_path(model_key), what=f"the evaluations of onboarded model {model_key!r}",
                            fix="drop an evaluation file for the model into incoming/")

    def record_evaluations(self, model_key: str, fresh: pd.DataFrame) -> pd.DataFrame:
        """Merge a model's new evaluations into its store under the model's lock (newest ``received_at`` wins
        per query_id); returns all of its evaluations so far."""
        from locus_model.onboarding import merge_into_store

        path = self.store_path(model_key)
        with self.lock(f"model-{model_key}"):
            merged = merge_into_store(self.read_store(model_key) if path.exists() else None, fresh)
            write_parquet_atomic(merged, path)
        return merged

    def onboarded_keys(self) -> list[str]:
        folder = self.path / "onboarded"
        return sorted(p.name[: -len(".parquet")] for p in folder.glob("*.parquet")) if folder.exists() else []

    def onboarded_evaluations(self) -> pd.DataFrame:
        """All evaluations of all onboarded models (an empty frame when none was onboarded)."""
        from locus_model.data.contract import EVALUATION_COLUMNS

        frames = [self.read_store(k) for k in self.onboarded_keys()]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(EVALUATION_COLUMNS))

    def training_models(self) -> set[str]:
        """Models of the training source (the evaluation table); an error, never an empty set, when it is missing."""
        return set(self.read_table("evaluation_table", columns=["model"])["model"].astype(str).unique())

    def model_identities(self) -> dict[str, str]:
        """model_key -> model name for every model the home knows (training source, pool, onboarded stores)."""
        known: dict[str, str] = {}
        from locus_model.data.contract import safe_model_key

        if self.table_path("evaluation_table").exists():
            known.update({safe_model_key(m): m for m in self.training_models()})
        if self.has_pool():
            pool = self.read_table(POOL, columns=["model", "model_key"])
            known.update(zip(pool["model_key"].astype(str), pool["model"].astype(str)))
        for key in self.onboarded_keys():
            names = read_parquet(self.store_path(key), what="an onboarded store", fix="-", columns=["model"])["model"]
            if len(names):
                known[key] = str(names.iloc[0])
        return known

    # ------------------------------------------------------------------ query encodings

    def encoding_cache(self, encoder: str) -> Path:
        """The encoder's cache folder (one subfolder per runtime, see locus_model.data.encoding.open_cache)."""
        from locus_model.data.encoding import resolve_encoder

        return self.dir("encodings", resolve_encoder(encoder).name)

    def encode(self, table: pd.DataFrame, encoder: str, *, runtime: str | None = None, progress: bool = False,
               batch_size: int = 64, device: str = "cpu", threads: int | None = None):
        """(query_id + encoding frame, EncodeReport) for the table's distinct queries, through the cache of
        (encoder, runtime); runtime None: the library's default."""
        from locus_model.data.encoding import encode_queries_with_report

        queries = table.drop_duplicates("query_id")
        vectors, report = encode_queries_with_report(queries["query"].astype(str).tolist(), encoder=encoder,
                                                     runtime=runtime, cache_dir=self.encoding_cache(encoder),
                                                     progress=progress, batch_size=batch_size, device=device,
                                                     threads=threads)
        frame = pd.DataFrame({"query_id": queries["query_id"].astype(str).to_numpy(), "encoding": list(vectors)})
        return frame, report


def checkpoint_id(path: str | Path) -> str:
    """Identity of a checkpoint: sha256 prefix of its bytes."""
    return sha256_file(Path(path))[:16]


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()

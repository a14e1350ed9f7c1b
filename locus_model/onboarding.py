"""Onboarding: a model never seen in training gets its model embedding by one forward pass. No training.

The drop folder (``LOCUS_HOME/incoming/``) and what happens to a file dropped there (see docs/onboarding.md):

1. *Complete files only.* Names starting with '.' or ending in '.part', '.tmp', '.partial', '.crdownload' are
   never read: write under such a name, then rename (atomic on one filesystem). As a safety net for writers
   that do not rename, a file is read only once its modification time is ``settle_seconds`` old, and it is
   set aside for a later tick if its size or modification time changed while it was read.
2. *Intake* (:func:`intake_file`): sha256, then one streamed pass (CSV chunks, categoricals) that validates
   every row with the evaluation data contract and splits the rows by model into
   ``accepted/<stem>.parts/<model_key>.parquet`` (memory grows with one chunk and the distinct query ids,
   not with the file). ``<stem>`` is ``<UTC time>-<sha8>-<original name>``.
   A valid file moves to ``accepted/<stem>`` and gets ``accepted/<stem>.manifest.json`` (written last: the
   commit). An invalid one moves to ``rejected/<stem>`` beside ``rejected/<stem>.reason.txt`` naming the row,
   column, problem and fix. A file whose bytes were already accepted moves to ``accepted/`` with a manifest
   marked ``duplicate_of`` and onboards nothing. Nothing is ever deleted.
3. *Onboarding* (:func:`onboard_model`, one run per model in the file): under a per-model lock, the file's
   rows join the model's store ``onboarded/<model_key>.parquet`` (deduplicated by query_id; the newest file,
   by its modification time, wins), only query text not yet in the encoding cache is encoded, the pool's
   checkpoint embeds the model from all its evaluations so far, and its row is upserted into the pool
   (atomic write under the pool lock; every other row stays bit-identical).

A model already in the training pool keeps its training embedding: the file's rows are recorded in its store
(nothing is lost) but its pool row is not changed, because training-pool rows must stay reproducible from
the training source (the blocking ``pool_embeddings_reproducible`` check re-embeds them from it). To refine a
training-pool model, add the evaluations to the training source and re-materialize ``model_embeddings``.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import time
import uuid
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd

from locus_model.encoding import encode_queries_with_report, resolve_encoder
from locus_model.evaluations import (
    EVALUATION_COLUMNS,
    EvaluationDataError,
    validate_chunk,
    iter_evaluation_chunks,
    safe_model_key,
    suffix_of,
)
from locus_model.model import Locus, load_checkpoint
from locus_model.pool import embed_models, pool_lock, upsert_pool, write_parquet_atomic

IN_PROGRESS_SUFFIXES = (".part", ".tmp", ".partial", ".crdownload", ".swp")
SETTLE_SECONDS = 3.0  # a file is read once nothing has written to it for this long
INTAKE_CHUNK_ROWS = 50_000  # CSV rows per streamed chunk at intake (~25 MB of text at 500 bytes a row)
STORE_COLUMNS = EVALUATION_COLUMNS + ("received_at", "source_file")
MANIFEST_SUFFIX = ".manifest.json"
PARTS_SUFFIX = ".parts"
REASON_SUFFIX = ".reason.txt"


# ---------------------------------------------------------------------------------------------- folders


@dataclass(frozen=True)
class DropFolder:
    """``LOCUS_HOME/incoming`` and its ``accepted/`` and ``rejected/`` folders."""

    home: Path

    @property
    def incoming(self) -> Path:
        return Path(self.home) / "incoming"

    @property
    def accepted(self) -> Path:
        return self.incoming / "accepted"

    @property
    def rejected(self) -> Path:
        return self.incoming / "rejected"

    def ensure(self) -> "DropFolder":
        for folder in (self.incoming, self.accepted, self.rejected):
            folder.mkdir(parents=True, exist_ok=True)
        return self


@contextmanager
def intake_lock(folder: DropFolder) -> Iterator[bool]:
    """Non-blocking exclusive lock on the drop folder: yields False when another process (e.g. a sensor tick
    that outlived its timeout) is still taking files in, so two ticks never read the same file."""
    folder.ensure()
    with open(folder.incoming / ".intake.lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def onboarded_dir(home: Path) -> Path:
    return Path(home) / "onboarded"


def store_path(home: Path, model_key: str) -> Path:
    """The store of one onboarded model: all its evaluations so far."""
    return onboarded_dir(home) / f"{model_key}.parquet"


def pool_path(home: Path) -> Path:
    return Path(home) / "warehouse" / "model_embeddings.parquet"


# ---------------------------------------------------------------------------------------------- drop folder


def is_in_progress(name: str) -> bool:
    """Names a writer uses while the file is incomplete: never read (write, then rename)."""
    return name.startswith(".") or name.lower().endswith(IN_PROGRESS_SUFFIXES)


def scan_incoming(folder: DropFolder, *, now: float | None = None, settle_seconds: float = SETTLE_SECONDS) -> tuple[list[Path], list[Path]]:
    """(ready, settling): complete-looking files in ``incoming/``, oldest first, and those still settling.

    A file is ready when its name is not an in-progress name and nothing has modified it for
    ``settle_seconds`` (a modification time in the future, e.g. from clock skew, counts as "just written").
    """
    now = time.time() if now is None else now
    ready, settling = [], []
    if not folder.incoming.exists():
        return ready, settling
    entries = []
    for path in folder.incoming.iterdir():
        if is_in_progress(path.name) or not path.is_file() or path.is_symlink():
            continue
        try:
            entries.append((path.stat().st_mtime, path))
        except FileNotFoundError:  # renamed away between listing and stat
            continue
    for mtime, path in sorted(entries, key=lambda e: (e[0], e[1].name)):
        (ready if now - mtime >= settle_seconds else settling).append(path)
    return ready, settling


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _stamp(now: float) -> str:
    return datetime.fromtimestamp(now, tz=timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")


def _stem(now: float, sha: str, name: str) -> str:
    raw = name.encode("utf-8")
    if len(raw) > 180:  # keep <stem>.manifest.json under the 255-byte name limit
        suffix = suffix_of(Path(name)) or Path(name).suffix
        name = raw[: 180 - len(suffix.encode())].decode("utf-8", "ignore") + suffix
    return f"{_stamp(now)}-{sha[:8]}-{name}"


@dataclass(frozen=True)
class ModelRows:
    model: str
    model_key: str
    rows: int  # rows of this model in the file
    evaluations: int  # after dropping exact repeats


@dataclass(frozen=True)
class Manifest:
    """What intake recorded about one accepted file (``accepted/<stem>.manifest.json``)."""

    stem: str
    original_name: str
    sha256: str
    bytes: int
    received_at: str  # ISO time: the file's modification time when it was accepted ("newest wins" order)
    received_at_ns: int
    accepted_at: str
    rows: int
    models: list[ModelRows] = field(default_factory=list)
    duplicate_of: str | None = None  # stem of the earlier file with the same bytes: nothing to onboard

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> "Manifest":
        data = json.loads(text)
        data["models"] = [ModelRows(**m) for m in data["models"]]
        return cls(**data)


@dataclass(frozen=True)
class Intake:
    """The outcome of :func:`intake_file`."""

    status: str  # "accepted" | "rejected" | "duplicate" | "changed" (still being written: retried later)
    source: Path  # where the file was
    stored: Path | None  # where it is now (None when status == "changed")
    sha256: str
    manifest: Manifest | None = None
    reason: str | None = None  # rejected: the full reason text (also in <stored>.reason.txt)


def _write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def read_manifest(folder: DropFolder, stem: str) -> Manifest:
    path = folder.accepted / f"{stem}{MANIFEST_SUFFIX}"
    if not path.exists():
        raise FileNotFoundError(f"no manifest {path}: the file {stem!r} was not accepted (look in {folder.rejected})")
    return Manifest.from_json(path.read_text(encoding="utf-8"))


def manifest_stems(folder: DropFolder) -> list[str]:
    """Stems of all accepted files, in acceptance order (the stem starts with the UTC acceptance time)."""
    if not folder.accepted.exists():
        return []
    return sorted(p.name[: -len(MANIFEST_SUFFIX)] for p in folder.accepted.glob(f"*{MANIFEST_SUFFIX}") if not p.name.startswith("."))


def _find_duplicate(folder: DropFolder, sha: str) -> str | None:
    for path in folder.accepted.glob(f"*-{sha[:8]}-*{MANIFEST_SUFFIX}"):
        manifest = Manifest.from_json(path.read_text(encoding="utf-8"))
        if manifest.sha256 == sha:
            return manifest.duplicate_of or manifest.stem
    return None


def _changed(path: Path, before: os.stat_result) -> bool:
    try:
        after = path.stat()
    except FileNotFoundError:
        return True
    return (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns)


def _reason_text(err: EvaluationDataError, original: str, sha: str, when: str) -> str:
    lines = [
        f"REJECTED: {original}",
        f"sha256: {sha}",
        f"rejected at: {when}",
        f"row: {err.row if err.row is not None else '-'} (1-based data row, the header not counted)",
        f"column: {err.column or '-'}",
        f"problem: {err.problem}",
        f"how to fix: {err.fix or '-'}",
        "",
        "The file is kept unchanged beside this note. Fix it and drop it into incoming/ again",
        "(write it as <name>.part, then rename it to <name>); see docs/onboarding.md.",
        "",
        f"full message: {err}",
    ]
    return "\n".join(lines) + "\n"


def _split_by_model(path: Path, out: Path, chunk_rows: int) -> tuple[int, list[ModelRows]]:
    """Validate ``path`` in one streamed pass and write each model's rows to ``out/<model_key>.parquet``.

    Returns (rows read, per-model counts). Raises EvaluationDataError at the first problem. Memory: one chunk,
    a text hash per distinct query_id, and (at the end) one model's rows at a time.
    """
    text_of: dict[str, tuple[int, int]] = {}  # query_id -> (hash of its text, first row)
    counts: dict[str, int] = {}
    rows_read = 0
    for number, chunk in enumerate(iter_evaluation_chunks(path, chunk_rows=chunk_rows)):
        valid = validate_chunk(chunk, path)
        rows_read += len(valid)
        pairs = valid[["query_id", "query", "_row"]].drop_duplicates(["query_id", "query"])
        hashes = pd.util.hash_array(pairs["query"].astype(str).to_numpy(object))
        for qid, h, row in zip(pairs["query_id"].astype(str), hashes, pairs["_row"]):
            seen = text_of.setdefault(qid, (int(h), int(row)))
            if seen[0] != int(h):
                raise EvaluationDataError(
                    f"query_id {qid!r} has two different texts (the first at row {seen[1]})",
                    file=path, row=int(row), column="query",
                    fix="one query_id must always name the same text; give different texts different ids",
                )
        for name, rows in valid.groupby("model", observed=True, sort=False):
            name = str(name)
            part = pd.DataFrame({c: rows[c].astype(str).to_numpy(object) for c in ("model", "query_id", "query", "benchmark")})
            part["score"] = rows["score"].to_numpy(np.float64)
            part["_row"] = rows["_row"].to_numpy(np.int64)
            folder = out / safe_model_key(name)
            folder.mkdir(parents=True, exist_ok=True)
            part.to_parquet(folder / f"{number:06d}.parquet", index=False)
            counts[name] = counts.get(name, 0) + len(part)
    if rows_read == 0:
        raise EvaluationDataError("the file has a header but no evaluation rows", file=path, row=1, fix="add at least one row")
    keys = pd.Series(list(counts)).map(safe_model_key)
    if keys.duplicated().any():
        clash = [n for n, k in zip(counts, keys) if (keys == k).sum() > 1]
        raise EvaluationDataError(f"model names {clash} map to the same key", file=path, column="model", fix="rename one of the models")
    models = []
    for name in sorted(counts):
        key = safe_model_key(name)
        rows = pd.read_parquet(out / key)
        dup = rows.duplicated("query_id", keep=False)
        if dup.any():
            conflicting = rows[dup].groupby("query_id")["score"].nunique()
            if (conflicting > 1).any():
                qid = conflicting[conflicting > 1].index[0]
                both = rows[rows["query_id"] == qid].sort_values("_row")
                raise EvaluationDataError(
                    f"model {name!r} has two different scores for query_id {qid!r}: {both['score'].iloc[0]} "
                    f"(row {both['_row'].iloc[0]}) and {both['score'].iloc[1]}",
                    file=path, row=int(both["_row"].iloc[1]), column="score",
                    fix="keep one score per (model, query_id); merge repeated runs before submitting",
                )
            rows = rows.drop_duplicates("query_id", keep="last")  # exact repeats
        rows.sort_values("query_id", kind="stable").reset_index(drop=True).to_parquet(out / f"{key}.parquet", index=False)
        shutil.rmtree(out / key)
        models.append(ModelRows(name, key, counts[name], len(rows)))
    return rows_read, models


def intake_file(
    path: Path, folder: DropFolder, *, chunk_rows: int = INTAKE_CHUNK_ROWS, now: float | None = None, name: str | None = None
) -> Intake:
    """Validate one dropped file and move it to ``accepted/`` (with per-model parts and a manifest) or to
    ``rejected/`` (with a reason). A file that changes while being read is left in place (status "changed").
    ``name``: the file's original name when ``path`` is a temporary one (recovery)."""
    folder.ensure()
    path = Path(path)
    name = name or path.name
    now = time.time() if now is None else now
    before = path.stat()
    sha = file_sha256(path)
    stem = _stem(now, sha, name)
    accepted_at = datetime.fromtimestamp(now, tz=timezone.utc).isoformat()
    received = datetime.fromtimestamp(before.st_mtime_ns / 1e9, tz=timezone.utc).isoformat()
    base = dict(stem=stem, original_name=name, sha256=sha, bytes=before.st_size, received_at=received,
                received_at_ns=before.st_mtime_ns, accepted_at=accepted_at)

    duplicate = _find_duplicate(folder, sha)
    if duplicate is not None:
        if _changed(path, before):
            return Intake("changed", path, None, sha)
        manifest = Manifest(**base, rows=0, models=[], duplicate_of=duplicate)
        os.replace(path, folder.accepted / stem)
        _write_text_atomic(folder.accepted / f"{stem}{MANIFEST_SUFFIX}", manifest.to_json())
        return Intake("duplicate", path, folder.accepted / stem, sha, manifest)

    staging = folder.accepted / f".{stem}{PARTS_SUFFIX}.{uuid.uuid4().hex}.tmp"
    staging.mkdir(parents=True)
    try:
        try:
            rows, models = _split_by_model(path, staging, chunk_rows)
        except EvaluationDataError as err:
            if _changed(path, before):  # half-written, not wrong: look again next time
                return Intake("changed", path, None, sha)
            reason = _reason_text(err, name, sha, accepted_at)
            target = folder.rejected / stem
            os.replace(path, target)
            _write_text_atomic(folder.rejected / f"{stem}{REASON_SUFFIX}", reason)
            return Intake("rejected", path, target, sha, reason=reason)
        if _changed(path, before):
            return Intake("changed", path, None, sha)
        manifest = Manifest(**base, rows=rows, models=models)
        os.replace(staging, folder.accepted / f"{stem}{PARTS_SUFFIX}")
        os.replace(path, folder.accepted / stem)
        _write_text_atomic(folder.accepted / f"{stem}{MANIFEST_SUFFIX}", manifest.to_json())  # the commit
        return Intake("accepted", path, folder.accepted / stem, sha, manifest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def recover_orphans(folder: DropFolder, *, chunk_rows: int = INTAKE_CHUNK_ROWS) -> list[Intake]:
    """Accepted files without a manifest (a process killed between moving the file and the commit):
    intake them again in place. Returns what was recovered."""
    out = []
    if not folder.accepted.exists():
        return out
    for path in sorted(folder.accepted.iterdir()):
        name = path.name
        if (name.startswith(".") or name.endswith((MANIFEST_SUFFIX, REASON_SUFFIX, PARTS_SUFFIX)) or not path.is_file()
                or (folder.accepted / f"{name}{MANIFEST_SUFFIX}").exists()):
            continue
        shutil.rmtree(folder.accepted / f"{name}{PARTS_SUFFIX}", ignore_errors=True)
        original = name.split("-", 2)[2] if name.count("-") >= 2 else name  # <time>-<sha8>-<original name>
        moved = folder.incoming / f".recover-{uuid.uuid4().hex}-{original}"  # hidden: the sensor will not list it
        os.replace(path, moved)
        result = intake_file(moved, folder, chunk_rows=chunk_rows, name=original)
        out.append(result)
    return out


def accepted_rows(folder: DropFolder, stem: str, model: str) -> pd.DataFrame:
    """One model's validated rows from an accepted file (model, query_id, query, benchmark, score, _row)."""
    path = folder.accepted / f"{stem}{PARTS_SUFFIX}" / f"{safe_model_key(model)}.parquet"
    if not path.exists():
        raise EvaluationDataError(
            f"model {model!r} has no rows in this accepted file", file=folder.accepted / stem, column="model",
            fix="check the model name in the run config (the sensor sets it from the file)",
        )
    return pd.read_parquet(path)


# ---------------------------------------------------------------------------------------------- evaluation store


def onboarded_evaluations(home: Path) -> pd.DataFrame:
    """All evaluations of all onboarded models (empty frame when none)."""
    files = sorted(onboarded_dir(home).glob("*.parquet"))
    if not files:
        return pd.DataFrame(columns=list(EVALUATION_COLUMNS))
    return pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)


def _as_store(evaluations: pd.DataFrame, received_at: pd.Timestamp | None, source_file: str) -> pd.DataFrame:
    fresh = evaluations[list(EVALUATION_COLUMNS)].astype({"model": str, "query_id": str, "query": str, "benchmark": str, "score": "float64"})
    fresh = fresh.reset_index(drop=True)
    fresh["received_at"] = pd.Timestamp(received_at) if received_at is not None else pd.Timestamp.now(tz="UTC")
    fresh["received_at"] = pd.to_datetime(fresh["received_at"], utc=True)
    fresh["source_file"] = source_file
    return fresh


def merge_into_store(store: pd.DataFrame | None, fresh: pd.DataFrame) -> pd.DataFrame:
    """All evaluations so far: one row per query_id, the row with the newest ``received_at`` wins (ties: the
    later argument). The order in which runs happen to finish does not matter."""
    parts = [fresh] if store is None else [store, fresh]
    both = pd.concat(parts, ignore_index=True)
    if "received_at" not in both or both["received_at"].isna().all():
        both["received_at"] = pd.Timestamp(0, tz="UTC")
    both["received_at"] = pd.to_datetime(both["received_at"], utc=True).fillna(pd.Timestamp(0, tz="UTC"))
    if "source_file" not in both:
        both["source_file"] = ""
    both["source_file"] = both["source_file"].fillna("")
    both = both.sort_values("received_at", kind="stable").drop_duplicates(["model", "query_id"], keep="last")
    return both[list(STORE_COLUMNS)].sort_values("query_id", kind="stable").reset_index(drop=True)


def _record_locked(home: Path, name: str, evaluations: pd.DataFrame, received_at, source_file: str) -> pd.DataFrame:
    path = store_path(home, safe_model_key(name))
    if len(evaluations) == 0:
        if not path.exists():
            raise FileNotFoundError(f"no evaluations recorded for model {name!r} at {path}")
        return pd.read_parquet(path)
    merged = merge_into_store(pd.read_parquet(path) if path.exists() else None, _as_store(evaluations, received_at, source_file))
    write_parquet_atomic(merged, path)
    return merged


def record_evaluations(home: Path, evaluations: pd.DataFrame, *, received_at: pd.Timestamp | None = None, source_file: str = "") -> pd.DataFrame:
    """Merge one model's new evaluations into its store (newest ``received_at`` wins per query_id); returns all so far."""
    name = _single_model(evaluations)
    with pool_lock(store_path(home, safe_model_key(name))):
        return _record_locked(home, name, evaluations, received_at, source_file)


def _single_model(evaluations: pd.DataFrame) -> str:
    names = evaluations["model"].astype(str).unique()
    if len(names) != 1:
        raise ValueError(f"onboarding takes one model at a time, got {list(names)[:5]}")
    return str(names[0])


def encodings_for(table: pd.DataFrame, encoder: str, home: Path, *, progress: bool = False) -> pd.DataFrame:
    """Encodings of the table's queries (query_id, encoding); the cache means only new text is encoded."""
    return _encodings_with_report(table, encoder, home, progress=progress)[0]


def _encodings_with_report(table: pd.DataFrame, encoder: str, home: Path, *, progress: bool = False):
    spec = resolve_encoder(encoder)
    queries = table.drop_duplicates("query_id")
    vectors, report = encode_queries_with_report(
        queries["query"].astype(str).tolist(), encoder=spec.name, cache_dir=Path(home) / "encodings" / spec.name, progress=progress
    )
    return pd.DataFrame({"query_id": queries["query_id"].astype(str).to_numpy(), "encoding": list(vectors)}), report


# ---------------------------------------------------------------------------------------------- the checkpoint


@dataclass(frozen=True)
class PoolCheckpoint:
    """The checkpoint the pool was embedded with, loaded."""

    model: Locus
    checkpoint_id: str
    encoder: str
    path: Path


@lru_cache(maxsize=2)
def _load(path: str, mtime_ns: int) -> tuple[Locus, dict]:
    return load_checkpoint(path)


def pool_checkpoint(home: Path) -> PoolCheckpoint:
    """Load the checkpoint whose id the pool carries (cached per process)."""
    home = Path(home)
    pool = pool_path(home)
    if not pool.exists():
        raise FileNotFoundError(f"no model embedding pool at {pool}; materialize model_embeddings (make demo / locus_job) first")
    ids = sorted(set(pd.read_parquet(pool, columns=["checkpoint_id"])["checkpoint_id"].astype(str)))
    if len(ids) != 1:
        raise ValueError(f"the pool {pool} mixes checkpoints {ids}; re-materialize model_embeddings")
    ckpt_id = ids[0]
    candidates = [home / "checkpoints" / f"locus-{ckpt_id}.pt"]
    table = home / "warehouse" / "locus_checkpoint.parquet"
    encoder = ""
    if table.exists():
        row = pd.read_parquet(table).iloc[0]
        if str(row["checkpoint_id"]) == ckpt_id:
            candidates.insert(0, Path(str(row["path"])))
            encoder = str(row.get("encoder", ""))
    path = next((p for p in candidates if p.exists()), None)
    if path is None:
        raise FileNotFoundError(
            f"the pool was embedded with checkpoint {ckpt_id} but no file for it was found (looked at "
            f"{[str(c) for c in candidates]}); re-materialize locus_checkpoint and model_embeddings"
        )
    model, extra = _load(str(path), path.stat().st_mtime_ns)
    encoder = str(extra.get("encoder", "")) or encoder
    if not encoder:
        raise ValueError(f"checkpoint {path} does not name its sentence encoder; re-materialize locus_checkpoint")
    return PoolCheckpoint(model, ckpt_id, encoder, path)


def training_pool_models(home: Path) -> set[str]:
    """Names of the models in the training source (warehouse/evaluation_table.parquet)."""
    table = Path(home) / "warehouse" / "evaluation_table.parquet"
    if not table.exists():
        return set()
    return set(pd.read_parquet(table, columns=["model"])["model"].astype(str).unique())


# ---------------------------------------------------------------------------------------------- onboarding


@dataclass(frozen=True)
class OnboardResult:
    model: str
    model_key: str
    action: str  # "new" | "replaced" (onboarded again) | "kept-training" (a training-pool model: row unchanged)
    n_evaluations: int  # evaluations the embedding came from (all so far, deduplicated by query_id)
    new_evaluations: int  # rows in this file
    newly_encoded: int  # query texts encoded now (the rest came from the cache)
    embedding: np.ndarray  # (d,) the model's pool embedding
    checkpoint_id: str
    nearest_model: str  # nearest other model in the pool (euclidean), "" if alone
    nearest_distance: float
    row: pd.DataFrame  # the model's pool row


def onboard_model(
    model: Locus,
    evaluations: pd.DataFrame,  # validated rows of one model (this file's)
    *,
    home: Path,
    encoder: str,
    checkpoint: str,
    pool_path: Path,
    received_at: pd.Timestamp | None = None,
    source_file: str = "",
    training_models: set[str] | None = None,
    name: str | None = None,
) -> OnboardResult:
    """Record the evaluations, embed the model from all of them (forward pass only), upsert its pool row.

    Runs for the same model are serialized by a per-model lock held from recording to the upsert, so the
    last one embeds from every row recorded so far; the pool itself is written atomically under its lock.
    """
    name = name or _single_model(evaluations)
    key = safe_model_key(name)
    training = training_pool_models(home) if training_models is None else training_models
    with pool_lock(store_path(home, key)):
        so_far = _record_locked(home, name, evaluations, received_at, source_file)
        if name in training:
            pool = pd.read_parquet(pool_path)
            row = pool[pool["model"] == name].reset_index(drop=True)
            return _result(name, key, "kept-training", so_far, evaluations, 0, row, pool, checkpoint)
        encodings, report = _encodings_with_report(so_far, encoder, home)
        row = embed_models(model, so_far, encodings, checkpoint=checkpoint, source="onboarded")
        before = pd.read_parquet(pool_path, columns=["model"]) if Path(pool_path).exists() else pd.DataFrame({"model": []})
        pool = upsert_pool(pool_path, row)
    action = "replaced" if (before["model"] == name).any() else "new"
    return _result(name, key, action, so_far, evaluations, report.encoded, row, pool, checkpoint)


def _result(name, key, action, so_far, evaluations, encoded, row, pool, checkpoint) -> OnboardResult:
    z = np.asarray(row["embedding"].iloc[0], dtype=np.float32) if len(row) else np.zeros(0, np.float32)
    others = pool[pool["model"] != name]
    nearest, distance = "", float("nan")
    if len(others) and len(z):
        zs = np.stack(others["embedding"].to_numpy()).astype(np.float32)
        d = np.linalg.norm(zs - z[None, :], axis=1)
        nearest, distance = str(others["model"].iloc[int(d.argmin())]), float(d.min())
    n = int(row["n_evaluations"].iloc[0]) if action == "kept-training" and len(row) else len(so_far)
    return OnboardResult(name, key, action, n, len(evaluations), int(encoded), z, checkpoint, nearest, distance, row)


def onboard_from_manifest(home: Path, stem: str, model: str) -> OnboardResult:
    """Onboard one model from an accepted file: its rows, the pool's checkpoint, the pool."""
    folder = DropFolder(Path(home))
    manifest = read_manifest(folder, stem)
    rows = accepted_rows(folder, stem, model)
    ckpt = pool_checkpoint(home)
    return onboard_model(
        ckpt.model, rows, home=Path(home), encoder=ckpt.encoder, checkpoint=ckpt.checkpoint_id, pool_path=pool_path(home),
        received_at=pd.Timestamp(manifest.received_at_ns, unit="ns", tz="UTC"), source_file=stem,
    )


def reembed_onboarded(home: Path, model_key: str) -> OnboardResult:
    """Recompute one onboarded model's pool row from its store (no new rows), e.g. from the UI."""
    path = store_path(home, model_key)
    if not path.exists():
        raise FileNotFoundError(f"no onboarded evaluations for {model_key!r} at {path}; drop a file into incoming/ first")
    store = pd.read_parquet(path)
    ckpt = pool_checkpoint(home)
    return onboard_model(
        ckpt.model, store.iloc[:0], name=str(store["model"].iloc[0]), home=Path(home), encoder=ckpt.encoder,
        checkpoint=ckpt.checkpoint_id, pool_path=pool_path(home),
    )

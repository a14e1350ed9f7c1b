"""The model embedding pool: one table of model embeddings, all from one checkpoint.

Schema of ``LOCUS_HOME/warehouse/model_embeddings.parquet`` (one row per model):

| column | type | meaning |
|---|---|---|
| model | str | model name as in the evaluation files |
| model_key | str | safe form of the name (partition key, file names) |
| embedding | list<float32>[d] | the model embedding z_m |
| n_evaluations | int | evaluations the embedding was computed from |
| evaluations_fingerprint | str | sha256 prefix of the (model, query_id, score) triples used |
| checkpoint_id | str | sha256 prefix of the checkpoint file that embedded it |
| source | str | "training" (in the training pool) or "onboarded" (forward pass on a dropped file) |
| embedded_at | timestamp[UTC] | when the row was written |

A pool embedding is computed from all of the model's evaluations outside the held-out test queries (the
test queries stay unseen so that routing accuracy on them is honest). Rows from different checkpoints are
never mixed: a new checkpoint re-embeds the whole pool, and an upsert with another checkpoint is refused.
Writes are atomic (temporary file + rename) under an exclusive lock, so a failed run never leaves half a pool.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd

from locus_model.evaluations import fingerprint_evaluations, safe_model_key
from locus_model.model import Locus, embed_evaluation_sets

POOL_COLUMNS = (
    "model", "model_key", "embedding", "n_evaluations", "evaluations_fingerprint", "checkpoint_id", "source", "embedded_at",
)


def checkpoint_id(path: str | Path) -> str:
    """Identity of a checkpoint: sha256 prefix of its bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def embed_models(
    model: Locus,
    table: pd.DataFrame,  # long table: model, query_id, score (the evaluations to embed from)
    encodings: pd.DataFrame,  # query encodings: columns query_id, encoding (list of floats)
    *,
    checkpoint: str,
    source: str,
    device: str = "cpu",
) -> pd.DataFrame:
    """Pool rows for every model in ``table``: one forward pass per batch of models, no training."""
    query_index = pd.Index(encodings["query_id"].astype(str))
    phi = encoding_matrix(encodings)
    models = sorted(table["model"].astype(str).unique())
    sets, prints, counts = [], [], []
    for name, rows in table.groupby(table["model"].astype(str), sort=True):
        idx = query_index.get_indexer(rows["query_id"].astype(str))
        if (idx < 0).any():
            missing = rows["query_id"].astype(str)[idx < 0].iloc[0]
            raise KeyError(f"query_id {missing!r} of model {name!r} has no encoding; encode the table's queries first")
        sets.append((idx, rows["score"].to_numpy(np.float32)))
        prints.append(fingerprint_evaluations(rows))
        counts.append(len(rows))
    z = embed_evaluation_sets(model, phi, sets, device=device)  # (M, d)
    now = pd.Timestamp.now(tz="UTC")
    return pd.DataFrame(
        {
            "model": models,
            "model_key": [safe_model_key(m) for m in models],
            "embedding": list(z.astype(np.float32)),
            "n_evaluations": np.asarray(counts, dtype=np.int64),
            "evaluations_fingerprint": prints,
            "checkpoint_id": checkpoint,
            "source": source,
            "embedded_at": now,
        }
    )


def encoding_matrix(encodings: pd.DataFrame) -> np.ndarray:
    """(Q, D) float32 array from a query-encodings frame with an ``encoding`` list column."""
    return np.stack(encodings["encoding"].to_numpy()).astype(np.float32)


def pool_matrix(pool: pd.DataFrame) -> tuple[list[str], np.ndarray]:
    """(names, (M, d) float32 embeddings) of a pool table."""
    return pool["model"].astype(str).tolist(), np.stack(pool["embedding"].to_numpy()).astype(np.float32)


def write_parquet_atomic(frame: pd.DataFrame, path: Path) -> None:
    """Write Parquet via a temporary file and rename: readers see the old or the new file, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        frame.to_parquet(tmp, index=False)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@contextmanager
def pool_lock(path: Path) -> Iterator[None]:
    """An exclusive lock beside the pool file, so concurrent onboarding runs do not lose each other's rows."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f".{path.name}.lock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def read_pool(path: Path) -> pd.DataFrame:
    if not Path(path).exists():
        raise FileNotFoundError(
            f"no model embedding pool at {path}; materialize the model_embeddings asset (make demo) first"
        )
    return pd.read_parquet(path)


def upsert_pool(path: Path, rows: pd.DataFrame) -> pd.DataFrame:
    """Insert or replace ``rows`` (by model) in the pool at ``path``; every other row stays byte-identical.

    Refused when the rows come from another checkpoint than the pool's: embeddings from different
    checkpoints live in different spaces and are never mixed.
    """
    path = Path(path)
    with pool_lock(path):
        pool = read_pool(path)
        ours, theirs = set(rows["checkpoint_id"]), set(pool["checkpoint_id"])
        if theirs and ours != theirs:
            raise ValueError(
                f"rows from checkpoint {sorted(ours)} cannot join a pool embedded with {sorted(theirs)}; "
                "re-materialize model_embeddings with the current checkpoint"
            )
        kept = pool[~pool["model"].isin(rows["model"])]
        merged = pd.concat([kept, rows[list(POOL_COLUMNS)]], ignore_index=True)
        write_parquet_atomic(merged, path)
    return merged

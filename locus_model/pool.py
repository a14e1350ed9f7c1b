"""The model embedding pool: one table of model embeddings, all from one checkpoint.

The table's schema is ``POOL_SCHEMA`` below (column, Arrow type as written to Parquet, meaning): the one
source of the pool's columns, shown by the pipeline as the table's schema and tested against the written file.

A pool embedding is computed from all of the model's evaluations outside the held-out test queries (the
test queries stay unseen so that routing accuracy on them is honest). Rows from different checkpoints are
never mixed: a new checkpoint re-embeds the whole pool, and an upsert with another checkpoint is refused.
Every embedding is computed by one forward pass of the checkpoint, so re-embedding the same evaluations
reproduces a row bit for bit.
"""

from __future__ import annotations


import numpy as np
import pandas as pd
import pyarrow as pa

from locus_model.data.contract import safe_model_key
from locus_model.data.matrix import fingerprint_evaluations
from locus_model.data.query_encodings import encoding_matrix, query_rows
from locus_model.infer import embed_evaluation_sets
from locus_model.model import Locus

POOL_SCHEMA = pa.schema([
    pa.field(name, type_, metadata={"doc": doc}) for name, type_, doc in (
        ("model", pa.string(), "model name as in the evaluation files"),
        ("model_key", pa.string(), "safe form of the name (partition key, file names)"),
        ("embedding", pa.list_(pa.float32()), "the model embedding z_m (d float32)"),
        ("n_evaluations", pa.int64(), "evaluations the embedding was computed from"),
        ("evaluations_fingerprint", pa.string(), "sha256 prefix of the (model, query_id, score) triples used"),
        ("checkpoint_id", pa.string(), "sha256 prefix of the checkpoint file that embedded it"),
        ("source", pa.string(), '"training" (trained on), "held_out" (in the training source, never trained on) '
                                'or "onboarded" (a dropped file)'),
        ("embedded_at", pa.timestamp("us", tz="UTC"), "when the row was written"),
    )
])
POOL_COLUMNS = tuple(POOL_SCHEMA.names)


def column_doc(column: str) -> str:
    """The meaning of a pool column, as POOL_SCHEMA states it."""
    return POOL_SCHEMA.field(column).metadata[b"doc"].decode()


def schema_differences(schema: pa.Schema) -> list[str]:
    """How an Arrow schema (a written pool file's, or ``pa.Schema.from_pandas(pool)``) differs from POOL_SCHEMA:
    one line per missing, extra or differently typed column; [] when it matches."""
    found = {f.name: f.type for f in schema if not f.name.startswith("__")}  # pandas' index columns
    out = [f"{f.name}: missing (expected {f.type})" for f in POOL_SCHEMA if f.name not in found]
    out += [f"{f.name}: {found[f.name]}, expected {f.type}" for f in POOL_SCHEMA
            if f.name in found and not found[f.name].equals(f.type)]
    return out + [f"{name}: not a pool column" for name in found if name not in POOL_COLUMNS]


def embed_models(
    model: Locus,
    table: pd.DataFrame,  # long table: model, query_id, score (the evaluations to embed from)
    encodings: pd.DataFrame,  # query encodings: columns query_id, encoding (list of floats)
    *,
    checkpoint: str,
    source: str,
    device: str = "cpu",
) -> pd.DataFrame:
    """Pool rows for every model in ``table``: one forward pass, no training."""
    phi = encoding_matrix(encodings)
    models = sorted(table["model"].astype(str).unique())
    sets, prints, counts = [], [], []
    for name, rows in table.groupby(table["model"].astype(str), sort=True):
        idx = query_rows(encodings, rows["query_id"], what=f"model {name!r}: ")
        sets.append((idx, rows["score"].to_numpy(np.float32)))
        prints.append(fingerprint_evaluations(rows))
        counts.append(len(rows))
    # a set's embedding does not depend on the other sets of its batch (embed_evaluation_sets pads by the set's
    # own length), so re-embedding any subset of the pool reproduces its rows bit for bit
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


def pool_matrix(pool: pd.DataFrame) -> tuple[list[str], np.ndarray]:
    """(names, (M, d) float32 embeddings) of a pool table."""
    return pool["model"].astype(str).tolist(), np.stack(pool["embedding"].to_numpy()).astype(np.float32)


def checkpoints_of(table: pd.DataFrame) -> list[str]:
    """The checkpoints a pool table's rows were embedded with (sorted; one for a valid non-empty pool)."""
    return sorted(set(table["checkpoint_id"].astype(str)))


class PoolError(ValueError):
    """A pool table that breaks its invariants (one checkpoint, one row per model and per key)."""


def check_pool(pool: pd.DataFrame) -> None:
    """Raise PoolError unless every row comes from one checkpoint and models and model keys are unique."""
    missing = [c for c in POOL_COLUMNS if c not in pool.columns]
    if missing:
        raise PoolError(f"the pool table lacks the columns {missing}")
    ids = checkpoints_of(pool)
    if len(ids) > 1:
        raise PoolError(f"the pool mixes checkpoints {ids}: embeddings of different checkpoints live in different spaces")
    for column in ("model", "model_key"):
        dup = pool[pool[column].duplicated(keep=False)]
        if len(dup):
            raise PoolError(f"{column} {dup[column].iloc[0]!r} appears twice in the pool "
                            f"(models {sorted(dup['model'].astype(str))[:4]})")


def upsert_rows(pool: pd.DataFrame, rows: pd.DataFrame) -> pd.DataFrame:
    """``pool`` with ``rows`` inserted or replaced (by model); every other row unchanged, in its place.

    Refused when the rows come from another checkpoint than the pool's."""
    ours, theirs = checkpoints_of(rows), checkpoints_of(pool)
    if theirs and ours != theirs:
        raise PoolError(f"rows from checkpoint {sorted(ours)} cannot join a pool embedded with {sorted(theirs)}")
    kept = pool[~pool["model"].isin(rows["model"])]
    return pd.concat([kept, rows[list(POOL_COLUMNS)]], ignore_index=True)

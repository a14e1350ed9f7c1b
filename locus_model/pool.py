"""The model embedding pool: one table of model embeddings, all from one checkpoint.

Schema of the pool table (one row per model):

| column | type | meaning |
|---|---|---|
| model | str | model name as in the evaluation files |
| model_key | str | safe form of the name (partition key, file names) |
| embedding | list<float32>[d] | the model embedding z_m |
| n_evaluations | int | evaluations the embedding was computed from |
| evaluations_fingerprint | str | sha256 prefix of the (model, query_id, score) triples used |
| checkpoint_id | str | sha256 prefix of the checkpoint file that embedded it |
| source | str | "training" (trained on), "held_out" (in the training source, never trained on) or "onboarded" (a dropped file) |
| embedded_at | timestamp[UTC] | when the row was written |

A pool embedding is computed from all of the model's evaluations outside the held-out test queries (the
test queries stay unseen so that routing accuracy on them is honest). Rows from different checkpoints are
never mixed: a new checkpoint re-embeds the whole pool, and an upsert with another checkpoint is refused.
Every embedding is computed by one forward pass of the checkpoint, so re-embedding the same evaluations
reproduces a row bit for bit.
"""

from __future__ import annotations


import numpy as np
import pandas as pd

from locus_model.data.contract import safe_model_key
from locus_model.data.matrix import fingerprint_evaluations
from locus_model.infer import embed_evaluation_sets
from locus_model.model import Locus

POOL_COLUMNS = (
    "model", "model_key", "embedding", "n_evaluations", "evaluations_fingerprint", "checkpoint_id", "source", "embedded_at",
)
# (type, meaning) of every pool column, as in the module docstring; the pipeline shows it as the table's schema
POOL_COLUMN_DOCS = {
    "model": ("str", "model name as in the evaluation files"),
    "model_key": ("str", "safe form of the name (partition key, file names)"),
    "embedding": ("list<float32>[d]", "the model embedding z_m"),
    "n_evaluations": ("int64", "evaluations the embedding was computed from"),
    "evaluations_fingerprint": ("str", "sha256 prefix of the (model, query_id, score) triples used"),
    "checkpoint_id": ("str", "sha256 prefix of the checkpoint file that embedded it"),
    "source": ("str", "training (trained on), held_out (in the training source, never trained on) or onboarded"),
    "embedded_at": ("timestamp[UTC]", "when the row was written"),
}


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


def encoding_matrix(encodings: pd.DataFrame) -> np.ndarray:
    """(Q, D) float32 array from a query-encodings frame with an ``encoding`` list column."""
    return np.stack(encodings["encoding"].to_numpy()).astype(np.float32)


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

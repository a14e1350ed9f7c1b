"""The pool table's schema: ``POOL_SCHEMA`` (column, Arrow type as written to Parquet, meaning), the one source of
the pool's columns, shown by the pipeline as the table's schema and tested against the written file; how a schema
differs from it; and the evaluation counts a model needs (the routable floor, the recommended count, the margin
of an accuracy measured on n answers).

No torch here: the pipeline shows the schema when its code location loads, before anything is embedded
(locus_model.pool computes the rows).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa

# A stated floor (a choice, not a measured threshold): an onboarded model with fewer evaluations stays in the pool
# (the atlas, neighbour lists) but `locus serve` leaves it out of its default candidates; a request naming it still
# reaches it. Models of the training source are routable whatever their count (the checkpoint was trained on them).
MIN_ROUTABLE_EVALUATIONS = 32
RECOMMENDED_EVALUATIONS = 128  # answers a new model needs (docs/onboarding.md, "How many queries")


def accuracy_margin(n_answers: int) -> float:
    """The 95% margin, in accuracy points, of an accuracy measured on ``n_answers`` answers, at its widest (p = 0.5):
    1.96 x sqrt(0.25 / n) x 100, about 98 / sqrt(n): +-17 at 32, +-12 at 64, +-9 at 128, +-4 at 512."""
    return 100 * 1.96 * np.sqrt(0.25 / max(int(n_answers), 1))


POOL_SCHEMA = pa.schema(
    [
        pa.field(name, type_, metadata={"doc": doc})
        for name, type_, doc in (
            ("model", pa.string(), "model name as in the evaluation files"),
            ("model_key", pa.string(), "safe form of the name (partition key, file names)"),
            ("embedding", pa.list_(pa.float32()), "the model embedding z_m (d float32)"),
            (
                "group_profile",
                pa.list_(pa.float32()),
                "the model's accuracy per query group of the checkpoint's router (smoothed; locus_model.query_groups)",
            ),
            ("n_evaluations", pa.int64(), "evaluations the embedding was computed from"),
            ("evaluations_digest", pa.string(), "sha256 prefix of the (model, query_id, score) triples used"),
            ("checkpoint_id", pa.string(), "sha256 prefix of the checkpoint file that embedded it"),
            (
                "source",
                pa.string(),
                '"training" (trained on), "held_out" (in the training source, never trained on) '
                'or "onboarded" (a dropped file)',
            ),
            ("embedded_at", pa.timestamp("us", tz="UTC"), "when the row was written"),
            (
                "routable",
                pa.bool_(),
                f"routed to by default: false for an onboarded model whose embedding rests on "
                f"fewer than {MIN_ROUTABLE_EVALUATIONS} evaluations (kept in the pool; locus serve "
                "routes to it only when a request names it)",
            ),
        )
    ]
)
POOL_COLUMNS = tuple(POOL_SCHEMA.names)


def routable(source: npt.ArrayLike, n_evaluations: npt.ArrayLike) -> np.ndarray:
    """The ``routable`` column: the training source's models, and onboarded ones with at least
    MIN_ROUTABLE_EVALUATIONS evaluations (arrays or Series in, a bool array out)."""
    return (np.asarray(source) != "onboarded") | (np.asarray(n_evaluations) >= MIN_ROUTABLE_EVALUATIONS)


def column_doc(column: str) -> str:
    """The meaning of a pool column, as POOL_SCHEMA states it."""
    return POOL_SCHEMA.field(column).metadata[b"doc"].decode()


def schema_differences(schema: pa.Schema) -> list[str]:
    """How an Arrow schema (a written pool file's, or ``pa.Schema.from_pandas(pool)``) differs from POOL_SCHEMA:
    one line per missing, extra or differently typed column; [] when it matches."""
    found = {f.name: f.type for f in schema if not f.name.startswith("__")}  # pandas' index columns
    out = [f"{f.name}: missing (expected {f.type})" for f in POOL_SCHEMA if f.name not in found]
    out += [
        f"{f.name}: {found[f.name]}, expected {f.type}"
        for f in POOL_SCHEMA
        if f.name in found and not found[f.name].equals(f.type)
    ]
    return out + [f"{name}: not a pool column" for name in found if name not in POOL_COLUMNS]

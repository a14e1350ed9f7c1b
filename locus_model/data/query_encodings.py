"""Query encodings as arrays: the one conversion from a query-encodings frame (columns query_id, encoding: one
vector per query) or a {query_id: vector} mapping to the (Q, D) float32 matrix the model takes, in a given query
order, and the rows of given queries in such a frame. Every caller (the pool, onboarding, the harness, the
pipeline's tables and reports) goes through these two functions."""

from __future__ import annotations

from typing import Mapping, Sequence, TypeAlias

import numpy as np
import pandas as pd

Encodings: TypeAlias = pd.DataFrame | Mapping[str, np.ndarray]


class MissingEncodingError(KeyError, ValueError):
    """A query without an encoding: a KeyError (a lookup that failed) and a ValueError (what the commands catch
    to print the message and its fix), whose text reads as a sentence."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _missing(query_ids: Sequence[str], found: np.ndarray, what: str) -> MissingEncodingError:
    missing = [q for q, ok in zip(query_ids, found) if not ok]
    return MissingEncodingError(
        f"{what}query_id {missing[0]!r} has no query encoding ({len(missing)} missing, e.g. {missing[:5]}). "
        "How to fix: encode every query of the table (the query_encodings asset, or "
        "locus_model.data.encoding.encode_queries) with the checkpoint's encoder first."
    )


def query_rows(encodings: pd.DataFrame, query_ids: Sequence | pd.Series, *, what: str = "") -> np.ndarray:
    """(n,) int64: the row of each of ``query_ids`` in the encodings frame; MissingEncodingError naming the first
    one without a row (``what``, e.g. "model 'x': ", is put in front of the message)."""
    ids = [str(q) for q in query_ids]
    rows = pd.Index(encodings["query_id"].astype(str)).get_indexer(ids)
    if (rows < 0).any():
        raise _missing(ids, rows >= 0, what)
    return rows.astype(np.int64)


def encoding_matrix(encodings: Encodings, query_ids: Sequence | None = None, *, what: str = "") -> np.ndarray:
    """(Q, D) float32 query encodings: the frame's rows in its own order when ``query_ids`` is None, else one
    row per query of ``query_ids``, in that order (from a frame or a {query_id: vector} mapping)."""
    if isinstance(encodings, pd.DataFrame):
        vectors = encodings["encoding"].to_numpy()
        if query_ids is not None:
            vectors = vectors[query_rows(encodings, query_ids, what=what)]
        return np.stack(vectors).astype(np.float32) if len(vectors) else np.zeros((0, 0), np.float32)
    ids = [str(q) for q in (encodings if query_ids is None else query_ids)]
    found = np.array([q in encodings for q in ids], dtype=np.bool_)
    if not found.all():
        raise _missing(ids, found, what)
    return np.stack([np.asarray(encodings[q], np.float32) for q in ids]) if ids else np.zeros((0, 0), np.float32)

"""Onboarding: a model never seen in training gets its model embedding by one forward pass. No training.

The pieces the pipeline's drop folder is built from, on frames and files it names:

- :func:`split_by_model`: one streamed pass over an evaluation file that validates every row with the data
  contract and writes each model's rows to ``<out>/<model_key>.parquet`` (memory: one chunk and the distinct
  query ids, not the file);
- :func:`merge_into_store`: a model's evaluations so far, one row per query_id, the newest file winning;
- :func:`nearest_models`: where a new embedding landed, its k nearest models in the pool;
- :func:`neighbour_stability`: how much of that a few evaluations can say (bootstrap of the model's own
  evaluations), a :class:`NeighbourStability` that renders itself; :func:`benchmark_profile`: its per-benchmark
  accuracy beside its neighbours';
- :func:`query_overlap` and :func:`onboarding_warnings`: whether a drop is too small or off the pool's queries to
  be trusted (the evaluations the checkpoint was trained with, the pool's routable floor).

The embedding itself is :func:`locus_model.pool.embed_models` over all of a model's evaluations so far.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from locus_model.data.contract import (
    EVALUATION_COLUMNS,
    check_model_keys,
    drop_repeats,
    no_rows_error,
    safe_model_key,
    text_values,
    two_texts_error,
    validate_chunk,
)
from locus_model.data.file_chunks import iter_evaluation_chunks
from locus_model.data.query_encodings import encoding_matrix, query_rows
from locus_model.markdown import escape_frame, escape_markdown
from locus_model.pool import pool_matrix
from locus_model.pool_schema import MIN_ROUTABLE_EVALUATIONS, RECOMMENDED_EVALUATIONS, accuracy_margin

INTAKE_CHUNK_ROWS = 50_000  # CSV rows per streamed chunk at intake (~25 MB of text at 500 bytes a row)
INTAKE_BUFFER_CHUNKS = 4  # validated chunks held before they are spilled to per-model parts (200,000 rows, ~100 MB)
STORE_COLUMNS = EVALUATION_COLUMNS + ("received_at", "source_file")


@dataclass(frozen=True)
class ModelRows:
    model: str
    model_key: str
    rows: int  # rows of this model in the file
    evaluations: int  # after dropping exact repeats


def split_by_model(
    path: Path, out: Path, chunk_rows: int, *, buffer_rows: int | None = None
) -> tuple[int, list[ModelRows]]:
    """Validate ``path`` in one streamed pass and write each model's rows to ``out/<model_key>.parquet``.

    A plain CSV whose last line has no newline is refused (that is how a file cut by its writer looks).
    Returns (rows read, per-model counts). Raises EvaluationDataError at the first problem. Memory: the validated
    rows of up to ``buffer_rows`` (default INTAKE_BUFFER_CHUNKS chunks; then spilled, one part per model buffered),
    a text hash per distinct query_id, and at the end one spilled model's rows at a time. Files written: one per
    model (and one per model and spill beyond ``buffer_rows``), not one per model and chunk, each read back: a file
    of 1,000 models x 128 rows costs 1,000 writes, not 3,000 writes and 1,000 reads.
    """
    buffer_rows = INTAKE_BUFFER_CHUNKS * chunk_rows if buffer_rows is None else buffer_rows
    out.mkdir(parents=True, exist_ok=True)
    text_of: dict[str, tuple[int, int]] = {}  # query_id -> (hash of its text, first row)
    counts: dict[str, int] = {}
    rows_read = 0
    buffered: list[pd.DataFrame] = []
    spilled: set[str] = set()
    spills = 0
    for chunk in iter_evaluation_chunks(path, chunk_rows=chunk_rows, require_final_newline=True):
        valid = validate_chunk(chunk, path)
        rows_read += len(valid)
        pairs = valid[["query_id", "query", "_row"]].drop_duplicates(["query_id", "query"])
        hashes = pd.util.hash_array(text_values(pairs["query"]))
        for qid, h, row in zip(text_values(pairs["query_id"]), hashes, pairs["_row"]):
            seen = text_of.setdefault(qid, (int(h), int(row)))
            if seen[0] != int(h):
                raise two_texts_error(qid, f"row {seen[1]}", file=path, row=int(row))
        part = pd.DataFrame({c: text_values(valid[c]) for c in ("model", "query_id", "query", "benchmark")})
        part["score"] = valid["score"].to_numpy(np.float64)
        part["_row"] = valid["_row"].to_numpy(np.int64)
        for name, n in part["model"].value_counts(sort=False).items():
            counts[str(name)] = counts.get(str(name), 0) + int(n)
        buffered.append(part)
        if sum(len(b) for b in buffered) > buffer_rows:  # a large file: its rows so far to one part per model
            spilled |= _write_by_model(pd.concat(buffered, ignore_index=True), out, spill=spills)
            buffered, spills = [], spills + 1
    if rows_read == 0:
        raise no_rows_error(path)
    check_model_keys(list(counts), file=path)
    rest = pd.concat(buffered, ignore_index=True) if buffered else None
    if rest is not None and spilled:
        _write_by_model(rest[rest["model"].isin(spilled)], out, spill=spills)
        rest = rest[~rest["model"].isin(spilled)]
    evaluations = {}
    if rest is not None and len(rest):  # every model held in memory: its repeats dropped at once, a file each
        kept, _ = drop_repeats(rest.sort_values(["model", "_row"], kind="stable"), file=path)
        evaluations = _write_by_model(kept.sort_values(["model", "query_id"], kind="stable"), out)
    for name in sorted(spilled):
        key = safe_model_key(name)
        rows, _ = drop_repeats(pd.read_parquet(out / key).sort_values("_row", kind="stable"), file=path)
        _write_part(rows.sort_values("query_id", kind="stable"), out / f"{key}.parquet")
        shutil.rmtree(out / key)
        evaluations[name] = len(rows)
    return rows_read, [
        ModelRows(name, safe_model_key(name), counts[name], evaluations[name]) for name in sorted(counts)
    ]


def _write_part(rows: pd.DataFrame | pa.Table, path: Path) -> None:
    table = (
        rows if isinstance(rows, pa.Table) else pa.Table.from_pandas(rows.reset_index(drop=True), preserve_index=False)
    )
    pq.write_table(table, path)


def _write_by_model(rows: pd.DataFrame, out: Path, *, spill: int | None = None):
    """Each model's rows (in their order) to ``out/<model_key>.parquet``, or with ``spill`` to
    ``out/<model_key>/<spill>.parquet``; returns {model: rows written} (the set of models, with ``spill``)."""
    rows = rows.sort_values("model", kind="stable")  # each model's rows one slice, in their order
    # why: one Arrow table for all models, sliced (no copy) per model: a small part costs a quarter of
    # DataFrame.to_parquet's time (1,000 parts a drop of 1,000 models)
    table = pa.Table.from_pandas(rows.reset_index(drop=True), preserve_index=False)
    names, starts = np.unique(rows["model"].to_numpy(), return_index=True)
    stops = [*starts[1:], len(rows)]
    written = {}
    for name, start, stop in zip(names, starts, stops):
        key = safe_model_key(str(name))
        if spill is None:
            path = out / f"{key}.parquet"
        else:
            (out / key).mkdir(parents=True, exist_ok=True)
            path = out / key / f"{spill:06d}.parquet"
        _write_part(table.slice(int(start), int(stop - start)), path)
        written[str(name)] = int(stop - start)
    return written if spill is None else set(written)


def as_store(evaluations: pd.DataFrame, received_at: pd.Timestamp | None, source_file: str) -> pd.DataFrame:
    """One model's validated rows in the store's columns, stamped with when the file was received."""
    fresh = evaluations[list(EVALUATION_COLUMNS)].astype(
        {"model": str, "query_id": str, "query": str, "benchmark": str, "score": "float64"}
    )
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


def nearest_models(pool: pd.DataFrame, model: str, k: int = 5) -> pd.DataFrame:
    """The ``k`` pool models nearest to ``model``'s embedding (Euclidean): rank, model, distance, source."""
    names, z = pool_matrix(pool)
    if model not in names:
        raise KeyError(f"model {model!r} is not in the pool")
    i = names.index(model)
    d = np.linalg.norm(z - z[i][None, :], axis=1).astype(np.float64)  # (M,)
    d[i] = np.inf
    order = np.argsort(d, kind="stable")[: min(k, len(names) - 1)]
    sources = pool["source"].astype(str).to_numpy()
    return pd.DataFrame(
        {
            "rank": np.arange(1, len(order) + 1),
            "model": [names[j] for j in order],
            "distance": d[order],
            "source": sources[order],
        }
    )


STABILITY_LISTED = 10  # models listed in the stability report; all of them are in `shares`


@dataclass(frozen=True)
class NeighbourStability:
    """How often each pool model is ``name``'s nearest (share_top1) or among its k nearest (share_topk) when its
    own evaluations are resampled; the most frequent first."""

    name: str
    n_evaluations: int
    draws: int
    k: int
    shares: pd.DataFrame  # model, share_top1, share_topk

    def share_top1(self, model: str) -> float:
        return float(self.shares.set_index("model")["share_top1"].get(model, 0.0))

    def to_markdown(self, nearest: str) -> str:
        """The resampling said in a sentence about ``nearest`` (the full pool embedding's nearest model), then
        the most frequent neighbours."""
        top = self.shares.head(STABILITY_LISTED)
        return (
            f"{self.draws} bootstrap resamples of {escape_markdown(self.name)}'s own {self.n_evaluations} "
            "evaluations, each embedded by one forward pass: how often each model is the nearest (share_top1) or "
            f"among the {self.k} nearest (share_topk). {escape_markdown(nearest)} is the nearest in "
            f"{100 * self.share_top1(nearest):.0f}% of them.\n\n"
            + escape_frame(top).to_markdown(index=False, floatfmt=".2f")
        )


def benchmark_profile(
    accuracy: pd.DataFrame, name: str, neighbours: Sequence[str], n_per_benchmark: Mapping[str, int] | None = None
) -> pd.DataFrame:
    """``name``'s per-benchmark accuracy beside its neighbours' (rows: name, then the neighbours; columns: the
    benchmarks ``name`` has, all where it has none), rounded to 3 digits, with a last row `n (<name>)` giving how
    many evaluations each of its accuracies rests on when ``n_per_benchmark`` is given."""
    profile = accuracy.reindex([name] + list(neighbours))
    profile = profile.loc[:, profile.loc[name].notna()] if name in accuracy.index else profile
    shown = profile.round(3)
    if n_per_benchmark:
        shown = pd.concat(
            [shown, pd.DataFrame([{b: n_per_benchmark.get(b) for b in shown.columns}], index=[f"n ({name})"])]
        )
    return shown


def neighbour_stability(
    model,
    evaluations: pd.DataFrame,
    encodings: pd.DataFrame,
    pool: pd.DataFrame,
    name: str,
    *,
    k: int = 5,
    draws: int = 20,
    seed: int = 0,
) -> NeighbourStability:
    """How stable ``name``'s nearest models are when its own evaluations are resampled (bootstrap: as many rows,
    drawn with replacement, embedded by one forward pass each): per pool model that was ever among the ``k``
    nearest, ``share_top1`` (draws where it is the nearest) and ``share_topk`` (draws where it is among the k
    nearest), most frequent first. With few evaluations the nearest model often changes between draws.

    ``evaluations``: the model's rows (query_id, score); ``encodings``: query_id, encoding for them; ``pool``: the
    other models' rows (``name`` itself is left out)."""
    # why: torch loads only when a model is embedded: the pipeline's intake imports this module
    from locus_model.infer import embed_evaluation_sets

    names, z = pool_matrix(pool[pool["model"].astype(str) != name])
    if not names:
        raise ValueError(f"neighbour_stability: the pool holds no model besides {name!r}")
    idx = query_rows(encodings, evaluations["query_id"], what="neighbour_stability: ")
    scores = evaluations["score"].to_numpy(np.float32)
    rng = np.random.default_rng(seed)
    picks = [rng.integers(0, len(idx), len(idx)) for _ in range(draws)]
    zs = embed_evaluation_sets(model, encoding_matrix(encodings), [(idx[p], scores[p]) for p in picks])  # (draws, d)
    dist = np.linalg.norm(zs[:, None, :].astype(np.float64) - z[None, :, :], axis=2)  # (draws, M)
    order = np.argsort(dist, axis=1, kind="stable")[:, : min(k, len(names))]
    top1 = np.bincount(order[:, 0], minlength=len(names)) / draws
    topk = np.bincount(order.ravel(), minlength=len(names)) / draws
    seen = np.flatnonzero(topk > 0)
    out = pd.DataFrame({"model": [names[i] for i in seen], "share_top1": top1[seen], "share_topk": topk[seen]})
    shares = out.sort_values(["share_top1", "share_topk", "model"], ascending=[False, False, True]).reset_index(
        drop=True
    )
    return NeighbourStability(name=name, n_evaluations=len(idx), draws=draws, k=k, shares=shares)


# ----------------------------------------------------------------------------- small or off-topic drops

OVERLAP_WARN_RATIO = 0.9  # overlap / baseline under this: the model's queries look unlike the pool's (a warning)


@dataclass(frozen=True)
class QueryOverlap:
    """How much a model's queries look like the pool's, by their sentence encodings: ``overlap`` is the mean over
    (a seeded sample of) its queries of the cosine similarity to the most similar pool query; ``baseline`` the same
    for a sample of pool queries against the other pool queries (what in-distribution reads with this encoder)."""

    overlap: float
    baseline: float
    queries: int  # the model's queries measured

    @property
    def ratio(self) -> float:
        return self.overlap / self.baseline if self.baseline > 0 else float("nan")


def _max_cosine(a: np.ndarray, b: np.ndarray, exclude: np.ndarray | None, block: int) -> np.ndarray:
    """(len(a),) the largest cosine similarity of each row of ``a`` to the rows of ``b``; ``exclude[i]``: a row
    of ``b`` left out for row i (itself)."""
    a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
    b = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)
    out = np.empty(len(a), dtype=np.float32)
    for start in range(0, len(a), block):
        sims = a[start : start + block] @ b.T  # (block, Q)
        if exclude is not None:
            sims[np.arange(len(sims)), exclude[start : start + block]] = -np.inf
        out[start : start + block] = sims.max(axis=1)
    return out


def query_overlap(
    model_phi: np.ndarray, pool_phi: np.ndarray, *, sample: int = 1024, seed: int = 0, block: int = 256
) -> QueryOverlap:
    """:class:`QueryOverlap` of a model's query encodings (n, D) with the pool's (Q, D), on at most ``sample``
    queries of each side (seeded), in blocks of ``block`` rows (memory block * Q)."""
    if len(model_phi) == 0 or len(pool_phi) < 2:
        raise ValueError(
            f"query_overlap: needs queries on both sides ({len(model_phi)} of the model's, "
            f"{len(pool_phi)} of the pool's; at least 2)"
        )
    rng = np.random.default_rng(seed)
    mine = rng.choice(len(model_phi), min(sample, len(model_phi)), replace=False)
    theirs = rng.choice(len(pool_phi), min(sample, len(pool_phi)), replace=False)
    overlap = float(_max_cosine(model_phi[mine].astype(np.float32), pool_phi.astype(np.float32), None, block).mean())
    baseline = float(
        _max_cosine(pool_phi[theirs].astype(np.float32), pool_phi.astype(np.float32), theirs, block).mean()
    )
    return QueryOverlap(overlap=overlap, baseline=baseline, queries=len(mine))


def onboarding_warnings(n_evaluations: int, budget: int, overlap: QueryOverlap | None) -> list[str]:
    """What a user should know before trusting an onboarded model's embedding: fewer evaluations than
    RECOMMENDED_EVALUATIONS (said as the margin of its measured accuracy, beside the checkpoint's training
    ``budget``'s), fewer than the routable floor (MIN_ROUTABLE_EVALUATIONS), or queries unlike the pool's (overlap
    ratio under OVERLAP_WARN_RATIO). [] when none applies."""
    out = []
    if n_evaluations < MIN_ROUTABLE_EVALUATIONS:
        out.append(
            f"{n_evaluations} evaluations, under the pool's floor of {MIN_ROUTABLE_EVALUATIONS}: kept in the "
            "pool but not routed to by default (locus serve routes to it only when a request names it). "
            "How to fix: drop more evaluations of the model"
        )
    if n_evaluations < RECOMMENDED_EVALUATIONS:
        out.append(
            f"{n_evaluations} evaluations, fewer than the {RECOMMENDED_EVALUATIONS} per model recommended: its "
            f"accuracy is known to about +-{accuracy_margin(n_evaluations):.0f} points (95%; "
            f"+-{accuracy_margin(RECOMMENDED_EVALUATIONS):.0f} at {RECOMMENDED_EVALUATIONS}, "
            f"+-{accuracy_margin(budget):.0f} at the checkpoint's {budget} per model), its embedding and nearest "
            "models less certain (see neighbours_under_resampling). How to fix: evaluate it on more queries"
        )
    if overlap is not None and overlap.ratio < OVERLAP_WARN_RATIO:
        out.append(
            f"its queries look unlike the pool's: mean best cosine similarity {overlap.overlap:.2f} against "
            f"{overlap.baseline:.2f} among the pool's own queries (ratio {overlap.ratio:.2f} < "
            f"{OVERLAP_WARN_RATIO}): the correctness predictor was not trained on such queries"
        )
    return out

"""A log of graded answers, in the order they were graded: what `locus evaluate --stream-log` replays.

One row per graded answer with the evaluation contract's columns (``model, query_id, query, benchmark, score``:
data/contract.py) and a ``time`` (a number, e.g. seconds since the epoch, or an ISO 8601 date-time). The answers of
the models to one request share its ``time``; the same name may answer the same query again later, differently (an
upstream redeployed behind one name), so a (model, query_id) pair may repeat at another time, never at the same one.
Every row is checked by the contract's validator (``validate_chunk``) and every failure names the file, the row, the
column and how to fix it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from locus_model.data.contract import (
    EVALUATION_COLUMNS,
    check_columns,
    check_model_keys,
    text_values,
    two_texts_error,
    validate_chunk,
)
from locus_model.data.errors import EvaluationDataError, suffix_of
from locus_model.data.file_chunks import iter_evaluation_chunks

LOG_COLUMNS = (*EVALUATION_COLUMNS, "time")


def read_stream_log(path: str | Path) -> pd.DataFrame:
    """The log at ``path`` (.csv, .csv.gz, .parquet) as a table in time order (rows of one time in file order):
    model, query_id, query, benchmark (str), score (float), time (float: seconds; a date-time as seconds since the
    epoch), _row (the file's data row). An EvaluationDataError says what is wrong where."""
    path = Path(path)
    if suffix_of(path) == ".parquet":
        frame = pd.read_parquet(path)
        check_columns(list(frame.columns), LOG_COLUMNS, path)
        frame["_row"] = np.arange(1, len(frame) + 1)
        frames = [frame]
    else:
        frames = list(iter_evaluation_chunks(path))
        if frames:
            check_columns(list(frames[0].columns), LOG_COLUMNS, path)
    parts = []
    for frame in frames:
        valid = validate_chunk(frame, path)
        valid["time"] = _times(frame["time"], frame["_row"].to_numpy(), path)
        parts.append(valid)
    if not parts or sum(len(p) for p in parts) == 0:
        raise EvaluationDataError("the log has no rows", file=path, fix="give one row per graded answer")
    table = pd.concat(parts, ignore_index=True)
    for column in ("model", "query_id", "query", "benchmark"):
        table[column] = text_values(table[column])
    _check_rows(table, path)
    return table.sort_values(["time", "_row"], kind="stable").reset_index(drop=True)


def _times(raw: pd.Series, rows: np.ndarray, path: Path) -> np.ndarray:
    """(n,) float seconds of a time column: numbers as they are, else ISO 8601 date-times (UTC when no zone)."""
    text = raw.astype(str).str.strip()
    numbers = pd.to_numeric(text, errors="coerce").to_numpy(np.float64)
    if np.isnan(numbers).any() and not np.isnan(numbers).all():
        first = int(np.isnan(numbers).argmax())
        raise _time_error(text.iloc[first], rows[first], path, "the column mixes numbers and date-times")
    if not np.isnan(numbers).any():
        return numbers
    stamps = pd.to_datetime(text, utc=True, errors="coerce", format="ISO8601")
    bad = stamps.isna().to_numpy()
    if bad.any():
        first = int(bad.argmax())
        raise _time_error(text.iloc[first], rows[first], path, "not a number nor an ISO 8601 date-time")
    return (stamps - pd.Timestamp(0, tz="UTC")).dt.total_seconds().to_numpy(np.float64)


def _time_error(value: str, row: int, path: Path, problem: str) -> EvaluationDataError:
    return EvaluationDataError(
        f"time {value!r}: {problem}",
        file=path,
        row=int(row),
        column="time",
        fix="give every row a time, all as numbers (e.g. seconds since the epoch) or all as ISO 8601 date-times "
        "such as 2026-12-07T10:15:00Z",
    )


def _check_rows(table: pd.DataFrame, path: Path) -> None:
    """Cross-row rules: one text per query_id, one score per (model, query_id, time), model keys distinct."""
    texts = table[["query_id", "query"]].drop_duplicates()
    clash = texts["query_id"].duplicated(keep=False)
    if clash.any():
        query_id = texts.loc[clash, "query_id"].iloc[0]
        rows = table[table["query_id"] == query_id].drop_duplicates("query")
        a, b = rows.iloc[0], rows.iloc[1]
        raise two_texts_error(
            query_id, f"row {int(a['_row'])}", file=path, row=int(b["_row"]), texts=(str(a["query"]), str(b["query"]))
        )
    keys = ["model", "query_id", "time"]
    twice = table.duplicated(keys, keep=False)
    if twice.any():
        same = table[twice].groupby(keys, sort=False)["score"].nunique()
        if (same > 1).any():
            model, query_id, when = same[same > 1].index[0]
            row = table[(table["model"] == model) & (table["query_id"] == query_id) & (table["time"] == when)].iloc[-1]
            raise EvaluationDataError(
                f"{model!r} has two different scores for query_id {query_id!r} at the same time {when:g}",
                file=path,
                row=int(row["_row"]),
                column="score",
                fix="keep one graded answer per model, query and time (a later answer has a later time)",
            )
    check_model_keys(table["model"].unique().astype(str).tolist(), file=path)


__all__ = ["LOG_COLUMNS", "read_stream_log"]

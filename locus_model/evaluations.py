"""The evaluation data contract: long-format evaluation tables, their validation, and the dense matrix.

An *evaluation* is one (model, query) pair with a score in [0, 1] (0/1 for correctness). Files are long
format, one row per evaluation, CSV (optionally gzipped) or Parquet, with the columns
``model, query_id, query, benchmark, score`` (an optional ``split`` column: train / val / test).
A companion *models file* has ``model, params_b, family``. See data/README.md for the full contract.

Every problem is raised as an :class:`EvaluationDataError` naming the file, the row (1-based data row, the
header not counted) and the column, what is wrong and how to fix it. Reading never modifies the file.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd

EVALUATION_COLUMNS = ("model", "query_id", "query", "benchmark", "score")
OPTIONAL_COLUMNS = ("split", "category")
MODELS_COLUMNS = ("model", "params_b", "family")
SPLITS = ("train", "val", "test")
EVALUATION_SUFFIXES = (".csv", ".csv.gz", ".parquet")
MAX_MODEL_NAME = 200
CSV_CHUNK_ROWS = 200_000  # rows per chunk when streaming a CSV: bounds memory for very large files


class EvaluationDataError(ValueError):
    """Bad evaluation data: says which file, row and column, what is wrong and how to fix it."""

    def __init__(
        self,
        problem: str,
        *,
        file: str | Path | None = None,
        row: int | None = None,
        column: str | None = None,
        fix: str | None = None,
    ) -> None:
        self.problem, self.file, self.row, self.column, self.fix = problem, file, row, column, fix
        where = [str(file) if file is not None else "<evaluations>"]
        if row is not None:
            where.append(f"row {row}")
        if column is not None:
            where.append(f"column '{column}'")
        message = ": ".join([", ".join(where), problem])
        if fix:
            message += f". How to fix: {fix}"
        super().__init__(message)


def suffix_of(path: Path) -> str:
    """The evaluation-file suffix of ``path`` ('.csv', '.csv.gz', '.parquet') or '' if it is none of them."""
    name = path.name.lower()
    return next((s for s in sorted(EVALUATION_SUFFIXES, key=len, reverse=True) if name.endswith(s)), "")


def is_evaluation_file(path: Path) -> bool:
    return path.is_file() and not path.name.startswith(".") and suffix_of(path) != ""


# ---------------------------------------------------------------------------------------------- names


def model_name_problem(name: object) -> str | None:
    """Why ``name`` cannot be used safely as a model key, or None when it can."""
    if not isinstance(name, str) or not name.strip():
        return "the model name is empty"
    if name != name.strip():
        return f"the model name {name!r} has leading or trailing whitespace"
    if len(name) > MAX_MODEL_NAME:
        return f"the model name is {len(name)} characters long (at most {MAX_MODEL_NAME})"
    if any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in name):
        return f"the model name {name!r} contains control or invisible characters"
    if name in (".", ".."):
        return f"the model name {name!r} is a path component, not a name"
    return None


def safe_model_key(name: str) -> str:
    """A filesystem- and partition-safe key for a model name, stable and collision-free.

    ASCII letters, digits, '.', '_' and '-' are kept; anything else ('/', spaces, '..', unicode) becomes '-'.
    When the key differs from the name, 8 hex digits of the name's sha1 are appended so that two names never
    share a key (``"org/llama 7b"`` -> ``"org-llama-7b-1c2d3e4f"``).
    """
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    key = re.sub(r"[^A-Za-z0-9._-]+", "-", ascii_name)
    key = re.sub(r"\.{2,}", "-", key).strip(".-")[:100] or "model"
    if key != name:
        key = f"{key}-{hashlib.sha1(name.encode()).hexdigest()[:8]}"
    return key


# ---------------------------------------------------------------------------------------------- reading


def _check_columns(columns: list[str], required: tuple[str, ...], file: Path) -> None:
    missing = [c for c in required if c not in columns]
    if missing:
        raise EvaluationDataError(
            f"missing column(s) {missing} in the header; found {list(columns)}",
            file=file,
            column=missing[0],
            fix=f"the header must name the columns {list(required)} (see data/README.md)",
        )


def _find_bad_utf8_row(path: Path, compressed: bool) -> tuple[int, str]:
    import gzip

    opener = gzip.open if compressed else open
    with opener(path, "rb") as handle:
        for line_no, raw in enumerate(handle, start=1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as err:
                return line_no - 1, str(err)
    return 0, "undecodable bytes"


def _csv_chunks(path: Path, chunk_rows: int) -> Iterator[pd.DataFrame]:
    compressed = suffix_of(path) == ".csv.gz"
    if path.stat().st_size == 0:
        raise EvaluationDataError("the file is empty", file=path, fix="write a header and at least one evaluation row")
    try:
        reader = pd.read_csv(
            path,
            dtype=str,
            keep_default_na=False,
            encoding="utf-8",
            encoding_errors="strict",
            chunksize=chunk_rows,
            compression="gzip" if compressed else None,
        )
        with reader:
            yield from reader
    except UnicodeDecodeError:
        row, detail = _find_bad_utf8_row(path, compressed)
        raise EvaluationDataError(
            f"the file is not valid UTF-8 ({detail})",
            file=path,
            row=row,
            fix="re-save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)",
        ) from None
    except pd.errors.EmptyDataError:
        raise EvaluationDataError("the file has no header and no rows", file=path, fix="write a header line") from None
    except pd.errors.ParserError as err:
        raise EvaluationDataError(f"the CSV cannot be parsed ({err})", file=path, fix="check quoting and the number of fields per line") from None


def iter_evaluation_chunks(path: Path, *, chunk_rows: int = CSV_CHUNK_ROWS) -> Iterator[pd.DataFrame]:
    """Raw chunks of an evaluation file as string/float frames, with a ``_row`` column (1-based data row)."""
    path = Path(path)
    suffix = suffix_of(path)
    if suffix == "":
        raise EvaluationDataError(
            f"unsupported file type '{path.suffix}'", file=path, fix=f"use one of {list(EVALUATION_SUFFIXES)}"
        )
    if suffix == ".parquet":
        if path.stat().st_size == 0:
            raise EvaluationDataError("the file is empty", file=path, fix="write a Parquet file with evaluation rows")
        import pyarrow.parquet as pq

        try:
            parquet = pq.ParquetFile(path)
        except Exception as err:  # pyarrow raises several types for corrupt files
            raise EvaluationDataError(f"not a readable Parquet file ({err})", file=path, fix="re-export the file") from None
        _check_columns(parquet.schema_arrow.names, EVALUATION_COLUMNS, path)
        offset = 0
        for batch in parquet.iter_batches(batch_size=chunk_rows):
            frame = batch.to_pandas()
            frame["_row"] = np.arange(offset + 1, offset + len(frame) + 1)
            offset += len(frame)
            yield frame
        return
    offset = 0
    for frame in _csv_chunks(path, chunk_rows):
        if offset == 0:
            _check_columns(list(frame.columns), EVALUATION_COLUMNS, path)
        frame["_row"] = np.arange(offset + 1, offset + len(frame) + 1)
        offset += len(frame)
        yield frame


def validate_chunk(frame: pd.DataFrame, file: Path) -> pd.DataFrame:
    """Per-row checks of one chunk; returns the chunk with a float ``score`` and categorical text columns."""
    _check_columns(list(frame.columns), EVALUATION_COLUMNS, file)
    for column in ("model", "query_id", "benchmark"):
        values = frame[column].astype("string")
        bad = values.isna() | (values.str.strip() == "")
        if bad.any():
            raise EvaluationDataError(
                f"empty {column}", file=file, row=int(frame["_row"][bad].iloc[0]), column=column,
                fix=f"every row needs a non-empty {column}",
            )
    for name, rows in frame.groupby("model", sort=False, observed=True)["_row"]:
        problem = model_name_problem(name)
        if problem:
            raise EvaluationDataError(
                problem, file=file, row=int(rows.iloc[0]), column="model",
                fix="use a printable name without control characters or surrounding spaces (slashes and unicode are fine)",
            )
    raw = frame["score"]
    score = pd.to_numeric(raw, errors="coerce").astype("float64")
    bad = score.isna() | (score < 0) | (score > 1)
    if bad.any():
        first = bad.to_numpy().nonzero()[0][0]
        raise EvaluationDataError(
            f"score {raw.iloc[first]!r} is not a number in [0, 1] ({int(bad.sum())} such row(s) in this file)",
            file=file, row=int(frame["_row"].iloc[first]), column="score",
            fix="scores are 0/1 for correctness or a fraction in [0, 1]; drop rows without a score",
        )
    query = frame["query"].astype("string")
    if query.isna().any():
        raise EvaluationDataError(
            "empty query text", file=file, row=int(frame["_row"][query.isna()].iloc[0]), column="query",
            fix="every row needs the query text",
        )
    out = pd.DataFrame(
        {
            "model": frame["model"].astype(str),
            "query_id": frame["query_id"].astype(str),
            "query": query.astype(str),
            "benchmark": frame["benchmark"].astype(str),
            "score": score,
            "_row": frame["_row"].to_numpy(),
        }
    )
    for column in OPTIONAL_COLUMNS:
        if column in frame.columns:
            out[column] = frame[column].astype(str)
    if "split" in out.columns:
        bad = ~out["split"].isin(SPLITS)
        if bad.any():
            raise EvaluationDataError(
                f"split {out['split'][bad].iloc[0]!r} is not one of {list(SPLITS)}",
                file=file, row=int(out["_row"][bad].iloc[0]), column="split", fix="use train, val or test",
            )
    for column in ("model", "query_id", "query", "benchmark"):
        out[column] = out[column].astype("category")
    return out


def _check_consistency(table: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """Cross-row checks over the whole table; drops exact repeats. Returns (table, number of repeats dropped)."""
    keys = ["model", "query_id"]
    dup = table.duplicated(keys, keep=False)
    repeats = 0
    if dup.any():
        groups = table[dup].groupby(keys, observed=True, sort=False)
        conflicting = groups["score"].nunique() > 1
        if conflicting.any():
            model, query_id = conflicting[conflicting].index[0]
            rows = table[dup & (table["model"] == model) & (table["query_id"] == query_id)]
            a, b = rows.iloc[0], rows.iloc[1]
            raise EvaluationDataError(
                f"model {model!r} has two different scores for query_id {query_id!r}: {a['score']} "
                f"(row {a['_row']} of {a['_file']}) and {b['score']}",
                file=b["_file"], row=int(b["_row"]), column="score",
                fix="keep one score per (model, query_id); merge repeated runs before submitting",
            )
        before = len(table)
        table = table.drop_duplicates(keys, keep="last")
        repeats = before - len(table)
    texts = table[["query_id", "query"]].drop_duplicates()
    clash = texts["query_id"].duplicated(keep=False)
    if clash.any():
        query_id = texts.loc[clash, "query_id"].iloc[0]
        rows = table[table["query_id"] == query_id].drop_duplicates("query")
        a, b = rows.iloc[0], rows.iloc[1]
        raise EvaluationDataError(
            f"query_id {query_id!r} has two different texts: {str(a['query'])[:60]!r} (row {a['_row']} of "
            f"{a['_file']}) and {str(b['query'])[:60]!r}",
            file=b["_file"], row=int(b["_row"]), column="query",
            fix="one query_id must always name the same text; give different texts different ids",
        )
    if "split" in table.columns:
        splits = table[["query_id", "split"]].drop_duplicates()
        clash = splits["query_id"].duplicated(keep=False)
        if clash.any():
            row = table[table["query_id"] == splits.loc[clash, "query_id"].iloc[0]].iloc[-1]
            raise EvaluationDataError(
                f"query_id {row['query_id']!r} is in two splits", file=row["_file"], row=int(row["_row"]),
                column="split", fix="a query belongs to exactly one of train/val/test",
            )
    keys_by_name = pd.Series(table["model"].unique().astype(str))
    safe = keys_by_name.map(safe_model_key)
    if safe.duplicated().any():
        clash = keys_by_name[safe.duplicated(keep=False)].tolist()
        raise EvaluationDataError(
            f"model names {clash} map to the same key {safe[safe.duplicated()].iloc[0]!r}",
            file=table["_file"].iloc[0], column="model", fix="rename one of the models",
        )
    return table, repeats


@dataclass(frozen=True)
class ReadReport:
    """What reading found: rows read, exact repeats dropped, models, queries."""

    files: tuple[str, ...]
    rows_read: int
    repeats_dropped: int
    models: int
    queries: int


def read_evaluations_with_report(path: str | Path, *, chunk_rows: int = CSV_CHUNK_ROWS) -> tuple[pd.DataFrame, ReadReport]:
    """Read and validate a long-format file, or every evaluation file in a folder (an EmbedLLM folder too).

    Exact repeats of a (model, query_id, score) row are collapsed (counted in the report); conflicting
    scores for one (model, query_id) are an error. CSVs are streamed in chunks of ``chunk_rows`` and text
    columns are held as categoricals, so memory grows with the number of distinct queries, not of rows.
    """
    path = Path(path)
    if not path.exists():
        raise EvaluationDataError("no such file or folder", file=path, fix="check the path")
    if path.is_dir():
        from locus_model.embedllm import is_embedllm_folder, read_embedllm

        if is_embedllm_folder(path):
            table, report = read_embedllm(path)
            return table, ReadReport(
                (str(path),), int(report.rows_read), int(report.duplicates_dropped),
                table["model"].nunique(), table["query_id"].nunique(),
            )
        files = sorted(p for p in path.iterdir() if is_evaluation_file(p))
        if not files:
            raise EvaluationDataError(
                "the folder has no evaluation files", file=path, fix=f"add files ending in {list(EVALUATION_SUFFIXES)}"
            )
    else:
        files = [path]
    chunks = []
    for file in files:
        for chunk in iter_evaluation_chunks(file, chunk_rows=chunk_rows):
            valid = validate_chunk(chunk, file)
            valid["_file"] = pd.Categorical([str(file)] * len(valid))
            chunks.append(valid)
    rows_read = sum(len(c) for c in chunks)
    if rows_read == 0:
        raise EvaluationDataError(
            "the file has a header but no evaluation rows", file=files[0], row=1, fix="add at least one row"
        )
    table = _concat_categorical(chunks)
    table, repeats = _check_consistency(table)
    table = _finish(table)
    return table, ReadReport(tuple(map(str, files)), rows_read, repeats, table["model"].nunique(), table["query_id"].nunique())


def read_evaluations(path: str | Path, *, chunk_rows: int = CSV_CHUNK_ROWS) -> pd.DataFrame:
    """Read and validate evaluations (see :func:`read_evaluations_with_report`)."""
    return read_evaluations_with_report(path, chunk_rows=chunk_rows)[0]


def _concat_categorical(frames: list[pd.DataFrame]) -> pd.DataFrame:
    from pandas.api.types import union_categoricals

    if len(frames) == 1:
        return frames[0].reset_index(drop=True)
    out = {}
    for column in frames[0].columns:
        parts = [f[column] for f in frames]
        if isinstance(parts[0].dtype, pd.CategoricalDtype):
            out[column] = union_categoricals(parts)
        else:
            out[column] = np.concatenate([p.to_numpy() for p in parts])
    return pd.DataFrame(out)


def _finish(table: pd.DataFrame) -> pd.DataFrame:
    columns = list(EVALUATION_COLUMNS) + [c for c in OPTIONAL_COLUMNS if c in table.columns]
    out = table[columns].reset_index(drop=True)
    for column in ("model", "query_id", "query", "benchmark") + tuple(c for c in OPTIONAL_COLUMNS if c in out.columns):
        out[column] = out[column].astype(str)
    return out


def validate_evaluations(df: pd.DataFrame, *, source: str = "<in-memory table>") -> pd.DataFrame:
    """Validate an in-memory long table with the same rules as the file reader; returns a clean copy."""
    if df is None or len(df) == 0:
        raise EvaluationDataError("the table is empty", file=source, fix="add evaluation rows")
    frame = df.copy()
    _check_columns(list(frame.columns), EVALUATION_COLUMNS, Path(source))
    frame["_row"] = np.arange(1, len(frame) + 1)
    valid = validate_chunk(frame, Path(source))
    valid["_file"] = source
    table, _ = _check_consistency(valid)
    return _finish(table)


def read_models_file(path: str | Path) -> pd.DataFrame:
    """Read the companion models file (model, params_b, family); params_b in billions, may be empty."""
    path = Path(path)
    if not path.exists() or path.stat().st_size == 0:
        raise EvaluationDataError("the models file is missing or empty", file=path, fix="write a header model,params_b,family")
    frame = pd.read_csv(path, dtype=str, keep_default_na=False) if suffix_of(path) != ".parquet" else pd.read_parquet(path)
    _check_columns(list(frame.columns), ("model",), path)
    out = pd.DataFrame({"model": frame["model"].astype(str)})
    params = frame.get("params_b", pd.Series([""] * len(frame))).replace("", np.nan)
    out["params_b"] = pd.to_numeric(params, errors="coerce")
    bad = params.notna() & (out["params_b"].isna() | (out["params_b"] < 0))
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise EvaluationDataError(
            f"params_b {params.iloc[i]!r} is not a non-negative number", file=path, row=i + 1, column="params_b",
            fix="give the parameter count in billions (e.g. 7 or 1.5) or leave it empty",
        )
    out["family"] = frame.get("family", pd.Series([""] * len(frame))).astype(str)
    for column in frame.columns:
        if column not in out.columns:
            out[column] = frame[column]
    dup = out["model"].duplicated()
    if dup.any():
        i = int(np.flatnonzero(dup.to_numpy())[0])
        raise EvaluationDataError(
            f"model {out['model'].iloc[i]!r} is listed twice", file=path, row=i + 1, column="model", fix="list each model once"
        )
    return out


# ---------------------------------------------------------------------------------------------- dense form


@dataclass
class EvaluationMatrix:
    """The dense form the model code uses: scores (M, Q) with NaN where a model was not evaluated."""

    models: list[str]  # M
    query_ids: list[str]  # Q
    queries: list[str]  # Q
    benchmarks: np.ndarray  # (Q,) str
    scores: np.ndarray  # (M, Q) float32, NaN = not evaluated
    split: np.ndarray | None = None  # (Q,) str or None

    @classmethod
    def from_table(cls, table: pd.DataFrame) -> "EvaluationMatrix":
        queries = table.drop_duplicates("query_id").sort_values("query_id", kind="stable")
        models = sorted(table["model"].astype(str).unique())
        model_index = pd.Index(models)
        query_index = pd.Index(queries["query_id"].astype(str))
        scores = np.full((len(models), len(query_index)), np.nan, dtype=np.float32)
        scores[model_index.get_indexer(table["model"].astype(str)), query_index.get_indexer(table["query_id"].astype(str))] = (
            table["score"].to_numpy(np.float32)
        )
        split = queries["split"].to_numpy(str) if "split" in queries.columns else None
        return cls(
            models=models,
            query_ids=query_index.tolist(),
            queries=queries["query"].astype(str).tolist(),
            benchmarks=queries["benchmark"].to_numpy(str),
            scores=scores,
            split=split,
        )

    @property
    def shape(self) -> tuple[int, int]:
        return self.scores.shape


def merge_newest_wins(older: pd.DataFrame, newer: pd.DataFrame) -> pd.DataFrame:
    """All evaluations so far for onboarding: rows of ``newer`` replace rows of ``older`` with the same
    (model, query_id); everything else is kept."""
    both = pd.concat([older, newer], ignore_index=True)
    return both.drop_duplicates(["model", "query_id"], keep="last").reset_index(drop=True)


def fingerprint_evaluations(table: pd.DataFrame) -> str:
    """sha256 over the sorted (model, query_id, score) triples: identical evaluations, identical fingerprint."""
    part = table[["model", "query_id", "score"]].astype({"model": str, "query_id": str})
    part = part.sort_values(["model", "query_id"], kind="stable")
    digest = hashlib.sha256()
    digest.update(pd.util.hash_pandas_object(part, index=False).to_numpy().tobytes())
    return digest.hexdigest()[:16]

"""Long-format evaluations read into one validated table: a file, a folder of files, an EmbedLLM folder or what
an evaluation harness wrote (``read_evaluations``, with a ``ReadSummary``), and the companion *models file*
(``model, params_b, family``: ``read_models_file``).

Each file is streamed in chunks by data.file_chunks and every chunk checked by the contract's one validator
(data.contract); the chunks are joined as categoricals, so memory grows with the number of distinct queries, not
of rows. Every way a file can fail is an :class:`EvaluationDataError` naming the file, the row and the column, what
is wrong and how to fix it. Reading never modifies the file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from locus_model.data.contract import check_columns, check_consistency, finish_table, no_rows_error, validate_chunk
from locus_model.data.embedllm import read_embedllm
from locus_model.data.embedllm_files import is_embedllm_folder
from locus_model.data.errors import EVALUATION_SUFFIXES, EvaluationDataError, suffix_of
from locus_model.data.file_chunks import CSV_CHUNK_ROWS, is_evaluation_file, iter_evaluation_chunks, read_csv_table
from locus_model.data.harnesses import detect_harness, is_harness_drop, read_harness_output
from locus_model.data.limits import DropLimits, bounded

# the per-model cost keys of a models file, the models config of ``locus serve`` and the model catalog
# (locus_model.routing.costs reads them)
COST_KEYS = ("cost_per_query", "price_input_per_mtok", "price_output_per_mtok", "params_b")

PARQUET_BATCH_ROWS = 1 << 22  # read_evaluations keeps the whole table anyway: few, dictionary-encoded batches


@dataclass(frozen=True)
class ReadSummary:
    """What reading found: rows read, exact repeats dropped, models, queries."""

    files: tuple[str, ...]
    rows_read: int
    repeats_dropped: int
    models: int
    queries: int


def read_evaluations(
    path: str | Path, *, chunk_rows: int = CSV_CHUNK_ROWS, limits: DropLimits | None = None
) -> tuple[pd.DataFrame, ReadSummary]:
    """Read and validate a long-format file, or every evaluation file in a folder (an EmbedLLM folder too), or what
    an evaluation harness wrote (a folder, an archive or an Inspect log: locus_model.data.harnesses); returns
    (table, report).

    Exact repeats of a (model, query_id, score) row are collapsed (counted in the report); conflicting
    scores for one (model, query_id) are an error. CSVs are streamed in chunks of ``chunk_rows`` and text
    columns are held as categoricals, so memory grows with the number of distinct queries, not of rows.
    Parquet is read in batches of up to ``PARQUET_BATCH_ROWS`` (its text columns arrive dictionary-encoded).
    ``limits``: rows, models, bytes and time of this read, all files together (:class:`DropLimits`; None: the
    enclosing ``bounded`` read's, else the defaults).
    """
    with bounded(limits):
        return _read_evaluations(Path(path), chunk_rows)


def _read_evaluations(path: Path, chunk_rows: int) -> tuple[pd.DataFrame, ReadSummary]:
    if not path.exists():
        raise EvaluationDataError("no such file or folder", file=path, fix="check the path")
    if path.is_dir():
        if is_embedllm_folder(path):
            table, report = read_embedllm(path)
            return table, ReadSummary(
                (str(path),),
                int(report.rows_read),
                int(report.duplicates_dropped),
                table["model"].nunique(),
                table["query_id"].nunique(),
            )

        if detect_harness(path):  # what an evaluation harness wrote (lm-eval, Inspect, lighteval, HELM)
            return _read_harness(path)
        files = sorted(p for p in path.iterdir() if is_evaluation_file(p))
        if not files:
            raise EvaluationDataError(
                "the folder has no evaluation files", file=path, fix=f"add files ending in {list(EVALUATION_SUFFIXES)}"
            )
    else:
        if is_harness_drop(path):  # an archive of a harness's output, or an Inspect log
            return _read_harness(path)
        files = [path]
    chunks = []
    for file in files:
        rows = max(chunk_rows, PARQUET_BATCH_ROWS) if suffix_of(file) == ".parquet" else chunk_rows
        for chunk in iter_evaluation_chunks(file, chunk_rows=rows):
            valid = validate_chunk(chunk, file)
            valid["_file"] = pd.Categorical.from_codes(np.zeros(len(valid), np.int8), [str(file)])
            chunks.append(valid)
    rows_read = sum(len(c) for c in chunks)
    if rows_read == 0:
        raise no_rows_error(files[0])
    table = _concat_categorical(chunks)
    table, repeats = check_consistency(table)
    models, queries = table["model"].nunique(), table["query_id"].nunique()  # on the categoricals: fast
    return finish_table(table), ReadSummary(tuple(map(str, files)), rows_read, repeats, models, queries)


def _read_harness(path: Path) -> tuple[pd.DataFrame, ReadSummary]:

    table, harness = read_harness_output(path)
    return table, ReadSummary(harness.files, len(table), 0, len(harness.models), table["query_id"].nunique())


def _concat_categorical(frames: list[pd.DataFrame]) -> pd.DataFrame:

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


def read_models_file(path: str | Path) -> pd.DataFrame:
    """Read the companion models file (``model``, and any of ``params_b`` in billions, ``family``, the prices of
    COST_KEYS), a CSV (or .csv.gz) or Parquet file. Sizes and prices are floats, NaN where the
    cell is empty; anything else that is not a plain number >= 0 ("abc", NaN, 1e309, 0x10) is an
    EvaluationDataError naming the file, row and column, as is a file that cannot be read (a ragged row, an unclosed
    quote, binary bytes, a corrupt Parquet file)."""

    path = Path(path)
    if not path.is_file() or path.stat().st_size == 0:
        raise EvaluationDataError(
            "the models file is missing or empty", file=path, fix="write a header model,params_b,family"
        )
    if suffix_of(path) == ".parquet":
        try:
            frame = pd.read_parquet(path)
        except Exception as err:  # noqa: BLE001 (pyarrow raises several types for a cut or corrupt file)
            raise EvaluationDataError(
                f"not a readable Parquet file ({type(err).__name__}: {err})",
                file=path,
                fix="the file is cut off or corrupt: export or copy it again",
            ) from None
        check_columns(list(frame.columns), ("model",), path)
    else:
        frame = read_csv_table(path, required=("model",))
    out = pd.DataFrame({"model": frame["model"].astype(str)})
    out["params_b"] = _sizes_and_prices(frame, "params_b", path)
    out["family"] = frame.get("family", pd.Series([""] * len(frame))).astype(str)
    for column in frame.columns:
        if column not in out.columns:
            out[column] = _sizes_and_prices(frame, column, path) if column in COST_KEYS else frame[column]
    dup = out["model"].duplicated()
    if dup.any():
        i = int(np.flatnonzero(dup.to_numpy())[0])
        raise EvaluationDataError(
            f"model {out['model'].iloc[i]!r} is listed twice",
            file=path,
            row=i + 1,
            column="model",
            fix="list each model once",
        )
    return out


_NUMBER_CHARACTERS = frozenset("0123456789.eE+-")


def _sizes_and_prices(frame: pd.DataFrame, column: str, path: Path) -> np.ndarray:
    """A size or price column as floats (NaN where empty); any other value is an error at its row."""
    out = np.full(len(frame), np.nan)
    if column not in frame.columns:
        return out
    for i, value in enumerate(frame[column].tolist()):
        if (
            value is None
            or (isinstance(value, str) and not value.strip())
            or (isinstance(value, float) and np.isnan(value))
        ):
            continue  # empty (a Parquet null is NaN once in pandas)
        number = _plain_number(value)
        if number is None or number < 0:
            raise EvaluationDataError(
                f"{column} {value!r} is not a number >= 0"[:200],
                file=path,
                row=i + 1,
                column=column,
                fix=f"write {column} as a plain decimal number (e.g. 7, 1.5 or 2.5e-1) or leave it empty; text, NaN, "
                "infinity, hexadecimal and numbers beyond a float's range (1e309) are not sizes or prices",
            )
        out[i] = number
    return out


def _plain_number(value: object) -> float | None:
    """``value`` as a finite float when it is a number or a decimal text (digits, '.', an exponent); else None."""
    if isinstance(value, str):
        text = value.strip()
        if not set(text) <= _NUMBER_CHARACTERS:  # no "nan", "inf", "0x10", "1_000"
            return None
        try:
            number = float(text)
        except ValueError:
            return None
    elif isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_)):
        number = float(value)
    else:
        return None
    return number if math.isfinite(number) else None

"""The evaluation data contract: long-format evaluation tables, their validation, and the dense matrix.

An *evaluation* is one (model, query) pair with a score in [0, 1] (0/1 for correctness). Files are long
format, one row per evaluation, CSV (optionally gzipped) or Parquet, with the columns
``model, query_id, query, benchmark, score`` (an optional ``split`` column: train / val / test).
A companion *models file* has ``model, params_b, family``. See data/README.md for the full contract.

Every problem is raised as an :class:`EvaluationDataError` naming the file, the row (1-based data row, the
header not counted) and the column, what is wrong and how to fix it. Reading never modifies the file.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import re
import unicodedata
import warnings
import zlib
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator

import numpy as np
import pandas as pd

EVALUATION_COLUMNS = ("model", "query_id", "query", "benchmark", "score")
OPTIONAL_COLUMNS = ("split", "category")
MODELS_COLUMNS = ("model", "params_b", "family")
SPLITS = ("train", "val", "test")
EVALUATION_SUFFIXES = (".csv", ".csv.gz", ".parquet")
MAX_MODEL_NAME = 200
CSV_CHUNK_ROWS = 200_000  # rows per chunk when streaming a CSV: bounds memory for very large files
PARQUET_BATCH_ROWS = 1 << 22  # read_evaluations keeps the whole table anyway: few, dictionary-encoded batches


class EvaluationDataError(ValueError):
    """Bad evaluation data: says which file, row and column, what is wrong and how to fix it.

    ``row`` is the 1-based data row (the header not counted, blank lines skipped; for Parquet the row index + 1).
    ``line`` is the line an editor shows for a CSV (the header is line 1, so usually ``row + 1``); when not
    given for a CSV row it is found by re-reading the file (errors only). The message reads
    ``<file>, row 2 (line 3), column 'score': <problem>. How to fix: <fix>``.
    """

    def __init__(
        self,
        problem: str,
        *,
        file: str | Path | None = None,
        row: int | None = None,
        column: str | None = None,
        fix: str | None = None,
        line: int | None = None,
    ) -> None:
        if line is None and row is not None and file is not None:
            line = editor_line(file, row)
        self.problem, self.file, self.row, self.column, self.fix, self.line = problem, file, row, column, fix, line
        where = [str(file) if file is not None else "<evaluations>"]
        if row is not None:
            where.append(f"row {row}" + (f" (line {line})" if line is not None else ""))
        elif line is not None:
            where.append(f"line {line}")
        if column is not None:
            where.append(f"column '{column}'")
        message = ": ".join([", ".join(where), problem])
        if fix:
            message += f". How to fix: {fix}"
        super().__init__(message)

    def __reduce__(self):  # picklable (worker processes, run processes): rebuild from the fields, not the message
        return (_rebuild_error, (self.problem, self.file, self.row, self.column, self.fix, self.line))


def _rebuild_error(problem, file, row, column, fix, line) -> "EvaluationDataError":  # noqa: ANN001
    return EvaluationDataError(problem, file=file, row=row, column=column, fix=fix, line=line)


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
#
# Rows and lines. ``row`` is the 1-based data row: the header is not counted and blank lines are skipped (as
# pandas does), so data row r of a plain CSV is the editor's line r + 1. A quoted value holding a newline spans
# several lines; the message then names the line where the row starts (``EvaluationDataError.line``), found by
# re-reading the file with the csv module, only when an error is raised.


class _RecordError(Exception):
    """The csv module could not read a record (the error path only)."""


_TEXT_COLUMNS = ("model", "query_id", "query", "benchmark")
_CUT_OR_CORRUPT = (EOFError, OSError, zlib.error)  # gzip: cut (EOFError), not gzip/CRC (BadGzipFile), bad data (zlib)


def _open_binary(path: Path) -> BinaryIO:
    return gzip.open(path, "rb") if suffix_of(path) == ".csv.gz" else open(path, "rb")


def _stream_error(path: Path, err: BaseException, *, at_byte: int | None = None, line: int | None = None) -> EvaluationDataError:
    if suffix_of(path) == ".csv.gz":
        where = f" after {at_byte:,} bytes of text (about line {line})" if at_byte else ""
        return EvaluationDataError(
            f"the gzip data is cut off or corrupt{where} ({type(err).__name__}: {err})", file=path,
            fix="the file was not completely written or copied: write it again (gzip -t FILE checks it)",
        )
    return EvaluationDataError(f"the file cannot be read ({type(err).__name__}: {err})", file=path, fix="check the file")


def _csv_records(path: Path) -> Iterator[tuple[int, int, list[str]]]:
    """(data row, editor line where the row starts, fields) for each row of a CSV after its header.

    Error path only (slow, Python csv): undecodable bytes are replaced, NULs are kept; raises _RecordError."""
    before = csv.field_size_limit()
    csv.field_size_limit(2**31 - 1)
    try:
        with _open_binary(path) as raw, io.TextIOWrapper(raw, encoding="utf-8-sig", errors="replace", newline="") as text:
            reader = csv.reader(text)
            next(reader, None)
            row, start = 0, reader.line_num + 1
            for fields in reader:
                line, start = start, reader.line_num + 1
                if fields:  # blank lines are skipped, as pandas does
                    row += 1
                    yield row, line, fields
    except (csv.Error, *_CUT_OR_CORRUPT) as err:
        raise _RecordError(str(err)) from None
    finally:
        csv.field_size_limit(before)


def editor_line(path: str | Path, row: int) -> int | None:
    """The line an editor shows data row ``row`` of a CSV on (the header is line 1; a blank line or a value
    spanning lines moves later rows down). None for Parquet, a missing file or when the file cannot be read."""
    path = Path(path)
    if suffix_of(path) not in (".csv", ".csv.gz") or row < 1 or not path.is_file():
        return None
    try:
        return next((line for r, line, _ in _csv_records(path) if r == row), None)
    except _RecordError:
        return None


def ends_with_newline(path: str | Path) -> bool:
    """Whether a file's last byte is a newline (or the file is empty). A plain CSV whose last line has no newline
    is how a cut or still-running in-place write looks; see ``iter_evaluation_chunks(require_final_newline=...)``."""
    with open(path, "rb") as handle:
        if handle.seek(0, io.SEEK_END) == 0:
            return True
        handle.seek(-1, io.SEEK_END)
        return handle.read(1) in (b"\n", b"\r")


def _check_final_newline(path: Path) -> None:
    if suffix_of(path) != ".csv" or ends_with_newline(path):
        return
    with open(path, "rb") as handle:
        lines = sum(block.count(b"\n") for block in iter(lambda: handle.read(1 << 20), b"")) + 1
    raise EvaluationDataError(
        "the last line has no newline at its end: the file looks cut off, or is still being written",
        file=path, line=lines,
        fix="finish writing the file (write it as <name>.part and rename it when complete), then drop it again",
    )


class _GuardedStream(io.RawIOBase):
    """The bytes of a CSV (decompressed for .csv.gz) for pandas, stopping at the first NUL byte (pandas' C
    parser would silently end the value there: 'a\\0b' -> 'a') and turning gzip errors into
    EvaluationDataError. Counts bytes and newlines to say where a cut gzip stream ends."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path, self.raw, self.bytes, self.lines = path, _open_binary(path), 0, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # noqa: ANN001 (a writable buffer)
        try:
            n = self.raw.readinto(buffer)
        except _CUT_OR_CORRUPT as err:
            raise _stream_error(self.path, err, at_byte=self.bytes, line=self.lines + 1) from None
        data = bytes(memoryview(buffer)[:n])
        if b"\0" in data:
            raise _nul_error(self.path)
        self.bytes += n
        self.lines += data.count(b"\n")
        return n

    def close(self) -> None:
        self.raw.close()
        super().close()


def _nul_error(path: Path) -> EvaluationDataError:
    fix = "remove the NUL bytes (tr -d '\\000'); they usually mean a damaged file or binary data saved as text"
    try:
        with _open_binary(path) as raw, io.TextIOWrapper(raw, encoding="utf-8-sig", errors="replace", newline="") as text:
            header = next(csv.reader(text), [])
        for row, line, fields in _csv_records(path):
            for i, value in enumerate(fields):
                if "\0" in value:
                    column = header[i] if i < len(header) else None
                    return EvaluationDataError(f"a NUL byte in the value {value!r}", file=path, row=row, line=line,
                                               column=column, fix=fix)
    except _RecordError:
        pass
    return EvaluationDataError("the file contains a NUL byte", file=path, fix=fix)


def _csv_header(path: Path) -> list[str]:
    """The header's column names, read with the csv module; every way it can fail is an EvaluationDataError."""
    if path.stat().st_size == 0:
        raise EvaluationDataError("the file is empty", file=path, fix="write a header and at least one evaluation row")
    try:
        with _open_binary(path) as raw:  # the first line only: a bad byte further down is reported at its row
            first = raw.readline(1 << 20).decode("utf-8-sig")
        header = next(csv.reader([first.rstrip("\r\n")]), None) if first.strip("\r\n") else None
    except UnicodeDecodeError as err:
        raise EvaluationDataError(f"the header is not valid UTF-8 ({err})", file=path, line=1,
                                  fix="re-save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)") from None
    except csv.Error as err:
        raise EvaluationDataError(f"the header cannot be parsed ({err})", file=path, line=1,
                                  fix="the first line names the columns, separated by commas") from None
    except _CUT_OR_CORRUPT as err:
        raise _stream_error(path, err, at_byte=0, line=1) from None
    if not header:
        raise EvaluationDataError("the file has no header and no rows", file=path, fix="write a header line")
    if any(_CONTROL.search(name) for name in header):
        raise EvaluationDataError(f"the header {header!r} contains control characters (NUL bytes?)", file=path,
                                  line=1, fix="the first line names the columns in plain text")
    return header


def _check_columns(columns: list[str], required: tuple[str, ...], file: Path) -> None:
    columns = [str(c) for c in columns]
    twice = sorted({c for c in columns if columns.count(c) > 1})
    if twice:
        raise EvaluationDataError(
            f"the header names {twice} more than once; found {columns}", file=file, column=twice[0],
            fix="name each column once (a second score column is ambiguous: keep one)",
        )
    missing = [c for c in required if c not in columns]
    if missing:
        raise EvaluationDataError(
            f"missing column(s) {missing} in the header; found {columns}",
            file=file,
            column=missing[0],
            fix=f"the header must name the columns {list(required)} (see data/README.md)",
        )


def _utf8_error(path: Path) -> EvaluationDataError:
    """Where the first undecodable byte is: the physical line, then the data row that holds it."""
    line, detail = 0, "undecodable bytes"
    try:
        with _open_binary(path) as handle:
            for line_no, raw in enumerate(handle, start=1):
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError as err:
                    line, detail = line_no, str(err)
                    break
    except _CUT_OR_CORRUPT:
        pass
    row = None
    if line > 1:  # the data row holding that line: the last row starting at or before it
        try:
            for r, start, _ in _csv_records(path):
                if start > line:
                    break
                row = r
        except _RecordError:
            pass
    return EvaluationDataError(f"the file is not valid UTF-8 ({detail})", file=path, row=row, line=line or None,
                               fix="re-save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)")


def _parse_error(path: Path, err: Exception, n_columns: int) -> EvaluationDataError:
    """Locate what pandas could not parse: an unclosed quote, or the first row whose field count is not the header's."""
    message = str(err).replace("Error tokenizing data. C error: ", "").strip()
    last = None
    try:
        for row, line, fields in _csv_records(path):
            last = (row, line)
            if len(fields) != n_columns and "EOF inside string" not in message:
                return EvaluationDataError(
                    f"the row has {len(fields)} fields, the header has {n_columns}", file=path, row=row, line=line,
                    fix='quote values that hold commas ("a, b"), write a literal quote as "", and check for a cut or merged line',
                )
    except _RecordError:
        pass
    if "EOF inside string" in message and last is not None:
        return EvaluationDataError(
            "a quoted value starting in this row is never closed (EOF inside string: the quote runs to the end of the file)",
            file=path, row=last[0], line=last[1],
            fix='close the quote; a literal quote inside a quoted value is written as ""; a cut file must be written again',
        )
    found = re.search(r"in line (\d+)", message)
    row = int(found.group(1)) - 1 if found else None  # pandas counts the header as line 1
    return EvaluationDataError(f"the CSV cannot be parsed ({message})", file=path, row=row,
                               fix="check quoting and the number of fields per line")


def _csv_chunks(path: Path, chunk_rows: int) -> Iterator[pd.DataFrame]:
    header = _csv_header(path)
    _check_columns(header, EVALUATION_COLUMNS, path)
    dtype = defaultdict(lambda: str, {c: "category" for c in (*_TEXT_COLUMNS, "score", *OPTIONAL_COLUMNS)})

    def readable(step):  # noqa: ANN001, ANN202 (pandas raises these while it reads, at any chunk)
        try:
            with warnings.catch_warnings():
                # a first row with too many fields is a warning ("loss of data"), not an error, in pandas
                warnings.simplefilter("error", pd.errors.ParserWarning)
                return step()
        except UnicodeDecodeError:
            raise _utf8_error(path) from None
        except (pd.errors.ParserError, pd.errors.ParserWarning) as err:
            raise _parse_error(path, err, len(header)) from None
        except pd.errors.EmptyDataError:
            raise EvaluationDataError("the file has no header and no rows", file=path, fix="write a header line") from None

    with io.BufferedReader(_GuardedStream(path), buffer_size=1 << 20) as stream:
        reader = readable(lambda: pd.read_csv(stream, dtype=dtype, na_filter=False, encoding="utf-8-sig",
                                              encoding_errors="strict", chunksize=chunk_rows, index_col=False))
        with reader:
            while (frame := readable(lambda: next(reader, None))) is not None:
                yield frame


def _parquet_chunks(path: Path, chunk_rows: int) -> Iterator[pd.DataFrame]:
    if path.stat().st_size == 0:
        raise EvaluationDataError("the file is empty", file=path, fix="write a Parquet file with evaluation rows")
    import pyarrow as pa
    import pyarrow.parquet as pq

    def unreadable(err: BaseException) -> EvaluationDataError:
        return EvaluationDataError(f"not a readable Parquet file ({type(err).__name__}: {err})", file=path,
                                   fix="the file is cut off or corrupt: export or copy it again")

    text = (*_TEXT_COLUMNS, *OPTIONAL_COLUMNS)
    try:  # pyarrow raises ArrowInvalid, OSError, ValueError ... for corrupt files: all mean the same here
        schema = pq.read_schema(path)
        names = schema.names
        strings = [f.name for f in schema if f.name in text and (pa.types.is_string(f.type) or pa.types.is_large_string(f.type))]
        parquet = pq.ParquetFile(path, read_dictionary=strings)  # text columns arrive as categoricals
    except Exception as err:  # noqa: BLE001 (re-raised with the file and a fix)
        raise unreadable(err) from None
    _check_columns(names, EVALUATION_COLUMNS, path)
    columns = [c for c in (*EVALUATION_COLUMNS, *OPTIONAL_COLUMNS) if c in names]
    batches = parquet.iter_batches(batch_size=chunk_rows, columns=columns)
    while True:
        try:
            batch = next(batches)
            arrays = {}
            for name, array in zip(batch.schema.names, batch.columns):
                if name in text and not pa.types.is_dictionary(array.type):
                    array = array.cast(pa.string()).dictionary_encode()  # e.g. integer query ids
                arrays[name] = array
            frame = pa.table(arrays).to_pandas()
        except StopIteration:
            return
        except Exception as err:  # noqa: BLE001 (a page cut or corrupt: re-raised with the file and a fix)
            raise unreadable(err) from None
        yield frame


def iter_evaluation_chunks(
    path: Path, *, chunk_rows: int = CSV_CHUNK_ROWS, require_final_newline: bool = False
) -> Iterator[pd.DataFrame]:
    """Raw chunks of an evaluation file with a ``_row`` column (1-based data row); text columns categorical.

    Every way the file can fail to read (cut or corrupt gzip or Parquet, not UTF-8, NUL bytes, a row with the
    wrong number of fields, an unclosed quote, a repeated column name) is an EvaluationDataError.
    ``require_final_newline``: refuse a plain CSV whose last line has no newline (a cut in-place write; gzip
    and Parquet check their own end). Not the default: editors and tools often omit the final newline.
    """
    path = Path(path)
    suffix = suffix_of(path)
    if suffix == "":
        raise EvaluationDataError(
            f"unsupported file type '{path.suffix}'", file=path, fix=f"use one of {list(EVALUATION_SUFFIXES)}"
        )
    if require_final_newline:
        _check_final_newline(path)
    chunks = _parquet_chunks(path, chunk_rows) if suffix == ".parquet" else _csv_chunks(path, chunk_rows)
    offset = 0
    for frame in chunks:
        frame["_row"] = np.arange(offset + 1, offset + len(frame) + 1)
        offset += len(frame)
        yield frame


# ---------------------------------------------------------------------------------------------- validation

# Control characters: none in names, ids, benchmarks and splits. The query text may hold tabs, newlines and
# the control characters real benchmarks contain (MMLU-Pro has \x07, \x08, \x0b from mis-escaped LaTeX such
# as "\alpha"), but never a NUL, which CSV tools truncate at.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL_RE2 = r"[\x00-\x1f\x7f-\x{9f}]"
_INVISIBLE_RE2 = r"[\p{Cc}\p{Cf}\x{2028}\x{2029}]"  # model names: Cc, Cf, Zl, Zp (as model_name_problem)


def _text_categorical(values: pd.Series) -> pd.Categorical:
    """A text column as a Categorical of str (NaN/None where missing), without a Python loop over rows."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        codes, uniques = values.cat.codes.to_numpy(), values.cat.categories
    else:
        codes, uniques = pd.factorize(values.to_numpy(object), use_na_sentinel=True)
    if pd.api.types.infer_dtype(uniques, skipna=False) not in ("string", "empty"):
        as_text = np.array([str(u) for u in uniques], dtype=object)  # integer ids, floats ...
        new_codes, uniques = pd.factorize(as_text)
        codes = np.where(codes >= 0, new_codes[np.maximum(codes, 0)], -1)
    return pd.Categorical.from_codes(codes, categories=pd.Index(np.asarray(uniques, dtype=object), dtype=object))


def _bad_categories(column: str, categories: pd.Index) -> np.ndarray:
    """Which distinct values of ``column`` break a rule (vectorised: pyarrow.compute over the distinct values)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    values = pa.array(categories.to_numpy(object), type=pa.string())
    if column == "category":  # optional free label: may be empty
        bad = pa.array(np.zeros(len(values), dtype=bool))
    else:  # empty or whitespace only (as str.isspace)
        bad = pc.match_substring_regex(values, r"^[\s\x0b\x1c-\x1f\x{85}\p{Z}]*$")
    if column == "query":
        bad = pc.or_(bad, pc.match_substring(values, "\0"))
    else:
        bad = pc.or_(bad, pc.match_substring_regex(values, _CONTROL_RE2))
    if column == "model":
        bad = pc.or_(bad, pc.match_substring_regex(values, _INVISIBLE_RE2))
        bad = pc.or_(bad, pc.not_equal(pc.utf8_trim_whitespace(values), values))
        bad = pc.or_(bad, pc.greater(pc.utf8_length(values), MAX_MODEL_NAME))
        bad = pc.or_(bad, pc.is_in(values, pa.array([".", ".."])))
    if column == "split":
        bad = pc.or_(bad, pc.invert(pc.is_in(values, pa.array(SPLITS))))
    return np.asarray(bad.to_numpy(zero_copy_only=False), dtype=bool)


def _value_problem(column: str, value: str) -> tuple[str, str]:
    """(problem, fix) for one value that _bad_categories flagged."""
    if column == "model":
        problem = model_name_problem(value) or f"the model name {value!r} is not usable"
        return problem, "use a printable name without control characters or surrounding spaces (slashes and unicode are fine)"
    if "\0" in value:
        return (f"a NUL byte in the value {value!r}",
                "remove the NUL bytes (tr -d '\\000'); they usually mean a damaged file or binary data saved as text")
    if not value.strip():
        what = "query text" if column == "query" else column
        return f"empty {what}" + (f" ({value!r})" if value else ""), f"every row needs a non-empty {what}"
    if column == "split":
        return f"split {value!r} is not one of {list(SPLITS)}", "use train, val or test"
    return (f"{column} {value!r} contains control characters",
            f"a {column} is printable text: remove tabs, newlines and other control characters")


def validate_chunk(frame: pd.DataFrame, file: Path) -> pd.DataFrame:
    """Per-row checks of one chunk; returns the chunk with a float ``score`` and categorical text columns.

    Vectorised: the rules run over each column's distinct values; the first offending row is looked up only
    when a rule fails."""
    _check_columns(list(frame.columns), EVALUATION_COLUMNS, file)
    rows = frame["_row"].to_numpy()
    out: dict[str, object] = {}
    for column in (*_TEXT_COLUMNS, *(c for c in OPTIONAL_COLUMNS if c in frame.columns)):
        values = _text_categorical(frame[column])
        bad = np.append(_bad_categories(column, values.categories), True)  # the last entry: code -1, missing
        bad_rows = bad[values.codes]
        if bad_rows.any():
            first = int(bad_rows.argmax())
            code = int(values.codes[first])
            if code < 0:
                problem, fix = f"missing {column}", f"every row needs a {column}"
            else:
                problem, fix = _value_problem(column, str(values.categories[code]))
            raise EvaluationDataError(problem, file=file, row=int(rows[first]), column=column, fix=fix)
        out[column] = values
    score = _scores(frame["score"])
    bad = np.isnan(score) | (score < 0) | (score > 1)
    if bad.any():
        first = int(bad.argmax())
        raise EvaluationDataError(
            f"score {frame['score'].iloc[first]!r} is not a number in [0, 1] ({int(bad.sum())} such row(s) in this chunk)",
            file=file, row=int(rows[first]), column="score",
            fix="scores are 0/1 for correctness or a fraction in [0, 1]; drop rows without a score",
        )
    result = pd.DataFrame({c: out[c] for c in _TEXT_COLUMNS})
    result["score"] = score
    result["_row"] = rows
    for column in OPTIONAL_COLUMNS:
        if column in out:
            result[column] = out[column]
    return result


def _scores(raw: pd.Series) -> np.ndarray:
    """float64 scores, NaN where a value is not a number."""
    if isinstance(raw.dtype, pd.CategoricalDtype):  # CSV: few distinct strings ('0', '1'): convert those only
        numbers = pd.to_numeric(pd.Series(raw.cat.categories.to_numpy(object)), errors="coerce")
        return np.append(numbers.to_numpy(np.float64, na_value=np.nan), np.nan)[raw.cat.codes.to_numpy()]
    if pd.api.types.is_bool_dtype(raw) or pd.api.types.is_numeric_dtype(raw):
        return raw.to_numpy(np.float64, na_value=np.nan)
    return pd.to_numeric(raw, errors="coerce").to_numpy(np.float64, na_value=np.nan)


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
    Parquet is read in batches of up to ``PARQUET_BATCH_ROWS`` (its text columns arrive dictionary-encoded).
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
        rows = max(chunk_rows, PARQUET_BATCH_ROWS) if suffix_of(file) == ".parquet" else chunk_rows
        for chunk in iter_evaluation_chunks(file, chunk_rows=rows):
            valid = validate_chunk(chunk, file)
            valid["_file"] = pd.Categorical.from_codes(np.zeros(len(valid), np.int8), [str(file)])
            chunks.append(valid)
    rows_read = sum(len(c) for c in chunks)
    if rows_read == 0:
        raise EvaluationDataError(
            "the file has a header but no evaluation rows", file=files[0], row=1, fix="add at least one row"
        )
    table = _concat_categorical(chunks)
    table, repeats = _check_consistency(table)
    models, queries = table["model"].nunique(), table["query_id"].nunique()  # on the categoricals: fast
    return _finish(table), ReadReport(tuple(map(str, files)), rows_read, repeats, models, queries)


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
    for column in (*_TEXT_COLUMNS, *(c for c in OPTIONAL_COLUMNS if c in out.columns)):
        values = out[column]
        if isinstance(values.dtype, pd.CategoricalDtype):  # categories.take: astype(str) would build a <U array
            out[column] = np.asarray(values.cat.categories, dtype=object).take(values.cat.codes.to_numpy())
        else:
            out[column] = values.astype(str)
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


def fingerprint_evaluations(table: pd.DataFrame) -> str:
    """sha256 over the sorted (model, query_id, score) triples: identical evaluations, identical fingerprint."""
    part = table[["model", "query_id", "score"]].astype({"model": str, "query_id": str})
    part = part.sort_values(["model", "query_id"], kind="stable")
    digest = hashlib.sha256()
    digest.update(pd.util.hash_pandas_object(part, index=False).to_numpy().tobytes())
    return digest.hexdigest()[:16]

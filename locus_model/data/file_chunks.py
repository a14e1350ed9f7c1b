"""One evaluation file streamed in raw chunks: CSV (optionally gzipped) and Parquet, every way it can fail to read
located.

``iter_evaluation_chunks`` yields the file's rows in chunks (text columns categorical, a 1-based ``_row``), not yet
validated: the contract (data.contract) checks the values, data.long_format assembles whole tables, the drop
folder validates file by file. A gzip or Parquet file cut off or corrupt, text that is not UTF-8, NUL bytes, a row
with the wrong number of fields, an unclosed quote: each is an :class:`EvaluationDataError` naming the file, the row
(and the editor's line), the column and how to fix it, never a gzip, pandas or pyarrow traceback. Reading never
modifies the file.
"""

from __future__ import annotations

import csv
import io
import re
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd

from locus_model.data.contract import CONTROL, EVALUATION_COLUMNS, OPTIONAL_COLUMNS, TEXT_COLUMNS, check_columns
from locus_model.data.errors import (
    CUT_OR_CORRUPT,
    EVALUATION_SUFFIXES,
    CutOffError,
    EvaluationDataError,
    RecordError,
    csv_records,
    open_binary,
    suffix_of,
)
from locus_model.data.limits import FIX_SPLIT, Budget, DropLimits, budget

CSV_CHUNK_ROWS = 200_000  # rows per chunk when streaming a CSV: bounds memory for very large files


def is_evaluation_file(path: Path) -> bool:
    return path.is_file() and not path.name.startswith(".") and suffix_of(path) != ""


def _stream_error(
    path: Path, err: BaseException, *, at_byte: int | None = None, line: int | None = None
) -> EvaluationDataError:
    if suffix_of(path) == ".csv.gz":
        where = f" after {at_byte:,} bytes of text (about line {line})" if at_byte else ""
        return CutOffError(
            f"the gzip data is cut off or corrupt{where} ({type(err).__name__}: {err})",
            file=path,
            fix="the file was not completely written or copied: write it again (gzip -t FILE checks it)",
        )
    return EvaluationDataError(
        f"the file cannot be read ({type(err).__name__}: {err})", file=path, fix="check the file"
    )


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
    raise CutOffError(
        "the last line has no newline at its end: the file looks cut off, or is still being written",
        file=path,
        line=lines,
        fix="finish writing the file (write it as <name>.part and rename it when complete), then drop it again",
    )


class _GuardedStream(io.RawIOBase):
    """The bytes of a CSV (decompressed for .csv.gz) for pandas, stopping at the first NUL byte (pandas' C
    parser would silently end the value there: 'a\\0b' -> 'a') and turning gzip errors into
    EvaluationDataError. Counts bytes and newlines to say where a cut gzip stream ends, and a .csv.gz's inflated
    bytes against the read's budget."""

    def __init__(self, path: Path, current: Budget) -> None:
        super().__init__()
        self.path, self.raw, self.bytes, self.lines = path, open_binary(path), 0, 0
        self.current, self.inflating = current, suffix_of(path) == ".csv.gz"

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # noqa: ANN001 (a writable buffer)
        try:
            n = self.raw.readinto(buffer)
        except CUT_OR_CORRUPT as err:
            raise _stream_error(self.path, err, at_byte=self.bytes, line=self.lines + 1) from None
        data = bytes(memoryview(buffer)[:n])
        if b"\0" in data:
            raise _nul_error(self.path)
        self.bytes += n
        self.lines += data.count(b"\n")
        if self.inflating:
            self.current.unpack(n, self.path, timed=False)
        return n

    def close(self) -> None:
        self.raw.close()
        super().close()


def _nul_error(path: Path) -> EvaluationDataError:
    fix = "remove the NUL bytes (tr -d '\\000'); they usually mean a damaged file or binary data saved as text"
    try:
        with (
            open_binary(path) as raw,
            io.TextIOWrapper(raw, encoding="utf-8-sig", errors="replace", newline="") as text,
        ):
            header = next(csv.reader(text), [])
        for row, line, fields in csv_records(path):
            for i, value in enumerate(fields):
                if "\0" in value:
                    column = header[i] if i < len(header) else None
                    return EvaluationDataError(
                        f"a NUL byte in the value {value!r}", file=path, row=row, line=line, column=column, fix=fix
                    )
    except RecordError:
        pass
    return EvaluationDataError("the file contains a NUL byte", file=path, fix=fix)


def _csv_header(path: Path) -> list[str]:
    """The header's column names, read with the csv module; every way it can fail is an EvaluationDataError."""
    if path.stat().st_size == 0:
        raise EvaluationDataError("the file is empty", file=path, fix="write a header and at least one evaluation row")
    try:
        with open_binary(path) as raw:  # the first line only: a bad byte further down is reported at its row
            first = raw.readline(1 << 20).decode("utf-8-sig")
        header = next(csv.reader([first.rstrip("\r\n")]), None) if first.strip("\r\n") else None
    except UnicodeDecodeError as err:
        raise EvaluationDataError(
            f"the header is not valid UTF-8 ({err})",
            file=path,
            line=1,
            fix="re-save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)",
        ) from None
    except csv.Error as err:
        raise EvaluationDataError(
            f"the header cannot be parsed ({err})",
            file=path,
            line=1,
            fix="the first line names the columns, separated by commas",
        ) from None
    except CUT_OR_CORRUPT as err:
        raise _stream_error(path, err, at_byte=0, line=1) from None
    if not header:
        raise EvaluationDataError("the file has no header and no rows", file=path, fix="write a header line")
    if any(CONTROL.search(name) for name in header):
        raise EvaluationDataError(
            f"the header {header!r} contains control characters (NUL bytes?)",
            file=path,
            line=1,
            fix="the first line names the columns in plain text",
        )
    return header


def _utf8_error(path: Path) -> EvaluationDataError:
    """Where the first undecodable byte is: the physical line, then the data row that holds it."""
    line, detail = 0, "undecodable bytes"
    try:
        with open_binary(path) as handle:
            for line_no, raw in enumerate(handle, start=1):
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError as err:
                    line, detail = line_no, str(err)
                    break
    except CUT_OR_CORRUPT:
        pass
    row = None
    if line > 1:  # the data row holding that line: the last row starting at or before it
        try:
            for r, start, _ in csv_records(path):
                if start > line:
                    break
                row = r
        except RecordError:
            pass
    return EvaluationDataError(
        f"the file is not valid UTF-8 ({detail})",
        file=path,
        row=row,
        line=line or None,
        fix="re-save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)",
    )


def _parse_error(path: Path, err: Exception, n_columns: int) -> EvaluationDataError:
    """Locate what pandas could not parse: an unclosed quote, or the first row whose field count is not the header's."""
    message = str(err).replace("Error tokenizing data. C error: ", "").strip()
    last = None
    try:
        for row, line, fields in csv_records(path):
            last = (row, line)
            if len(fields) != n_columns and "EOF inside string" not in message:
                return EvaluationDataError(
                    f"the row has {len(fields)} fields, the header has {n_columns}",
                    file=path,
                    row=row,
                    line=line,
                    fix='quote values that hold commas ("a, b"), write a literal quote as "", and check for a cut or '
                    "merged line",
                )
    except RecordError:
        pass
    if "EOF inside string" in message and last is not None:
        return CutOffError(
            "a quoted value starting in this row is never closed (EOF inside "
            "string: the quote runs to the end of the file)",
            file=path,
            row=last[0],
            line=last[1],
            fix='close the quote; a literal quote inside a quoted value is written as ""; a cut file must be written '
            "again",
        )
    found = re.search(r"in line (\d+)", message)
    at_row = int(found.group(1)) - 1 if found else None  # pandas counts the header as line 1
    return EvaluationDataError(
        f"the CSV cannot be parsed ({message})",
        file=path,
        row=at_row,
        fix="check quoting and the number of fields per line",
    )


def _csv_chunks(
    path: Path,
    chunk_rows: int,
    current: Budget,
    *,
    required: tuple[str, ...] = EVALUATION_COLUMNS,
    categorical: tuple[str, ...] = (*TEXT_COLUMNS, "score", *OPTIONAL_COLUMNS),
) -> Iterator[pd.DataFrame]:
    """The CSV's rows in chunks, every column text (``categorical`` ones as categoricals)."""
    header = _csv_header(path)
    check_columns(header, required, path)
    dtype: defaultdict[str, type[str] | str] = defaultdict(lambda: str, {c: "category" for c in categorical})

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
            raise EvaluationDataError(
                "the file has no header and no rows", file=path, fix="write a header line"
            ) from None

    with io.BufferedReader(_GuardedStream(path, current), buffer_size=1 << 20) as stream:
        reader = readable(
            lambda: pd.read_csv(
                stream,
                dtype=dtype,
                na_filter=False,
                encoding="utf-8-sig",
                encoding_errors="strict",
                chunksize=chunk_rows,
                index_col=False,
            )
        )
        with reader:
            while (frame := readable(lambda: next(reader, None))) is not None:
                yield frame


def _parquet_chunks(path: Path, chunk_rows: int, current: Budget) -> Iterator[pd.DataFrame]:
    if path.stat().st_size == 0:
        raise EvaluationDataError("the file is empty", file=path, fix="write a Parquet file with evaluation rows")
    import pyarrow as pa  # why: pyarrow only for Parquet input (pandas loads it lazily too)
    import pyarrow.parquet as pq  # why: pyarrow only for Parquet input (pandas loads it lazily too)

    def unreadable(err: BaseException) -> EvaluationDataError:
        return EvaluationDataError(
            f"not a readable Parquet file ({type(err).__name__}: {err})",
            file=path,
            fix="the file is cut off or corrupt: export or copy it again",
        )

    text = (*TEXT_COLUMNS, *OPTIONAL_COLUMNS)
    try:  # pyarrow raises ArrowInvalid, OSError, ValueError ... for corrupt files: all mean the same here
        schema = pq.read_schema(path)
        names = schema.names
        strings = [
            f.name
            for f in schema
            if f.name in text and (pa.types.is_string(f.type) or pa.types.is_large_string(f.type))
        ]
        parquet = pq.ParquetFile(path, read_dictionary=strings)  # text columns arrive as categoricals
    except Exception as err:  # noqa: BLE001 (re-raised with the file and a fix)
        raise unreadable(err) from None
    check_columns(names, EVALUATION_COLUMNS, path)
    declared = parquet.metadata.num_rows  # what pyarrow will read: refused here, before any row is read
    if current.rows + declared > current.limits.max_rows:
        raise EvaluationDataError(
            f"the file has {declared:,} rows: the drop would have more than "
            f"{current.limits.max_rows:,} evaluation rows",
            file=path,
            fix=FIX_SPLIT,
        )
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


def read_csv_table(path: Path, *, required: tuple[str, ...]) -> pd.DataFrame:
    """A small CSV (e.g. the models file) whole, every column text (empty cells ""), with the header naming
    ``required``; read as evaluation files are, so every way it can fail (not UTF-8, NUL bytes, a row with the wrong
    number of fields, an unclosed quote, a cut gzip stream) is an EvaluationDataError naming the file and row."""
    path = Path(path)
    frames = list(_csv_chunks(path, CSV_CHUNK_ROWS, budget(), required=required, categorical=()))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=_csv_header(path), dtype=str)


def iter_evaluation_chunks(
    path: Path,
    *,
    chunk_rows: int = CSV_CHUNK_ROWS,
    require_final_newline: bool = False,
    limits: DropLimits | None = None,
) -> Iterator[pd.DataFrame]:
    """Raw chunks of an evaluation file with a ``_row`` column (1-based data row); text columns categorical.

    Every way the file can fail to read (cut or corrupt gzip or Parquet, not UTF-8, NUL bytes, a row with the
    wrong number of fields, an unclosed quote, a repeated column name) is an EvaluationDataError.
    ``require_final_newline``: refuse a plain CSV whose last line has no newline (a cut in-place write; gzip
    and Parquet check their own end). Not the default: editors and tools often omit the final newline.
    ``limits``: rows, models and (.csv.gz) inflated bytes this read may take (:class:`DropLimits`; None: the
    enclosing ``bounded`` read's, else the defaults): rows and models are counted chunk by chunk, a Parquet file's
    rows from its footer before any is read, and past a limit the read stops with an EvaluationDataError.
    """
    path = Path(path)
    suffix = suffix_of(path)
    if suffix == "":
        raise EvaluationDataError(
            f"unsupported file type '{path.suffix}'", file=path, fix=f"use one of {list(EVALUATION_SUFFIXES)}"
        )
    if require_final_newline:
        _check_final_newline(path)
    current = budget() if limits is None else Budget(limits)
    chunks = (
        _parquet_chunks(path, chunk_rows, current) if suffix == ".parquet" else _csv_chunks(path, chunk_rows, current)
    )
    offset = 0
    for frame in chunks:
        current.count_rows(len(frame), path, first_row=offset + 1)
        frame["_row"] = np.arange(offset + 1, offset + len(frame) + 1)
        offset += len(frame)
        if "model" in frame.columns:
            first = frame.loc[~frame["model"].duplicated(), ["model", "_row"]]
            current.count_models(zip(map(str, first["model"]), map(int, first["_row"])), path)
        yield frame

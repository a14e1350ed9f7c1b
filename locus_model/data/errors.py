"""The error every reader and the validator raise: which file, row and column, what is wrong, how to fix it.

Rows and lines. ``row`` is the 1-based data row: the header is not counted and blank lines are skipped (as
pandas does), so data row r of a plain CSV is the editor's line r + 1. A quoted value holding a newline spans
several lines; the message then names the line where the row starts (``EvaluationDataError.line``), found by
re-reading the file with the csv module, only when an error is raised.
"""

from __future__ import annotations

import csv
import gzip
import io
import zlib
from pathlib import Path
from typing import Iterator

EVALUATION_SUFFIXES = (".csv", ".csv.gz", ".parquet")
CUT_OR_CORRUPT = (EOFError, OSError, zlib.error)  # gzip: cut (EOFError), not gzip/CRC (BadGzipFile), bad data (zlib)


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
        return (_rebuild_error, (self.problem, self.file, self.row, self.column, self.fix, self.line, type(self)))


class CutOffError(EvaluationDataError):
    """The file ends the way a file still being written does (no newline after the last line, a quoted value never
    closed, a gzip stream cut): the drop folder waits for the writer before it rejects it."""


def _rebuild_error(problem, file, row, column, fix, line, kind=EvaluationDataError) -> "EvaluationDataError":  # noqa: ANN001
    return kind(problem, file=file, row=row, column=column, fix=fix, line=line)


def suffix_of(path: Path) -> str:
    """The evaluation-file suffix of ``path`` ('.csv', '.csv.gz', '.parquet') or '' if it is none of them."""
    name = path.name.lower()
    return next((s for s in sorted(EVALUATION_SUFFIXES, key=len, reverse=True) if name.endswith(s)), "")


class RecordError(Exception):
    """The csv module could not read a record (the error path only)."""


def open_binary(path: Path) -> gzip.GzipFile | io.BufferedReader:
    return gzip.open(path, "rb") if suffix_of(path) == ".csv.gz" else open(path, "rb")


def csv_records(path: Path) -> Iterator[tuple[int, int, list[str]]]:
    """(data row, editor line where the row starts, fields) for each row of a CSV after its header.

    Error path only (slow, Python csv): undecodable bytes are replaced, NULs are kept; raises RecordError."""
    before = csv.field_size_limit()
    csv.field_size_limit(2**31 - 1)
    try:
        with (
            open_binary(path) as raw,
            io.TextIOWrapper(raw, encoding="utf-8-sig", errors="replace", newline="") as text,
        ):
            reader = csv.reader(text)
            next(reader, None)
            row, start = 0, reader.line_num + 1
            for fields in reader:
                line, start = start, reader.line_num + 1
                if fields:  # blank lines are skipped, as pandas does
                    row += 1
                    yield row, line, fields
    except (csv.Error, *CUT_OR_CORRUPT) as err:
        raise RecordError(str(err)) from None
    finally:
        csv.field_size_limit(before)


def editor_line(path: str | Path, row: int) -> int | None:
    """The line an editor shows data row ``row`` of a CSV on (the header is line 1; a blank line or a value
    spanning lines moves later rows down). None for Parquet, a missing file or when the file cannot be read."""
    path = Path(path)
    if suffix_of(path) not in (".csv", ".csv.gz") or row < 1 or not path.is_file():
        return None
    try:
        return next((line for r, line, _ in csv_records(path) if r == row), None)
    except RecordError:
        return None

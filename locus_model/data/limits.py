"""Bounds on the work one read of a drop may do, whatever the drop declares: rows and models (counted as they are
read; a Parquet file's row count read from its footer before any row), bytes unpacked (counted as they are read, not
as an archive declares them), the size and nesting depth of one JSON document, archive members and, where the
caller sets one, a wall-clock budget. Past a bound the read stops with an :class:`EvaluationDataError` naming the
file (and row where known), the bound, and how to stay inside it. The defaults and their meaning are stated in
docs/onboarding.md ("Limits of one drop").

Every reader takes ``limits=`` (a :class:`DropLimits`; None: the enclosing :func:`bounded` read's, else the
defaults). :func:`bounded` sets one budget for all the reads inside it (the drop folder gives each drop its own),
so a folder of several files counts its rows and models together.
"""

from __future__ import annotations

import json
import lzma
import tarfile
import time
import zipfile
import zlib
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from locus_model.data.errors import EvaluationDataError

FIX_SPLIT = (
    "split the output into several drops (e.g. one per model or per task), each within the limits "
    "(docs/onboarding.md, Limits of one drop)"
)


@dataclass(frozen=True)
class DropLimits:
    """What one read of a drop (a long-format file, a folder of them, a harness output or an archive) may take."""

    max_rows: int = (
        5_000_000  # evaluation rows (long-format rows, harness records): ~270 bytes of memory each (metabench: 2.15M)
    )
    max_models: int = 5_000  # distinct model names (metabench, the largest pool source here, has 2,001)
    max_document_bytes: int = (
        64 << 20
    )  # one JSON document parsed whole (a .json file, an .eval member, a .jsonl line): ~24x in memory
    max_unpacked_bytes: int = (
        4 << 30
    )  # bytes inflated from archives, .csv.gz and .eval members, counted as they are read
    max_members: int = 200_000  # members of one archive
    max_depth: int = 200  # nesting of a JSON document (harness files nest a few levels; json recurses per level)
    seconds: float | None = None  # wall-clock for the whole read; None: no bound (the CLI); the drop folder sets one


@dataclass
class Budget:
    """The running count of one read against its :class:`DropLimits`."""

    limits: DropLimits = DropLimits()
    started: float = field(default_factory=time.monotonic)
    unpacked: int = 0
    rows: int = 0
    models: set[str] = field(default_factory=set)

    def check_time(self, where: Path | str) -> None:
        """Past the time budget: an error naming where the read was."""
        seconds = self.limits.seconds
        if seconds is not None and time.monotonic() - self.started > seconds:
            raise EvaluationDataError(
                f"reading this drop took longer than {seconds:g} s (stopped at {where})", file=where, fix=FIX_SPLIT
            )

    def unpack(self, n: int, where: Path | str, *, timed: bool = True) -> None:
        """Count ``n`` more bytes unpacked (decompressed); past the limit, or the time budget (when ``timed``: the
        time budget bounds harness reads, not long-format files), an error."""
        self.unpacked += n
        if self.unpacked > self.limits.max_unpacked_bytes:
            raise EvaluationDataError(
                f"unpacks to more than {self.limits.max_unpacked_bytes:,} bytes (counted while "
                "unpacking: a zip bomb, or not evaluation output)",
                file=where,
                fix=FIX_SPLIT,
            )
        if timed:
            self.check_time(where)

    def count_rows(self, n: int, where: Path | str, *, first_row: int | None = None) -> None:
        """Count ``n`` more rows (``first_row``: the file's row number of the first of them); past the limit, an
        error at the first row over it."""
        limit = self.limits.max_rows
        if self.rows + n > limit:
            over = None if first_row is None else first_row + (limit - self.rows)
            raise EvaluationDataError(
                f"the drop has more than {limit:,} evaluation rows", file=where, row=over, fix=FIX_SPLIT
            )
        self.rows += n

    def count_models(self, names: Iterable[tuple[str, int | None]], where: Path | str) -> None:
        """Count the models of (name, row of its first appearance); past the limit, an error at the first row of the
        first model over it."""
        limit = self.limits.max_models
        for name, row in names:
            if name in self.models:
                continue
            if len(self.models) >= limit:
                raise EvaluationDataError(
                    f"the drop names more than {limit:,} models (the next one is {name[:80]!r})",
                    file=where,
                    row=row,
                    column="model",
                    fix=FIX_SPLIT,
                )
            self.models.add(name)


_CURRENT: ContextVar[Budget | None] = ContextVar("locus_read_budget", default=None)


def budget() -> Budget:
    """The budget of the read in progress (a fresh default one outside :func:`bounded`)."""
    return _CURRENT.get() or Budget()


@contextmanager
def bounded(limits: DropLimits | None = None) -> Iterator[Budget]:
    """Reads inside share one budget with ``limits`` (default: :class:`DropLimits`); nested calls keep the outer one."""
    outer = _CURRENT.get()
    if outer is not None:
        yield outer
        return
    current = Budget(limits or DropLimits())
    token = _CURRENT.set(current)
    try:
        yield current
    finally:
        _CURRENT.reset(token)


def read_bounded(handle, where: Path | str, *, unpacking: bool, chunk: int = 1 << 20) -> bytes:
    """All of ``handle``'s bytes, at most the document limit (and counted as unpacked when ``unpacking``); never
    more than one chunk past the limit is held."""
    current, parts, total = budget(), [], 0
    limit = current.limits.max_document_bytes
    while block := handle.read(min(chunk, limit + 1 - total)):
        total += len(block)
        if unpacking:
            current.unpack(len(block), where)
        if total > limit:
            raise EvaluationDataError(f"a JSON document larger than {limit:,} bytes", file=where, fix=FIX_SPLIT)
        parts.append(block)
    current.check_time(where)
    return b"".join(parts)


CORRUPT = (zipfile.BadZipFile, tarfile.TarError, OSError, EOFError, zlib.error, lzma.LZMAError)  # a damaged archive
READABLE_ZIP = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA)


def zip_member_problem(info: zipfile.ZipInfo, *, extra: tuple[int, ...] = ()) -> str | None:
    """Why a zip member cannot be read (password-protected, a compression method not read here), or None."""
    if info.flag_bits & 0x1:
        return "is encrypted (password-protected)"
    if info.compress_type not in READABLE_ZIP + extra:
        return f"uses compression method {info.compress_type}, not one read here (stored, deflate, bzip2, lzma)"
    return None


_BLOCK = 1 << 20  # bytes scanned at a time: the scan's arrays stay a few MB whatever the document's size


def json_depth(data: bytes) -> int:
    """How deep a JSON document nests (``{}`` is 1), without parsing it (so without recursion).

    One pass over the bytes, in blocks, as a state machine computed with prefix sums: a quote preceded by an odd
    run of backslashes is escaped; the unescaped quotes toggle "inside a string"; brackets outside strings step
    the depth. Linear in the document, whatever its content (a regex that skips strings is quadratic on an
    unclosed string of escaped quotes). Where the document is not JSON (a backslash outside a string) the
    count may differ from a parser's, but only after the point where json.loads stops."""
    deepest = level = run = quotes = 0  # carried from block to block: depth, backslashes ending it, quote parity
    for start in range(0, len(data), _BLOCK):
        part = np.frombuffer(data, np.uint8, count=min(_BLOCK, len(data) - start), offset=start)
        backslash = part == ord("\\")
        index = np.arange(part.size)
        other = np.maximum.accumulate(np.where(backslash, -1, index))  # the last byte at or before i not a backslash
        before = np.empty(part.size, np.int64)  # (n,) backslashes right before byte i
        before[0] = run
        before[1:] = index[:-1] - other[:-1] + np.where(other[:-1] < 0, run, 0)
        quote = (part == ord('"')) & (before % 2 == 0)
        outside = (np.cumsum(quote) + quotes) % 2 == 0
        step = (outside & ((part == ord("[")) | (part == ord("{")))).astype(np.int64)
        step -= outside & ((part == ord("]")) | (part == ord("}")))
        levels = level + np.cumsum(step)
        deepest, level = max(deepest, int(levels.max())), int(levels[-1])
        run = int(before[-1]) + 1 if backslash[-1] else 0
        quotes = (quotes + int(quote.sum())) % 2
    return deepest


def parse_json(data: bytes, where: Path | str, *, line: int | None = None) -> object:
    """A JSON document within the depth limit, parsed. Raises UnicodeDecodeError and ValueError (json's
    JSONDecodeError, or a number with more digits than Python converts) for the caller to place."""
    limit = budget().limits.max_depth
    if data.count(b"[") + data.count(b"{") > limit and json_depth(data) > limit:
        raise EvaluationDataError(
            f"the JSON nests deeper than {limit} levels",
            file=where,
            line=line,
            fix="harness outputs nest a few levels: this is not one, or it is damaged",
        )
    return json.loads(data.decode("utf-8"))

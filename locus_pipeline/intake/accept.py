"""Taking one dropped entry in (``intake_file``): its size and what it holds checked from the file system, sha256,
one streamed pass that validates every row and splits the rows by model, then the entry moved to ``accepted/`` with
its parts and manifest, or to ``rejected/`` with the reason (a :class:`Rejection`: file, row, column, problem, fix;
``Rejection.summary`` says it on one line); left in place when it changed while read."""

from __future__ import annotations

import errno
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Mapping

from locus_model.data.contract import confusable_skeleton
from locus_model.data.errors import CutOffError, EvaluationDataError
from locus_model.data.harnesses import archive_suffix, check_entry, detect_harness, read_checked_entry
from locus_model.data.limits import DropLimits, bounded
from locus_model.onboarding import INTAKE_CHUNK_ROWS, ModelRows, split_by_model
from locus_pipeline.intake.folder import (
    DropFolder,
    EntryStat,
    entry_stat,
    entry_stem,
    move_to_rejected,
    sha256_entry,
    write_text_atomic,
)
from locus_pipeline.intake.manifests import PARTS_SUFFIX, Manifest, find_duplicate
from locus_pipeline.intake.messages import printable
from locus_pipeline.intake.outcomes import is_outcomes_file, read_outcomes
from locus_pipeline.storage.drops import MANIFEST_SUFFIX

HARNESS_TABLE = ".harness-evaluations.parquet"  # a harness output's long table, in the staging folder while split
DROP_LIMITS = DropLimits(seconds=30.0)  # what reading one harness drop may take (docs/onboarding.md, Limits)
CUT_OFF_WAIT_SECONDS = 60.0  # a file that ends as if still being written is rejected once unchanged this long
RETRIED_ERRNOS = {errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT, errno.EMFILE, errno.ENFILE, errno.ENOMEM}


@dataclass(frozen=True)
class IntakeLimits:
    """What one drop may declare (docs/onboarding.md, Limits): past either it is rejected with the limit, its size
    read from the file system before anything is hashed or read."""

    max_bytes: int = 16 << 30  # a file's size as the file system gives it (st_size: a sparse file's holes count, they
    #                            read as zeros), a folder's: its files' sum
    max_models: int = 1_000  # models in one drop (each is a pool row and a partition)
    read: DropLimits = field(default_factory=lambda: DROP_LIMITS)  # what reading a harness drop may take


@dataclass(frozen=True)
class Rejection:
    """Why a drop (or a file intake met, such as a foreign manifest) was refused, as fields: where (row, editor line,
    column), the problem and its fix; ``reason_file`` is the ``.reason.txt`` beside the refused entry in rejected/."""

    file: str  # the entry's name as dropped
    problem: str
    fix: str = ""
    row: int | None = None
    line: int | None = None
    column: str | None = None
    reason_file: str = ""  # relative to the drop folder (incoming/)

    @classmethod
    def of(cls, err: EvaluationDataError, file: str, reason_file: str = "") -> "Rejection":
        return cls(
            file=file,
            problem=err.problem,
            fix=err.fix or "",
            row=err.row,
            line=err.line,
            column=err.column,
            reason_file=reason_file,
        )

    def summary(self) -> str:
        """On one line for a tick message: where, the problem and the fix; every field printable (a newline in a file
        name is shown as ``\\n``, so no name can add a line or a field of its own)."""
        where = ", ".join(
            filter(
                None,
                [
                    (f"row {self.row}" + (f" (line {self.line})" if self.line is not None else ""))
                    if self.row is not None
                    else (f"line {self.line}" if self.line is not None else ""),
                    f"column '{printable(self.column)}'" if self.column else "",
                ],
            )
        )
        return printable(
            (f"{where}: " if where else "") + self.problem + (f". How to fix: {self.fix}" if self.fix else "")
        )


@dataclass(frozen=True)
class Intake:
    """The outcome of :func:`intake_file`."""

    status: str  # "accepted" | "rejected" | "duplicate" | "changed" (still being written: retried later)
    source: Path  # where the file was
    stored: Path | None  # where it is now (None when status == "changed")
    sha256: str
    manifest: Manifest | None = None
    reason: str | None = (
        None  # rejected: the full reason text (also in <stored>.reason.txt); changed: why, if not a write
    )
    rejection: Rejection | None = None  # rejected: the reason as fields


def _changed(path: Path, before: EntryStat) -> bool:
    try:
        return entry_stat(path).signature != before.signature
    except FileNotFoundError:
        return True


def _reason_text(err: EvaluationDataError, original: str, sha: str, when: str) -> str:
    lines = [
        f"REJECTED: {original}",
        f"sha256: {sha}",
        f"rejected at: {when}",
        f"row: {err.row if err.row is not None else '-'} (1-based data row, the header not counted)",
        f"line: {err.line if err.line is not None else '-'} (as an editor shows it: the header is line 1)",
        f"column: {err.column or '-'}",
        f"problem: {err.problem}",
        f"how to fix: {err.fix or '-'}",
        *(
            [f"error type: {type(err.__cause__).__name__} (raised while reading; see the problem)"]
            if err.__cause__ is not None and not isinstance(err.__cause__, EvaluationDataError)
            else []
        ),
        "",
        "The file is kept unchanged beside this note. Fix it and drop it into incoming/ again",
        "(write it as <name>.part, then rename it to <name>); see docs/onboarding.md.",
        "",
        f"full message: {err}",
    ]
    return "\n".join(lines) + "\n"


def intake_file(
    path: Path,
    folder: DropFolder,
    *,
    chunk_rows: int = INTAKE_CHUNK_ROWS,
    now: float | None = None,
    name: str | None = None,
    claimed: Mapping[str, str] | None = None,
    limits: IntakeLimits | None = None,
    known: list[Manifest] | None = None,
) -> Intake:
    """Validate one dropped file and move it to ``accepted/`` (with per-model parts and a manifest) or to
    ``rejected/`` (with a reason). A file that changes while being read is left in place (status "changed").
    ``name``: the file's original name when ``path`` is a temporary one (recovery). ``claimed``: model_key ->
    model name of every model already known (:func:`claimed_keys`); a model whose key names another model is
    a rejection. ``limits``: what a drop may declare and reading it may take (default IntakeLimits()).
    ``known``: the accepted manifests already read (the tick's; default: read for the duplicate check)."""
    folder.ensure()
    path = Path(path)
    name = name or path.name
    limits = limits or IntakeLimits()
    now = time.time() if now is None else now
    before = entry_stat(path)
    accepted_at = datetime.fromtimestamp(now, tz=timezone.utc).isoformat()
    try:
        check_before_reading(path, before, limits)  # nothing hashed or read yet
    except EvaluationDataError as err:
        return _reject(folder, path, err, name, "notread", now)
    sha = sha256_entry(path)
    stem = entry_stem(now, sha, name)
    base = partial(  # the manifest's fields known before reading
        Manifest,
        stem=stem,
        original_name=name,
        sha256=sha,
        bytes=before.st_size,
        received_at=accepted_at,
        received_at_ns=int(now * 1e9),
        accepted_at=accepted_at,
        modified_at_ns=before.st_mtime_ns,
    )

    duplicate = find_duplicate(folder, sha, known)
    if duplicate is not None:
        if _changed(path, before):
            return Intake("changed", path, None, sha)
        manifest = base(rows=0, models=[], duplicate_of=duplicate)
        os.replace(path, folder.accepted / stem)
        write_text_atomic(folder.accepted / f"{stem}{MANIFEST_SUFFIX}", manifest.to_json())
        return Intake("duplicate", path, folder.accepted / stem, sha, manifest)

    if is_outcomes_file(name) and path.is_file():  # graded outcomes of locus serve's answers: to the outcome log
        try:
            records = read_outcomes(path, sha, folder.home)
        except EvaluationDataError as err:
            if _changed(path, before):
                return Intake("changed", path, None, sha)
            return _reject(folder, path, err, name, sha, now)
        if _changed(path, before):
            return Intake("changed", path, None, sha)
        folder.home.append_outcome_records(records)  # ids from the file's sha256: taken twice, counted once
        manifest = base(rows=len(records), models=[])
        os.replace(path, folder.accepted / stem)
        write_text_atomic(folder.accepted / f"{stem}{MANIFEST_SUFFIX}", manifest.to_json())
        return Intake("accepted", path, folder.accepted / stem, sha, manifest)

    staging = folder.accepted / f".{stem}{PARTS_SUFFIX}.{uuid.uuid4().hex}.tmp"
    staging.mkdir(parents=True)
    try:
        try:
            rows, models = read_drop(path, staging, chunk_rows, claimed or {}, limits)
        except EvaluationDataError as err:
            if _changed(path, before):  # half-written, not wrong: look again next time
                return Intake("changed", path, None, sha)
            if isinstance(err, CutOffError) and now - before.st_mtime_ns / 1e9 < CUT_OFF_WAIT_SECONDS:
                return Intake(
                    "changed",
                    path,
                    None,
                    sha,
                    reason=f"{err.problem} (a writer may still be writing it: "
                    f"rejected if unchanged for {CUT_OFF_WAIT_SECONDS:g} s)",
                )
            return _reject(folder, path, err, name, sha, now)
        if _changed(path, before):
            return Intake("changed", path, None, sha)
        manifest = base(rows=rows, models=models)
        os.replace(staging, folder.accepted / f"{stem}{PARTS_SUFFIX}")
        os.replace(path, folder.accepted / stem)
        write_text_atomic(folder.accepted / f"{stem}{MANIFEST_SUFFIX}", manifest.to_json())  # the commit
        return Intake("accepted", path, folder.accepted / stem, sha, manifest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _reject(folder: DropFolder, path: Path, err: EvaluationDataError, name: str, sha: str, now: float) -> Intake:
    """The entry to ``rejected/<stem>`` beside ``<stem>.reason.txt`` (move_to_rejected)."""
    stem = entry_stem(now, sha, name)
    reason = _reason_text(err, name, sha, datetime.fromtimestamp(now, tz=timezone.utc).isoformat())
    reason_file = move_to_rejected(folder, path, stem, reason)
    return Intake(
        "rejected", path, folder.rejected / stem, sha, reason=reason, rejection=Rejection.of(err, name, reason_file)
    )


def check_before_reading(path: Path, stat: EntryStat, limits: IntakeLimits) -> None:
    """What the file system says about an entry, checked before anything in it is hashed or read: its size (a
    sparse file's holes count: a reader would read them) and the library's check_entry: a regular file, or a
    folder of regular files and folders only (a link's target is never read, a pipe never opened); read_drop
    reads it unchecked again (read_checked_entry)."""
    if stat.st_size > limits.max_bytes:
        raise EvaluationDataError(
            f"{stat.st_size:,} bytes (as the file system gives its size), over the drop limit of {limits.max_bytes:,}",
            file=path,
            fix="split it into several drops, or raise max_bytes in the intake resource's limits "
            "(docs/onboarding.md, Limits)",
        )
    check_entry(path)


def read_drop(
    path: Path, staging: Path, chunk_rows: int, claimed: Mapping[str, str], limits: IntakeLimits | None = None
) -> tuple[int, list[ModelRows]]:
    """The one boundary between a dropped entry and the readers: the entry validated and split by model into
    ``staging`` (harness drops within ``limits.read``: unpacked bytes, JSON size and depth, time; at most
    ``limits.max_models`` models), or an EvaluationDataError for intake to reject it with. Whatever a reader raises
    becomes one, naming the exception's type (a reader's bug, a RecursionError, a MemoryError are this drop's
    problem, not the folder's); only an OSError that is about this machine (permissions, a full disk, no memory or
    file handles) goes up, for the tick to retry the entry later."""
    limits = limits or IntakeLimits()
    try:
        with bounded(limits.read):
            rows, models = _split(path, staging, chunk_rows)
        if len(models) > limits.max_models:
            raise EvaluationDataError(
                f"{len(models):,} models in one drop, over the limit of {limits.max_models:,}",
                file=path,
                column="model",
                fix="split the drop into files of fewer models, or raise max_models in the intake resource's limits "
                "(docs/onboarding.md, Limits)",
            )
        check_identities(models, claimed, path)
        return rows, models
    except EvaluationDataError:
        raise
    except OSError as err:
        if err.errno in RETRIED_ERRNOS:
            raise
        raise _unreadable(err, path) from err
    except Exception as err:  # the boundary: any other failure of a reader rejects this drop, with its type
        raise _unreadable(err, path) from err


def _unreadable(err: Exception, path: Path) -> EvaluationDataError:
    what = {RecursionError: "the data nests too deeply to read", MemoryError: "reading it ran out of memory"}
    problem = next((text for kind, text in what.items() if isinstance(err, kind)), "reading it failed")
    detail = str(err)[:300]
    return EvaluationDataError(
        f"{problem} ({type(err).__name__}{': ' + detail if detail else ''})",
        file=path,
        fix="check that the drop is what the harness wrote (data/README.md); if it is, report "
        "this message with the file: the reader should have said what is wrong",
    )


def _split(path: Path, staging: Path, chunk_rows: int) -> tuple[int, list[ModelRows]]:
    """Validate a dropped entry and split its rows by model into ``staging``: a long-format file streamed as it is;
    what an evaluation harness wrote (a folder, an archive, an Inspect log) read into the long table first. The
    format is detected once, here (what the file system says was checked before: check_before_reading)."""
    kind = detect_harness(path)
    if kind is None and path.is_dir():
        raise EvaluationDataError(
            "a folder, but not an evaluation harness's output: no lm-eval samples_<task>_<time>.jsonl, Inspect log "
            "(.eval, .json), lighteval details_<task>_<time>.parquet, or HELM scenario_state.json + "
            "per_instance_stats.json in it",
            file=path,
            fix="drop evaluation files themselves, or the folder a harness wrote as it is (write it elsewhere, "
            "then move it into incoming/), or an archive of it; see data/README.md",
        )
    if kind is None and not (archive_suffix(path) or path.suffix == ".eval"):
        return split_by_model(path, staging, chunk_rows)
    table, _ = read_checked_entry(
        path, harness=kind or ("inspect" if path.suffix == ".eval" and path.is_file() else None)
    )
    converted = staging / HARNESS_TABLE
    table.to_parquet(converted, index=False)
    try:
        return split_by_model(converted, staging, chunk_rows)
    except EvaluationDataError as err:  # the rows were validated by the reader: name the drop, not the table
        raise EvaluationDataError(err.problem, file=path, column=err.column, fix=err.fix) from None
    finally:
        converted.unlink(missing_ok=True)


def check_identities(models: list[ModelRows], claimed: Mapping[str, str], path: Path) -> None:
    """A model's identity is its name: a name whose safe key already names another model, or that looks the same
    as another model's name (:func:`confusable_skeleton`: ``Org／Model`` beside ``Org/Model``), is refused."""
    forms = {confusable_skeleton(name): name for name in claimed.values()}
    names = set(claimed.values())
    for entry in models:
        other = claimed.get(entry.model_key)
        if other is not None and other != entry.model:
            raise EvaluationDataError(
                f"model {entry.model!r} has the key {entry.model_key!r}, which already names the model {other!r}",
                file=path,
                column="model",
                fix="model names must stay distinct after making them file-safe: rename this model (e.g. add a suffix)",
            )
        twin = (
            None if entry.model in names else forms.get(confusable_skeleton(entry.model))
        )  # a model's own name: itself
        if twin is not None and twin != entry.model:
            raise EvaluationDataError(
                f"model {entry.model!r} looks the same as the model {twin!r} (they differ only in case, look-alike "
                "characters or trailing punctuation: Unicode's confusables, UTS #39)",
                file=path,
                column="model",
                fix=f"if it is that model, write its name as {twin!r}; if not, give it a name that reads differently",
            )

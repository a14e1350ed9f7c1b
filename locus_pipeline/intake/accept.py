"""Taking one dropped entry in (``intake_file``): sha256, one streamed pass that validates every row and splits the
rows by model, then the entry moved to ``accepted/`` with its parts and manifest, or to ``rejected/`` with the
reason (``reason_summary`` says it on one line); left in place when it changed while read."""

from __future__ import annotations

import errno
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Mapping

from locus_model.data.contract import look_alike
from locus_model.data.errors import CutOffError, EvaluationDataError
from locus_model.data.harnesses import is_harness_drop
from locus_model.data.harnesses.limits import ReadLimits, bounded
from locus_model.onboarding import INTAKE_CHUNK_ROWS, ModelRows, split_by_model
from locus_pipeline.intake.folder import (REASON_SUFFIX, DropFolder, EntryStat, entry_stat, entry_stem, sha256_entry,
                                          write_text_atomic)
from locus_pipeline.intake.manifests import PARTS_SUFFIX, Manifest, find_duplicate
from locus_pipeline.storage.drops import MANIFEST_SUFFIX

HARNESS_TABLE = ".harness-evaluations.parquet"  # a harness output's long table, in the staging folder while split
DROP_LIMITS = ReadLimits(seconds=30.0)  # what reading one harness drop may take (docs/onboarding.md, Limits)
CUT_OFF_WAIT_SECONDS = 60.0  # a file that ends as if still being written is rejected once unchanged this long
RETRIED_ERRNOS = {errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT, errno.EMFILE, errno.ENFILE, errno.ENOMEM}


@dataclass(frozen=True)
class Intake:
    """The outcome of :func:`intake_file`."""

    status: str  # "accepted" | "rejected" | "duplicate" | "changed" (still being written: retried later)
    source: Path  # where the file was
    stored: Path | None  # where it is now (None when status == "changed")
    sha256: str
    manifest: Manifest | None = None
    reason: str | None = None  # rejected: the full reason text (also in <stored>.reason.txt); changed: why, if not a write


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
        *([f"error type: {type(err.__cause__).__name__} (raised while reading; see the problem)"]
          if err.__cause__ is not None and not isinstance(err.__cause__, EvaluationDataError) else []),
        "",
        "The file is kept unchanged beside this note. Fix it and drop it into incoming/ again",
        "(write it as <name>.part, then rename it to <name>); see docs/onboarding.md.",
        "",
        f"full message: {err}",
    ]
    return "\n".join(lines) + "\n"


def intake_file(
    path: Path, folder: DropFolder, *, chunk_rows: int = INTAKE_CHUNK_ROWS, now: float | None = None, name: str | None = None,
    claimed: Mapping[str, str] | None = None, limits: ReadLimits | None = None,
) -> Intake:
    """Validate one dropped file and move it to ``accepted/`` (with per-model parts and a manifest) or to
    ``rejected/`` (with a reason). A file that changes while being read is left in place (status "changed").
    ``name``: the file's original name when ``path`` is a temporary one (recovery). ``claimed``: model_key ->
    model name of every model already known (:func:`claimed_keys`); a model whose key names another model is
    a rejection. ``limits``: what reading a harness drop may take (default DROP_LIMITS; :func:`read_drop`)."""
    folder.ensure()
    path = Path(path)
    name = name or path.name
    now = time.time() if now is None else now
    before = entry_stat(path)
    sha = sha256_entry(path)
    stem = entry_stem(now, sha, name)
    accepted_at = datetime.fromtimestamp(now, tz=timezone.utc).isoformat()
    base = dict(stem=stem, original_name=name, sha256=sha, bytes=before.st_size, received_at=accepted_at,
                received_at_ns=int(now * 1e9), accepted_at=accepted_at, modified_at_ns=before.st_mtime_ns)

    duplicate = find_duplicate(folder, sha)
    if duplicate is not None:
        if _changed(path, before):
            return Intake("changed", path, None, sha)
        manifest = Manifest(**base, rows=0, models=[], duplicate_of=duplicate)
        os.replace(path, folder.accepted / stem)
        write_text_atomic(folder.accepted / f"{stem}{MANIFEST_SUFFIX}", manifest.to_json())
        return Intake("duplicate", path, folder.accepted / stem, sha, manifest)

    staging = folder.accepted / f".{stem}{PARTS_SUFFIX}.{uuid.uuid4().hex}.tmp"
    staging.mkdir(parents=True)
    try:
        try:
            rows, models = read_drop(path, staging, chunk_rows, claimed or {}, limits or DROP_LIMITS)
        except EvaluationDataError as err:
            if _changed(path, before):  # half-written, not wrong: look again next time
                return Intake("changed", path, None, sha)
            if isinstance(err, CutOffError) and now - before.st_mtime_ns / 1e9 < CUT_OFF_WAIT_SECONDS:
                return Intake("changed", path, None, sha, reason=f"{err.problem} (a writer may still be writing it: "
                                                                 f"rejected if unchanged for {CUT_OFF_WAIT_SECONDS:g} s)")
            reason = _reason_text(err, name, sha, accepted_at)
            target = folder.rejected / stem
            os.replace(path, target)
            write_text_atomic(folder.rejected / f"{stem}{REASON_SUFFIX}", reason)
            return Intake("rejected", path, target, sha, reason=reason)
        if _changed(path, before):
            return Intake("changed", path, None, sha)
        manifest = Manifest(**base, rows=rows, models=models)
        os.replace(staging, folder.accepted / f"{stem}{PARTS_SUFFIX}")
        os.replace(path, folder.accepted / stem)
        write_text_atomic(folder.accepted / f"{stem}{MANIFEST_SUFFIX}", manifest.to_json())  # the commit
        return Intake("accepted", path, folder.accepted / stem, sha, manifest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def read_drop(path: Path, staging: Path, chunk_rows: int, claimed: Mapping[str, str],
              limits: ReadLimits = DROP_LIMITS) -> tuple[int, list[ModelRows]]:
    """The one boundary between a dropped entry and the readers: the entry validated and split by model into
    ``staging`` (harness drops within ``limits``: unpacked bytes, JSON size and depth, time), or an
    EvaluationDataError for intake to reject it with. Whatever a reader raises becomes one, naming the exception's
    type (a reader's bug, a RecursionError, a MemoryError are this drop's problem, not the folder's); only an
    OSError that is about this machine (permissions, a full disk, no memory or file handles) goes up, for the
    tick to retry the entry later."""
    try:
        with bounded(limits):
            rows, models = _split(path, staging, chunk_rows)
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
    return EvaluationDataError(f"{problem} ({type(err).__name__}{': ' + detail if detail else ''})", file=path,
                               fix="check that the drop is what the harness wrote (data/README.md); if it is, report "
                                   "this message with the file: the reader should have said what is wrong")


def _split(path: Path, staging: Path, chunk_rows: int) -> tuple[int, list[ModelRows]]:
    """Validate a dropped entry and split its rows by model into ``staging``: a long-format file streamed as it is;
    what an evaluation harness wrote (a folder, an archive, an Inspect log) read into the long table first."""
    if not is_harness_drop(path):
        return split_by_model(path, staging, chunk_rows)
    from locus_model.data.harnesses import read_harness_output

    if path.is_dir():
        from locus_model.data.harnesses import check_regular_files, detect_harness

        check_regular_files(path)  # before anything in it is looked at: no links, pipes or devices
        if detect_harness(path) is None:
            raise EvaluationDataError(
                "a folder, but not an evaluation harness's output: no lm-eval samples_<task>_<time>.jsonl, Inspect log "
                "(.eval, .json), lighteval details_<task>_<time>.parquet, or HELM scenario_state.json + per_instance_stats.json in it",
                file=path, fix="drop evaluation files themselves, or the folder a harness wrote as it is (write it elsewhere, "
                               "then move it into incoming/), or an archive of it; see data/README.md")
    table, _ = read_harness_output(path)
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
    as another model's name (:func:`look_alike`: ``Org／Model`` beside ``Org/Model``), is refused."""
    forms = {look_alike(name): name for name in claimed.values()}
    for entry in models:
        other = claimed.get(entry.model_key)
        if other is not None and other != entry.model:
            raise EvaluationDataError(
                f"model {entry.model!r} has the key {entry.model_key!r}, which already names the model {other!r}",
                file=path, column="model",
                fix="model names must stay distinct after making them file-safe: rename this model (e.g. add a suffix)",
            )
        twin = forms.get(look_alike(entry.model))
        if twin is not None and twin != entry.model:
            raise EvaluationDataError(
                f"model {entry.model!r} looks the same as the model {twin!r} (they differ only in look-alike characters)",
                file=path, column="model",
                fix=f"if it is that model, write its name as {twin!r}; if not, give it a name that reads differently",
            )


def reason_summary(reason: str) -> str:
    """A rejection reason on one line for the sensor's tick message: where (row, editor line, column), the problem
    and the fix (the tick message shows one line only)."""
    fields = {}
    for line in reason.splitlines():
        key, sep, value = line.partition(": ")
        if sep and key in ("problem", "how to fix", "row", "line", "column"):
            fields[key] = value.split(" (")[0] if key in ("row", "line") else value
    known = {k: v for k, v in fields.items() if v != "-"}
    where = ", ".join(filter(None, [
        f"row {known['row']}" + (f" (line {known['line']})" if "line" in known else "") if "row" in known
        else (f"line {known['line']}" if "line" in known else ""),
        f"column '{known['column']}'" if "column" in known else ""]))
    problem = known.get("problem") or (reason.strip().splitlines()[-1] if reason.strip() else "")
    return (f"{where}: " if where else "") + problem + (f". How to fix: {known['how to fix']}" if "how to fix" in known else "")

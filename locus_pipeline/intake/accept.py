"""Taking one dropped entry in (``intake_file``): sha256, one streamed pass that validates every row and splits the
rows by model, then the entry moved to ``accepted/`` with its parts and manifest, or to ``rejected/`` with the
reason (``reason_summary`` says it on one line); left in place when it changed while read."""

from __future__ import annotations

import os
import shutil
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Mapping

from locus_model.data.errors import EvaluationDataError
from locus_model.data.harnesses import is_harness_drop
from locus_model.onboarding import INTAKE_CHUNK_ROWS, ModelRows, split_by_model
from locus_pipeline.intake.folder import (REASON_SUFFIX, DropFolder, EntryStat, entry_stat, entry_stem, sha256_entry,
                                          write_text_atomic)
from locus_pipeline.intake.manifests import PARTS_SUFFIX, Manifest, find_duplicate
from locus_pipeline.storage.drops import MANIFEST_SUFFIX

HARNESS_TABLE = ".harness-evaluations.parquet"  # a harness output's long table, in the staging folder while split


@dataclass(frozen=True)
class Intake:
    """The outcome of :func:`intake_file`."""

    status: str  # "accepted" | "rejected" | "duplicate" | "changed" (still being written: retried later)
    source: Path  # where the file was
    stored: Path | None  # where it is now (None when status == "changed")
    sha256: str
    manifest: Manifest | None = None
    reason: str | None = None  # rejected: the full reason text (also in <stored>.reason.txt)


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
        "",
        "The file is kept unchanged beside this note. Fix it and drop it into incoming/ again",
        "(write it as <name>.part, then rename it to <name>); see docs/onboarding.md.",
        "",
        f"full message: {err}",
    ]
    return "\n".join(lines) + "\n"


def intake_file(
    path: Path, folder: DropFolder, *, chunk_rows: int = INTAKE_CHUNK_ROWS, now: float | None = None, name: str | None = None,
    claimed: Mapping[str, str] | None = None,
) -> Intake:
    """Validate one dropped file and move it to ``accepted/`` (with per-model parts and a manifest) or to
    ``rejected/`` (with a reason). A file that changes while being read is left in place (status "changed").
    ``name``: the file's original name when ``path`` is a temporary one (recovery). ``claimed``: model_key ->
    model name of every model already known (:func:`claimed_keys`); a model whose key names another model is
    a rejection."""
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
            rows, models = _split(path, staging, chunk_rows)
            check_identities(models, claimed or {}, path)
        except EvaluationDataError as err:
            if _changed(path, before):  # half-written, not wrong: look again next time
                return Intake("changed", path, None, sha)
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


def _split(path: Path, staging: Path, chunk_rows: int) -> tuple[int, list[ModelRows]]:
    """Validate a dropped entry and split its rows by model into ``staging``: a long-format file streamed as it is;
    what an evaluation harness wrote (a folder, an archive, an Inspect log) read into the long table first."""
    if not is_harness_drop(path):
        return split_by_model(path, staging, chunk_rows)
    from locus_model.data.harnesses import read_harness_output

    if path.is_dir():
        from locus_model.data.harnesses import detect_harness

        link = next((p for p in sorted(path.rglob("*")) if p.is_symlink()), None)
        if link is not None:  # a link could point anywhere, and change after intake
            raise EvaluationDataError(f"the folder holds a symbolic link ({link.relative_to(path).as_posix()})", file=path,
                                      fix="copy the files themselves into the folder (cp -rL), then drop it again")
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
    """A model's identity is its name: a name whose safe key already names another model is refused."""
    for entry in models:
        other = claimed.get(entry.model_key)
        if other is not None and other != entry.model:
            raise EvaluationDataError(
                f"model {entry.model!r} has the key {entry.model_key!r}, which already names the model {other!r}",
                file=path, column="model",
                fix="model names must stay distinct after making them file-safe: rename this model (e.g. add a suffix)",
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

"""The drop folder: how a file dropped into LOCUS_HOME/incoming/ is taken in (see docs/onboarding.md).

1. *Complete files only.* Names starting with '.' or ending in '.part', '.tmp', '.partial', '.crdownload' are
   never read: write under such a name, then rename (atomic on one filesystem). As a safety net for writers
   that do not rename, a file is read only once its modification time is ``settle_seconds`` old, and it is
   set aside for a later tick if its size or modification time changed while it was read.
2. *Intake* (:func:`intake_file`): sha256, then one streamed pass that validates every row with the evaluation
   data contract and splits the rows by model into ``accepted/<stem>.parts/<model_key>.parquet``
   (:func:`locus_model.onboarding.split_by_model`). ``<stem>`` is ``<UTC time>-<sha8>-<original name>``.
   A valid file moves to ``accepted/<stem>`` and gets ``accepted/<stem>.manifest.json`` (written last: the
   commit). An invalid one moves to ``rejected/<stem>`` beside ``rejected/<stem>.reason.txt`` naming the row,
   column, problem and fix. A model name whose safe key already names another model (in the training source,
   the pool, a store or an accepted file) is a rejection too, whatever the order of the files. A file whose
   bytes were already accepted moves to ``accepted/`` with a manifest marked ``duplicate_of`` and onboards
   nothing. Nothing is ever deleted.
3. *Onboarding* is a Dagster run per (file, model): see locus_pipeline/defs/assets/onboarding.py.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator, Mapping

import pandas as pd

from locus_model.data.contract import safe_model_key
from locus_model.data.errors import EvaluationDataError, suffix_of
from locus_model.onboarding import INTAKE_CHUNK_ROWS, ModelRows, split_by_model
from locus_pipeline.storage import LocusHome, sha256_file

IN_PROGRESS_SUFFIXES = (".part", ".tmp", ".partial", ".crdownload", ".swp")
SETTLE_SECONDS = 2.0  # a file is read once nothing has written to it for this long
MANIFEST_SUFFIX = ".manifest.json"
PARTS_SUFFIX = ".parts"
REASON_SUFFIX = ".reason.txt"


# ---------------------------------------------------------------------------------------------- folders


@dataclass(frozen=True)
class DropFolder:
    """``LOCUS_HOME/incoming`` and its ``accepted/`` and ``rejected/`` folders."""

    home: LocusHome

    @classmethod
    def at(cls, root: Path | str) -> "DropFolder":
        return cls(LocusHome(root=str(root)))

    @property
    def incoming(self) -> Path:
        return self.home.path / "incoming"

    @property
    def accepted(self) -> Path:
        return self.incoming / "accepted"

    @property
    def rejected(self) -> Path:
        return self.incoming / "rejected"

    def ensure(self) -> "DropFolder":
        for folder in (self.incoming, self.accepted, self.rejected):
            folder.mkdir(parents=True, exist_ok=True)
        return self

    @contextmanager
    def intake_lock(self) -> Iterator[bool]:
        """Non-blocking: False when another process (e.g. a sensor tick that outlived its timeout) is still
        taking files in, so two ticks never read the same file."""
        with self.home.lock("intake", blocking=False) as mine:
            yield mine


# ---------------------------------------------------------------------------------------------- drop folder


def is_in_progress(name: str) -> bool:
    """Names a writer uses while the file is incomplete: never read (write, then rename)."""
    return name.startswith(".") or name.lower().endswith(IN_PROGRESS_SUFFIXES)


def scan_incoming(folder: DropFolder, *, now: float | None = None, settle_seconds: float = SETTLE_SECONDS) -> tuple[list[Path], list[Path]]:
    """(ready, settling): complete-looking files in ``incoming/``, oldest first, and those still settling.

    A file is ready when its name is not an in-progress name and nothing has modified it for
    ``settle_seconds`` (a modification time in the future, e.g. from clock skew, counts as "just written").
    """
    now = time.time() if now is None else now
    ready, settling = [], []
    if not folder.incoming.exists():
        return ready, settling
    entries = []
    for path in folder.incoming.iterdir():
        if is_in_progress(path.name) or not path.is_file() or path.is_symlink():
            continue
        try:
            entries.append((path.stat().st_mtime, path))
        except FileNotFoundError:  # renamed away between listing and stat
            continue
    for mtime, path in sorted(entries, key=lambda e: (e[0], e[1].name)):
        (ready if now - mtime >= settle_seconds else settling).append(path)
    return ready, settling


def _stamp(now: float) -> str:
    return datetime.fromtimestamp(now, tz=timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")


MAX_NAME_BYTES = 120  # of the original name kept in a stem: every name made from it stays under the 255-byte limit


def _stem(now: float, sha: str, name: str) -> str:
    """``<UTC time>-<sha8>-<name>``, the name cut to MAX_NAME_BYTES (keeping its suffix): the longest name built from
    a stem, the temporary ``.<stem>.manifest.json.<32 hex>.tmp``, stays under the filesystem's 255 bytes."""
    raw = name.encode("utf-8")
    if len(raw) > MAX_NAME_BYTES:
        suffix = suffix_of(Path(name)) or Path(name).suffix[:16]
        name = raw[: MAX_NAME_BYTES - len(suffix.encode())].decode("utf-8", "ignore") + suffix
    return f"{_stamp(now)}-{sha[:8]}-{name}"


@dataclass(frozen=True)
class Manifest:
    """What intake recorded about one accepted file (``accepted/<stem>.manifest.json``)."""

    stem: str
    original_name: str
    sha256: str
    bytes: int
    received_at: str  # ISO time: the file's modification time when it was accepted ("newest wins" order)
    received_at_ns: int
    accepted_at: str
    rows: int
    models: list[ModelRows] = field(default_factory=list)
    duplicate_of: str | None = None  # stem of the earlier file with the same bytes: nothing to onboard

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> "Manifest":
        data = json.loads(text)
        data["models"] = [ModelRows(**m) for m in data["models"]]
        return cls(**data)


@dataclass(frozen=True)
class Intake:
    """The outcome of :func:`intake_file`."""

    status: str  # "accepted" | "rejected" | "duplicate" | "changed" (still being written: retried later)
    source: Path  # where the file was
    stored: Path | None  # where it is now (None when status == "changed")
    sha256: str
    manifest: Manifest | None = None
    reason: str | None = None  # rejected: the full reason text (also in <stored>.reason.txt)


def _write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def read_manifest(folder: DropFolder, stem: str) -> Manifest:
    path = folder.accepted / f"{stem}{MANIFEST_SUFFIX}"
    if not path.exists():
        raise FileNotFoundError(f"no manifest {path}: the file {stem!r} was not accepted (look in {folder.rejected})")
    return Manifest.from_json(path.read_text(encoding="utf-8"))


def manifest_stems(folder: DropFolder) -> list[str]:
    """Stems of all accepted files, in acceptance order (the stem starts with the UTC acceptance time)."""
    if not folder.accepted.exists():
        return []
    return sorted(p.name[: -len(MANIFEST_SUFFIX)] for p in folder.accepted.glob(f"*{MANIFEST_SUFFIX}") if not p.name.startswith("."))


def _find_duplicate(folder: DropFolder, sha: str) -> str | None:
    for path in folder.accepted.glob(f"*-{sha[:8]}-*{MANIFEST_SUFFIX}"):
        manifest = Manifest.from_json(path.read_text(encoding="utf-8"))
        if manifest.sha256 == sha:
            return manifest.duplicate_of or manifest.stem
    return None


def _changed(path: Path, before: os.stat_result) -> bool:
    try:
        after = path.stat()
    except FileNotFoundError:
        return True
    return (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns)


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
    before = path.stat()
    sha = sha256_file(path)
    stem = _stem(now, sha, name)
    accepted_at = datetime.fromtimestamp(now, tz=timezone.utc).isoformat()
    received = datetime.fromtimestamp(before.st_mtime_ns / 1e9, tz=timezone.utc).isoformat()
    base = dict(stem=stem, original_name=name, sha256=sha, bytes=before.st_size, received_at=received,
                received_at_ns=before.st_mtime_ns, accepted_at=accepted_at)

    duplicate = _find_duplicate(folder, sha)
    if duplicate is not None:
        if _changed(path, before):
            return Intake("changed", path, None, sha)
        manifest = Manifest(**base, rows=0, models=[], duplicate_of=duplicate)
        os.replace(path, folder.accepted / stem)
        _write_text_atomic(folder.accepted / f"{stem}{MANIFEST_SUFFIX}", manifest.to_json())
        return Intake("duplicate", path, folder.accepted / stem, sha, manifest)

    staging = folder.accepted / f".{stem}{PARTS_SUFFIX}.{uuid.uuid4().hex}.tmp"
    staging.mkdir(parents=True)
    try:
        try:
            rows, models = split_by_model(path, staging, chunk_rows)
            check_identities(models, claimed or {}, path)
        except EvaluationDataError as err:
            if _changed(path, before):  # half-written, not wrong: look again next time
                return Intake("changed", path, None, sha)
            reason = _reason_text(err, name, sha, accepted_at)
            target = folder.rejected / stem
            os.replace(path, target)
            _write_text_atomic(folder.rejected / f"{stem}{REASON_SUFFIX}", reason)
            return Intake("rejected", path, target, sha, reason=reason)
        if _changed(path, before):
            return Intake("changed", path, None, sha)
        manifest = Manifest(**base, rows=rows, models=models)
        os.replace(staging, folder.accepted / f"{stem}{PARTS_SUFFIX}")
        os.replace(path, folder.accepted / stem)
        _write_text_atomic(folder.accepted / f"{stem}{MANIFEST_SUFFIX}", manifest.to_json())  # the commit
        return Intake("accepted", path, folder.accepted / stem, sha, manifest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def recover_orphans(folder: DropFolder, *, chunk_rows: int = INTAKE_CHUNK_ROWS,
                    claimed: Mapping[str, str] | None = None) -> list[Intake]:
    """Accepted files without a manifest (a process killed between moving the file and the commit):
    intake them again in place. Returns what was recovered."""
    out = []
    if not folder.accepted.exists():
        return out
    for path in sorted(folder.accepted.iterdir()):
        name = path.name
        if (name.startswith(".") or name.endswith((MANIFEST_SUFFIX, REASON_SUFFIX, PARTS_SUFFIX)) or not path.is_file()
                or (folder.accepted / f"{name}{MANIFEST_SUFFIX}").exists()):
            continue
        shutil.rmtree(folder.accepted / f"{name}{PARTS_SUFFIX}", ignore_errors=True)
        original = name.split("-", 2)[2] if name.count("-") >= 2 else name  # <time>-<sha8>-<original name>
        moved = folder.incoming / f".recover-{uuid.uuid4().hex}-{original}"  # hidden: the sensor will not list it
        os.replace(path, moved)
        result = intake_file(moved, folder, chunk_rows=chunk_rows, name=original, claimed=claimed)
        out.append(result)
    return out


def accepted_rows(folder: DropFolder, stem: str, model: str) -> pd.DataFrame:
    """One model's validated rows from an accepted file (model, query_id, query, benchmark, score, _row)."""
    path = folder.accepted / f"{stem}{PARTS_SUFFIX}" / f"{safe_model_key(model)}.parquet"
    if not path.exists():
        raise EvaluationDataError(
            f"model {model!r} has no rows in this accepted file", file=folder.accepted / stem, column="model",
            fix="check the model name in the run config (the sensor sets it from the file)",
        )
    return pd.read_parquet(path)


def claimed_keys(home: LocusHome, folder: DropFolder) -> dict[str, str]:
    """model_key -> model name of every model the home knows, and of every model of an accepted file."""
    claimed = home.model_identities()
    for stem in manifest_stems(folder):
        for entry in read_manifest(folder, stem).models:
            claimed.setdefault(entry.model_key, entry.model)
    return claimed


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


# ---------------------------------------------------------------------------------------------- what is never read


def unusable_entries(folder: DropFolder) -> list[tuple[Path, str]]:
    """Entries of ``incoming/`` that are never read, with the reason: symlinks and folders (besides accepted/ and
    rejected/). Hidden and in-progress names are not listed: they are the writers' convention (write, then rename)."""
    out = []
    if not folder.incoming.exists():
        return out
    for path in sorted(folder.incoming.iterdir()):
        if is_in_progress(path.name) or path in (folder.accepted, folder.rejected):
            continue
        if path.is_symlink():
            out.append((path, "a symbolic link: links are not followed (the target could change or vanish after intake); "
                              "copy the file itself into incoming/"))
        elif path.is_dir():
            out.append((path, "a folder: folders are not read; drop the evaluation files themselves into incoming/"))
    return out


def reject_unusable(folder: DropFolder, path: Path, reason: str, *, now: float | None = None) -> Path:
    """Move a symlink or folder out of incoming/ into rejected/ (the link itself, never its target) with a reason."""
    now = time.time() if now is None else now
    when = datetime.fromtimestamp(now, tz=timezone.utc).isoformat()
    target = folder.rejected / _stem(now, "notafile", path.name)
    os.replace(path, target)
    _write_text_atomic(folder.rejected / f"{target.name}{REASON_SUFFIX}",
                       f"REJECTED: {path.name}\nrejected at: {when}\nproblem: {reason}\n"
                       "how to fix: see the problem; nothing was read from it, and it is kept here unchanged.\n")
    return target


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

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
4. *Harness outputs.* A folder, an archive (.zip, .tar.gz, .tgz) or an Inspect log dropped into incoming/ is read
   by the harness readers (:mod:`locus_model.data.harnesses`: lm-eval, Inspect AI, lighteval, HELM), recognised
   by its content; its long table is then split by model as a file's rows are. A folder is taken whole: write it
   elsewhere and move it into incoming/ when complete (one rename), or drop an archive (as ``<name>.part``,
   then renamed). As the safety net for files, a folder is read only once nothing in it has changed for
   ``settle_seconds``, and set aside if anything in it changed while it was read. A folder that holds no harness
   output is rejected with the reason.
"""

from __future__ import annotations

import hashlib
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
from locus_model.data.harnesses import is_harness_drop
from locus_model.onboarding import INTAKE_CHUNK_ROWS, ModelRows, split_by_model
from locus_pipeline.storage import LocusHome, sha256_file

HARNESS_TABLE = ".harness-evaluations.parquet"  # a harness output's long table, in the staging folder while split

IN_PROGRESS_SUFFIXES = (".part", ".tmp", ".partial", ".crdownload", ".swp")
SETTLE_SECONDS = 2.0  # a file is read once nothing has written to it for this long
MANIFEST_SUFFIX = ".manifest.json"
PARTS_SUFFIX = ".parts"
REASON_SUFFIX = ".reason.txt"
CHANGED_SUFFIX = ".changed.txt"  # beside an accepted file that changed after intake (see retake)


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
        """The local drop folder: the home's own on a local home, its working copy on a remote one (storage/drops.py)."""
        return self.home.local_path / "incoming"

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
            if not (mine and self.home.remote):
                yield mine
                return
            from locus_pipeline.storage import drops

            self.ensure()
            pulled = drops.pull(self.home, self.incoming)  # the bucket's new objects into the local copy
            yield mine
            drops.push(self.home, self.incoming, pulled)  # the outcome back, the objects taken in deleted

    def fetch(self, path: Path, mtime_ns: int | None = None) -> Path:
        """``path`` (under the local drop folder) present locally: on a remote home, downloaded on first use."""
        if self.home.remote:
            from locus_pipeline.storage import drops

            drops.fetch(self.home, self.incoming, path, mtime_ns)
        return path


# ---------------------------------------------------------------------------------------------- drop folder


@dataclass(frozen=True)
class EntryStat:
    """Size and modification time of a dropped file, or of a dropped folder's content (every file in it)."""

    st_size: int  # bytes (a folder: of all its files)
    st_mtime_ns: int  # a folder: the newest modification time of anything in it (of the folder itself when empty)
    signature: tuple  # what must stay the same while the entry is read


def entry_stat(path: Path) -> EntryStat:
    stat = path.stat()
    if not path.is_dir():
        return EntryStat(stat.st_size, stat.st_mtime_ns, (stat.st_size, stat.st_mtime_ns))
    entries = []
    for item in sorted(path.rglob("*")):
        item_stat = item.lstat()
        entries.append((item.relative_to(path).as_posix(), item_stat.st_size if item.is_file() else 0, item_stat.st_mtime_ns))
    return EntryStat(sum(e[1] for e in entries), max((e[2] for e in entries), default=stat.st_mtime_ns), tuple(entries))


def sha256_entry(path: Path) -> str:
    """sha256 of a file's bytes; of a folder: over each file's relative path and sha256, in sorted order."""
    if not path.is_dir():
        return sha256_file(path)
    digest = hashlib.sha256(b"locus-folder\0")
    for item in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(item.relative_to(path).as_posix().encode() + b"\0" + sha256_file(item).encode() + b"\n")
    return digest.hexdigest()


def is_in_progress(name: str) -> bool:
    """Names a writer uses while the file is incomplete: never read (write, then rename)."""
    return name.startswith(".") or name.lower().endswith(IN_PROGRESS_SUFFIXES)


def scan_incoming(folder: DropFolder, *, now: float | None = None, settle_seconds: float = SETTLE_SECONDS) -> tuple[list[Path], list[Path]]:
    """(ready, settling): complete-looking files and folders in ``incoming/``, oldest first, and those still settling.

    An entry is ready when its name is not an in-progress name and nothing has modified it (a folder: anything in
    it, or the folder itself) for ``settle_seconds`` (a modification time in the future, e.g. from clock skew,
    counts as "just written"). ``accepted/`` and ``rejected/`` are not entries.
    """
    now = time.time() if now is None else now
    ready, settling = [], []
    if not folder.incoming.exists():
        return ready, settling
    entries = []
    for path in folder.incoming.iterdir():
        if (is_in_progress(path.name) or path.is_symlink() or path in (folder.accepted, folder.rejected)
                or not (path.is_file() or path.is_dir())):
            continue
        try:
            mtime = path.stat().st_mtime if path.is_file() else max(entry_stat(path).st_mtime_ns, path.stat().st_mtime_ns) / 1e9
            entries.append((mtime, path))
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
    received_at: str  # ISO time: the file's modification time when it was accepted (tells a later change apart)
    received_at_ns: int
    accepted_at: str  # ISO time of the intake: the "newest file wins" order (intake_order)
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


def intake_order(manifest: Manifest) -> pd.Timestamp:
    """When a file counts as received for "the newest file wins": the time it was taken in, not its modification
    time. A writer sets the modification time (``cp -p``, ``rsync -t``, an unpacked archive keep old ones), so a
    correction dropped after the file it corrects must win whatever its mtime says."""
    return pd.Timestamp(manifest.accepted_at).tz_convert("UTC")


def read_manifest(folder: DropFolder, stem: str) -> Manifest:
    path = folder.fetch(folder.accepted / f"{stem}{MANIFEST_SUFFIX}")
    if not path.exists():
        raise FileNotFoundError(f"no manifest {path}: the file {stem!r} was not accepted (look in {folder.rejected})")
    return Manifest.from_json(path.read_text(encoding="utf-8"))


def manifest_stems(folder: DropFolder) -> list[str]:
    """Stems of all accepted files, in acceptance order (the stem starts with the UTC acceptance time)."""
    if not folder.accepted.exists():
        return []
    return sorted(p.name[: -len(MANIFEST_SUFFIX)] for p in folder.accepted.glob(f"*{MANIFEST_SUFFIX}") if not p.name.startswith("."))


def read_manifests(folder: DropFolder) -> list[Manifest]:
    """Every accepted file's manifest, in acceptance order."""
    return [read_manifest(folder, stem) for stem in manifest_stems(folder)]


def _find_duplicate(folder: DropFolder, sha: str) -> str | None:
    for path in folder.accepted.glob(f"*-{sha[:8]}-*{MANIFEST_SUFFIX}"):
        manifest = Manifest.from_json(path.read_text(encoding="utf-8"))
        if manifest.sha256 == sha:
            return manifest.duplicate_of or manifest.stem
    return None


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
            rows, models = _split(path, staging, chunk_rows)
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


HELD_PREFIXES = (".recover-", ".retake-")  # incoming/.<prefix><32 hex>-<original name>: a file intake is holding


def _hold(folder: DropFolder, path: Path, kind: str, original: str) -> Path:
    """Move a file intake takes in again under a hidden name in incoming/ (the scan does not list it); a process
    killed before the intake ends leaves it there, and :func:`recover_orphans` takes it in on the next tick."""
    moved = folder.incoming / f".{kind}-{uuid.uuid4().hex}-{original}"
    os.replace(path, moved)
    return moved


def _intake_held(folder: DropFolder, held: Path, original: str, *, chunk_rows: int,
                 claimed: Mapping[str, str] | None) -> Intake:
    result = intake_file(held, folder, chunk_rows=chunk_rows, name=original, claimed=claimed)
    if result.status == "changed":  # still being written: back under a visible name, read once it settles
        target = folder.incoming / original
        if target.exists():
            target = folder.incoming / f"{Path(original).stem}-{uuid.uuid4().hex[:8]}{suffix_of(Path(original))}"
        os.replace(held, target)
        result = Intake("changed", target, None, result.sha256)
    return result


def recover_orphans(folder: DropFolder, *, chunk_rows: int = INTAKE_CHUNK_ROWS,
                    claimed: Mapping[str, str] | None = None) -> list[Intake]:
    """What a killed process left half-way, taken in again: accepted files without a manifest (killed between
    moving the file and the commit) and files held under a hidden name in incoming/ (killed during a recovery
    or a re-take); a killed intake's hidden staging folder is removed (the file it was made from is never in it).
    Call it under the intake lock. Returns what was recovered."""
    out = []
    if not folder.accepted.exists():
        return out
    for staging in folder.accepted.glob(f".*{PARTS_SUFFIX}.*.tmp"):  # a killed intake's parts; its file is still in
        shutil.rmtree(staging, ignore_errors=True)                   # incoming/ (or below, without manifest): read again
    for path in sorted(folder.accepted.iterdir()):
        name = path.name
        if (name.startswith(".") or name.endswith((MANIFEST_SUFFIX, REASON_SUFFIX, PARTS_SUFFIX, CHANGED_SUFFIX))
                or path.is_symlink() or not (path.is_file() or path.is_dir())
                or (folder.accepted / f"{name}{MANIFEST_SUFFIX}").exists()):
            continue
        shutil.rmtree(folder.accepted / f"{name}{PARTS_SUFFIX}", ignore_errors=True)
        original = name.split("-", 2)[2] if name.count("-") >= 2 else name  # <time>-<sha8>-<original name>
        out.append(_intake_held(folder, _hold(folder, path, "recover", original), original, chunk_rows=chunk_rows, claimed=claimed))
    for path in sorted(folder.incoming.iterdir()):
        if path.name.startswith(HELD_PREFIXES) and (path.is_file() or path.is_dir()) and not path.is_symlink():
            original = path.name.split("-", 2)[2] if path.name.count("-") >= 2 else path.name.lstrip(".")
            out.append(_intake_held(folder, path, original, chunk_rows=chunk_rows, claimed=claimed))
    return out


# ---------------------------------------------------------------------------------------------- changed after intake


def changed_since_intake(folder: DropFolder, manifest: Manifest) -> str | None:
    """Why the accepted copy no longer holds the bytes its manifest records (a writer that kept writing in place:
    its open file followed the move into accepted/), or None when it still does. Size and modification time
    first; the sha256 when they match (a rewrite within the same second and size). On a remote home the bucket's
    accepted copy was uploaded by intake itself, from its own copy: no writer holds it open (None)."""
    if folder.home.remote:
        return None
    path = folder.accepted / manifest.stem
    try:
        stat = entry_stat(path)
    except FileNotFoundError:
        return f"accepted/{manifest.stem} is missing"
    if stat.st_size != manifest.bytes:
        return f"accepted/{manifest.stem} has {stat.st_size:,} bytes, {manifest.bytes:,} when it was taken in"
    if stat.st_mtime_ns != manifest.received_at_ns and sha256_entry(path) != manifest.sha256:
        return f"accepted/{manifest.stem} was rewritten after it was taken in (its sha256 differs from the manifest's)"
    return None


def changed_accepted_files(folder: DropFolder, manifests: list[Manifest] | None = None) -> list[Manifest]:
    """Accepted files whose size or modification time differ from their manifest (cheap: one stat each).
    ``manifests``: those already read this tick (default: every manifest)."""
    out = []
    for manifest in read_manifests(folder) if manifests is None else manifests:
        stem = manifest.stem
        try:
            stat = entry_stat(folder.accepted / stem)
        except FileNotFoundError:
            continue  # restored copy impossible (rewritten, not appended): the .changed.txt note says so
        if (stat.st_size, stat.st_mtime_ns) != (manifest.bytes, manifest.received_at_ns):
            out.append(manifest)
    return out


def retake(folder: DropFolder, manifest: Manifest, *, now: float | None = None, settle_seconds: float = SETTLE_SECONDS,
           chunk_rows: int = INTAKE_CHUNK_ROWS, claimed: Mapping[str, str] | None = None) -> Intake | None:
    """Take an accepted file that grew or changed after intake in again, as a new file (the whole of it, so
    the model is onboarded from every row, newest wins), once it has settled; None while it is still written.

    The accepted copy is put back as it was taken in: its first ``manifest.bytes`` bytes, if their sha256 is the
    manifest's (an append), with the original modification time; a note ``accepted/<stem>.changed.txt`` says what
    happened and where the new version went. Nothing is deleted."""
    now = time.time() if now is None else now
    path = folder.accepted / manifest.stem
    if now - entry_stat(path).st_mtime_ns / 1e9 < settle_seconds:
        return None
    held = _hold(folder, path, "retake", manifest.original_name)
    grown_to = entry_stat(held).st_size
    restored = False
    prefix = b""
    if held.is_file():  # a folder is taken in again whole; its onboarded rows stay in <stem>.parts/
        with open(held, "rb") as source:
            prefix = source.read(manifest.bytes)
    if held.is_file() and len(prefix) == manifest.bytes and hashlib.sha256(prefix).hexdigest() == manifest.sha256:
        tmp = folder.accepted / f".{manifest.stem}.{uuid.uuid4().hex}.tmp"
        tmp.write_bytes(prefix)
        os.utime(tmp, ns=(manifest.received_at_ns, manifest.received_at_ns))
        os.replace(tmp, path)
        restored = True
    result = _intake_held(folder, held, manifest.original_name, chunk_rows=chunk_rows, claimed=claimed)
    where = {"accepted": f"accepted/{result.stored.name if result.stored else ''}",
             "duplicate": f"accepted/{result.stored.name if result.stored else ''} (same bytes as an accepted file)",
             "rejected": f"rejected/{result.stored.name if result.stored else ''}",
             "changed": f"incoming/{result.source.name} (still being written; taken in once it settles)"}[result.status]
    _write_text_atomic(folder.accepted / f"{manifest.stem}{CHANGED_SUFFIX}", (
        f"CHANGED AFTER INTAKE: {manifest.original_name}\n"
        f"noticed at: {datetime.fromtimestamp(now, tz=timezone.utc).isoformat()}\n"
        f"onboarded from this file: {manifest.rows:,} rows, {manifest.bytes:,} bytes, sha256 {manifest.sha256}\n"
        f"the file then had: {grown_to:,} bytes (a writer kept writing it in place after intake)\n"
        f"this copy: {'restored to the bytes that were onboarded' if restored else 'NOT restored: its first bytes changed too (not an append); the onboarded rows are in ' + manifest.stem + PARTS_SUFFIX + '/'}\n"
        f"the new version: {where}\n"
        "To avoid this, write the file under a .part name and rename it when it is complete (docs/onboarding.md).\n"))
    return result


def accepted_rows(folder: DropFolder, stem: str, model: str) -> pd.DataFrame:
    """One model's validated rows from an accepted file (model, query_id, query, benchmark, score, _row)."""
    path = folder.fetch(folder.accepted / f"{stem}{PARTS_SUFFIX}" / f"{safe_model_key(model)}.parquet")
    if not path.exists():
        raise EvaluationDataError(
            f"model {model!r} has no rows in this accepted file", file=folder.accepted / stem, column="model",
            fix="check the model name in the run config (the sensor sets it from the file)",
        )
    return pd.read_parquet(path)


def claimed_keys(home: LocusHome, folder: DropFolder, manifests: list[Manifest] | None = None) -> dict[str, str]:
    """model_key -> model name of every model the home knows, and of every model of an accepted file.
    ``manifests``: those already read this tick (default: every manifest)."""
    claimed = home.model_identities()
    for manifest in read_manifests(folder) if manifests is None else manifests:
        for entry in manifest.models:
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
    """Entries of ``incoming/`` that are never read, with the reason: symlinks (and anything neither a file nor a
    folder). Folders are read (harness outputs; a folder that holds none is rejected by intake, with the reason).
    Hidden and in-progress names are not listed: they are the writers' convention (write, then rename)."""
    out = []
    if not folder.incoming.exists():
        return out
    for path in sorted(folder.incoming.iterdir()):
        if is_in_progress(path.name) or path in (folder.accepted, folder.rejected):
            continue
        if path.is_symlink():
            out.append((path, "a symbolic link: links are not followed (the target could change or vanish after intake); "
                              "copy the file itself into incoming/"))
        elif not (path.is_file() or path.is_dir()):
            out.append((path, "neither a file nor a folder (a pipe, socket or device): drop evaluation files or a harness's output folder"))
    return out


def in_progress_entries(folder: DropFolder) -> list[Path]:
    """Files of ``incoming/`` the scan skips for their in-progress name (``.x.csv``, ``x.csv.part``): named in the tick
    so a file dropped under such a name by mistake is not waited on in silence. Intake's own held files excluded."""
    if not folder.incoming.exists():
        return []
    return sorted(p for p in folder.incoming.iterdir()
                  if is_in_progress(p.name) and not p.name.startswith(HELD_PREFIXES) and p.is_file() and not p.is_symlink())


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

"""Entries intake takes in again: what a killed process left half-way (``recover_orphans``), and an accepted file a
writer kept writing in place after intake (``changed_accepted_files``, ``changed_since_intake``, ``retake``)."""

from __future__ import annotations

import hashlib
import os
import shutil
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Mapping

from locus_model.data.errors import suffix_of
from locus_model.onboarding import INTAKE_CHUNK_ROWS
from locus_pipeline.intake.accept import Intake, intake_file
from locus_pipeline.intake.folder import (
    HELD_PREFIXES,
    REASON_SUFFIX,
    SETTLE_SECONDS,
    DropFolder,
    entry_stat,
    sha256_entry,
    write_text_atomic,
)
from locus_pipeline.intake.manifests import PARTS_SUFFIX, Manifest, read_manifests
from locus_pipeline.storage.drops import MANIFEST_SUFFIX

CHANGED_SUFFIX = ".changed.txt"  # beside an accepted file that changed after intake (see retake)


def _hold(folder: DropFolder, path: Path, kind: str, original: str) -> Path:
    """Move a file intake takes in again under a hidden name in incoming/ (the scan does not list it); a process
    killed before the intake ends leaves it there, and :func:`recover_orphans` takes it in on the next tick."""
    moved = folder.incoming / f".{kind}-{uuid.uuid4().hex}-{original}"
    os.replace(path, moved)
    return moved


def _intake_held(
    folder: DropFolder, held: Path, original: str, *, chunk_rows: int, claimed: Mapping[str, str] | None
) -> Intake:
    result = intake_file(held, folder, chunk_rows=chunk_rows, name=original, claimed=claimed)
    if result.status == "changed":  # still being written: back under a visible name, read once it settles
        target = folder.incoming / original
        if target.exists():
            target = folder.incoming / f"{Path(original).stem}-{uuid.uuid4().hex[:8]}{suffix_of(Path(original))}"
        os.replace(held, target)
        result = Intake("changed", target, None, result.sha256)
    return result


def recover_orphans(
    folder: DropFolder, *, chunk_rows: int = INTAKE_CHUNK_ROWS, claimed: Mapping[str, str] | None = None
) -> list[Intake]:
    """What a killed process left half-way, taken in again: accepted files without a manifest (killed between
    moving the file and the commit) and files held under a hidden name in incoming/ (killed during a recovery
    or a re-take); a killed intake's hidden staging folder is removed (the file it was made from is never in it).
    Call it under the intake lock. Returns what was recovered."""
    out: list[Intake] = []
    if not folder.accepted.exists():
        return out
    for staging in folder.accepted.glob(f".*{PARTS_SUFFIX}.*.tmp"):  # a killed intake's parts; its file is still in
        shutil.rmtree(staging, ignore_errors=True)  # incoming/ (or below, without manifest): read again
    for path in sorted(folder.accepted.iterdir()):
        name = path.name
        if (
            name.startswith(".")
            or name.endswith((MANIFEST_SUFFIX, REASON_SUFFIX, PARTS_SUFFIX, CHANGED_SUFFIX))
            or path.is_symlink()
            or not (path.is_file() or path.is_dir())
            or (folder.accepted / f"{name}{MANIFEST_SUFFIX}").exists()
        ):
            continue
        shutil.rmtree(folder.accepted / f"{name}{PARTS_SUFFIX}", ignore_errors=True)
        original = name.split("-", 2)[2] if name.count("-") >= 2 else name  # <time>-<sha8>-<original name>
        out.append(
            _intake_held(
                folder, _hold(folder, path, "recover", original), original, chunk_rows=chunk_rows, claimed=claimed
            )
        )
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
    if stat.st_mtime_ns != manifest.mtime_ns and sha256_entry(path) != manifest.sha256:
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
        if (stat.st_size, stat.st_mtime_ns) != (manifest.bytes, manifest.mtime_ns):
            out.append(manifest)
    return out


def retake(
    folder: DropFolder,
    manifest: Manifest,
    *,
    now: float | None = None,
    settle_seconds: float = SETTLE_SECONDS,
    chunk_rows: int = INTAKE_CHUNK_ROWS,
    claimed: Mapping[str, str] | None = None,
) -> Intake | None:
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
        os.utime(tmp, ns=(manifest.mtime_ns, manifest.mtime_ns))
        os.replace(tmp, path)
        restored = True
    result = _intake_held(folder, held, manifest.original_name, chunk_rows=chunk_rows, claimed=claimed)
    where = {
        "accepted": f"accepted/{result.stored.name if result.stored else ''}",
        "duplicate": f"accepted/{result.stored.name if result.stored else ''} (same bytes as an accepted file)",
        "rejected": f"rejected/{result.stored.name if result.stored else ''}",
        "changed": f"incoming/{result.source.name} (still being written; taken in once it settles)",
    }[result.status]
    copy_note = (
        "restored to the bytes that were onboarded"
        if restored
        else "NOT restored: its first bytes changed too (not an append); the onboarded rows are in "
        f"{manifest.stem}{PARTS_SUFFIX}/"
    )
    write_text_atomic(
        folder.accepted / f"{manifest.stem}{CHANGED_SUFFIX}",
        (
            f"CHANGED AFTER INTAKE: {manifest.original_name}\n"
            f"noticed at: {datetime.fromtimestamp(now, tz=timezone.utc).isoformat()}\n"
            f"onboarded from this file: {manifest.rows:,} rows, {manifest.bytes:,} bytes, sha256 {manifest.sha256}\n"
            f"the file then had: {grown_to:,} bytes (a writer kept writing it in place after intake)\n"
            f"this copy: {copy_note}\nthe new version: {where}\n"
            "To avoid this, write the file under a .part name and rename it when it is complete (docs/onboarding.md).\n"
        ),
    )
    return result

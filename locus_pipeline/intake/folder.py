"""The drop folder and its entries: where files are dropped (``DropFolder``), which entries are complete and
settled (``scan_incoming``), what is never read (in-progress names, links), how an entry is fingerprinted while
it is read (``entry_stat``, ``sha256_entry``), and the names intake gives what it stores (``entry_stem``)."""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

from locus_model.data.errors import suffix_of
from locus_pipeline.storage import LocusHome, drops, sha256_file
from locus_pipeline.storage.drops import IN_PROGRESS_SUFFIXES

SETTLE_SECONDS = 2.0  # a file is read once nothing has written to it for this long
REASON_SUFFIX = ".reason.txt"
HELD_PREFIXES = (".recover-", ".retake-")  # incoming/.<prefix><32 hex>-<original name>: a file intake is holding


@dataclass(frozen=True)
class DropFolder:
    """``LOCUS_HOME/incoming`` and its ``accepted/`` and ``rejected/`` folders."""

    home: LocusHome

    @classmethod
    def at(cls, root: Path | str) -> "DropFolder":
        return cls(LocusHome(root=str(root)))

    @property
    def incoming(self) -> Path:
        """The local drop folder: the home's own on a local home, its working copy on a remote one
        (storage/drops.py)."""
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
            self.ensure()
            pulled = drops.pull(self.home, self.incoming)  # the bucket's new objects into the local copy
            yield mine
            drops.push(self.home, self.incoming, pulled)  # the outcome back, the objects taken in deleted

    def fetch(self, path: Path, mtime_ns: int | None = None) -> Path:
        """``path`` (under the local drop folder) present locally: on a remote home, downloaded on first use."""
        if self.home.remote:
            drops.fetch(self.home, self.incoming, path, mtime_ns)
        return path


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
        entries.append(
            (item.relative_to(path).as_posix(), item_stat.st_size if item.is_file() else 0, item_stat.st_mtime_ns)
        )
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


def scan_incoming(
    folder: DropFolder, *, now: float | None = None, settle_seconds: float = SETTLE_SECONDS
) -> tuple[list[Path], list[Path]]:
    """(ready, settling): complete-looking files and folders in ``incoming/``, oldest first, and those still settling.

    An entry is ready when its name is not an in-progress name and nothing has modified it (a folder: anything in
    it, or the folder itself) for ``settle_seconds`` (a modification time in the future, e.g. from clock skew,
    counts as "just written"). ``accepted/`` and ``rejected/`` are not entries.
    """
    now = time.time() if now is None else now
    ready: list[Path] = []
    settling: list[Path] = []
    if not folder.incoming.exists():
        return ready, settling
    entries = []
    for path in folder.incoming.iterdir():
        if (
            is_in_progress(path.name)
            or path.is_symlink()
            or path in (folder.accepted, folder.rejected)
            or not (path.is_file() or path.is_dir())
        ):
            continue
        try:
            mtime = (
                path.stat().st_mtime
                if path.is_file()
                else max(entry_stat(path).st_mtime_ns, path.stat().st_mtime_ns) / 1e9
            )
            entries.append((mtime, path))
        except FileNotFoundError:  # renamed away between listing and stat
            continue
    for mtime, path in sorted(entries, key=lambda e: (e[0], e[1].name)):
        (ready if now - mtime >= settle_seconds else settling).append(path)
    return ready, settling


def stamp(now: float) -> str:
    return datetime.fromtimestamp(now, tz=timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")


MAX_NAME_BYTES = 120  # of the original name kept in a stem: every name made from it stays under the 255-byte limit


def entry_stem(now: float, sha: str, name: str) -> str:
    """``<UTC time>-<sha8>-<name>``, the name cut to MAX_NAME_BYTES (keeping its suffix): the longest name built from
    a stem, the temporary ``.<stem>.manifest.json.<32 hex>.tmp``, stays under the filesystem's 255 bytes."""
    raw = name.encode("utf-8")
    if len(raw) > MAX_NAME_BYTES:
        suffix = suffix_of(Path(name)) or Path(name).suffix[:16]
        name = raw[: MAX_NAME_BYTES - len(suffix.encode())].decode("utf-8", "ignore") + suffix
    return f"{stamp(now)}-{sha[:8]}-{name}"


def write_text_atomic(path: Path, text: str) -> None:
    """Write beside, then rename: a reader sees the whole text or none."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------- what is never read


def unusable_entries(folder: DropFolder) -> list[tuple[Path, str]]:
    """Entries of ``incoming/`` that are never read, with the reason: symlinks (and anything neither a file nor a
    folder). Folders are read (harness outputs; a folder that holds none is rejected by intake, with the reason).
    Hidden and in-progress names are not listed: they are the writers' convention (write, then rename)."""
    out: list[tuple[Path, str]] = []
    if not folder.incoming.exists():
        return out
    for path in sorted(folder.incoming.iterdir()):
        if is_in_progress(path.name) or path in (folder.accepted, folder.rejected):
            continue
        if path.is_symlink():
            out.append(
                (
                    path,
                    "a symbolic link: links are not followed (the target could change or vanish after intake); "
                    "copy the file itself into incoming/",
                )
            )
        elif not (path.is_file() or path.is_dir()):
            out.append(
                (
                    path,
                    "neither a file nor a folder (a pipe, socket or device): "
                    "drop evaluation files or a harness's output folder",
                )
            )
    return out


def in_progress_entries(folder: DropFolder) -> list[Path]:
    """Files of ``incoming/`` the scan skips for their in-progress name (``.x.csv``, ``x.csv.part``): named in the tick
    so a file dropped under such a name by mistake is not waited on in silence. Intake's own held files excluded."""
    if not folder.incoming.exists():
        return []
    return sorted(
        p
        for p in folder.incoming.iterdir()
        if is_in_progress(p.name) and not p.name.startswith(HELD_PREFIXES) and p.is_file() and not p.is_symlink()
    )


def move_to_rejected(folder: DropFolder, path: Path, stem: str, reason: str) -> str:
    """The one mover into ``rejected/``: ``path`` (a dropped entry, a link, a manifest intake did not write) to
    ``rejected/<stem>`` unchanged, then ``reason`` beside it as ``<stem>.reason.txt``; returns that reason file's path
    relative to incoming/ (a Rejection's ``reason_file``). Nothing is deleted."""
    os.replace(path, folder.rejected / stem)
    write_text_atomic(folder.rejected / f"{stem}{REASON_SUFFIX}", reason)
    return f"rejected/{stem}{REASON_SUFFIX}"


def reject_unusable(folder: DropFolder, path: Path, reason: str, *, now: float | None = None) -> Path:
    """Move a symlink or other non-file out of incoming/ into rejected/ (the link itself, never its target) with a
    reason (move_to_rejected); returns where it went."""
    now = time.time() if now is None else now
    when = datetime.fromtimestamp(now, tz=timezone.utc).isoformat()
    stem = entry_stem(now, "notafile", path.name)
    move_to_rejected(
        folder,
        path,
        stem,
        f"REJECTED: {path.name}\nrejected at: {when}\nproblem: {reason}\n"
        "how to fix: see the problem; nothing "
        "was read from it, and it is kept here unchanged.\n",
    )
    return folder.rejected / stem

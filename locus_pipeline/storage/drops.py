"""A remote home's drop folder: the bucket's ``incoming/`` mirrored into the local working copy around each intake.

Object storage has no rename. Its writer protocol is "upload the whole object": one PUT (or one multipart upload)
makes the object visible complete or not at all, so every object directly under ``incoming/`` is a complete file
(in-progress names, ``x.csv.part``, are still skipped; a folder cannot be dropped atomically: drop an archive).
Intake itself (locus_pipeline/intake/) runs unchanged on the local copy; around it, under the intake lock:

- ``pull``: the accepted manifests the local copy lacks (a new machine or pod), then each complete object under
  ``incoming/``, downloaded under a hidden name and renamed into the local ``incoming/`` with the object's time;
- ``push``: every file intake wrote under the local ``accepted/`` and ``rejected/`` that the bucket lacks, the
  manifest of an accepted file last (it is the commit), then the ``incoming/`` object of each file taken in is
  deleted (only the version that was pulled: ``If-Match``);
- ``fetch``: an onboarding run on any machine downloads the accepted manifest, part or file it reads on first use.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

# The drop folder's names, here once (intake, a layer above, imports them): an accepted file's manifest, and the
# names a writer uses while a file is incomplete (never read).
MANIFEST_SUFFIX = ".manifest.json"
IN_PROGRESS_SUFFIXES = (".part", ".tmp", ".partial", ".crdownload", ".swp")


def _download(remote: Any, local: Path, mtime_ns: int | None = None) -> Path:
    local.parent.mkdir(parents=True, exist_ok=True)
    tmp = local.with_name(f".{local.name}.{uuid.uuid4().hex}.tmp")
    remote.fs.get_file(remote.path, str(tmp))
    if mtime_ns is not None:
        os.utime(tmp, ns=(mtime_ns, mtime_ns))
    os.replace(tmp, local)
    return local


def pull(home: Any, local_incoming: Path) -> dict[str, str]:
    """Download what a local intake needs from the bucket; returns name -> ETag of the incoming objects pulled."""
    remote = home.path / "incoming"
    accepted = remote / "accepted"
    if accepted.exists():
        for item in accepted.iterdir():
            if item.name.endswith(MANIFEST_SUFFIX) and not (local_incoming / "accepted" / item.name).exists():
                _download(item, local_incoming / "accepted" / item.name)
    pulled: dict[str, str] = {}
    if not remote.exists():
        return pulled
    remote.fs.invalidate_cache(remote.path)
    for info in remote.fs.ls(remote.path, detail=True):
        name = info["name"].rstrip("/").rsplit("/", 1)[-1]
        if info["type"] != "file" or name.startswith(".") or name.lower().endswith(IN_PROGRESS_SUFFIXES):
            continue
        local = local_incoming / name
        mtime_ns = int(info["LastModified"].timestamp() * 1e9) if info.get("LastModified") else None
        if not (local.exists() and local.stat().st_size == info["size"]):
            _download(remote / name, local, mtime_ns)
        pulled[name] = str(info.get("ETag", ""))
    return pulled


def push(home: Any, local_incoming: Path, pulled: dict[str, str]) -> list[str]:
    """Upload intake's results to the bucket and delete the incoming objects taken in; returns what was uploaded."""
    remote = home.path / "incoming"
    fs = remote.fs
    have = {}
    for folder in ("accepted", "rejected"):
        prefix = (remote / folder).path
        fs.invalidate_cache(prefix)
        have.update({p: s for p, s in fs.find(prefix, detail=True).items()} if fs.exists(prefix) else {})
    files = [
        p
        for folder in ("accepted", "rejected")
        if (local_incoming / folder).exists()
        for p in sorted((local_incoming / folder).rglob("*"))
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(local_incoming).parts)
    ]
    files.sort(key=lambda p: p.name.endswith(MANIFEST_SUFFIX))  # manifests last: an accepted file is complete first
    uploaded = []
    for file in files:
        name = file.relative_to(local_incoming).as_posix()
        target = remote / name
        known = have.get(target.path)
        if known is None or int(known["size"]) != file.stat().st_size:
            fs.put_file(str(file), target.path)
            uploaded.append(name)
    for name, etag in pulled.items():
        if not (local_incoming / name).exists():  # taken in (accepted, rejected or a duplicate): out of incoming/
            bucket, key, _ = fs.split_path((remote / name).path)
            try:
                fs.call_s3("delete_object", Bucket=bucket, Key=key, **({"IfMatch": etag} if etag else {}))
            except (FileNotFoundError, OSError):  # replaced by a new upload meanwhile: the next tick takes it in
                pass
    return uploaded


def fetch(home: Any, local_incoming: Path, local: Path, mtime_ns: int | None = None) -> Path:
    """A local copy of a file under the bucket's ``incoming/`` (``local`` is its place in the local copy)."""
    if not local.exists():
        remote = home.path / "incoming" / local.relative_to(local_incoming).as_posix()
        if remote.exists():
            _download(remote, local, mtime_ns)
    return local

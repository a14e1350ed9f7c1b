"""Files under the home, on a local disk or in object storage: whole-file writes that readers see complete or not
at all, and reads that name the file and the fix.

A local home writes a temporary file and renames it (POSIX rename is atomic). An object store has no rename: an
object is written by one upload (a PUT), which is atomic by itself, so the same functions upload the whole object.
A path is a ``pathlib.Path`` for a local home and a ``upath.UPath`` (fsspec) for a URL such as ``s3://bucket/prefix``.
"""

from __future__ import annotations

import hashlib
import io
import os
import uuid
from pathlib import Path
from typing import Any, TypeAlias

import pandas as pd

# what version_of returns: (mtime_ns, size, inode) for a local file, (ETag, size) for an object in object storage
FileVersion: TypeAlias = tuple[int, int, int] | tuple[str, int]


class StorageError(RuntimeError):
    """A stored table or file is missing or unreadable; the message says which and how to fix it."""


def is_url(root: str) -> bool:
    """Whether a home root is an fsspec URL (``s3://...``, ``memory://...``) rather than a local folder."""
    return "://" in root and not root.startswith("file://")


def is_remote(path: Any) -> bool:
    """Whether a path lives in object storage (a UPath), not on the local disk."""
    return not isinstance(path, Path)


def as_path(location: str) -> Any:
    """A local folder as an absolute Path, a URL as a UPath (universal-pathlib, imported only for URLs)."""
    if is_url(location):
        # why: universal-pathlib (fsspec) loads only for a home in object storage
        from upath import UPath

        # no listings cache: other processes write the same prefixes, and a cached listing would hide their objects
        return UPath(location.rstrip("/"), use_listings_cache=False)
    return Path(location.removeprefix("file://")).expanduser().resolve()


def write_bytes_atomic(data: bytes, path: Any) -> None:
    """Readers see the old or the new file, never half of one: temporary file + rename on a local disk, one
    upload of the whole object in object storage."""
    if is_remote(path):
        path.write_bytes(data)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_parquet_atomic(frame: pd.DataFrame, path: Any) -> None:
    """A frame as one Parquet file (or object), written atomically (see write_bytes_atomic)."""
    if is_remote(path):
        buffer = io.BytesIO()
        frame.to_parquet(buffer, index=False)
        path.write_bytes(buffer.getvalue())
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        frame.to_parquet(tmp, index=False)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def put_file(local: Path, path: Any) -> None:
    """Copy a finished local file to ``path`` atomically: a rename when both are on this disk, else one upload."""
    if is_remote(path):
        path.fs.put_file(str(local), path.path)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    if local.parent == path.parent:
        os.replace(local, path)
    else:
        write_bytes_atomic(Path(local).read_bytes(), path)


def read_parquet(path: Any, *, what: str, fix: str, columns: list[str] | None = None) -> pd.DataFrame:
    """A Parquet file, or a StorageError naming it and the fix (missing, or unreadable)."""
    if not path.exists():
        raise StorageError(f"{what} does not exist at {path}. How to fix: {fix}")
    try:
        if is_remote(path):
            with path.open("rb") as handle:  # one GET of one object version: a consistent snapshot
                return pd.read_parquet(io.BytesIO(handle.read()), columns=columns)
        return pd.read_parquet(path, columns=columns)
    except Exception as err:  # pyarrow raises several types for a damaged file; name the file, keep the cause
        raise StorageError(f"{what} at {path} cannot be read ({type(err).__name__}: {err}). How to fix: {fix}") from err


def version_of(path: Any) -> FileVersion | None:
    """What changes whenever the file is replaced, None when it is missing: (mtime_ns, size, inode) locally
    (an atomic rewrite changes the inode), the object's ETag in object storage."""
    if is_remote(path):
        try:
            info = path.fs.info(path.path)
        except FileNotFoundError:
            return None
        return (
            str(info.get("ETag") or info.get("etag") or info.get("generation") or info.get("mtime")),
            int(info["size"]),
        )
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def checkpoint_id(path: str | Path) -> str:
    """Identity of a checkpoint: sha256 prefix of its bytes."""
    return sha256_file(Path(path))[:16]


def sha256_file(path: Any) -> str:
    digest = hashlib.sha256()
    with (Path(path) if isinstance(path, str) else path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()

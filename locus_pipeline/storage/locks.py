"""Exclusive locks across processes (and machines): a file lock on a local home, a lease object created by a
conditional write on an object store.

Every read-modify-write of the home (the pool, an onboarded model's store) runs under one of these. On a local
disk that is ``flock`` on ``.locks/<name>.lock``. An object store has no file lock: the lock is the object
``.locks/<name>.lock`` itself, created with ``If-None-Match: *`` (S3 conditional write; exactly one of several
concurrent creators succeeds), deleted with ``If-Match: <its ETag>`` by its holder, and broken by the next
process once its lease (``LOCUS_LOCK_TTL`` seconds, default 3600) has expired (a holder that died).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

POLL_SECONDS = 0.1


def lease_seconds() -> float:
    return float(os.environ.get("LOCUS_LOCK_TTL", "3600"))


@contextmanager
def file_lock(path: Path, *, blocking: bool = True) -> Iterator[bool]:
    """``flock`` on a local file; yields False when ``blocking`` is off and another process holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _s3(path: Any) -> tuple[Any, str, str]:
    if path.protocol not in ("s3", "s3a"):
        raise NotImplementedError(
            f"locks on {path.protocol}:// homes are not implemented (only S3 and S3-compatible stores have the "
            "conditional writes they need). How to fix: put LOCUS_HOME in an s3:// bucket, or on a local disk"
        )
    bucket, key, _ = path.fs.split_path(path.path)
    return path.fs, bucket, key


def _try_create(fs: Any, bucket: str, key: str) -> str | None:
    """Create the lease object if it does not exist; its ETag, or None when another process holds it."""
    body = json.dumps(
        {
            "holder": f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}",
            "expires": time.time() + lease_seconds(),
        }
    ).encode()
    try:
        return fs.call_s3("put_object", Bucket=bucket, Key=key, Body=body, IfNoneMatch="*")["ETag"]
    except FileExistsError:  # 412 Precondition Failed: the object exists, someone holds the lock
        return None


def _break_if_expired(fs: Any, bucket: str, key: str) -> bool:
    """Delete the lease object if its lease ran out (its holder died); only that version of it (If-Match).
    Whether it is gone (broken here or meanwhile)."""
    try:
        # the ETag first, then the body: if the object is replaced in between, the delete below names the older
        # version and fails, so a fresh lease is never deleted
        etag = fs.call_s3("head_object", Bucket=bucket, Key=key)["ETag"]
        lease = json.loads(fs.cat_file(f"{bucket}/{key}"))
    except FileNotFoundError:
        return True
    if lease.get("expires", 0) >= time.time():
        return False
    try:
        fs.call_s3("delete_object", Bucket=bucket, Key=key, IfMatch=etag)
        return True
    except (FileNotFoundError, OSError):  # another process broke it, or it was replaced: try again
        return False


@contextmanager
def object_lock(path: Any, *, blocking: bool = True) -> Iterator[bool]:
    """The lease object at ``path`` (a UPath in S3); yields False when ``blocking`` is off and it is held."""
    fs, bucket, key = _s3(path)
    while True:
        etag = _try_create(fs, bucket, key)
        if etag is not None:
            break
        if _break_if_expired(fs, bucket, key):
            continue
        if not blocking:
            yield False
            return
        time.sleep(POLL_SECONDS)
    try:
        yield True
    finally:
        try:
            fs.call_s3("delete_object", Bucket=bucket, Key=key, IfMatch=etag)
        except (FileNotFoundError, OSError):  # our lease expired and another process broke it: nothing to release
            pass

"""The gateway's traffic log (``traffic/`` under LOCUS_HOME): what `locus serve` decided and the outcomes graded since.

    traffic/decisions/<start>-<writer>-<seq>.jsonl   one JSON object a line per routed request (request id, time,
                                                     the query text's sha256 and encoding, candidates, the model that
                                                     answered, whether it was exploration)
    traffic/outcomes/<start>-<writer>-<seq>.jsonl    one a line per graded answer {request_id, score, source, client}
                                                     and per reset {reset: MODEL} (``locus learn reset``)
    traffic/learner.json                             the learner's state and how far into each outcome segment it read

Each writer (one gateway process, one CLI call) appends only to segments of its own, so replicas sharing a home never
write the same file: on a local home a segment is a file opened for appending (decisions flushed, outcomes synced
to disk before the answer); in object storage, which has no append, a segment is this writer's own object, uploaded
whole (one PUT) when it changes (outcomes at once, decisions at each tick of the gateway's watcher), and segments
stay small there (``Retention.remote_segment_mb``). Readers (:class:`SegmentTail`) follow every writer's segments
by byte offset, so each replica catches up from the log. Retention: segments older than ``days`` are deleted, and
the oldest ones while the total passes ``max_mb`` (never one written in the last ``segment_minutes``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import pandas as pd

from locus_pipeline.storage.files import StorageError, is_remote, write_bytes_atomic

log = logging.getLogger("locus.traffic")

KINDS = ("decisions", "outcomes")


@dataclass(frozen=True)
class Retention:
    """How much of the traffic log is kept."""

    days: float = 30.0  # segments last written longer ago than this are deleted
    max_mb: float = 1024.0  # and the oldest ones while all segments of a kind together pass this
    segment_mb: float = 16.0  # a writer starts a new segment past this size (local home)
    remote_segment_mb: float = 1.0  # in object storage, where a segment is uploaded whole at each change
    segment_minutes: float = 60.0  # or past this age

    def __post_init__(self) -> None:
        for name in ("days", "max_mb", "segment_mb", "remote_segment_mb", "segment_minutes"):
            if not getattr(self, name) > 0:
                raise ValueError(f"Retention.{name} = {getattr(self, name)!r}: give a positive number")


def writer_id() -> str:
    """This process's name in segment names: host, pid and a random suffix (a restarted process writes anew)."""
    host = "".join(c if c.isalnum() else "-" for c in socket.gethostname())[:32] or "host"
    return f"{host}-{os.getpid()}-{secrets.token_hex(3)}"


class SegmentWriter:
    """Appends JSON lines to this writer's own segments of one kind of record (thread-safe)."""

    def __init__(self, folder: Any, writer: str, retention: Retention) -> None:
        self.folder, self.writer, self.retention = folder, writer, retention
        self.remote = is_remote(folder)
        limit = retention.remote_segment_mb if self.remote else retention.segment_mb
        self.max_bytes, self.max_age = int(limit * (1 << 20)), retention.segment_minutes * 60
        self._lock = threading.Lock()
        self._seq, self._path, self._handle, self._started = 0, None, None, 0.0
        self._buffer, self._dirty = bytearray(), False  # object storage: the current segment, uploaded whole

    def _rotate(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        if self._dirty:
            self._upload()
        self._seq += 1
        self._started = time.time()
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(self._started))
        self._path = self.folder / f"{stamp}-{self.writer}-{self._seq:06d}.jsonl"
        self._buffer = bytearray()
        if not self.remote:
            self.folder.mkdir(parents=True, exist_ok=True)
            self._handle = open(self._path, "ab")

    def _upload(self) -> None:
        self._path.write_bytes(bytes(self._buffer))  # one PUT: the object is the whole segment so far
        self._dirty = False

    def append(self, records: list[dict], *, sync: bool) -> None:
        """Append ``records``; with ``sync`` they are durable on return (synced to disk, or uploaded)."""
        data = b"".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")).encode() + b"\n" for r in records)
        with self._lock:
            size = len(self._buffer) if self.remote else (self._handle.tell() if self._handle else 0)
            if self._path is None or size + len(data) > self.max_bytes or time.time() - self._started > self.max_age:
                self._rotate()
            if self.remote:
                self._buffer += data
                self._dirty = True
                if sync:
                    self._upload()
                return
            self._handle.write(data)
            self._handle.flush()
            if sync:
                os.fsync(self._handle.fileno())

    def flush(self) -> None:
        """Upload what object storage does not have yet (a local segment is already written)."""
        with self._lock:
            if self.remote and self._dirty:
                self._upload()

    def close(self) -> None:
        with self._lock:
            if self.remote and self._dirty:
                self._upload()
            if self._handle is not None:
                self._handle.close()
                self._handle = None


class SegmentTail:
    """Follows every writer's segments of one kind: each :meth:`read` returns the complete lines written since the
    last one, each with (segment, end offset) so that a reader can say how far it got."""

    def __init__(self, folder: Any, offsets: dict[str, int] | None = None) -> None:
        self.folder = folder
        self.offsets: dict[str, int] = dict(offsets or {})

    def _segments(self) -> list[tuple[str, int]]:
        if is_remote(self.folder):
            fs = self.folder.fs
            fs.invalidate_cache(self.folder.path)
            if not fs.exists(self.folder.path):
                return []
            return sorted(
                (i["name"].rstrip("/").rsplit("/", 1)[-1], int(i["size"]))
                for i in fs.ls(self.folder.path, detail=True)
                if i["type"] == "file"
            )
        if not self.folder.exists():
            return []
        out = []
        for entry in os.scandir(self.folder):
            try:
                out.append((entry.name, entry.stat().st_size))
            except FileNotFoundError:  # pruned meanwhile
                continue
        return sorted(out)

    def _read_from(self, name: str, start: int) -> bytes:
        path = self.folder / name
        if is_remote(path):
            return path.fs.cat_file(path.path, start=start)
        with open(path, "rb") as handle:
            handle.seek(start)
            return handle.read()

    def read(self) -> Iterator[tuple[str, int, dict]]:
        segments = self._segments()
        present = {n for n, _ in segments}
        self.offsets = {n: o for n, o in self.offsets.items() if n in present}  # pruned segments
        for name, size in segments:
            if not name.endswith(".jsonl") or size <= self.offsets.get(name, 0):
                continue
            start = self.offsets.get(name, 0)
            try:
                data = self._read_from(name, start)
            except FileNotFoundError:
                continue
            end = data.rfind(b"\n") + 1  # a line still being written waits for the next read
            offset = start
            for line in data[:end].splitlines(keepends=True):
                offset += len(line)
                try:
                    record = json.loads(line)
                except ValueError:
                    log.warning("traffic log %s: a line at byte %d is not JSON; skipped", self.folder / name, offset)
                    continue
                if isinstance(record, dict):
                    yield name, offset, record
            self.offsets[name] = start + end


def prune(folder: Any, retention: Retention, *, now: float | None = None) -> list[str]:
    """Delete the segments past the retention (see the module's docstring); returns their names."""
    now = time.time() if now is None else now
    if is_remote(folder):
        fs = folder.fs
        if not fs.exists(folder.path):
            return []
        items = [
            (i["name"].rstrip("/").rsplit("/", 1)[-1], int(i["size"]), _mtime(i))
            for i in fs.ls(folder.path, detail=True)
            if i["type"] == "file"
        ]
    else:
        if not folder.exists():
            return []
        items = []
        for entry in os.scandir(folder):
            try:
                st = entry.stat()
            except FileNotFoundError:
                continue
            items.append((entry.name, st.st_size, st.st_mtime))
    items.sort()  # by name: by start time
    recent = now - retention.segment_minutes * 60
    doomed = {n for n, _, mtime in items if mtime < now - retention.days * 86400}
    total = sum(size for n, size, _ in items if n not in doomed)
    for name, size, mtime in items:
        if total <= retention.max_mb * (1 << 20):
            break
        if name not in doomed and mtime < recent:
            doomed.add(name)
            total -= size
    for name in sorted(doomed):
        path = folder / name
        try:
            path.fs.rm_file(path.path) if is_remote(path) else path.unlink()
        except FileNotFoundError:
            pass
    return sorted(doomed)


def _mtime(info: dict) -> float:
    stamp = info.get("LastModified") or info.get("mtime") or info.get("created")
    if hasattr(stamp, "timestamp"):
        return stamp.timestamp()
    return float(stamp) if stamp is not None else time.time()


class TrafficLog:
    """The traffic-log half of LocusHome (a mixin: it uses the home's paths)."""

    def traffic_folder(self, kind: str) -> Any:
        if kind not in KINDS:
            raise ValueError(f"traffic kind {kind!r}: one of {KINDS}")
        return self.path / "traffic" / kind

    @property
    def learner_state_path(self) -> Any:
        return self.path / "traffic" / "learner.json"

    def traffic_writer(self, kind: str, writer: str, retention: Retention | None = None) -> SegmentWriter:
        return SegmentWriter(self.traffic_folder(kind), writer, retention or Retention())

    def traffic_tail(self, kind: str, offsets: dict[str, int] | None = None) -> SegmentTail:
        return SegmentTail(self.traffic_folder(kind), offsets)

    def prune_traffic(self, retention: Retention) -> list[str]:
        return [f"{kind}/{name}" for kind in KINDS for name in prune(self.traffic_folder(kind), retention)]

    def append_outcome_records(self, records: list[dict]) -> None:
        """Records appended to the outcome log by a one-shot writer of their own (the CLI's reset, an intake)."""
        writer = self.traffic_writer("outcomes", writer_id())
        writer.append(records, sync=True)
        writer.close()

    def traffic_evaluations(self, checkpoint_id: str | None = None) -> pd.DataFrame:
        """The graded answers the traffic log holds, as evaluations: model, query_id (``traffic-`` and the query's
        sha256 prefix), score, source, time, and the query's ``encoding`` (float32, from the decision log) or, for a
        dropped file's (model, query) rows, its ``query`` text. The first outcome of a request counts; a model's
        outcomes before its last reset do not; per (model, query) the newest answer wins (as in an evaluation
        store). ``checkpoint_id``: only answers routed with that checkpoint (their encodings are its encoder's)."""
        decisions = {str(r["request_id"]): r for _, _, r in self.traffic_tail("decisions").read() if "request_id" in r}
        rows, seen, resets = [], set(), {}
        for _, _, r in self.traffic_tail("outcomes").read():
            if "reset" in r:
                resets[str(r["reset"])] = max(resets.get(str(r["reset"]), 0.0), float(r.get("time", 0.0)))
                continue
            rid = str(r.get("request_id", ""))
            if not rid or rid in seen:
                continue
            seen.add(rid)
            base = {
                "score": float(r["score"]),
                "source": str(r.get("source", "user")),
                "time": float(r.get("time", 0.0)),
            }
            if "query" in r and "model" in r:
                digest = hashlib.sha256(str(r["query"]).encode("utf-8", "surrogatepass")).hexdigest()
                rows.append(
                    {
                        **base,
                        "model": str(r["model"]),
                        "query_id": f"traffic-{digest[:16]}",
                        "query": str(r["query"]),
                        "encoding": None,
                        "checkpoint_id": None,
                    }
                )
                continue
            d = decisions.get(rid)
            if d is None:
                continue
            vector = np.frombuffer(base64.b64decode(d["encoding"]), np.float16).astype(np.float32)
            rows.append(
                {
                    **base,
                    "model": str(d["answered_by"]),
                    "query_id": f"traffic-{d['query_sha256'][:16]}",
                    "query": None,
                    "encoding": vector,
                    "checkpoint_id": str(d["checkpoint_id"]),
                }
            )
        columns = ["model", "query_id", "score", "source", "time", "query", "encoding", "checkpoint_id"]
        frame = pd.DataFrame(rows, columns=columns)
        if len(frame):
            frame = frame[frame["time"] >= frame["model"].map(resets).fillna(-np.inf)]
            if checkpoint_id is not None:
                frame = frame[frame["checkpoint_id"].isna() | (frame["checkpoint_id"] == checkpoint_id)]
            frame = frame.sort_values("time", kind="stable").drop_duplicates(["model", "query_id"], keep="last")
        return frame.reset_index(drop=True)

    def read_learner_state(self) -> dict | None:
        """The learner's saved state ({state, offsets, checkpoint_id, ...}), None when there is none."""
        path = self.learner_state_path
        if not path.exists():
            return None
        try:
            return json.loads(path.read_bytes())
        except ValueError as err:
            raise StorageError(
                f"the learner's state {path} is not JSON ({err}). How to fix: delete it; the gateway "
                "starts again from the router's estimates and reads the outcome log kept"
            ) from None

    def write_learner_state(self, state: dict) -> None:
        write_bytes_atomic(json.dumps(state, separators=(",", ":")).encode(), self.learner_state_path)

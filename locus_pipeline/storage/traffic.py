"""The gateway's traffic log (``traffic/`` under LOCUS_HOME): what `locus serve` decided and the outcomes graded since.

    traffic/decisions/<start>-<writer>-<seq>.jsonl   one JSON object a line per routed request (request id, time,
                                                     client, the query's keyed hash and encoding, candidates, the
                                                     model that answered, whether it was exploration)
    traffic/outcomes/<start>-<writer>-<seq>.jsonl    one a line per graded answer {request_id, score, source, client,
                                                     grader, label?} and per reset {reset: MODEL, before: positions}
    traffic/queries/<file>.json                      a dropped file's query texts by keyed hash (never in the log)
    traffic/claims/<day>/<id hash>                   the one outcome of a request id, claimed across replicas
    traffic/learner.json                             the learner's state and how far into each outcome segment it read
    traffic/secret.key                               the home's key of the keyed hashes (queries, client labels)

Each writer (one gateway process, one CLI call) appends only to segments of its own, so replicas sharing a home never
write the same file: on a local home a segment is a file opened for appending (decisions flushed, outcomes synced
to disk before the answer); in object storage, which has no append, a segment is this writer's own object, uploaded
whole (one PUT) when it changes (outcomes at once, decisions at each tick of the gateway's watcher), and segments
stay small there (``Retention.remote_segment_mb``). A gateway appends through a writer thread (:class:`QueuedWriter`):
a slow store never holds up a request. Readers (:class:`SegmentTail`) follow every writer's segments by byte offset,
so each replica catches up from the log. Retention: segments older than ``days`` are deleted, and the oldest ones
while the total passes ``max_mb`` (never one written in the last ``segment_minutes``), judged by the store's clock.
What counts for everyone (the shared pool row) out of the graded answers: :func:`shared_evidence`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import io
import json
import logging
import math
import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np
import pandas as pd

from locus_pipeline.storage.files import StorageError, is_remote, write_bytes_atomic
from locus_pipeline.storage.locks import _s3

log = logging.getLogger("locus.traffic")

KINDS = ("decisions", "outcomes")
OPERATOR = "operator"  # the client of --token, of the drop folder, and of a gateway without credentials
# who graded an answer: a posted outcome says one of the first three; "file": a graded-outcomes file dropped
SOURCES = ("user", "judge", "verifier", "file")


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


def keyed_hash(secret: bytes, value: str) -> str:
    """HMAC-SHA256 of ``value`` with the home's secret (:meth:`TrafficLog.traffic_secret`), hex: equal values match,
    and a guessed value cannot be checked against the log without the secret."""
    return hmac.new(secret, value.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()


def query_key(secret: bytes, query: str) -> str:
    """The decision log's keyed hash of a query: of its sha256 (what the gateway computes once per request)."""
    return keyed_hash(secret, hashlib.sha256(query.encode("utf-8", "surrogatepass")).hexdigest())


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
        self._seq, self._started = 0, 0.0
        self._path: Any = None  # the current segment (a Path or UPath); None before the first and after a failure
        self._handle: io.BufferedWriter | None = None  # the current local segment, open to append
        self._buffer, self._dirty = bytearray(), False  # object storage: the current segment, uploaded whole

    def _rotate(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        if self._dirty and self._path is not None:
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
        """Append ``records``; with ``sync`` they are durable on return (synced to disk, or uploaded). A failed write
        (disk full, a read-only folder: OSError) leaves its segment behind: the next append starts a new one."""
        lines = [json.dumps(r, ensure_ascii=False, separators=(",", ":")).encode() + b"\n" for r in records]
        with self._lock:
            try:
                start = 0
                while start < len(lines):  # as many lines as the segment has room for, in one write (at least one)
                    room, end = self.max_bytes - self._size(), start + 1
                    used = len(lines[start])
                    while end < len(lines) and used + len(lines[end]) <= room:
                        used += len(lines[end])
                        end += 1
                    self._append(b"".join(lines[start:end]), sync)
                    start = end
            except OSError:
                self._abandon()
                raise

    def _size(self) -> int:
        return len(self._buffer) if self.remote else (self._handle.tell() if self._handle else 0)

    def _append(self, data: bytes, sync: bool) -> None:
        size = self._size()
        if (
            self._path is None
            or (self._handle is None and not self.remote)
            or (self._handle is not None and os.fstat(self._handle.fileno()).st_nlink == 0)  # deleted under us
            or size + len(data) > self.max_bytes
            or time.time() - self._started > self.max_age
        ):
            self._rotate()
        if self.remote:
            self._buffer += data
            self._dirty = True
            if sync:
                self._upload()
            return
        assert self._handle is not None  # a local segment is open: _rotate opened it where there was none
        self._handle.write(data)
        self._handle.flush()
        if sync:
            os.fsync(self._handle.fileno())

    def _abandon(self) -> None:
        """After a failed write: no current segment (a partial line stays unread at its end)."""
        if self._handle is not None:
            try:
                self._handle.close()
            except OSError:
                pass
        self._handle, self._path = None, None
        if self.remote:  # the records not uploaded are lost with the failure the caller was told of
            self._buffer, self._dirty = bytearray(), False

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


LINGER_S = 0.01  # how long a writer thread's first record waits for others to join its write


class QueuedWriter:
    """A :class:`SegmentWriter` fed by a writer thread, so that a request never waits on the disk or the bucket.

    ``append(records, sync=False)`` puts them on a bounded queue and returns at once; when the queue is full they are
    dropped, counted (``dropped``) and logged, and the request still answers. ``append(records, sync=True)`` (an
    outcome, durable before its 202) waits for what is queued, then writes and syncs itself. A failing store (disk
    full, a read-only folder) is ``failing`` (its error, in words) until a write succeeds again."""

    def __init__(self, writer: SegmentWriter, *, max_queued: int = 10_000) -> None:
        self.writer, self.max_queued = writer, max_queued
        self.dropped, self.failed = 0, 0  # records dropped (queue full), lost (store failing)
        self.failing: str | None = None  # the last write error while the store fails
        self._queue: list[list[dict]] = []
        self._queued = 0
        self._busy = False
        self._closed = False
        self._idle, self._draining = False, 0  # the writer waits for a first record; drains waiting
        self._written = -math.inf  # when the writer thread last wrote (time.monotonic())
        self._cond = threading.Condition()
        self._last_warning = 0.0
        self._thread = threading.Thread(target=self._run, name=f"traffic-{writer.folder.name}", daemon=True)
        self._thread.start()

    @property
    def folder(self) -> Any:
        return self.writer.folder

    def append(self, records: list[dict], *, sync: bool) -> None:
        if sync:
            self.drain()
            self._write(records, sync=True, raise_=True)
            return
        with self._cond:
            if self._queued + len(records) > self.max_queued or self._closed:
                self.dropped += len(records)
                self._warn(
                    f"the {self.folder.name} log's queue is full ({self.max_queued:,} records): "
                    f"{self.dropped:,} record(s) dropped so far (the store is slower than the traffic)"
                )
                return
            self._queue.append(records)
            self._queued += len(records)
            if self._idle:  # a lingering writer is not woken per record: it takes them all when its wait ends
                self._cond.notify_all()

    def _warn(self, message: str) -> None:
        now = time.monotonic()
        if now - self._last_warning >= 10.0:  # at most one line each 10 s
            self._last_warning = now
            log.warning(message)

    def _write(self, records: list[dict], *, sync: bool, raise_: bool) -> None:
        try:
            self.writer.append(records, sync=sync)
        except OSError as err:
            self.failing = f"{type(err).__name__}: {err}"
            if raise_:
                raise
            self.failed += len(records)
            self._warn(
                f"the {self.folder.name} log cannot be written ({self.failing}): {self.failed:,} record(s) "
                "lost so far; writing resumes when the store accepts writes again"
            )
            return
        if self.failing is not None:
            log.info("the %s log is written again (it failed with %s)", self.folder.name, self.failing)
        self.failing = None

    def _run(self) -> None:
        while True:
            with self._cond:
                self._idle = True
                while not self._queue and not self._closed:
                    self._cond.wait()
                self._idle = False
                if not self._queue:
                    return
                # under load (a write less than LINGER_S ago) the first record waits for those behind it until
                # LINGER_S after that write (one write, one wake-up, not one each); an idle writer writes at once; a
                # drain (an outcome waiting for its decision) or a close cuts the wait short
                deadline = self._written + LINGER_S
                while not self._closed and not self._draining and (left := deadline - time.monotonic()) > 0:
                    self._cond.wait(left)
                batch, self._queue = self._queue, []
                self._busy = True
            self._write([r for part in batch for r in part], sync=False, raise_=False)  # one write, not one each
            self._written = time.monotonic()
            with self._cond:
                self._queued -= sum(len(part) for part in batch)
                self._busy = False
                self._cond.notify_all()

    def drain(self, timeout: float | None = 30.0) -> bool:
        """Wait until what was queued is written (or ``timeout`` s); whether it was."""
        with self._cond:
            self._draining += 1
            self._cond.notify_all()
            try:
                return self._cond.wait_for(lambda: not self._queue and not self._busy, timeout)
            finally:
                self._draining -= 1

    @property
    def queued(self) -> int:
        return self._queued

    def flush(self) -> None:
        self.drain()
        self.writer.flush()

    def close(self) -> None:
        self.drain()
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=30.0)
        self.writer.close()


class SegmentTail:
    """Follows every writer's segments of one kind: each :meth:`read` returns the complete lines written since the
    last one, each with (segment, end offset) so that a reader can say how far it got."""

    def __init__(self, folder: Any, offsets: dict[str, int] | None = None, *, skip_writer: str | None = None) -> None:
        self.folder = folder
        self.offsets: dict[str, int] = dict(offsets or {})
        # a writer whose segments are passed over unread (a gateway's own decisions: indexed as it wrote them)
        self.skip = None if skip_writer is None else f"-{skip_writer}-"
        self._queries: dict[str, dict] = {}  # a dropped file's query texts (traffic/queries/<file>.json), once each

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
            if self.skip is not None and self.skip in name:
                self.offsets[name] = size
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
                except (ValueError, RecursionError):
                    log.warning("traffic log %s: a line at byte %d is not JSON; skipped", self.folder / name, offset)
                    continue
                if isinstance(record, dict) and "queries" in record and "query" not in record:
                    record = self._with_query(record)
                if isinstance(record, dict):
                    yield name, offset, record
            self.offsets[name] = start + end

    def _with_query(self, record: dict) -> dict | None:
        """A dropped file's (model, query, score) row with its query text from the file's query store (the log holds
        only the text's keyed hash); None, with a warning, once the store is past the retention."""
        stamp, key = str(record["queries"]), str(record.get("query_key", ""))
        if key not in self._queries.get(stamp, {}):  # not read yet, or the same file taken in again since
            path = self.folder.parent / "queries" / f"{stamp}.json"
            try:
                self._queries[stamp] = json.loads(path.read_bytes())
            except (OSError, ValueError) as err:
                log.warning(
                    "the query texts of dropped file %s are not readable (%s): its rows are skipped", stamp, err
                )
                self._queries[stamp] = {}
        text = self._queries[stamp].get(key)
        return None if text is None else {**record, "query": text}


CLOCK_TOLERANCE_S = 300.0  # a writer's clock this far from the store's is not trusted to judge the retention


def store_clock(folder: Any) -> float | None:
    """The store's own time now: the modification time it gives a probe object written now (None when it cannot
    be written). On a shared home this is the clock every replica sees, whatever its own."""
    probe = folder.parent / f".clock-{writer_id()}"
    try:
        if is_remote(probe):
            probe.write_bytes(b"")
            info = probe.fs.info(probe.path)
            stamp = _mtime(info)
            probe.fs.rm_file(probe.path)
            return stamp
        folder.parent.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        stamp = probe.stat().st_mtime
        probe.unlink()
        return stamp
    except OSError:
        return None


def prune(folder: Any, retention: Retention, *, now: float | None = None) -> list[str]:
    """Delete the segments past the retention (see the module's docstring); returns their names. ``now``: this
    writer's clock (default time.time()); it judges the retention only within CLOCK_TOLERANCE_S of the store's own
    clock (:func:`store_clock`), so a replica whose clock runs days fast never deletes another's live segments."""
    now = time.time() if now is None else now
    store = store_clock(folder)
    if store is None:
        log.warning("traffic log %s: the store's clock cannot be read (not writable?): nothing pruned", folder)
        return []
    if abs(now - store) > CLOCK_TOLERANCE_S:
        log.warning(
            "traffic log %s: this process's clock is %+.0f s off the store's: the retention is judged by the store's",
            folder,
            now - store,
        )
        now = store
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
    if stamp is not None and hasattr(stamp, "timestamp"):
        return stamp.timestamp()
    return float(stamp) if stamp is not None else time.time()


class TrafficLog:
    """The traffic-log half of LocusHome (a mixin: it uses the home's paths)."""

    if TYPE_CHECKING:  # the home's, which LocusHome gives its mixins

        @property
        def path(self) -> Any: ...

    def traffic_folder(self, kind: str) -> Any:
        if kind not in KINDS:
            raise ValueError(f"traffic kind {kind!r}: one of {KINDS}")
        return self.path / "traffic" / kind

    @property
    def learner_state_path(self) -> Any:
        return self.path / "traffic" / "learner.json"

    def traffic_writer(self, kind: str, writer: str, retention: Retention | None = None) -> QueuedWriter:
        """This writer's segments of ``kind``, appended by a writer thread (:class:`QueuedWriter`)."""
        return QueuedWriter(SegmentWriter(self.traffic_folder(kind), writer, retention or Retention()))

    def traffic_tail(
        self, kind: str, offsets: dict[str, int] | None = None, *, skip_writer: str | None = None
    ) -> SegmentTail:
        """A reader of every writer's segments of ``kind`` (``skip_writer``'s passed over unread)."""
        return SegmentTail(self.traffic_folder(kind), offsets, skip_writer=skip_writer)

    def prune_traffic(self, retention: Retention, *, now: float | None = None) -> list[str]:
        """Segments past the retention (``now``: this process's clock, checked against the store's), and the
        claims of outcomes too old to be graded."""
        removed = [f"{kind}/{name}" for kind in KINDS for name in prune(self.traffic_folder(kind), retention, now=now)]
        queries = self.path / "traffic" / "queries"
        removed += [f"queries/{name}" for name in prune(queries, Retention(days=retention.days), now=now)]
        store = store_clock(self.traffic_folder("outcomes"))
        return removed + (self.prune_claims(retention, now=store) if store is not None else [])

    def append_outcome_records(self, records: list[dict]) -> None:
        """Records appended to the outcome log by a one-shot writer of their own (the CLI's reset, an intake). A
        dropped file's (model, query, score) rows keep their query text out of the log: the texts go to
        ``traffic/queries/<file>.json`` (pruned with the log), the log holds each text's keyed hash."""
        texts: dict[str, dict[str, str]] = {}
        secret = self.traffic_secret() if any("query" in r for r in records) else b""
        kept = []
        for record in records:
            if "query" in record:
                stamp = str(record.get("file") or "cli")
                key = query_key(secret, str(record["query"]))
                texts.setdefault(stamp, {})[key] = str(record["query"])
                record = {k: v for k, v in record.items() if k != "query"} | {"query_key": key, "queries": stamp}
            kept.append(record)
        for stamp, queries in texts.items():
            path = self.path / "traffic" / "queries" / f"{stamp}.json"
            if path.exists():  # the same file again: its texts so far, and these
                queries = {**json.loads(path.read_bytes()), **queries}
            write_bytes_atomic(json.dumps(queries, ensure_ascii=False).encode(), path)
        records = kept
        writer = SegmentWriter(self.traffic_folder("outcomes"), writer_id(), Retention())
        try:
            writer.append(records, sync=True)
        finally:
            writer.close()

    def append_reset(self, model: str) -> dict:
        """``locus learn reset MODEL``: a reset record that names how far into each outcome segment the log was
        (``before``), so every reader drops the model's outcomes written before it by the log's own positions,
        whatever the writers' clocks say."""
        before = {name: size for name, size in self.traffic_tail("outcomes")._segments() if name.endswith(".jsonl")}
        record = {"reset": model, "time": time.time(), "before": before}
        self.append_outcome_records([record])
        return record

    def traffic_evaluations(self, checkpoint_id: str | None = None) -> pd.DataFrame:
        """The graded answers the traffic log holds, as evaluations for the shared pool row (:func:`shared_evidence`
        says which count): model, query_id (``traffic-`` and the query's keyed hash prefix), score, source, time,
        graded_by (the clients, by credential), and the query's ``encoding`` (float32, from the decision log) or, for
        a dropped file's (model, query) rows, its ``query`` text. The first outcome of a request counts; a model's
        outcomes written before its last reset do not (by the log's positions). ``checkpoint_id``: only answers
        routed with that checkpoint (their encodings are its encoder's)."""
        decisions = {str(r["request_id"]): r for _, _, r in self.traffic_tail("decisions").read() if "request_id" in r}
        secret = self.traffic_secret()
        rows: list[dict] = []
        seen: set[str] = set()
        resets: dict[str, list[dict]] = {}  # model -> its reset records
        for segment, end, r in self.traffic_tail("outcomes").read():
            if "reset" in r:
                resets.setdefault(str(r["reset"]), []).append(r)
                continue
            rid = str(r.get("request_id", ""))
            if not rid or rid in seen:
                continue
            seen.add(rid)
            try:
                score = float(r["score"])
            except (KeyError, TypeError, ValueError):
                continue
            if not 0.0 <= score <= 1.0:
                continue
            base = {
                "score": score,
                "source": str(r.get("source", "user")),
                "time": float(r.get("time", 0.0)),
                "graded_by": str(r.get("client", OPERATOR)),
                # why: a record without the flag was written by a gateway without credentials: the operator's
                "grader": bool(r.get("grader", True)),
                "_at": (segment, end),
            }
            if "query" in r and "model" in r:
                digest = query_key(secret, str(r["query"]))
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
                    "query_id": f"traffic-{str(d.get('query_key') or d['query_sha256'])[:16]}",
                    "query": None,
                    "encoding": vector,
                    "checkpoint_id": str(d["checkpoint_id"]),
                }
            )
        rows = [row for row in rows if not any(before_reset(row, reset) for reset in resets.get(row["model"], ()))]
        columns = ["model", "query_id", "score", "source", "time", "graded_by", "grader", "query", "encoding"]
        frame = pd.DataFrame(rows, columns=[*columns, "checkpoint_id", "_at"])
        if len(frame) and checkpoint_id is not None:
            frame = frame[frame["checkpoint_id"].isna() | (frame["checkpoint_id"] == checkpoint_id)]
        return shared_evidence(frame.drop(columns=["_at"]))[[*columns, "checkpoint_id"]]

    def claim_outcome(self, request_id: str, day: float) -> bool:
        """Claim the one outcome of ``request_id`` across every replica of the home (an object created only if absent,
        under the day the request was issued): True for the first claim, False when another holds it."""
        name = hashlib.sha256(request_id.encode("utf-8", "surrogatepass")).hexdigest()[:40]
        path = self.path / "traffic" / "claims" / time.strftime("%Y%m%d", time.gmtime(day)) / name
        if is_remote(path):
            fs, bucket, key = _s3(path)
            try:
                fs.call_s3("put_object", Bucket=bucket, Key=key, Body=b"", IfNoneMatch="*")
            except FileExistsError:  # 412: another replica claimed it first
                return False
            return True
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        except FileExistsError:
            return False
        return True

    def release_outcome(self, request_id: str, day: float) -> None:
        """Undo :meth:`claim_outcome` (its outcome could not be logged)."""
        name = hashlib.sha256(request_id.encode("utf-8", "surrogatepass")).hexdigest()[:40]
        path = self.path / "traffic" / "claims" / time.strftime("%Y%m%d", time.gmtime(day)) / name
        try:
            path.fs.rm_file(path.path) if is_remote(path) else path.unlink()
        except FileNotFoundError:
            pass

    def prune_claims(self, retention: Retention, *, now: float) -> list[str]:
        """Delete the claims of days past the retention (a request that old can no longer be graded)."""
        folder = self.path / "traffic" / "claims"
        if not folder.exists():
            return []
        horizon = time.strftime("%Y%m%d", time.gmtime(now - retention.days * 86400 - 86400))
        removed = []
        for day in sorted(p for p in folder.iterdir() if p.name < horizon):
            if is_remote(day):
                day.fs.rm(day.path, recursive=True)
            else:
                for item in day.iterdir():
                    item.unlink(missing_ok=True)
                day.rmdir()
            removed.append(f"claims/{day.name}")
        return removed

    def traffic_secret(self) -> bytes:
        """The home's key of pseudonyms (query hashes, client labels): 32 random bytes made once, never logged."""
        path = self.path / "traffic" / "secret.key"
        if is_remote(path):
            if not path.exists():
                fs, bucket, key = _s3(path)
                try:  # created only if absent: two replicas starting at once agree on the first one's key
                    fs.call_s3("put_object", Bucket=bucket, Key=key, Body=secrets.token_bytes(32), IfNoneMatch="*")
                except FileExistsError:
                    pass
                fs.invalidate_cache(path.path)
            return path.read_bytes()
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "wb") as handle:
                handle.write(secrets.token_bytes(32))
                handle.flush()
                os.fsync(handle.fileno())
        for _ in range(50):  # another process is writing it: its 32 bytes arrive at once
            key = path.read_bytes()
            if len(key) == 32:
                return key
            time.sleep(0.01)
        raise StorageError(f"{path} is not a 32-byte key. How to fix: delete it (the pseudonyms change once)")

    def read_learner_state(self) -> dict | None:
        """The learner's saved state ({state, offsets, checkpoint_id, ...}), None when there is none or when it
        cannot be used (not JSON, truncated, the wrong shape, values that are not finite): then it is moved aside to
        ``learner.json.dropped``, the warning says why, and the gateway rebuilds from the outcome log. Temporary files
        of a save killed half-way are removed."""
        self.clean_learner_temporaries()
        path = self.learner_state_path
        if not path.exists():
            return None
        problem = None
        try:
            state = json.loads(path.read_bytes())
        except (ValueError, UnicodeDecodeError, RecursionError) as err:
            state, problem = None, f"not JSON ({type(err).__name__}: {str(err)[:120]})"
        if problem is None:
            problem = learner_state_problem(state)
        if problem is None:
            return state
        aside = path.with_name(path.name + ".dropped")
        try:
            if is_remote(path):
                path.fs.mv(path.path, aside.path)
            else:
                os.replace(path, aside)
        except OSError as err:
            log.warning("the unusable learner state %s could not be moved aside (%s)", path, err)
        log.warning(
            "the learner's saved state %s is dropped: %s; moved to %s. Learning rebuilds from the outcome log kept",
            path,
            problem,
            aside.name,
        )
        return None

    def clean_learner_temporaries(self, *, older_than_s: float = 60.0) -> list[str]:
        """Delete the temporary files of learner-state saves that never finished (a process killed while saving);
        one younger than ``older_than_s`` may be another replica's save in progress and is left."""
        folder = self.learner_state_path.parent
        if is_remote(folder) or not folder.exists():
            return []  # object storage: a save is one PUT, nothing is left half-written
        removed, now = [], time.time()
        for entry in os.scandir(folder):
            if entry.name.startswith(f".{self.learner_state_path.name}.") and entry.name.endswith(".tmp"):
                try:
                    if now - entry.stat().st_mtime >= older_than_s:
                        os.unlink(entry.path)
                        removed.append(entry.name)
                except FileNotFoundError:
                    continue
        if removed:
            log.warning("removed %d unfinished save(s) of the learner's state: %s", len(removed), ", ".join(removed))
        return removed

    def write_learner_state(self, state: dict) -> None:
        write_bytes_atomic(json.dumps(state, separators=(",", ":")).encode(), self.learner_state_path)


def before_reset(row: dict, reset: dict) -> bool:
    """Whether an outcome (its ``_at``: segment, end offset) was written before ``reset``: by the positions the reset
    recorded (``before``: each segment's size then); a reset without them (an older log) by the times."""
    before = reset.get("before")
    if isinstance(before, dict):
        segment, end = row["_at"]
        return segment in before and end <= int(before[segment])
    return row["time"] < float(reset.get("time", 0.0))


def shared_evidence(frame: pd.DataFrame) -> pd.DataFrame:
    """The graded answers that count for everyone (the shared pool row), one row per (model, query):

    - a grader's (the operator's judge, the drop folder, a server without credentials): the newest grade;
    - otherwise only where clients agree: at least two clients by credential graded the (model, query), and more
      than half of them (each client's newest grade) lie within 0.25 of their median, which is the row's score.

    A client alone, however many outcomes it posts, steers only its own routing (the learner), never the pool row."""
    if frame.empty:
        return frame.assign(agreeing=pd.Series(dtype="int64"))
    frame = frame.sort_values("time", kind="stable")
    graded = frame[frame["grader"]].drop_duplicates(["model", "query_id"], keep="last").assign(agreeing=1)
    others = frame[~frame["grader"]].drop_duplicates(["model", "query_id", "graded_by"], keep="last")
    rows = []
    for _, group in others.groupby(["model", "query_id"], sort=False):
        if group["graded_by"].nunique() < 2:
            continue
        median = float(group["score"].median())
        agree = group[(group["score"] - median).abs() <= 0.25]
        if 2 * len(agree) <= len(group):
            continue
        last = group.iloc[-1]
        rows.append(
            {
                **last.to_dict(),
                "score": median,
                "graded_by": ",".join(sorted(agree["graded_by"])),
                "agreeing": len(agree),
            }
        )
    agreed = pd.DataFrame(rows, columns=[*frame.columns, "agreeing"])
    if len(agreed) and len(graded):
        taken = set(zip(graded["model"], graded["query_id"]))
        agreed = agreed[[k not in taken for k in zip(agreed["model"], agreed["query_id"])]]
    parts = [p for p in (graded, agreed) if len(p)]
    out = pd.concat(parts, ignore_index=True) if parts else graded
    return out.sort_values("time", kind="stable").reset_index(drop=True)


def learner_state_problem(state: Any) -> str | None:
    """Why a saved learner state cannot be used (None when it can): the learner rebuilds it (Learner.from_state) and
    every number it holds is finite."""
    from locus_model.learning import Learner  # why: numpy-only, but only a gateway's start needs it

    if not isinstance(state, dict) or not isinstance(state.get("learner"), dict):
        return "not a mapping with a 'learner' entry"
    for key, kind in (("offsets", dict), ("pending", list), ("direct", list), ("unscored", list)):
        if key in state and not isinstance(state[key], kind):
            return f"'{key}' is not a {kind.__name__}"
    if not all(isinstance(v, int) for v in state.get("offsets", {}).values()):
        return "an offset is not an integer"
    try:
        learner = Learner.from_state(state["learner"])
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as err:
        return f"the wrong shape ({type(err).__name__}: {str(err)[:120]})"
    if not np.isfinite(learner.shift()).all() or not np.isfinite(learner.start).all():
        return "values that are not finite"
    return None

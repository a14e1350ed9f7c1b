"""P(correct) of every pool model for a query: the micro-batching :class:`QueryBatcher` on its own thread (the query
encoder, then the snapshot's PoolScorer: the checkpoint's correctness predictor over the pool's rows)."""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from locus_model.data.encoding import EncodingInputError, EncodingLRU, check_texts, load_encoder
from locus_pipeline.serve.snapshot import Snapshot

log = logging.getLogger("locus.serve")


@dataclass(frozen=True)
class Scored:
    """One query scored: P(correct) of every pool model, its query group (the router's, for the learner's cells) and
    its encoding (kept in the decision log)."""

    probs: np.ndarray  # (M,)
    group: int
    encoding: np.ndarray  # (D,)


@dataclass
class _Pending:
    snap: Snapshot
    text: str
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    queued: float  # time.monotonic() when it was queued


def _settle(future: asyncio.Future, result: "Scored | BaseException") -> None:  # on the event loop
    if future.done():  # the client went away
        return
    if isinstance(result, BaseException):
        future.set_exception(result)
    else:
        future.set_result(result)


class QueryBatcher:
    """P(correct) of every pool model for a query, in micro-batches on the batcher's own thread.

    Requests queue up; a batch is what is waiting when the thread is free (up to ``max_batch``): a request alone is
    encoded at once and a full batch goes at once, so while the encoder works the next batch gathers by itself. Only
    a batch that others are joining (more than one waiting, fewer than ``max_batch``) waits for more, until
    ``batch_wait_ms`` after its first request was queued. The thread encodes the texts not in the LRU in one call
    of the library encoder (locus_model.data.encoding.load_encoder) and predicts for the batch. Each request gets
    its own result or its own error: a text the encoder refuses fails that request only."""

    def __init__(
        self, *, max_batch: int, cache_size: int, batch_wait_ms: float = 2.0, threads: int | None = None, on_batch=None
    ) -> None:
        self.max_batch, self.batch_wait, self.threads = max_batch, batch_wait_ms / 1000.0, threads
        self.on_batch = on_batch  # called with each batch's size (metrics)
        self._lru = EncodingLRU(cache_size)  # the scorer's thread only (and the warm-up before it starts)
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def encoder(self, snap: Snapshot):
        return load_encoder(snap.encoder, snap.runtime, threads=self.threads)

    def encode(self, snap: Snapshot, texts: Sequence[str]) -> np.ndarray:  # (n, D); in the batcher's thread
        encoder = self.encoder(snap)
        found = {t: v for t in dict.fromkeys(texts) if (v := self._lru.get(encoder, t)) is not None}
        new = [t for t in dict.fromkeys(texts) if t not in found]
        if new:
            for text, vector in zip(new, encoder.encode(new, self.max_batch)):
                found[text] = vector
                self._lru.put(encoder, text, vector)
        return np.stack([found[t] for t in texts])

    def _score_group(self, snap: Snapshot, texts: list[str]) -> list[Scored]:
        encodings = self.encode(snap, texts)  # (B, D)
        probs = snap.pool_scorer.proba(encodings)  # (M, B)
        groups = snap.pool_scorer.router.groups.membership(encodings).argmax(axis=1)  # (B,)
        return [Scored(probs[:, j], int(groups[j]), encodings[j]) for j in range(len(texts))]

    def _score_batch(self, items: list[tuple[Snapshot, str]]) -> list[Scored | BaseException]:
        """Each item's scores, or the exception that item alone raised."""
        out: list[Scored | BaseException | None] = [None] * len(items)
        groups: dict[int, list[int]] = {}
        for i, (snap, text) in enumerate(items):
            try:
                check_texts([text])  # a text the tokenizer would refuse fails here, alone
            except EncodingInputError as err:
                out[i] = err
                continue
            groups.setdefault(id(snap), []).append(i)
        for rows in groups.values():  # a reload in progress: each snapshot scores its own queries
            snap = items[rows[0]][0]
            try:
                scored = self._score_group(snap, [items[i][1] for i in rows])
            except Exception:  # noqa: BLE001 -- find the request that fails: each is scored alone, fails alone
                for i in rows:
                    try:
                        out[i] = self._score_group(snap, [items[i][1]])[0]
                    except Exception as err:  # that request's own error, handed to it
                        log.exception("scoring a query failed")
                        out[i] = err
                continue
            for j, i in enumerate(rows):
                out[i] = scored[j]
        return out  # type: ignore[return-value]

    def _next_batch(self) -> list[_Pending] | None:
        """The next batch, sized by what is waiting (the class docstring); None when the batcher stops."""
        first = self._queue.get()
        if first is None:
            return None
        batch = [first]
        if not self._take(batch, wait_until=None):  # what is waiting now, without waiting
            return batch  # a stop is queued: this batch, then none
        if 1 < len(batch) < self.max_batch and self.batch_wait > 0:  # others are arriving: let them join
            self._take(batch, wait_until=first.queued + self.batch_wait)
        return batch

    def _take(self, batch: list[_Pending], *, wait_until: float | None) -> bool:
        """Queued requests appended to ``batch`` up to max_batch: those waiting now, or (``wait_until``) those
        arriving until that time.monotonic(). False when the stop was met (it stays queued for the next call)."""
        while len(batch) < self.max_batch:
            try:
                if wait_until is None:
                    item = self._queue.get_nowait()
                else:
                    wait = wait_until - time.monotonic()
                    if wait <= 0:
                        return True
                    item = self._queue.get(timeout=wait)
            except queue.Empty:
                return True
            if item is None:  # stop after this batch
                self._queue.put(None)
                return False
            batch.append(item)
        return True

    def _work(self) -> None:
        while (batch := self._next_batch()) is not None:
            live = [p for p in batch if not p.future.done()]  # drop the cancelled (client gone)
            if not live:
                continue
            if self.on_batch is not None:
                self.on_batch(len(live))
            try:
                results = self._score_batch([(p.snap, p.text) for p in live])
            except BaseException as err:  # noqa: BLE001 -- never leave a request waiting; the thread keeps serving
                log.exception("a scoring batch failed")
                results = [err] * len(live)
            for pending, result in zip(live, results):
                try:
                    pending.loop.call_soon_threadsafe(_settle, pending.future, result)
                except RuntimeError:  # its event loop is closed (an app stopped in tests)
                    pass

    def start(self) -> None:
        """Start the scorer's thread (an app may be started more than once, e.g. in tests)."""
        self.stop()
        self._queue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._work, name="locus-scorer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=30)
            self._thread = None

    async def score(self, snap: Snapshot, text: str) -> np.ndarray:  # (M,)
        return (await self.score_full(snap, text)).probs

    async def score_full(self, snap: Snapshot, text: str) -> Scored:
        """P(correct) of every pool model on ``text``, with its query group and encoding."""
        if self._thread is None:
            raise RuntimeError("the scorer is not running (the app's lifespan did not start)")
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._queue.put(_Pending(snap, text, future, loop, time.monotonic()))
        return await future

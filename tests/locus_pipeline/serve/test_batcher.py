"""The batcher's batches are sized by what is waiting: a request alone goes at once, a full batch goes at once, and
only a batch others are joining waits (at most batch_wait_ms after its first request)."""

from __future__ import annotations

import queue
import time

from locus_pipeline.serve.batcher import QueryBatcher, _Pending


class RecordingQueue:
    """A queue holding given items that records every blocking wait the batcher asks of it."""

    def __init__(self, items: list, arriving: list | None = None) -> None:
        self.items, self.arriving = list(items), list(arriving or [])
        self.waits: list[float] = []

    def get(self, timeout: float | None = None):
        if timeout is None:
            return self.items.pop(0)
        self.waits.append(timeout)
        if self.arriving:  # what arrives while the batcher waits
            return self.arriving.pop(0)
        raise queue.Empty

    def get_nowait(self):
        if not self.items:
            raise queue.Empty
        return self.items.pop(0)

    def put(self, item) -> None:
        self.items.append(item)


def pending(n: int) -> list[_Pending]:
    now = time.monotonic()
    return [_Pending(None, f"query {i}", None, None, now) for i in range(n)]  # type: ignore[arg-type]


def batcher(items: list, *, arriving: list | None = None, max_batch: int = 4, wait_ms: float = 3_600_000.0):
    out = QueryBatcher(max_batch=max_batch, cache_size=0, batch_wait_ms=wait_ms)
    out._queue = RecordingQueue(items, arriving)  # type: ignore[assignment]
    return out


def test_a_request_alone_is_encoded_at_once_without_waiting():
    b = batcher(pending(1))  # an hour's batch wait: waiting at all would show in the recorded waits
    assert [p.text for p in b._next_batch()] == ["query 0"]
    assert b._queue.waits == []


def test_a_full_batch_goes_at_once_and_the_rest_wait_for_the_next():
    b = batcher(pending(6), max_batch=4)
    assert [p.text for p in b._next_batch()] == ["query 0", "query 1", "query 2", "query 3"]
    assert b._queue.waits == []
    assert [p.text for p in b._next_batch()] == ["query 4", "query 5"]  # two waiting: they wait for more to join


def test_a_batch_others_are_joining_waits_for_them_until_the_batch_wait():
    late = pending(3)
    b = batcher(pending(2), arriving=late[:1], max_batch=4, wait_ms=50.0)
    batch = b._next_batch()
    assert [p.text for p in batch] == ["query 0", "query 1", "query 0"]  # the two waiting and one that arrived
    assert b._queue.waits and all(0 < w <= 0.05 for w in b._queue.waits)  # never past the first's batch wait


def test_a_stop_ends_the_batch_and_stays_queued():
    b = batcher([*pending(2), None], max_batch=4)
    assert len(b._next_batch()) == 2
    assert b._next_batch() is None

"""The traffic log (storage/traffic.py): writers' own segments, tails that follow them by offset, rotation, retention;
on a local home and in object storage (moto, e2e)."""

from __future__ import annotations

import errno
import json
import logging
import os
import threading
import time

import numpy as np
import pandas as pd
import pytest

from locus_model.learning import Learner
from locus_pipeline.storage import LocusHome
from locus_pipeline.storage.traffic import (
    QueuedWriter,
    Retention,
    SegmentWriter,
    keyed_hash,
    prune,
    shared_evidence,
)


def test_a_tail_reads_each_writers_lines_once_and_waits_for_a_line_being_written(tmp_path):
    home = LocusHome(root=str(tmp_path / "home"))
    a, b = home.traffic_writer("outcomes", "replica-a"), home.traffic_writer("outcomes", "replica-b")
    tail = home.traffic_tail("outcomes")
    a.append([{"n": 1}], sync=True)
    b.append([{"n": 2}, {"n": 3}], sync=False)  # queued: the writer thread writes them
    assert b.drain()
    assert sorted(r["n"] for _, _, r in tail.read()) == [1, 2, 3]
    assert list(tail.read()) == []
    (segment,) = [p for p in home.traffic_folder("outcomes").iterdir() if "replica-a" in p.name]
    with open(segment, "ab") as handle:  # a line cut short (a writer mid-write): not read until it ends
        handle.write(b'{"n": 4')
    assert list(tail.read()) == []
    with open(segment, "ab") as handle:
        handle.write(b"}\n")
    ((name, end, record),) = list(tail.read())
    assert record == {"n": 4} and end == segment.stat().st_size and name == segment.name
    again = home.traffic_tail("outcomes", offsets=tail.offsets)  # a reader resuming from saved offsets
    a.append([{"n": 5}], sync=True)
    assert [r["n"] for _, _, r in again.read()] == [5]


def test_a_writer_starts_a_new_segment_past_its_size(tmp_path):
    home = LocusHome(root=str(tmp_path / "home"))
    writer = home.traffic_writer("decisions", "w", Retention(segment_mb=200 / (1 << 20)))  # 200 bytes
    for i in range(10):
        writer.append([{"i": i, "pad": "x" * 50}], sync=False)
    writer.close()
    segments = sorted(home.traffic_folder("decisions").iterdir())
    assert len(segments) >= 4 and all(s.stat().st_size <= 200 for s in segments)
    assert [r["i"] for _, _, r in home.traffic_tail("decisions").read()] == list(range(10))


def test_retention_removes_old_segments_then_the_oldest_past_the_size(tmp_path):
    folder = tmp_path / "traffic" / "outcomes"
    folder.mkdir(parents=True)
    now = time.time()
    ages_days = {
        "20260101T000000-w-000001.jsonl": 40,
        "20260201T000000-w-000002.jsonl": 3,
        "20260202T000000-w-000003.jsonl": 2,
        "20260203T000000-w-000004.jsonl": 0,
    }
    for name, age in ages_days.items():
        (folder / name).write_bytes(b"x" * 1000 + b"\n")
        os.utime(folder / name, (now - age * 86400, now - age * 86400))
    retention = Retention(days=30, max_mb=2500 / (1 << 20), segment_minutes=60)
    removed = prune(folder, retention, now=now)
    # 40 days: past the days; then the oldest until 2,500 bytes (the one written within the hour is kept)
    assert removed == ["20260101T000000-w-000001.jsonl", "20260201T000000-w-000002.jsonl"]
    assert sorted(p.name for p in folder.iterdir()) == [
        "20260202T000000-w-000003.jsonl",
        "20260203T000000-w-000004.jsonl",
    ]


def test_retention_values_must_be_positive():
    with pytest.raises(ValueError, match="Retention.days = 0"):
        Retention(days=0)


def learner_state(names=("a", "b"), groups: int = 3) -> dict:
    learner = Learner.start_from(names, np.full((len(names), groups), 0.6))
    learner.observe(0, 1, 1.0, 0.6, client="team-a")
    return {"checkpoint_id": "c", "offsets": {"s": 3}, "learner": learner.state_dict()}


def test_the_learner_state_round_trips(tmp_path):
    home = LocusHome(root=str(tmp_path / "home"))
    assert home.read_learner_state() is None
    home.write_learner_state(learner_state())
    assert home.read_learner_state() == json.loads(json.dumps(learner_state()))


def wrong_shape() -> dict:
    state = learner_state()
    state["learner"]["start"] = [[0.5]]  # (1, 1) where the clients' sums are (3, 2, 3)
    return state


def not_finite() -> dict:
    state = learner_state()
    state["learner"]["start"][0][0] = float("nan")
    return state


@pytest.mark.parametrize(
    "damage, why",
    [
        (lambda path: path.write_text("{not json"), "not JSON"),
        (lambda path: path.write_bytes(path.read_bytes()[:40]), "not JSON"),  # truncated
        (lambda path: path.write_text(json.dumps(wrong_shape())), "the wrong shape"),
        (lambda path: path.write_text(json.dumps(not_finite())), "not finite"),
        (lambda path: path.write_text("[1, 2]"), "not a mapping"),
    ],
    ids=["not-json", "truncated", "wrong-shape", "nan", "a-list"],
)
def test_an_unusable_learner_state_is_moved_aside_with_the_reason_and_reads_as_none(tmp_path, caplog, damage, why):
    home = LocusHome(root=str(tmp_path / "home"))
    home.write_learner_state(learner_state())
    damage(home.learner_state_path)
    with caplog.at_level(logging.WARNING, logger="locus.traffic"):
        assert home.read_learner_state() is None
    assert why in caplog.text and "rebuilds from the outcome log" in caplog.text
    assert not home.learner_state_path.exists()
    assert home.learner_state_path.with_name("learner.json.dropped").exists()


def test_a_save_killed_half_way_leaves_a_temporary_file_that_the_next_start_removes(tmp_path):
    home = LocusHome(root=str(tmp_path / "home"))
    home.write_learner_state(learner_state())
    folder = home.learner_state_path.parent
    old = folder / ".learner.json.0123abcd.tmp"  # what write_bytes_atomic leaves when killed before its rename
    old.write_bytes(b"x" * 1000)
    os.utime(old, (time.time() - 120, time.time() - 120))
    young = folder / ".learner.json.4567ef01.tmp"  # another replica saving now
    young.write_bytes(b"y")
    assert home.read_learner_state() is not None
    assert not old.exists() and young.exists()


class Failing:
    """A segment handle on a full disk: every write raises ENOSPC."""

    def __init__(self, real) -> None:
        self.real = real

    def fileno(self) -> int:
        return self.real.fileno()

    def tell(self) -> int:
        return 0

    def write(self, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    def close(self) -> None:
        self.real.close()


def test_a_writer_that_failed_writes_again_into_a_new_segment_once_the_disk_has_room(tmp_path):
    home = LocusHome(root=str(tmp_path / "home"))
    writer = SegmentWriter(home.traffic_folder("outcomes"), "w", Retention())
    writer.append([{"n": 1}], sync=True)
    writer._handle = Failing(writer._handle)  # the disk fills up
    with pytest.raises(OSError, match="No space left"):
        writer.append([{"n": 2}], sync=True)
    writer.append([{"n": 3}], sync=True)  # room again: not "'NoneType' object has no attribute 'write'"
    writer.close()
    assert [r["n"] for _, _, r in home.traffic_tail("outcomes").read()] == [1, 3]
    assert len(list(home.traffic_folder("outcomes").iterdir())) == 2


class Blocked:
    """A store that blocks every write until released (a bucket upload that hangs), or fails while ``full``."""

    def __init__(self, inner) -> None:
        self.inner, self.release, self.full, self.calls = inner, threading.Event(), False, 0
        self.folder = inner.folder

    def append(self, records, *, sync):
        self.calls += 1
        self.release.wait(10)
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.inner.append(records, sync=sync)

    def flush(self):
        self.inner.flush()

    def close(self):
        self.inner.close()


def test_a_blocked_store_never_blocks_an_append_and_a_full_queue_drops_and_counts(tmp_path):
    home = LocusHome(root=str(tmp_path / "home"))
    store = Blocked(SegmentWriter(home.traffic_folder("decisions"), "w", Retention()))
    queued = QueuedWriter(store, max_queued=5)
    for i in range(20):  # every call returns while the store is blocked
        queued.append([{"i": i}], sync=False)
    assert queued.dropped >= 14 and queued.queued <= 5
    store.release.set()
    assert queued.drain()
    written = [r["i"] for _, _, r in home.traffic_tail("decisions").read()]
    assert len(written) + queued.dropped == 20 and written == sorted(written)
    queued.close()


def test_what_queues_while_the_store_writes_goes_in_one_write(tmp_path):
    home = LocusHome(root=str(tmp_path / "home"))
    store = Blocked(SegmentWriter(home.traffic_folder("decisions"), "w", Retention()))
    queued = QueuedWriter(store)
    queued.append([{"i": 0}], sync=False)  # the writer takes it and blocks in the store
    for i in range(1, 50):  # these queue meanwhile
        queued.append([{"i": i}], sync=False)
    store.release.set()
    assert queued.drain()
    assert store.calls <= 3  # not one write per request (the first, then what queued behind it)
    assert [r["i"] for _, _, r in home.traffic_tail("decisions").read()] == list(range(50))
    queued.close()


def test_a_tail_passes_over_its_own_writers_segments_and_reads_the_others(tmp_path):
    home = LocusHome(root=str(tmp_path / "home"))
    mine = home.traffic_writer("decisions", "me", Retention())
    other = home.traffic_writer("decisions", "other", Retention())
    mine.append([{"by": "me"}], sync=True)
    other.append([{"by": "other"}], sync=True)
    tail = home.traffic_tail("decisions", skip_writer="me")
    assert [r["by"] for _, _, r in tail.read()] == ["other"]
    mine.append([{"by": "me"}], sync=True)
    assert list(tail.read()) == []  # its own lines: never parsed, the offset moved past them
    assert sorted(r["by"] for _, _, r in home.traffic_tail("decisions").read()) == ["me", "me", "other"]  # others do
    mine.close()
    other.close()


def test_a_failing_store_says_so_until_a_write_succeeds_again(tmp_path):
    home = LocusHome(root=str(tmp_path / "home"))
    store = Blocked(SegmentWriter(home.traffic_folder("decisions"), "w", Retention()))
    store.release.set()
    queued = QueuedWriter(store)
    store.full = True
    queued.append([{"i": 1}], sync=False)
    assert queued.drain() and "No space left" in queued.failing and queued.failed == 1
    with pytest.raises(OSError):
        queued.append([{"i": 2}], sync=True)  # an outcome: the caller is told (503), nothing is claimed durable
    store.full = False
    queued.append([{"i": 3}], sync=False)
    assert queued.drain() and queued.failing is None
    assert [r["i"] for _, _, r in home.traffic_tail("decisions").read()] == [3]
    queued.close()


def test_a_replica_with_a_clock_31_days_fast_never_deletes_live_segments(tmp_path):
    folder = tmp_path / "traffic" / "outcomes"
    folder.mkdir(parents=True)
    for name in ("20260101T000000-a-000001.jsonl", "20260101T000000-b-000001.jsonl"):
        (folder / name).write_bytes(b'{"n": 1}\n')
    fast = time.time() + 31 * 86400
    assert prune(folder, Retention(days=30), now=fast) == []
    assert len(list(folder.iterdir())) == 2
    old = folder / "20260101T000000-a-000001.jsonl"  # a segment truly past the retention still goes
    os.utime(old, (time.time() - 31 * 86400, time.time() - 31 * 86400))
    assert prune(folder, Retention(days=30), now=fast) == [old.name]


def test_one_outcome_per_request_id_across_replicas_the_first_claim_wins(tmp_path):
    a, b = LocusHome(root=str(tmp_path / "home")), LocusHome(root=str(tmp_path / "home"))
    day = time.time()
    assert a.claim_outcome("req-1", day) is True
    assert b.claim_outcome("req-1", day) is False and a.claim_outcome("req-1", day) is False
    assert b.claim_outcome("req-2", day) is True
    a.release_outcome("req-1", day)  # its write failed: the id may be graded again
    assert b.claim_outcome("req-1", day) is True


def test_the_home_secret_is_made_once_and_kept(tmp_path):
    a, b = LocusHome(root=str(tmp_path / "home")), LocusHome(root=str(tmp_path / "home"))
    key = a.traffic_secret()
    assert len(key) == 32 and b.traffic_secret() == key
    assert keyed_hash(key, "q") == keyed_hash(key, "q") != keyed_hash(b"other" * 8, "q")


def frame(rows):
    base = {"source": "user", "query": None, "encoding": None, "checkpoint_id": "c"}
    return pd.DataFrame([{**base, **r} for r in rows])


def test_shared_evidence_takes_a_grader_and_agreeing_clients_never_one_client_alone():
    rows = [
        # q1: a grader said 1 and the attacker 0 many times: the grader's word
        {"model": "m", "query_id": "q1", "score": 1.0, "time": 1, "graded_by": "judge", "grader": True},
        *[
            {"model": "m", "query_id": "q1", "score": 0.0, "time": 2 + i, "graded_by": "mallory", "grader": False}
            for i in range(5)
        ],
        # q2: only the attacker: not shared
        {"model": "m", "query_id": "q2", "score": 0.0, "time": 3, "graded_by": "mallory", "grader": False},
        # q3: two clients agree: shared at their median
        {"model": "m", "query_id": "q3", "score": 1.0, "time": 4, "graded_by": "team-a", "grader": False},
        {"model": "m", "query_id": "q3", "score": 0.9, "time": 5, "graded_by": "team-b", "grader": False},
        # q4: two clients disagree: not shared
        {"model": "m", "query_id": "q4", "score": 1.0, "time": 6, "graded_by": "team-a", "grader": False},
        {"model": "m", "query_id": "q4", "score": 0.0, "time": 7, "graded_by": "mallory", "grader": False},
    ]
    out = shared_evidence(frame(rows)).set_index("query_id")
    assert sorted(out.index) == ["q1", "q3"]
    assert out.loc["q1", "score"] == 1.0 and out.loc["q1", "graded_by"] == "judge"
    assert out.loc["q3", "score"] == pytest.approx(0.95) and out.loc["q3", "graded_by"] == "team-a,team-b"
    assert out.loc["q3", "agreeing"] == 2


def write_outcomes(folder, name, records):
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / name, "a") as handle:
        for r in records:
            handle.write(json.dumps(r) + "\n")


def test_a_reset_drops_what_was_written_before_it_by_the_logs_positions_whatever_the_clocks(tmp_path):
    home = LocusHome(root=str(tmp_path / "home"))
    folder = home.traffic_folder("outcomes")
    hour_fast = time.time() + 3600  # the server's clock runs an hour fast
    graded = [
        {"request_id": f"file-x-{i}", "model": "m", "query": f"q{i}", "score": 0.0, "time": hour_fast + i}
        for i in range(3)
    ]
    write_outcomes(folder, "20260101T000000-server-000001.jsonl", graded)
    reset = home.append_reset("m")  # its own segment, named after the server's start: it sorts after it
    after = [{"request_id": "file-x-9", "model": "m", "query": "q9", "score": 1.0, "time": hour_fast + 9}]
    write_outcomes(folder, "20260101T000000-server-000001.jsonl", after)
    assert reset["before"] == {
        "20260101T000000-server-000001.jsonl": (folder / "20260101T000000-server-000001.jsonl").stat().st_size
        - len(json.dumps(after[0]))
        - 1
    }
    table = home.traffic_evaluations()
    assert list(table["score"]) == [1.0]  # the poisoned rows stay out although their times are after the reset's


@pytest.mark.e2e
def test_the_log_in_object_storage_is_uploaded_whole_and_tailed(tmp_path):
    from tests.locus_pipeline.object_store import BUCKET, s3_endpoint

    with s3_endpoint():
        home = LocusHome(
            root=f"s3://{BUCKET}/{tmp_path.name}", cache=str(tmp_path / "cache")
        )  # moto keeps buckets per process
        a, b = home.traffic_writer("outcomes", "replica-a"), home.traffic_writer("outcomes", "replica-b")
        tail = home.traffic_tail("outcomes")
        a.append([{"n": 1}], sync=True)
        b.append([{"n": 2}], sync=False)  # buffered until flushed
        assert [r["n"] for _, _, r in tail.read()] == [1]
        b.flush()
        a.append([{"n": 3}], sync=True)  # the same object, uploaded again whole: only the new line is read
        assert sorted(r["n"] for _, _, r in tail.read()) == [2, 3]
        home.write_learner_state(learner_state())
        assert home.read_learner_state() == json.loads(json.dumps(learner_state()))
        assert prune(home.traffic_folder("outcomes"), Retention(days=30)) == []


def test_a_writer_whose_segment_was_deleted_under_it_writes_a_new_one(tmp_path):
    home = LocusHome(root=str(tmp_path / "home"))
    writer = SegmentWriter(home.traffic_folder("outcomes"), "w", Retention())
    writer.append([{"n": 1}], sync=True)
    (segment,) = home.traffic_folder("outcomes").iterdir()
    segment.unlink()  # another replica's wrong retention (or an operator) removed it
    writer.append([{"n": 2}], sync=True)  # durable somewhere a reader finds it, not in a deleted file
    writer.close()
    assert [r["n"] for _, _, r in home.traffic_tail("outcomes").read()] == [2]


def test_claims_and_a_dropped_files_query_texts_go_with_the_retention(tmp_path):
    home = LocusHome(root=str(tmp_path / "home"))
    now = time.time()
    assert home.claim_outcome("req-old", now - 40 * 86400) and home.claim_outcome("req-new", now)
    home.append_outcome_records([{"request_id": "file-a-1", "model": "m", "query": "q", "score": 1.0, "file": "a"}])
    texts = home.path / "traffic" / "queries" / "a.json"
    os.utime(texts, (now - 40 * 86400, now - 40 * 86400))
    removed = home.prune_traffic(Retention(days=30))
    assert "queries/a.json" in removed and not texts.exists()
    assert [p.name for p in (home.path / "traffic" / "claims").iterdir()] == [time.strftime("%Y%m%d", time.gmtime(now))]
    assert not home.claim_outcome("req-new", now)  # a live claim stays
    assert [r for _, _, r in home.traffic_tail("outcomes").read()] == []  # its text gone: the row is skipped

"""The traffic log (storage/traffic.py): writers' own segments, tails that follow them by offset, rotation, retention;
on a local home and in object storage (moto, e2e)."""

from __future__ import annotations

import os
import time

import pytest

from locus_pipeline.storage import LocusHome
from locus_pipeline.storage.traffic import Retention, prune


def test_a_tail_reads_each_writers_lines_once_and_waits_for_a_line_being_written(tmp_path):
    home = LocusHome(root=str(tmp_path / "home"))
    a, b = home.traffic_writer("outcomes", "replica-a"), home.traffic_writer("outcomes", "replica-b")
    tail = home.traffic_tail("outcomes")
    a.append([{"n": 1}], sync=True)
    b.append([{"n": 2}, {"n": 3}], sync=False)
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


def test_the_learner_state_round_trips_and_a_damaged_one_says_how_to_fix(tmp_path):
    home = LocusHome(root=str(tmp_path / "home"))
    assert home.read_learner_state() is None
    home.write_learner_state({"checkpoint_id": "c", "offsets": {"s": 3}})
    assert home.read_learner_state() == {"checkpoint_id": "c", "offsets": {"s": 3}}
    home.learner_state_path.write_text("{not json")
    with pytest.raises(Exception, match="delete it"):
        home.read_learner_state()


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
        home.write_learner_state({"checkpoint_id": "c"})
        assert home.read_learner_state() == {"checkpoint_id": "c"}
        assert prune(home.traffic_folder("outcomes"), Retention(days=30)) == []

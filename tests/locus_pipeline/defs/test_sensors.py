"""The onboarding sensors, evaluated with build_sensor_context: cursor, run requests, partition requests."""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import dagster as dg
import pandas as pd
import pytest

from locus_model.data.contract import safe_model_key
from locus_pipeline.defs.partitions import ONBOARDED_MODELS
from locus_pipeline.defs.sensors import onboarding_job, reports_after_pool_change, reports_lag
from locus_pipeline.intake import DropFolder
from locus_pipeline.storage import LocusHome
from tests.locus_pipeline.drops import HEADER, OLD, drop, range_of, request_key, requests_of, text
from tests.locus_pipeline.drops import sensor_tick as tick


def sensed(result: object) -> dg.SensorResult:
    """A sensor's result, which must be a SensorResult."""
    assert isinstance(result, dg.SensorResult), result
    return result


def skip_message(result: object) -> str:
    """What a sensor that skipped (a SkipReason) says."""
    assert isinstance(result, dg.SkipReason) and result.skip_message is not None, result
    return result.skip_message


def run_of(instance: dg.DagsterInstance, run_id: str) -> dg.DagsterRun:
    run = instance.get_run_by_id(run_id)
    assert run is not None, f"no run {run_id}"
    return run


def evals(*models: str, n: int = 3) -> str:
    return HEADER + "".join(f'"{m}",q{q},"question {q}",bench,{q % 2}\n' for m in models for q in range(n))


@pytest.fixture()
def home(tmp_path: Path) -> Path:
    (tmp_path / "warehouse").mkdir()
    pd.DataFrame({"model": ["x"], "model_key": ["x"]}).to_parquet(
        tmp_path / "warehouse" / "model_embeddings.parquet"
    )  # "a pool exists"
    return tmp_path


def test_a_dropped_file_becomes_partitions_and_one_run_over_them(home: Path) -> None:
    models = ["org/llama 7b", "../escape", "modèle"]
    drop(home, "evals.csv", evals(*models))
    with dg.instance_for_test() as instance:
        result, context = tick(instance, home)
        assert isinstance(result, dg.SensorResult)
        (add,) = result.dynamic_partitions_requests or []
        keys = list(add.partition_keys)  # added in this order, after every partition there was: one range
        assert add.partitions_def_name == ONBOARDED_MODELS and sorted(keys) == sorted(safe_model_key(m) for m in models)
        (request,) = requests_of(result)  # one run for the file: the range of its models' partitions
        assert range_of(request) == (keys[0], keys[-1]) and request.partition_key is None
        stem = result.cursor
        assert stem is not None and request.run_key is not None
        assert stem.endswith("-evals.csv") and (home / "incoming" / "accepted" / stem).exists()
        assert request.run_config["ops"]["onboarded_evaluations"]["config"] == {"accepted_file": stem}
        assert len(request.run_key) == 64 and request.tags["locus/accepted_file"] == stem  # the file's sha256
        # next tick, same cursor: nothing new
        again, _ = tick(instance, home, cursor=stem)
        assert again.run_requests == [] and again.skip_reason is not None


def test_partial_writes_wait_and_in_progress_names_are_ignored(home: Path) -> None:
    drop(home, "big.csv.part", evals("m"))
    drop(home, "fresh.csv", evals("n"), mtime=time.time() + 60)  # still being written
    with dg.instance_for_test() as instance:
        result, _ = tick(instance, home)
        assert (
            result.run_requests == []
            and "waiting for 1 file(s) to settle: fresh.csv" in result.skip_reason.skip_message
        )
        assert (home / "incoming" / "big.csv.part").exists() and (home / "incoming" / "fresh.csv").exists()
        os.replace(home / "incoming" / "big.csv.part", home / "incoming" / "big.csv")  # the writer's final rename
        result, _ = tick(instance, home, cursor=result.cursor)
        assert [request_key(r) for r in result.run_requests] == ["m"]


def test_rejections_show_in_the_tick_and_move_the_file(home: Path) -> None:
    drop(home, "bad.csv", HEADER + "m,q1,text,bench,7\n")
    with dg.instance_for_test() as instance:
        result, _ = tick(instance, home)
        message = result.skip_reason.skip_message
        assert "rejected bad.csv" in message and "row 1 (line 2), column 'score'" in message and "How to fix" in message
        rejected = list((home / "incoming" / "rejected").iterdir())
        assert sorted(p.name.endswith(".reason.txt") for p in rejected) == [False, True]


def test_a_rejection_beside_an_accepted_file_is_a_failed_check_of_the_onboarding_asset(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tick that requests runs still shows the rejected file: a failed evaluation (WARN) of onboarded_evaluations'
    check dropped_files_accepted (the asset's Checks in the UI, not a green event) with the reason; a tick with
    only a rejection is SKIPPED with it and the same."""
    drop(home, "good.csv", evals("org/good 7b"))
    drop(home, "bad.csv", HEADER + "m,q1,text,bench,7\n")
    with dg.instance_for_test() as instance:
        result, _ = tick(instance, home)
        assert [request_key(r) for r in result.run_requests] == [safe_model_key("org/good 7b")]
        (seen,) = result.asset_events
        assert isinstance(seen, dg.AssetCheckEvaluation) and seen.asset_key == dg.AssetKey("onboarded_evaluations")
        assert seen.check_name == "dropped_files_accepted" and not seen.passed
        assert seen.severity == dg.AssetCheckSeverity.WARN
        assert seen.metadata["rejected_file"].value == "bad.csv" and "column 'score'" in text(seen.metadata["reason"])
        assert (home / text(seen.metadata["reason_file"])).exists()
        drop(home, "worse.csv", "not,a,header\n1,2,3\n")
        alone, _ = tick(instance, home, cursor=result.cursor)
        assert alone.run_requests == [] and "rejected worse.csv" in alone.skip_reason.skip_message
        assert [e.metadata["rejected_file"].value for e in alone.asset_events] == ["worse.csv"]
        from locus_pipeline.defs.checks import dropped_files_accepted

        by_hand = dropped_files_accepted(home=LocusHome(root=str(home)))  # the newest file was rejected
        assert isinstance(by_hand, dg.AssetCheckResult)
        assert not by_hand.passed and by_hand.metadata["rejected_files"].value == 2
        drop(home, "later.csv", evals("org/later 7b"))
        later = time.time() + 2  # stems start with the UTC time to the second: the later file's is later
        monkeypatch.setattr("locus_pipeline.intake.accept.time", SimpleNamespace(time=lambda: later))
        tick(instance, home, cursor=alone.cursor)
        checked = dropped_files_accepted(home=LocusHome(root=str(home)))
        assert isinstance(checked, dg.AssetCheckResult) and checked.passed


def test_the_same_file_twice_requests_nothing_the_second_time(home: Path) -> None:
    drop(home, "a.csv", evals("m"))
    with dg.instance_for_test() as instance:
        first, _ = tick(instance, home)
        drop(home, "a-copy.csv", evals("m"))
        second, _ = tick(instance, home, cursor=first.cursor)
        assert len(first.run_requests) == 1 and second.run_requests == []
        assert "already onboarded" in second.skip_reason.skip_message
        # a changed file (new bytes) for the same model is a new onboarding run
        drop(home, "a.csv", evals("m", n=5))
        third, _ = tick(instance, home, cursor=second.cursor)
        assert [request_key(r) for r in third.run_requests] == ["m"] and third.run_requests[
            0
        ].run_key != first.run_requests[0].run_key


def test_accepted_files_wait_for_the_pool(tmp_path: Path) -> None:
    drop(tmp_path, "a.csv", evals("m"))
    with dg.instance_for_test() as instance:
        result, _ = tick(instance, tmp_path)
        assert "wait for the model embedding pool" in skip_message(result)
        (tmp_path / "warehouse").mkdir()
        pd.DataFrame({"model": ["x"], "model_key": ["x"]}).to_parquet(
            tmp_path / "warehouse" / "model_embeddings.parquet"
        )
        result, _ = tick(instance, tmp_path)  # cursor was not advanced: the runs are requested now
        assert [request_key(r) for r in result.run_requests] == ["m"]


def _add_run(instance: dg.DagsterInstance, status: dg.DagsterRunStatus) -> None:
    instance.add_run(dg.DagsterRun(job_name=onboarding_job.name, run_id=str(uuid.uuid4()), status=status))


def _materialize(instance: dg.DagsterInstance, asset: str) -> None:
    instance.report_runless_asset_event(dg.AssetMaterialization(asset))


def test_reports_refresh_once_when_the_pool_is_newer_and_nothing_is_running() -> None:
    with dg.instance_for_test() as instance:
        sense = lambda cursor=None: reports_after_pool_change(dg.build_sensor_context(instance=instance, cursor=cursor))  # noqa: E731
        assert "no pool yet" in skip_message(sense())
        _materialize(instance, "model_embeddings")
        _materialize(instance, "analysis_reports")
        assert "up to date with the pool" in skip_message(sense()) and reports_lag(instance) == ""
        _materialize(instance, "model_embeddings")  # an onboarding changed the pool
        _add_run(instance, dg.DagsterRunStatus.STARTED)  # and another one is still going
        assert "waiting for 1 onboarding_job run" in skip_message(sense())
        assert "1 onboarding_job" in reports_lag(instance)
        for record in instance.get_run_records(dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED])):
            instance.report_run_failed(record.dagster_run)
        assert "older than the pool" in reports_lag(instance)
        result = sensed(sense())
        (request,) = requests_of(result)
        assert result.cursor and isinstance(sense(result.cursor), dg.SkipReason)  # one refresh per pool state
        assert request.run_key is not None  # keyed by the pool's materialization
        refresh = instance.add_run(
            dg.DagsterRun(
                job_name="reports_refresh_job",
                run_id=str(uuid.uuid4()),
                status=dg.DagsterRunStatus.STARTED,
                tags={"dagster/run_key": request.run_key},
            )
        )
        _materialize(
            instance, "test_query_predictions"
        )  # the refresh's first asset is newer than the pool, the rest is not
        assert "a reports refresh is running" in skip_message(sense(result.cursor))
        assert "reports_refresh_job" in reports_lag(instance)
        instance.report_run_failed(refresh)  # a step failed: said, not retried, not called up to date
        assert "the refresh for this pool failed" in skip_message(sense(result.cursor))
        assert "older than the pool" in reports_lag(instance)
        _materialize(instance, "model_embeddings")
        assert len(requests_of(sense(result.cursor))) == 1  # the pool changed again


def test_a_tick_never_reads_a_file_another_tick_is_reading(home: Path) -> None:
    drop(home, "a.csv", evals("m"))
    with dg.instance_for_test() as instance:
        with DropFolder.at(home).intake_lock() as mine:  # an earlier tick that outlived its timeout
            assert mine
            result, _ = tick(instance, home)
        assert "still taking files in" in result.skip_reason.skip_message and (home / "incoming" / "a.csv").exists()
        result, _ = tick(instance, home)
        assert [request_key(r) for r in result.run_requests] == ["m"]


def test_an_unreadable_file_is_reported_and_does_not_block_the_others(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import locus_pipeline.intake.folder as ob  # where sha256_entry looks up sha256_file

    locked = drop(home, "a-locked.csv", evals("m"))
    drop(home, "b.csv", evals("n"))
    real = ob.sha256_file

    def no_permission(path: Path) -> str:
        if Path(path).name == "a-locked.csv":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(ob, "sha256_file", no_permission)
    with dg.instance_for_test() as instance:
        result, context = tick(instance, home)
        assert [request_key(r) for r in result.run_requests] == ["n"] and locked.exists()


def test_long_names_symlinks_and_folders_never_jam_the_folder(home: Path, tmp_path_factory) -> None:
    """A 250-byte file name is taken in; a symlink and a folder are moved to rejected/ with a reason (the link's
    target untouched) and named in the tick; a good file on the same tick is onboarded."""
    long_name = "é" * 60 + "x" * 126 + ".csv"  # 250 bytes, the most a filesystem name allows is 255
    assert len(long_name.encode()) == 250
    drop(home, long_name, evals("long-named"))
    outside = tmp_path_factory.mktemp("outside") / "target.csv"
    outside.write_text(evals("linked"), encoding="utf-8")
    (home / "incoming" / "link.csv").symlink_to(outside)
    (home / "incoming" / "a-folder.csv").mkdir()
    os.utime(home / "incoming" / "a-folder.csv", (OLD, OLD))  # settled: a folder is read once nothing in it changes
    with dg.instance_for_test() as instance:
        result, _ = tick(instance, home)
    assert sorted(request_key(r) for r in result.run_requests) == ["long-named"]
    rejected = {p.name for p in (home / "incoming" / "rejected").iterdir()}
    assert any(n.endswith("-link.csv") for n in rejected) and any(n.endswith("-a-folder.csv") for n in rejected)
    reasons = [(home / "incoming" / "rejected" / n).read_text() for n in rejected if n.endswith(".reason.txt")]
    assert any("symbolic link" in r for r in reasons) and any("a folder" in r for r in reasons)
    assert outside.read_text(encoding="utf-8") == evals("linked")  # the link moved, its target untouched
    assert not (home / "incoming" / "link.csv").exists() and not (home / "incoming" / "a-folder.csv").exists()


def test_a_rejection_shows_in_the_tick_on_one_line() -> None:
    from locus_pipeline.intake import Rejection

    line = Rejection("bad.csv", "score 'x' is not a number", "write a number", row=3, line=7, column="score").summary()
    assert line == "row 3 (line 7), column 'score': score 'x' is not a number. How to fix: write a number"
    assert "\n" not in line


def test_a_file_name_cannot_make_the_tick_say_something_false(home: Path) -> None:
    """A name holding a newline and a fake field is shown escaped, on its own line, with the real reason."""
    name = "x\nproblem: all fine.csv"
    drop(home, name, HEADER + "m,q1,text,bench,7\n")
    with dg.instance_for_test() as instance:
        result, _ = tick(instance, home)
    message = result.skip_reason.skip_message
    assert "\n" not in message and "rejected x\\nproblem: all fine.csv: row 1 (line 2), column 'score'" in message
    (seen,) = result.asset_events
    assert seen.metadata["rejected_file"].value == name and "all fine" not in seen.metadata["reason"].value


def test_fuzz_corrupt_files_beside_a_good_one_never_fail_a_tick(tmp_path_factory) -> None:
    """Random byte-level corruptions and truncations of a good file (plain and gzip), dropped with a good file:
    the tick never raises, the good file gets its run, every other file ends in accepted/ or in rejected/ with a
    reason, and nothing is left in incoming/."""
    import gzip

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    good = evals("fuzzed", n=12).encode()
    edits = st.lists(st.tuples(st.integers(0, len(good) - 1), st.integers(0, 255)), max_size=6)

    @settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(edits=edits, cut=st.integers(0, len(good)), gz=st.booleans())
    def check(edits, cut, gz) -> None:
        home = tmp_path_factory.mktemp("fuzz")
        (home / "warehouse").mkdir()
        pd.DataFrame({"model": ["x"], "model_key": ["x"]}).to_parquet(home / "warehouse" / "model_embeddings.parquet")
        edited = bytearray(good)
        for at, value in edits:
            edited[at] = value
        data = bytes(edited[:cut])
        name = "bad.csv.gz" if gz else "bad.csv"
        if gz:
            packed = gzip.compress(good)
            data = packed[: max(1, cut * len(packed) // len(good))]
        folder = DropFolder.at(home).ensure()
        (folder.incoming / name).write_bytes(data)
        os.utime(folder.incoming / name, (OLD, OLD))
        drop(home, "good.csv", evals("good-model"))
        with dg.instance_for_test() as instance:
            result, _ = tick(instance, home)
        keys = [key for r in getattr(result, "run_requests", []) for key in range_of(r)]
        assert "good-model" in keys
        assert not [p for p in folder.incoming.iterdir() if p.is_file()]  # nothing stuck in incoming/
        rejected = [p for p in folder.rejected.iterdir() if not p.name.endswith(".reason.txt")]
        for p in rejected:
            assert (folder.rejected / f"{p.name}.reason.txt").read_text().startswith("REJECTED: ")

    check()


def test_a_file_that_grows_after_intake_is_taken_in_again_whole(home: Path) -> None:
    """An in-place writer that paused past the settle time at a row boundary: the first half was taken in, then the
    writer (its open file followed the move into accepted/) wrote the rest. The next tick takes the whole file in
    again as a new file with its own runs, puts the accepted copy back as it was onboarded, and says so."""
    import hashlib

    full = evals("writer", n=40)
    lines = full.splitlines(keepends=True)
    half = "".join(lines[:21])  # the header and 20 rows: a row boundary
    drop(home, "inplace.csv", half)
    with dg.instance_for_test() as instance:
        first, _ = tick(instance, home)
        (request,) = first.run_requests
        stem = first.cursor
        accepted = home / "incoming" / "accepted" / stem
        with open(accepted, "a", encoding="utf-8") as writer:  # the writer goes on where it paused
            writer.write("".join(lines[21:]))
        os.utime(accepted, (OLD + 60, OLD + 60))
        second, _ = tick(instance, home, cursor=first.cursor)
    (again,) = second.run_requests
    assert request_key(again) == "writer" and again.run_key != request.run_key and second.cursor > stem
    new_stem = again.run_config["ops"]["onboarded_evaluations"]["config"]["accepted_file"]
    manifest = DropFolder.at(home).accepted / f"{new_stem}.manifest.json"
    assert '"rows": 40' in manifest.read_text() and (home / "incoming" / "accepted" / new_stem).read_text() == full
    old_sha = request.run_key.split(":")[0]
    assert hashlib.sha256(accepted.read_bytes()).hexdigest() == old_sha and accepted.read_text() == half  # restored
    note = (home / "incoming" / "accepted" / f"{stem}.changed.txt").read_text()
    assert "restored to the bytes that were onboarded" in note and new_stem in note
    assert f"the file then had: {len(full.encode()):,} bytes" in note
    assert [p for p in (home / "incoming").iterdir() if p.is_file()] == []


def test_a_file_still_written_after_intake_waits_and_a_cut_one_is_rejected(home: Path) -> None:
    drop(home, "inplace.csv", evals("writer", n=4))
    with dg.instance_for_test() as instance:
        first, _ = tick(instance, home)
        accepted = home / "incoming" / "accepted" / first.cursor
        with open(accepted, "a", encoding="utf-8") as writer:
            writer.write('"writer",q9,"question 9",bench,1\n"writer",q10,"quest')  # the writer died mid-row
        second, _ = tick(instance, home, cursor=first.cursor)  # modified just now: still being written
        assert second.run_requests == [] and "still being written after intake" in second.skip_reason.skip_message
        os.utime(accepted, (OLD + 60, OLD + 60))
        third, _ = tick(instance, home, cursor=second.cursor)
    assert (
        third.run_requests == [] and "changed after intake: taken in again, rejected" in third.skip_reason.skip_message
    )
    assert accepted.read_text() == evals("writer", n=4)
    (reason,) = (home / "incoming" / "rejected").glob("*.reason.txt")
    assert "inplace.csv" in reason.read_text()


def test_in_progress_names_are_named_in_the_tick(home: Path) -> None:
    drop(home, "..csv", evals("dots"))
    drop(home, "results.csv.part", evals("partial"))
    with dg.instance_for_test() as instance:
        result, _ = tick(instance, home)
    message = result.skip_reason.skip_message
    assert "2 file(s) with in-progress names are read once renamed" in message
    assert "..csv" in message and "results.csv.part" in message


def test_a_file_held_by_a_killed_retake_is_taken_in_on_the_next_tick(home: Path) -> None:
    drop(home, f".retake-{uuid.uuid4().hex}-held.csv", evals("held"))
    with dg.instance_for_test() as instance:
        result, _ = tick(instance, home)
    assert [request_key(r) for r in result.run_requests] == ["held"] and result.cursor.endswith("-held.csv")
    assert not list((home / "incoming").glob(".retake-*"))


# ---------------------------------------------------------------------------------------------- runs whose process died


def _dead_pid() -> int:
    import subprocess

    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _started_run(
    instance: dg.DagsterInstance,
    job_name: str,
    *,
    run_key: str,
    pid: int,
    partition: str | None = None,
    run_config: dict | None = None,
    reported_at: float | None = None,
) -> dg.DagsterRun:
    """A STARTED run whose worker reported ``pid`` (at ``reported_at``, default now), as a run worker does."""
    from dagster._core.events import DagsterEvent, DagsterEventType, EngineEventData

    tags = {"dagster/run_key": run_key, **({"dagster/partition": partition} if partition else {})}
    run = instance.add_run(
        dg.DagsterRun(
            job_name=job_name,
            run_id=str(uuid.uuid4()),
            status=dg.DagsterRunStatus.STARTED,
            tags=tags,
            run_config=run_config or {},
        )
    )
    event = DagsterEvent(
        DagsterEventType.ENGINE_EVENT.value,
        job_name=job_name,
        message=f"Started process for run (pid: {pid}).",
        event_specific_data=EngineEventData.in_process(pid),
    )
    instance.report_dagster_event(event, run.run_id, timestamp=reported_at)
    return run


def test_an_onboarding_whose_process_died_is_failed_its_slot_freed_and_requested_again(home: Path) -> None:
    from locus_pipeline.runs import pid_alive

    config = {"ops": {"onboarded_evaluations": {"config": {"accepted_file": "stem", "model": "m"}}}}
    with dg.instance_for_test() as instance:
        dead = _started_run(
            instance, onboarding_job.name, run_key="abc:m", pid=_dead_pid(), partition="m", run_config=config
        )
        alive = _started_run(instance, onboarding_job.name, run_key="def:n", pid=os.getpid(), partition="n")
        storage = instance.event_log_storage
        storage.set_concurrency_slots("model_embeddings", 1)
        storage.claim_concurrency_slot("model_embeddings", dead.run_id, "model_embeddings")
        assert storage.get_concurrency_info("model_embeddings").active_slot_count == 1 and pid_alive(os.getpid())
        result, _ = tick(instance, home)
        assert run_of(instance, dead.run_id).status == dg.DagsterRunStatus.FAILURE
        assert run_of(instance, alive.run_id).status == dg.DagsterRunStatus.STARTED  # its process is there
        assert storage.get_concurrency_info("model_embeddings").active_slot_count == 0
        (retry,) = result.run_requests
        assert retry.run_key == "abc:m:attempt-2" and retry.partition_key == "m" and retry.run_config == config
        assert retry.tags["locus/retry_of"] == dead.run_id


def test_a_killed_reports_refresh_is_not_waited_on_and_runs_again() -> None:
    with dg.instance_for_test() as instance:
        _materialize(instance, "analysis_reports")
        _materialize(instance, "model_embeddings")
        pool_id = next(
            iter(instance.fetch_materializations(dg.AssetKey("model_embeddings"), limit=1).records)
        ).storage_id
        killed = _started_run(instance, "reports_refresh_job", run_key=f"reports-for-pool-{pool_id}", pid=_dead_pid())
        _materialize(instance, "test_query_predictions")  # killed half-way: its first report is newer than the pool
        result = reports_after_pool_change(dg.build_sensor_context(instance=instance, cursor=str(pool_id)))
        assert run_of(instance, killed.run_id).status == dg.DagsterRunStatus.FAILURE
        (request,) = requests_of(result)
        assert request.run_key == f"reports-for-pool-{pool_id}:attempt-2"


def test_a_pid_taken_by_a_later_process_is_not_the_run_s_worker() -> None:
    from locus_pipeline.runs import fail_dead_runs, pid_alive

    started = time.time()
    assert pid_alive(os.getpid()) and pid_alive(os.getpid(), started_by=started)
    assert not pid_alive(os.getpid(), started_by=started - 24 * 3600)  # the run reported this pid before we existed
    assert not pid_alive(_dead_pid())
    with dg.instance_for_test() as instance:
        reused = _started_run(
            instance, onboarding_job.name, run_key="abc:m", pid=os.getpid(), reported_at=started - 24 * 3600
        )
        assert fail_dead_runs(instance, [onboarding_job.name]) == [reused.run_id]  # the pid is ours now, not the run's
        fresh = _started_run(instance, onboarding_job.name, run_key="def:n", pid=os.getpid())
        assert fail_dead_runs(instance, [onboarding_job.name]) == []
        assert run_of(instance, fresh.run_id).status == dg.DagsterRunStatus.STARTED


def test_a_run_that_failed_in_a_step_is_not_retried(home: Path) -> None:
    with dg.instance_for_test() as instance:
        run = instance.add_run(
            dg.DagsterRun(
                job_name=onboarding_job.name,
                run_id=str(uuid.uuid4()),
                status=dg.DagsterRunStatus.STARTED,
                tags={"dagster/run_key": "abc:m"},
            )
        )
        instance.report_run_failed(run)  # no failure reason of a crash: a step failed, a retry would fail the same way
        result, _ = tick(instance, home)
        assert isinstance(result, dg.SensorResult) and not result.run_requests


def _hostile_encrypted_zip(incoming: Path) -> Path:
    from tests.locus_model.data import hostile

    return hostile.patch_zip(
        hostile.zip_folder(hostile.lm_eval_folder(incoming, name=".src"), incoming / "locked.zip"), flags=1
    )


def _hostile_deep_json(incoming: Path) -> Path:
    from tests.locus_model.data import hostile

    path = incoming / "deep.json"
    path.write_text(hostile.deep_json(100_000))
    return path


def _hostile_fifo_folder(incoming: Path) -> Path:
    from tests.locus_model.data import hostile

    return hostile.helm_with_fifo(incoming)


def _hostile_many_members(incoming: Path) -> Path:
    from tests.locus_model.data import hostile

    return hostile.many_members(incoming / "many.zip", 3000)


@pytest.mark.parametrize(
    "build, says, seconds",
    [
        (_hostile_encrypted_zip, "is encrypted", 0.2),  # RuntimeError on the reader's side: the tick failed, 120 times
        (_hostile_deep_json, "nests deeper", 0.2),  # RecursionError
        (_hostile_fifo_folder, "not a regular file", 0.2),  # the tick hung on the pipe, holding the intake lock
        # 150,000 empty members held the intake for minutes; a budget that any read of 3,000 members exceeds, whatever
        # the machine's speed (0.2 s was not always exceeded on an idle machine)
        (_hostile_many_members, "took longer than", 1e-6),
    ],
)
def test_a_hostile_drop_never_stops_the_folder(
    home: Path, monkeypatch: pytest.MonkeyPatch, build, says: str, seconds: float
) -> None:
    """A hostile drop, then a good file: the hostile one is rejected with its reason in the same tick and the good
    one is accepted and gets its run (issue 47)."""
    import threading

    import locus_pipeline.intake.accept as accept
    from locus_model.data.limits import DropLimits

    monkeypatch.setattr(accept, "DROP_LIMITS", DropLimits(seconds=seconds))  # the drop folder's time budget, shortened
    folder = DropFolder.at(home).ensure()
    bad = build(folder.incoming)
    for entry in [*bad.rglob("*"), bad] if bad.is_dir() else [bad]:  # settled, and the oldest: read first
        os.utime(entry, (OLD - 60, OLD - 60))
    drop(home, "good.csv", evals("good-model"))
    outcome = []
    with dg.instance_for_test() as instance:
        ticking = threading.Thread(target=lambda: outcome.append(tick(instance, home)[0]), daemon=True)
        ticking.start()
        ticking.join(60)
        assert not ticking.is_alive(), "the tick hung"
    (result,) = outcome
    assert [request_key(r) for r in result.run_requests] == ["good-model"]
    assert not bad.exists() and not (folder.incoming / "good.csv").exists()
    (reason,) = [p.read_text() for p in folder.rejected.glob("*.reason.txt")]
    assert says in reason
    (observation,) = result.asset_events
    assert says in observation.metadata["reason"].value


def test_a_reader_failure_of_any_type_rejects_only_that_drop(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import locus_pipeline.intake.accept as accept

    real = accept._split

    def failing(path: Path, *args, **kwargs):
        if path.name == "bad.csv":
            raise MemoryError()
        return real(path, *args, **kwargs)

    monkeypatch.setattr(accept, "_split", failing)
    drop(home, "bad.csv", evals("bad-model"), mtime=OLD - 60)
    drop(home, "good.csv", evals("good-model"))
    with dg.instance_for_test() as instance:
        result, _ = tick(instance, home)
    assert [request_key(r) for r in result.run_requests] == ["good-model"]
    (observation,) = result.asset_events
    assert "ran out of memory (MemoryError)" in observation.metadata["reason"].value
    (reason,) = (home / "incoming" / "rejected").glob("*.reason.txt")
    assert "error type: MemoryError" in reason.read_text()


def test_a_writer_paused_inside_a_quoted_field_is_waited_on_and_the_folder_moves_on(home: Path) -> None:
    paused = HEADER + '"writer",q1,"a question\nover two lines",bench,1\n"writer",q2,"second\n'
    drop(home, "paused.csv", paused, mtime=time.time() - 5)
    drop(home, "good.csv", evals("good-model"))
    with dg.instance_for_test() as instance:
        result, _ = tick(instance, home)
        again, _ = tick(instance, home, cursor=result.cursor)
    assert [request_key(r) for r in result.run_requests] == ["good-model"] and not result.asset_events
    assert (home / "incoming" / "paused.csv").read_text() == paused  # not rejected while its writer may go on
    assert "paused.csv: a quoted value starting in this row is never closed" in again.skip_reason.skip_message
    assert "a writer may still be writing it" in again.skip_reason.skip_message


def test_one_file_gets_one_run_whoever_publishes_it(home: Path) -> None:
    """`locus onboard` hands its file to the intake (hand_in: through incoming/, taken in once settled) and starts
    its run under the intake lock: a sensor tick meanwhile publishes nothing, and the tick after it requests no second
    run of that file's run key."""
    from locus_pipeline.intake import hand_in

    @dg.op
    def started() -> None:
        pass

    @dg.job
    def locus_onboard_run():
        started()

    folder = DropFolder.at(home)
    with dg.instance_for_test() as instance:

        def publish(manifest) -> str:  # what locus onboard does under the lock: the run, keyed as the sensor keys it
            meanwhile, _ = tick(instance, home)  # a sensor tick while this process holds the lock
            assert meanwhile.run_requests == [] and meanwhile.cursor is None
            return locus_onboard_run.execute_in_process(
                instance=instance, tags={"dagster/run_key": manifest.sha256}
            ).run_id

        handed = hand_in(folder, "live-first-3.csv", evals("org/first"), publish=publish, poll_s=0.1)
        assert handed.manifest is not None
        assert handed.rejection is None and handed.manifest.original_name == "live-first-3.csv"
        assert handed.published == instance.get_runs(limit=1)[0].run_id
        assert not (folder.incoming / "live-first-3.csv").exists()
        assert (folder.accepted / handed.manifest.stem).read_text() == evals("org/first")
        drop(home, "second.csv", evals("org/second"))
        after, _ = tick(instance, home)
        assert [request_key(r) for r in after.run_requests] == [safe_model_key("org/second")]
        assert after.cursor.endswith("-second.csv")


def test_the_front_door_tells_a_rejection_and_a_duplicate_and_publishes_neither(home: Path) -> None:
    from locus_pipeline.intake import hand_in

    folder = DropFolder.at(home)
    published: list = []  # the manifests publish was given
    bad = hand_in(folder, "live-bad-1.csv", "model,query_id\nx,q1\n", publish=published.append, poll_s=0.1)
    assert bad.rejection is not None
    assert bad.manifest is None and "score" in bad.rejection.problem
    assert (folder.incoming / bad.rejection.reason_file).is_file()
    first = hand_in(folder, "live-same-3.csv", evals("org/same"), publish=published.append, poll_s=0.1)
    again = hand_in(folder, "live-same-3.csv", evals("org/same"), publish=published.append, poll_s=0.1)
    assert again.manifest is not None and first.manifest is not None
    assert again.manifest.duplicate_of == first.manifest.stem and again.published is None
    assert published == [first.manifest]  # the accepted file only


@pytest.mark.parametrize("content, accepted", [(evals("org/theirs"), True), ("model,query_id\nx,q1\n", False)])
def test_a_file_another_process_took_in_is_told_its_outcome_from_the_folder(
    home: Path, monkeypatch, content, accepted
) -> None:
    """A running sensor's tick took the handed-in file in first (its publish, not ours): the outcome is read back
    from accepted/ or rejected/, and nothing is published here."""
    import locus_pipeline.intake.tick as tick_module
    from locus_pipeline.intake import hand_in

    real = tick_module.intake_tick
    monkeypatch.setattr(tick_module, "intake_tick", lambda folder, **kw: real(folder, limits=kw.get("limits")))
    published: list = []  # the manifests publish was given
    handed = hand_in(DropFolder.at(home), "live-theirs-3.csv", content, publish=published.append, poll_s=0.1)
    assert published == [] and handed.published is None
    if accepted:
        assert handed.manifest is not None
        assert handed.manifest.original_name == "live-theirs-3.csv" and handed.rejection is None
    else:
        assert handed.rejection is not None
        assert handed.manifest is None and "score" in handed.rejection.problem


# ---------------------------------------------------------------------------------------------- a file of many models


def _covered(instance: dg.DagsterInstance, request: dg.RunRequest) -> list[str]:
    from locus_pipeline.defs.partitions import run_model_keys

    keys = run_model_keys(instance, request.tags)
    assert keys is not None  # a run over partitions
    return keys


def test_a_file_of_40_models_is_one_request_over_40_partitions(home: Path) -> None:
    models = [f"org/model {i:02d}" for i in range(40)]
    drop(home, "forty.csv", evals(*models))
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(ONBOARDED_MODELS, ["older"])  # onboarded before: not in the range
        result, _ = tick(instance, home)
        (add,) = result.dynamic_partitions_requests
        instance.add_dynamic_partitions(add.partitions_def_name, list(add.partition_keys))  # as the daemon does
        (request,) = result.run_requests
        assert sorted(_covered(instance, request)) == sorted(safe_model_key(m) for m in models)
        manifest = (home / "incoming" / "accepted" / f"{result.cursor}.manifest.json").read_text()
        assert len(request.run_key) == 64 and f'"sha256": "{request.run_key}"' in manifest  # the file's bytes
        again, _ = tick(instance, home, cursor=result.cursor)
        assert again.run_requests == []
        drop(home, "forty-copy.csv", evals(*models))  # the same bytes: nothing to run
        copy, _ = tick(instance, home, cursor=result.cursor)
        assert copy.run_requests == [] and "already onboarded" in copy.skip_reason.skip_message
        drop(home, "forty-changed.csv", evals(*models, n=4))  # other bytes, the same models: a run of its own
        changed, _ = tick(instance, home, cursor=copy.cursor)
        (other,) = changed.run_requests
        assert other.run_key != request.run_key and sorted(_covered(instance, other)) == sorted(
            _covered(instance, request)
        )


def test_a_file_whose_models_are_not_one_range_gets_one_run_per_range(home: Path) -> None:
    """Partitions keep their insertion order: models onboarded before sit among others, so the file's keys make
    two ranges here, each a run with a run key of its own."""
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(ONBOARDED_MODELS, ["a", "other", "b"])
        drop(home, "mixed.csv", evals("a", "b", "c"))
        result, _ = tick(instance, home)
        assert list(result.dynamic_partitions_requests[0].partition_keys) == ["c"]
        instance.add_dynamic_partitions(ONBOARDED_MODELS, ["c"])
        ranges = sorted(range_of(r) for r in result.run_requests)
        assert ranges == [("a", "a"), ("b", "c")]
        sha = result.run_requests[0].run_key.split(":")[0]
        assert sorted(r.run_key for r in result.run_requests) == [f"{sha}:a..a", f"{sha}:b..c"]
        assert sorted(k for r in result.run_requests for k in _covered(instance, r)) == ["a", "b", "c"]


def test_a_crashed_run_over_a_range_is_requested_again_over_the_same_range(home: Path) -> None:
    from locus_pipeline.defs.partitions import range_tags

    with dg.instance_for_test() as instance:
        run = instance.add_run(
            dg.DagsterRun(
                job_name=onboarding_job.name,
                run_id=str(uuid.uuid4()),
                status=dg.DagsterRunStatus.STARTED,
                tags={"dagster/run_key": "abc", **range_tags("a", "c")},
            )
        )
        from dagster._core.events import JobFailureData, RunFailureReason

        instance.report_run_failed(
            run, "killed", JobFailureData(error=None, failure_reason=RunFailureReason.UNEXPECTED_TERMINATION)
        )
        result, _ = tick(instance, home)
        (retry,) = result.run_requests
        assert retry.run_key == "abc:attempt-2" and range_of(retry) == ("a", "c") and retry.partition_key is None


# ---------------------------------------------------------------------------------------------- the queue's order


def test_the_small_drops_of_a_tick_share_one_run_and_a_large_one_runs_in_its_own_lane(home: Path) -> None:
    import yaml

    from locus_pipeline.defs.sensors import DROP_SIZE_TAG, SMALL_DROP_MODELS

    for i in range(3):
        drop(home, f"one-{i}.csv", evals(f"small/{i}"))
    drop(home, "big.csv", evals(*[f"big/{i:02d}" for i in range(SMALL_DROP_MODELS + 4)]))
    with dg.instance_for_test() as instance:
        result, _ = tick(instance, home)
        (add,) = result.dynamic_partitions_requests
        instance.add_dynamic_partitions(add.partitions_def_name, list(add.partition_keys))
        lanes = {r.tags[DROP_SIZE_TAG]: r for r in result.run_requests}
        assert sorted(lanes) == ["large", "small"] and len(result.run_requests) == 2
        small, large = lanes["small"], lanes["large"]
        stems = small.run_config["ops"]["onboarded_evaluations"]["config"]["accepted_files"]
        assert [s.split("-", 2)[-1] for s in stems] == ["one-0.csv", "one-1.csv", "one-2.csv"]  # intake order
        assert sorted(_covered(instance, small)) == sorted(safe_model_key(f"small/{i}") for i in range(3))
        assert len(_covered(instance, large)) == SMALL_DROP_MODELS + 4
        assert int(small.tags["dagster/priority"]) > int(large.tags["dagster/priority"])  # small drops dequeued first
        assert small.run_key != large.run_key and len(small.run_key) == 64
    limits = yaml.safe_load((Path(__file__).parents[3] / "dagster.yaml").read_text())["concurrency"]["runs"]
    assert {"key": DROP_SIZE_TAG, "value": "large", "limit": 1} in limits["tag_concurrency_limits"]
    assert limits["max_concurrent_runs"] > 1  # a slot is always left for the small lane


def test_while_a_small_run_is_queued_new_drops_wait_and_then_share_one_run(home: Path, monkeypatch) -> None:
    """A good drop never waits behind more than one queued run: the drops that arrive while a small run is queued
    are requested once it starts, together."""
    import locus_pipeline.defs.sensors as sensors
    from locus_pipeline.defs.partitions import range_tags
    from locus_pipeline.defs.sensors import DROP_SIZE_TAG
    from tests.locus_pipeline.drops import defs

    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(ONBOARDED_MODELS, ["earlier"])
        queued = instance.create_run_for_job(
            job_def=defs().resolve_job_def("onboarding_job"),
            tags={DROP_SIZE_TAG: "small", **range_tags("earlier", "earlier")},
            run_config={"ops": {"onboarded_evaluations": {"config": {"accepted_file": "x"}}}},
        )
        drop(home, "zero.csv", evals("good/zero"))
        not_started, _ = tick(instance, home)  # created, not in the queue (a killed in-process run): not waited on
        assert len(not_started.run_requests) == 1
        # a QUEUED run needs the remote job origin only the daemon's submission has: here the created run stands
        # for it (the sensor's filter on the status, its lane tag and its job is what is under test)
        monkeypatch.setattr(sensors, "QUEUED", [dg.DagsterRunStatus.NOT_STARTED])
        drop(home, "first.csv", evals("good/first"))
        held, _ = tick(instance, home, cursor=not_started.cursor)
        assert (
            held.run_requests == [] and held.cursor == not_started.cursor
        )  # accepted, not requested: the cursor stays
        assert "wait until the queued onboarding run starts" in held.skip_reason.skip_message
        drop(home, "second.csv", evals("good/second"))
        still, _ = tick(instance, home, cursor=held.cursor)
        assert still.run_requests == []
        instance.handle_run_event(
            queued.run_id,
            dg.DagsterEvent(event_type_value=dg.DagsterEventType.RUN_START.value, job_name="onboarding_job"),
        )
        started, _ = tick(instance, home, cursor=still.cursor)
    (request,) = started.run_requests  # both drops, one run
    stems = request.run_config["ops"]["onboarded_evaluations"]["config"]["accepted_files"]
    assert [s.split("-", 2)[-1] for s in stems] == ["first.csv", "second.csv"] and started.cursor == stems[-1]


def test_small_drops_of_models_onboarded_before_keep_a_run_each(home: Path) -> None:
    from locus_pipeline.defs.sensors import coalesced_requests

    def manifest(stem: str, *keys: str):  # the fields of intake's Manifest the sensor reads
        return SimpleNamespace(stem=stem, sha256=stem * 8, models=[SimpleNamespace(model_key=k, model=k) for k in keys])

    a, b, big = manifest("a", "m1"), manifest("b", "m2"), manifest("c", *[f"x{i:02d}" for i in range(20)] + ["m2"])
    requests, new = coalesced_requests([a, b], known=["m1"])  # m1 onboarded before: its file keeps its own run
    assert len(requests) == 2 and new == ["m2"]
    requests, new = coalesced_requests([a, b, big], known=[])  # m2 also in the large file: no shared run
    assert len(requests) == 3 and sorted(new) == sorted(["m1", "m2", *[f"x{i:02d}" for i in range(20)]])
    (shared,), new = coalesced_requests([a, b], known=["old"])
    assert new == ["m1", "m2"] and shared.tags["dagster/asset_partition_range_start"] == "m1"


def outcome_lines(folder: Path, name: str, records: list[dict]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / name, "a") as handle:
        handle.writelines(json.dumps(r) + "\n" for r in records)


@pytest.mark.parametrize("positions", [True, False], ids=["locus-learn-reset", "a-reset-with-its-time-only"])
def test_graded_answers_after_a_reset_count_whatever_order_the_segments_are_read_in(
    home: Path, monkeypatch: pytest.MonkeyPatch, positions: bool
) -> None:
    from locus_pipeline.defs.assets import traffic
    from locus_pipeline.defs.sensors import traffic_sensor

    monkeypatch.setattr(traffic, "MIN_NEW_ANSWERS", 5)
    store = LocusHome(root=str(home))
    folder = store.traffic_folder("outcomes")
    server = "20260101T000000-server-000001.jsonl"  # the server's segment, started long before the reset
    graded = [{"request_id": f"r{i}", "model": "x", "score": 1.0, "time": 1.0 if i < 4 else 2e9} for i in range(8)]
    outcome_lines(folder, server, graded[:4])
    if positions:  # its own segment sorts after the server's, which goes on being written
        store.append_reset("x")
    else:  # a reset written by an older locus: its time only
        store.append_outcome_records([{"reset": "x", "time": 1.5}])
    outcome_lines(folder, server, graded[4:])
    outcome_lines(folder, server, [{"request_id": "g", "model": "ghost-model", "score": 1.0, "time": 2.0}])
    with dg.instance_for_test() as instance:
        first = sensed(traffic_sensor(dg.build_sensor_context(instance=instance, resources={"home": store})))
        assert first.cursor is not None
        assert json.loads(first.cursor)["since"] == {"x": 4}  # the 4 graded after the reset, not 0
        outcome_lines(folder, server, [{"request_id": "r9", "model": "x", "score": 1.0, "time": 1.0}])
        second = sensed(
            traffic_sensor(dg.build_sensor_context(instance=instance, cursor=first.cursor, resources={"home": store}))
        )
    assert [r.partition_key for r in requests_of(second)] == ["x"]
    assert second.cursor is not None
    assert "ghost-model" not in json.dumps(json.loads(second.cursor))  # not in the pool: no partition, no run


def test_one_client_alone_never_starts_a_relearning_whatever_it_posts(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from locus_pipeline.defs.assets import traffic
    from locus_pipeline.defs.sensors import traffic_sensor

    monkeypatch.setattr(traffic, "MIN_NEW_ANSWERS", 5)
    store = LocusHome(root=str(home))
    folder = store.traffic_folder("outcomes")
    segment = "20260101T000000-server-000001.jsonl"

    def graded(client: str, grader: bool, n: int, start: int) -> list[dict]:
        return [
            {"request_id": f"{client}-{start + i}", "model": "x", "score": 0.0, "client": client, "grader": grader}
            for i in range(n)
        ]

    outcome_lines(folder, segment, graded("mallory", False, 60, 0))
    with dg.instance_for_test() as instance:
        first = sensed(traffic_sensor(dg.build_sensor_context(instance=instance, resources={"home": store})))
        assert first.skip_reason is not None and first.skip_reason.skip_message is not None
        assert not first.run_requests and "a grader or two clients" in first.skip_reason.skip_message
        outcome_lines(folder, segment, graded("team-a", False, 1, 0))  # a second client: its answers may agree
        second = sensed(
            traffic_sensor(dg.build_sensor_context(instance=instance, cursor=first.cursor, resources={"home": store}))
        )
        assert [r.partition_key for r in requests_of(second)] == ["x"]
        outcome_lines(folder, segment, graded("mallory", False, 10, 60))
        third = sensed(
            traffic_sensor(dg.build_sensor_context(instance=instance, cursor=second.cursor, resources={"home": store}))
        )
        assert not third.run_requests
        outcome_lines(folder, segment, graded("judge", True, 1, 0))  # a grader's answer
        fourth = sensed(
            traffic_sensor(dg.build_sensor_context(instance=instance, cursor=third.cursor, resources={"home": store}))
        )
    assert [r.partition_key for r in requests_of(fourth)] == ["x"]

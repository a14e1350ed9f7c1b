"""End to end: the real `dagster dev` (daemon included) on a copy of the tiny materialized home. A dropped file is
onboarded by the sensor's run, which materializes the pool asset (count, check) and the model's own asset; then a
rebuild with a new checkpoint races two more onboardings and the pool ends with every model from that checkpoint.
Then `kill -9` of dagster dev mid-onboarding and mid-refresh, and a restart (issue 26)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

from locus_model.data.contract import safe_model_key
from locus_pipeline.devserver import start_dagster_dev, stop_dagster_dev
from locus_pipeline.instance import prepare_dagster_home
from locus_pipeline.storage import LocusHome
from tests.locus_pipeline.drops import new_checkpoint, new_model_rows

MODEL = "e2e/dropped model ü"


def drop_renamed(home: Path, name: str, rows: pd.DataFrame) -> float:
    incoming = home / "incoming"
    incoming.mkdir(parents=True, exist_ok=True)
    rows.to_csv(incoming / f"{name}.part", index=False)  # write, then rename: the documented convention
    os.replace(incoming / f"{name}.part", incoming / name)
    return time.time()


def wait_for(predicate, what: str, proc: subprocess.Popen, log_path: Path, timeout: float = 150):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"dagster dev exited early:\n{log_path.read_text()[-3000:]}")
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    pytest.fail(f"{what} did not happen within {timeout:.0f} s:\n{log_path.read_text()[-5000:]}")


def pool_models(home: Path) -> set[str]:
    try:
        return set(pd.read_parquet(home / "warehouse" / "model_embeddings.parquet", columns=["model"])["model"])
    except (OSError, ValueError):
        return set()


@pytest.mark.e2e
def test_dropped_files_are_onboarded_by_pool_materializations_and_race_a_rebuild(materialized, tmp_path: Path) -> None:
    _, _, source = materialized
    home = tmp_path / "home"
    shutil.copytree(source, home, ignore=shutil.ignore_patterns(".locks", "dagster"))
    before = pd.read_parquet(home / "warehouse" / "model_embeddings.parquet")
    log_path = tmp_path / "dagster.log"
    proc, _ = start_dagster_dev(home, log_path)
    try:
        dropped = drop_renamed(home, "new-model.csv", new_model_rows(home, MODEL, 64))
        wait_for(lambda: MODEL in pool_models(home), f"{MODEL!r} in the pool", proc, log_path)
        print(f"file drop -> row in the pool: {time.time() - dropped:.1f} s")
        pool = pd.read_parquet(home / "warehouse" / "model_embeddings.parquet")
        row = pool[pool["model"] == MODEL].iloc[0]
        assert row["source"] == "onboarded" and row["n_evaluations"] == 64
        pd.testing.assert_frame_equal(pool[pool["model"] != MODEL].reset_index(drop=True), before)
        assert len(list((home / "incoming" / "accepted").glob("*-new-model.csv"))) == 1

        with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:

            def pool_materialized():
                event = instance.get_latest_materialization_event(dg.AssetKey("model_embeddings"))
                return (
                    event
                    if event is not None and event.asset_materialization.metadata["models"].value == len(before) + 1
                    else None
                )

            event = wait_for(pool_materialized, "the pool materialization", proc, log_path, timeout=30)
            meta = event.asset_materialization.metadata
            assert meta["onboarded_models"].value == 1 and meta["action"].value == "new"
            key = safe_model_key(MODEL)
            view = wait_for(
                lambda: instance.get_latest_materialization_event(dg.AssetKey("onboarded_model_embedding")),
                "the onboarded model's materialization",
                proc,
                log_path,
                timeout=30,
            )
            assert view.asset_materialization.partition == key and view.run_id == event.run_id
            assert view.asset_materialization.metadata["nearest_model"].value in set(before["model"])
            check = wait_for(
                lambda: instance.event_log_storage.get_latest_asset_check_execution_by_key(
                    [dg.AssetCheckKey(dg.AssetKey("model_embeddings"), "pool_embeddings_reproducible")]
                ).get(dg.AssetCheckKey(dg.AssetKey("model_embeddings"), "pool_embeddings_reproducible")),
                "the blocking check",
                proc,
                log_path,
                timeout=30,
            )
            assert check.run_id == event.run_id

        # a rebuild with a new checkpoint, started beside two more onboardings
        new_id = new_checkpoint(home)
        env = {**os.environ, "LOCUS_HOME": str(home), "DAGSTER_HOME": str(prepare_dagster_home(home))}
        rebuild = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "dagster"),
                "asset",
                "materialize",
                "--select",
                "model_embeddings",
                "-m",
                "locus_pipeline.definitions",
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        drop_renamed(home, "second.csv", new_model_rows(home, "second/model", 48))
        drop_renamed(home, "third.csv", new_model_rows(home, "third/model", 40))
        out, _ = rebuild.communicate(timeout=240)
        assert rebuild.returncode == 0, out[-3000:]
        wait_for(lambda: {"second/model", "third/model"} <= pool_models(home), "both onboardings", proc, log_path)

        def settled():  # every onboarding run has finished: 3, or 2 when the two small drops shared a tick's run
            with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:
                runs = instance.get_runs(dg.RunsFilter(job_name="onboarding_job"))
                return len(runs) in (2, 3) and all(r.is_finished for r in runs) and runs

        runs = wait_for(settled, "the onboarding runs to finish", proc, log_path, timeout=120)
        assert all(r.is_success for r in runs), [r.status for r in runs]
        pool = pd.read_parquet(home / "warehouse" / "model_embeddings.parquet")
        assert set(pool["checkpoint_id"]) == {new_id} and len(pool) == len(before) + 3 and pool["model"].is_unique
    finally:
        stop_dagster_dev(proc)


# ------------------------------------------------------------------------------ kill -9 of dagster dev, restart


def run_of(instance: dg.DagsterInstance, run_id: str) -> dg.DagsterRun:
    run = instance.get_run_by_id(run_id)
    assert run is not None, f"no run {run_id}"
    return run


def runs_of(instance: dg.DagsterInstance, job: str) -> list[dg.DagsterRun]:
    return list(instance.get_runs(dg.RunsFilter(job_name=job)))


def step_started(instance: dg.DagsterInstance, run_id: str, step: str) -> bool:
    return any(
        e.dagster_event is not None and e.dagster_event.step_key == step
        for e in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_START)
    )


def materializations(instance: dg.DagsterInstance, asset: str, partition: str | None = None) -> int:
    return len(
        instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[partition] if partition else None),
            limit=100,
        ).records
    )


def slots_held(instance: dg.DagsterInstance, pool: str = "model_embeddings") -> int:
    return instance.event_log_storage.get_concurrency_info(pool).active_slot_count


def kill_group(proc: subprocess.Popen) -> None:
    """kill -9 of the whole process group of `dagster dev`: webserver, daemon, code server and run workers."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def kill_and_restart(home: Path, tmp_path: Path, *, timeout: float = 150) -> dict[str, float]:
    """The issue-26 scenario on ``home`` (a materialized LOCUS_HOME, changed in place): an onboarding killed with
    `dagster dev` while its pool step holds the model_embeddings slot, then a restart; then a reports refresh
    killed half-way, then a restart. Asserts at each stage; returns the seconds each took."""
    from locus_pipeline.defs.sensors import reports_lag

    timings: dict[str, float] = {}
    storage = LocusHome(root=str(home))
    before = pool_models(home)
    instance = dg.DagsterInstance.from_config(str(prepare_dagster_home(home)))
    log1 = tmp_path / "dagster-1.log"
    proc, _ = start_dagster_dev(home, log1)
    try:
        with storage.lock("pool"):  # the onboarding's pool step waits here, holding the model_embeddings slot
            drop_renamed(home, "killed.csv", new_model_rows(home, MODEL, 64))
            run = wait_for(
                lambda: next(
                    (
                        r
                        for r in runs_of(instance, "onboarding_job")
                        if step_started(instance, r.run_id, "model_embeddings")
                    ),
                    None,
                ),
                "the onboarding's pool step",
                proc,
                log1,
                timeout,
            )
            wait_for(lambda: slots_held(instance) == 1, "the model_embeddings slot claimed", proc, log1, 30)
            kill_group(proc)
        killed_at = time.time()
        assert run_of(instance, run.run_id).status == dg.DagsterRunStatus.STARTED and slots_held(instance) == 1
        assert MODEL not in pool_models(home)

        log2 = tmp_path / "dagster-2.log"
        proc, _ = start_dagster_dev(home, log2)
        key = safe_model_key(MODEL)
        retry = wait_for(
            lambda: next(
                (
                    r
                    for r in runs_of(instance, "onboarding_job")
                    if r.tags.get("locus/retry_of") == run.run_id and r.is_finished
                ),
                None,
            ),
            "the retry of the killed onboarding",
            proc,
            log2,
            timeout,
        )
        timings["restart -> killed onboarding done"] = time.time() - killed_at
        failed = run_of(instance, run.run_id)
        assert (
            failed.status == dg.DagsterRunStatus.FAILURE
            and failed.tags["dagster/failure_reason"] == "UNEXPECTED_TERMINATION"
        )
        assert retry.is_success and retry.tags["dagster/run_key"].endswith(":attempt-2")
        pool = pd.read_parquet(home / "warehouse" / "model_embeddings.parquet")
        assert (pool["model"] == MODEL).sum() == 1 and set(pool["model"]) == before | {MODEL}
        assert materializations(instance, "onboarded_model_embedding", key) == 1
        assert slots_held(instance) == 0

        # the refresh after that onboarding, killed half-way: its first report is newer than the pool, the index is
        # not (its step waits to write its table)
        with storage.lock("table-analysis_reports"):
            refresh = wait_for(
                lambda: next(
                    (
                        r
                        for r in runs_of(instance, "reports_refresh_job")
                        if step_started(instance, r.run_id, "analysis_reports")
                    ),
                    None,
                ),
                "a reports refresh at its last step",
                proc,
                log2,
                2 * timeout,
            )
            assert materializations_after(instance, "test_query_predictions", refresh.run_id)
            kill_group(proc)
        killed_at = time.time()
        assert not run_of(instance, refresh.run_id).is_finished and reports_lag(instance)

        log3 = tmp_path / "dagster-3.log"
        proc, _ = start_dagster_dev(home, log3)
        wait_for(lambda: reports_lag(instance) == "" or None, "the reports to follow the pool", proc, log3, 2 * timeout)
        timings["restart -> reports follow the pool"] = time.time() - killed_at
        retried = [
            r for r in runs_of(instance, "reports_refresh_job") if r.tags.get("locus/retry_of") == refresh.run_id
        ]
        assert [r.status for r in retried] == [dg.DagsterRunStatus.SUCCESS]
        assert run_of(instance, refresh.run_id).status == dg.DagsterRunStatus.FAILURE

        dropped = drop_renamed(home, "later.csv", new_model_rows(home, "later/model", 48))  # no slot to wait for
        wait_for(lambda: "later/model" in pool_models(home), "the later onboarding", proc, log3, timeout)
        timings["later drop -> in the pool"] = time.time() - dropped
        later = wait_for(
            lambda: next(
                (
                    r
                    for r in runs_of(instance, "onboarding_job")
                    if r.is_finished
                    and r.tags.get("dagster/asset_partition_range_start") == safe_model_key("later/model")
                ),
                None,
            ),
            "the later onboarding run to end",
            proc,
            log3,
            timeout,
        )
        assert later.is_success and len(runs_of(instance, "onboarding_job")) == 3 and slots_held(instance) == 0
        return timings
    finally:
        stop_dagster_dev(proc)
        instance.dispose()


def materializations_after(instance: dg.DagsterInstance, asset: str, run_id: str) -> bool:
    return any(
        r.event_log_entry.run_id == run_id for r in instance.fetch_materializations(dg.AssetKey(asset), limit=5).records
    )


@pytest.mark.e2e
def test_kill_9_mid_onboarding_and_mid_refresh_then_restart_ends_onboarded_once_with_no_slot_held(
    materialized, tmp_path: Path
) -> None:
    _, _, source = materialized
    home = tmp_path / "home"
    shutil.copytree(source, home, ignore=shutil.ignore_patterns(".locks", "dagster"))
    timings = kill_and_restart(home, tmp_path)
    print(", ".join(f"{k}: {v:.1f} s" for k, v in timings.items()))

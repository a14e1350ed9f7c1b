"""End to end: the real `dagster dev` (daemon included) on a copy of the tiny materialized home. A dropped file is
onboarded by the sensor's run, which materializes the pool asset (count, check) and the model's own asset; then a
rebuild with a new checkpoint races two more onboardings and the pool ends with every model from that checkpoint."""

from __future__ import annotations

import os
import shutil
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
from tests.locus_pipeline.defs.assets.test_onboarding import new_checkpoint, new_model_rows

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


@pytest.mark.slow
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
                return event if event is not None and event.asset_materialization.metadata["models"].value == len(before) + 1 else None

            event = wait_for(pool_materialized, "the pool materialization", proc, log_path, timeout=30)
            meta = event.asset_materialization.metadata
            assert meta["onboarded_models"].value == 1 and meta["action"].value == "new"
            key = safe_model_key(MODEL)
            view = wait_for(lambda: instance.get_latest_materialization_event(dg.AssetKey("onboarded_model_embedding")),
                            "the onboarded model's materialization", proc, log_path, timeout=30)
            assert view.asset_materialization.partition == key and view.run_id == event.run_id
            assert view.asset_materialization.metadata["nearest_model"].value in set(before["model"])
            check = wait_for(lambda: instance.event_log_storage.get_latest_asset_check_execution_by_key(
                [dg.AssetCheckKey(dg.AssetKey("model_embeddings"), "pool_embeddings_reproducible")]).get(
                dg.AssetCheckKey(dg.AssetKey("model_embeddings"), "pool_embeddings_reproducible")),
                "the blocking check", proc, log_path, timeout=30)
            assert check.run_id == event.run_id

        # a rebuild with a new checkpoint, started beside two more onboardings
        new_id = new_checkpoint(home)
        env = {**os.environ, "LOCUS_HOME": str(home), "DAGSTER_HOME": str(prepare_dagster_home(home))}
        rebuild = subprocess.Popen(
            [str(Path(sys.executable).parent / "dagster"), "asset", "materialize", "--select", "model_embeddings",
             "-m", "locus_pipeline.definitions"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        drop_renamed(home, "second.csv", new_model_rows(home, "second/model", 48))
        drop_renamed(home, "third.csv", new_model_rows(home, "third/model", 40))
        out, _ = rebuild.communicate(timeout=240)
        assert rebuild.returncode == 0, out[-3000:]
        wait_for(lambda: {"second/model", "third/model"} <= pool_models(home), "both onboardings", proc, log_path)

        def settled():  # every onboarding run has finished
            with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:
                runs = instance.get_runs(dg.RunsFilter(job_name="onboarding_job"))
                return len(runs) == 3 and all(r.is_finished for r in runs) and runs

        runs = wait_for(settled, "the onboarding runs to finish", proc, log_path, timeout=120)
        assert all(r.is_success for r in runs), [r.status for r in runs]
        pool = pd.read_parquet(home / "warehouse" / "model_embeddings.parquet")
        assert set(pool["checkpoint_id"]) == {new_id} and len(pool) == len(before) + 3 and pool["model"].is_unique
    finally:
        stop_dagster_dev(proc)

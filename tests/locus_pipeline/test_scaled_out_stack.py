"""The scaled-out stack, end to end, with real servers the test starts itself: Postgres (pgserver) holding the
Dagster instance and MLflow's backend store, an S3 endpoint (moto) holding LOCUS_HOME and MLflow's artifacts, and
an `mlflow server` on both. The pool job runs on them; a file uploaded into the bucket's incoming/ is onboarded
through the drop-folder sensor; `locus serve`, reading the pool from the bucket, picks the new model up without a
restart."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from locus_model.data.contract import safe_model_key
from tests.locus_pipeline.drops import range_of
from tests.locus_pipeline.object_store import BUCKET, s3_endpoint
from tests.locus_pipeline.tiny import POOL_OPS, run_config_for

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate, what: str, proc: subprocess.Popen, log: Path, timeout: float = 180) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise AssertionError(f"{what}: the process exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        try:
            if predicate():
                return
        except (httpx.HTTPError, OSError):
            pass
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout} s:\n{log.read_text()[-3000:]}")


def start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        args, env=env, cwd=ROOT, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True
    )


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)


def test_pool_job_sensor_onboarding_and_serve_on_postgres_s3_and_an_mlflow_server(tmp_path, monkeypatch) -> None:
    import dagster as dg
    import pgserver

    # a folder directly under the temporary root: run as root, pgserver runs Postgres as its own user, which
    # cannot enter pytest's private tmp_path
    postgres = pgserver.get_server(tempfile.mkdtemp(prefix="locus-pg-"), cleanup_mode="delete")
    for database in ("dagster", "mlflow"):
        postgres.psql(f"create database {database};")

    def database_url(name: str) -> str:  # SQLAlchemy 2.1 reads postgresql:// as psycopg 3; the stack has psycopg2
        return postgres.get_uri(name).replace("postgresql://", "postgresql+psycopg2://", 1)

    procs: list[subprocess.Popen] = []
    with s3_endpoint() as s3:
        try:
            env = {**os.environ, **s3, "PYTHONPATH": str(ROOT), "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
            mlflow_port = free_port()
            mlflow_log = tmp_path / "mlflow.log"
            procs.append(
                start(
                    [
                        sys.executable,
                        "-m",
                        "mlflow",
                        "server",
                        "--backend-store-uri",
                        database_url("mlflow"),
                        "--artifacts-destination",
                        f"s3://{BUCKET}/mlflow",
                        "--host",
                        "127.0.0.1",
                        "--port",
                        str(mlflow_port),
                        "--workers",
                        "1",
                    ],
                    env,
                    mlflow_log,
                )
            )
            mlflow_url = f"http://127.0.0.1:{mlflow_port}"
            home_url = f"s3://{BUCKET}/home"
            for key, value in {
                "LOCUS_HOME": home_url,
                "LOCUS_CACHE": str(tmp_path / "cache"),
                "MLFLOW_TRACKING_URI": mlflow_url,
                "LOCUS_DAGSTER_PG_URL": database_url("dagster"),
                "DAGSTER_HOME": str(tmp_path / "dagster"),
            }.items():
                monkeypatch.setenv(key, value)
            wait_until(
                lambda: httpx.get(f"{mlflow_url}/health").status_code == 200, "mlflow server", procs[0], mlflow_log
            )

            from locus_pipeline.definitions import defs as load_defs
            from locus_pipeline.defs.resources import DropFolderIntake
            from locus_pipeline.defs.sensors import onboarding_drop_folder
            from locus_pipeline.instance import prepare_dagster_home
            from locus_pipeline.storage import LocusHome

            home = LocusHome()
            dagster_home = prepare_dagster_home(dagster_home=tmp_path / "dagster")
            defs = load_defs()
            with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
                assert type(instance.run_storage).__name__ == "PostgresRunStorage"
                assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
                assert type(instance.schedule_storage).__name__ == "PostgresScheduleStorage"
                # the concurrency pools (dagster.yaml: every pool admits one step) hold across processes in Postgres
                events = instance.event_log_storage
                assert events.supports_global_concurrency_limits
                events.initialize_concurrency_limit_to_default("training")
                assert events.get_concurrency_info("training").slot_count == 1
                assert events.claim_concurrency_slot("training", "run-a", "locus_checkpoint").is_claimed
                assert not events.claim_concurrency_slot("training", "run-b", "locus_checkpoint").is_claimed
                events.free_concurrency_slots_for_run("run-a")
                events.free_concurrency_slots_for_run("run-b")

                # 1. the pool job: every table, the checkpoint and the pool in the bucket; the run in MLflow's server
                result = defs.resolve_job_def("pool_job").execute_in_process(
                    instance=instance, run_config=run_config_for(POOL_OPS), raise_on_error=True
                )
                assert result.success
                pool = home.read_pool()
                record = home.current_checkpoint()
                assert home.resolve(record.path).exists() and str(home.pool_path).startswith(home_url)
                assert not (tmp_path / "cache" / "warehouse").exists()  # tables go to the bucket, not the local copy
                import mlflow

                client = mlflow.MlflowClient(mlflow_url)
                run_id = home.read_table("locus_checkpoint")["mlflow_run_id"].iloc[0]
                artifacts = {a.path for a in client.list_artifacts(run_id, "checkpoint")}
                assert artifacts == {f"checkpoint/locus-{record.checkpoint_id}.pt"}
                version = client.get_model_version_by_alias("locus", "current")
                assert version.run_id == run_id and version.tags["checkpoint_id"] == record.checkpoint_id
                assert client.list_artifacts(run_id, "plots")[0].path == "plots/training_curve.png"
                assert (home.path / "reports" / "runs" / result.run_id / "training_curve.png").exists()

                # 2. locus serve, reading the pool from the bucket
                serve_port = free_port()
                serve_log = tmp_path / "serve.log"
                serve_env = {**env, "LOCUS_HOME": home_url, "LOCUS_CACHE": str(tmp_path / "serve-cache")}
                procs.append(
                    start(
                        [
                            sys.executable,
                            "-m",
                            "locus_pipeline.cli",
                            "serve",
                            "--port",
                            str(serve_port),
                            "--poll-seconds",
                            "0.5",
                        ],
                        serve_env,
                        serve_log,
                    )
                )
                serve_url = f"http://127.0.0.1:{serve_port}"

                def served() -> set[str]:
                    return {m["id"] for m in httpx.get(f"{serve_url}/v1/models", timeout=5).json()["data"]}

                wait_until(
                    lambda: httpx.get(f"{serve_url}/healthz", timeout=5).status_code == 200,
                    "locus serve",
                    procs[-1],
                    serve_log,
                )
                assert set(pool["model"]) <= served()

                # 3. a file uploaded whole into the bucket's incoming/ is onboarded through the sensor
                name = "newcomer-on-s3"
                table = home.read_table("evaluation_table")
                rows = (
                    table.drop_duplicates("query_id")
                    .head(96)
                    .assign(model=name, score=lambda f: (np.arange(len(f)) % 3 == 0).astype(float))
                )
                local = tmp_path / "new.csv"
                rows[["model", "query_id", "query", "benchmark", "score"]].to_csv(local, index=False)
                target = home.path / "incoming" / "new.csv"
                target.fs.put_file(str(local), target.path)
                time.sleep(2.1)  # the intake's settle time, counted from the upload
                tick = onboarding_drop_folder(
                    dg.build_sensor_context(instance=instance, resources={"home": home, "intake": DropFolderIntake()})
                )
                assert isinstance(tick, dg.SensorResult)
                (request,) = tick.run_requests or []
                assert range_of(request) == (safe_model_key(name),) * 2 and tick.cursor
                for add in tick.dynamic_partitions_requests or []:
                    instance.add_dynamic_partitions(add.partitions_def_name, list(add.partition_keys))
                assert safe_model_key(name) in instance.get_dynamic_partitions("onboarded_models")
                onboarded = defs.resolve_job_def("onboarding_job").execute_in_process(
                    instance=instance, run_config=request.run_config, tags=request.tags, raise_on_error=True
                )
                checks = {c.check_name: c.passed for c in onboarded.get_asset_check_evaluations()}
                assert checks.get("pool_embeddings_reproducible") is True
                assert name in set(home.read_pool()["model"])
                assert not target.exists()  # taken in: out of incoming/, into accepted/ in the bucket
                again = onboarding_drop_folder(
                    dg.build_sensor_context(
                        instance=instance, cursor=tick.cursor, resources={"home": home, "intake": DropFolderIntake()}
                    )
                )
                assert not getattr(again, "run_requests", None)  # the cursor holds: nothing requested twice

                # 4. the router picks the new model up without a restart
                wait_until(lambda: name in served(), "the new model in locus serve", procs[-1], serve_log, timeout=60)
        finally:
            for proc in reversed(procs):
                stop(proc)

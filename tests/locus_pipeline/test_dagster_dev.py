"""The real `dagster dev` loads the project; a run launched through its GraphQL API succeeds."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.locus_pipeline.tiny import run_config_for

REPO = Path(__file__).resolve().parents[2]
POOL_OPS = {"raw_evaluations", "query_encodings", "training_split", "locus_checkpoint"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_dagster_dev_materializes_the_pool_through_graphql(tmp_path: Path) -> None:
    from dagster_graphql import DagsterGraphQLClient, DagsterGraphQLClientError

    from locus_pipeline.instance import prepare_dagster_home

    home = tmp_path / "home"
    env = {**os.environ, "LOCUS_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    env["DAGSTER_HOME"] = str(prepare_dagster_home(home))
    port = free_port()
    log = (tmp_path / "dagster.log").open("w")
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "dagster"), "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        client = DagsterGraphQLClient("127.0.0.1", port_number=port)
        deadline = time.time() + 120
        run_id = None
        while run_id is None:
            try:
                run_id = client.submit_job_execution(
                    "pool_job", repository_location_name="locus", run_config=run_config_for(POOL_OPS)
                )
            except (DagsterGraphQLClientError, Exception) as err:  # server still starting
                if time.time() > deadline:
                    raise AssertionError(f"dagster dev did not accept a run: {err}\n{(tmp_path / 'dagster.log').read_text()[-3000:]}")
                time.sleep(2)
        status = None
        while time.time() < deadline + 300:
            status = client.get_run_status(run_id).value
            if status in ("SUCCESS", "FAILURE", "CANCELED"):
                break
            time.sleep(2)
        assert status == "SUCCESS", (tmp_path / "dagster.log").read_text()[-5000:]
        pool = pd.read_parquet(home / "warehouse" / "model_embeddings.parquet")
        assert len(pool) == 24
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()

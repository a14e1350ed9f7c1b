"""The real `dagster dev` loads the project; a run launched through its GraphQL API succeeds."""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
import pytest

from locus_pipeline.devserver import start_dagster_dev, stop_dagster_dev
from tests.locus_pipeline.tiny import POOL_OPS, run_config_for


@pytest.mark.e2e
def test_dagster_dev_materializes_the_pool_through_graphql(tmp_path: Path) -> None:
    from dagster_graphql import DagsterGraphQLClient

    home = tmp_path / "home"
    proc, port = start_dagster_dev(home, tmp_path / "dagster.log")
    try:
        client = DagsterGraphQLClient("127.0.0.1", port_number=port)
        deadline = time.time() + 120
        run_id = None
        while run_id is None:
            try:
                run_id = client.submit_job_execution(
                    "pool_job", repository_location_name="locus", run_config=run_config_for(POOL_OPS)
                )
            except Exception as err:  # connection refused while the server starts; reported at the deadline
                if time.time() > deadline:
                    raise AssertionError(
                        f"dagster dev did not accept a run: {err}\n{(tmp_path / 'dagster.log').read_text()[-3000:]}"
                    )
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
        stop_dagster_dev(proc)

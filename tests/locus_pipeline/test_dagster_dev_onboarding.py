"""End to end: the real `dagster dev` (daemon included) on a temporary LOCUS_HOME; drop a file into incoming/,
the sensor and an onboarding run put the model's embedding into the pool table."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pandas as pd
import pytest

from locus_pipeline.devserver import start_dagster_dev, stop_dagster_dev

MODEL = "e2e/dropped model ü"


@pytest.mark.slow
def test_dropping_a_file_puts_the_model_into_the_pool(materialized, tmp_path: Path) -> None:
    _, _, source = materialized
    home = tmp_path / "home"
    shutil.copytree(source / "warehouse", home / "warehouse", ignore=shutil.ignore_patterns(".*"))
    pool_file = home / "warehouse" / "model_embeddings.parquet"
    before = pd.read_parquet(pool_file)
    table = pd.read_parquet(home / "warehouse" / "evaluation_table.parquet")
    rows = table.drop_duplicates("query_id").head(64).assign(model=MODEL)[["model", "query_id", "query", "benchmark", "score"]]

    log_path = tmp_path / "dagster.log"
    proc, _ = start_dagster_dev(home, log_path)
    try:
        incoming = home / "incoming"
        incoming.mkdir(parents=True, exist_ok=True)
        rows.to_csv(incoming / "new-model.csv.part", index=False)  # write, then rename: the documented convention
        os.replace(incoming / "new-model.csv.part", incoming / "new-model.csv")
        dropped = time.time()
        deadline = dropped + 150
        while time.time() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"dagster dev exited early:\n{log_path.read_text()[-3000:]}")
            pool = pd.read_parquet(pool_file)
            if MODEL in set(pool["model"]):
                break
            time.sleep(1)
        else:
            pytest.fail(f"{MODEL!r} not in the pool after {time.time() - dropped:.0f} s:\n{log_path.read_text()[-5000:]}")
        print(f"file drop -> embedding in the pool: {time.time() - dropped:.1f} s")
        row = pool[pool["model"] == MODEL].iloc[0]
        assert row["source"] == "onboarded" and row["n_evaluations"] == 64
        kept = pool[pool["model"] != MODEL].reset_index(drop=True)
        pd.testing.assert_frame_equal(kept, before)
        accepted = list((incoming / "accepted").glob("*-new-model.csv"))
        assert len(accepted) == 1 and not (incoming / "new-model.csv").exists()
    finally:
        stop_dagster_dev(proc)

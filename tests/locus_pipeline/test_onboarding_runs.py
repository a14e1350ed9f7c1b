"""Onboarding runs in pytest, on a private copy of the tiny materialized pool: sensor tick -> runs -> pool row."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import dagster as dg
import numpy as np
import pandas as pd
import pytest

from locus_model.evaluations import safe_model_key
from locus_pipeline.defs.assets.onboarding import onboarded_model_embedding
from locus_pipeline.defs.partitions import onboarded_models
from locus_pipeline.defs.resources import LocusHome, WarehouseIOManager
from locus_pipeline.defs.sensors import onboarding_drop_folder

OLD = time.time() - 3600


@pytest.fixture()
def home(materialized, tmp_path: Path) -> Path:
    """A copy of the session's materialized LOCUS_HOME warehouse: these tests change the pool, others must not see it."""
    _, _, source = materialized
    shutil.copytree(source / "warehouse", tmp_path / "warehouse", ignore=shutil.ignore_patterns(".*"))
    if (source / "encodings").exists():
        shutil.copytree(source / "encodings", tmp_path / "encodings")
    return tmp_path


def materialize(instance: dg.DagsterInstance, home: Path, request: dg.RunRequest) -> dg.ExecuteInProcessResult:
    root = LocusHome(root=str(home))
    return dg.materialize(
        [onboarded_model_embedding], instance=instance, partition_key=request.partition_key, run_config=request.run_config,
        resources={"home": root, "io_manager": WarehouseIOManager(home=root)}, raise_on_error=False, tags=request.tags,
    )


def drop_and_tick(instance: dg.DagsterInstance, home: Path, name: str, table: pd.DataFrame) -> dg.SensorResult:
    (home / "incoming").mkdir(exist_ok=True)
    path = home / "incoming" / name
    table.to_csv(path, index=False)
    os.utime(path, (OLD, OLD))
    context = dg.build_sensor_context(instance=instance, resources={"home": LocusHome(root=str(home))})
    result = onboarding_drop_folder(context)
    for add in result.dynamic_partitions_requests:
        instance.add_dynamic_partitions(add.partitions_def_name, list(add.partition_keys))
    return result


def test_sensor_to_pool_row_with_every_other_row_bit_identical(home: Path) -> None:
    table = pd.read_parquet(home / "warehouse" / "evaluation_table.parquet")
    queries = table.drop_duplicates("query_id").head(128)
    new = queries.assign(model="newcomer/llama 3 ü", score=np.arange(len(queries)) % 2)[list(table.columns[:5])]
    trained_name = str(table["model"].iloc[0])
    trained = queries.head(5).assign(model=trained_name, score=1.0)[list(table.columns[:5])]
    pool_file = home / "warehouse" / "model_embeddings.parquet"
    before = pd.read_parquet(pool_file)
    with dg.instance_for_test() as instance:
        tick = drop_and_tick(instance, home, "two models.csv", pd.concat([new, trained]))
        assert sorted(r.partition_key for r in tick.run_requests) == sorted([safe_model_key("newcomer/llama 3 ü"), safe_model_key(trained_name)])
        assert set(instance.get_dynamic_partitions(onboarded_models.name)) == {r.partition_key for r in tick.run_requests}
        results = {r.partition_key: materialize(instance, home, r) for r in tick.run_requests}
    assert all(r.success for r in results.values())
    meta = {k: next(iter(r.asset_materializations_for_node("onboarded_model_embedding"))).metadata for k, r in results.items()}
    newcomer = meta[safe_model_key("newcomer/llama 3 ü")]
    assert newcomer["action"].value == "new" and newcomer["n_evaluations"].value == 128
    assert newcomer["nearest_pool_model"].value in set(before["model"]) and newcomer["distance_to_nearest"].value > 0
    assert newcomer["checkpoint_id"].value == before["checkpoint_id"].iloc[0]
    assert meta[safe_model_key(trained_name)]["action"].value == "kept-training"
    after = pd.read_parquet(pool_file)
    assert len(after) == len(before) + 1
    row = after[after["model"] == "newcomer/llama 3 ü"].iloc[0]
    assert row["source"] == "onboarded" and np.isfinite(np.asarray(row["embedding"])).all()
    kept = after[after["model"] != "newcomer/llama 3 ü"].reset_index(drop=True)
    pd.testing.assert_frame_equal(kept, before)  # the training model's row too: kept, bit-identical
    per_model = home / "warehouse" / "onboarded_model_embedding" / f"{safe_model_key('newcomer/llama 3 ü')}.parquet"
    assert per_model.exists()


def test_a_failing_run_shows_the_reason_and_leaves_the_pool(home: Path) -> None:
    table = pd.read_parquet(home / "warehouse" / "evaluation_table.parquet").head(4).assign(model="solo")
    pool_file = home / "warehouse" / "model_embeddings.parquet"
    with dg.instance_for_test() as instance:
        tick = drop_and_tick(instance, home, "solo.csv", table[["model", "query_id", "query", "benchmark", "score"]])
        (request,) = tick.run_requests
        before = pool_file.read_bytes()
        stem = request.run_config["ops"]["onboarded_model_embedding"]["config"]["accepted_file"]
        (home / "incoming" / "accepted" / f"{stem}.parts" / "solo.parquet").unlink()  # the file's rows went missing
        result = materialize(instance, home, request)
        assert not result.success
        failure = result.get_step_failure_events()[0].step_failure_data
        assert "model 'solo' has no rows in this accepted file" in failure.error.message
        assert "How to fix" in failure.error.message
        assert pool_file.read_bytes() == before

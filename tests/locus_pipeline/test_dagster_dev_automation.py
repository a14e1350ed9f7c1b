"""End to end, as `make dev` runs it: the real `dagster dev` (its daemon) on a copy of the tiny materialized home. A
model's graded traffic materialized before dagster dev started is relearned by the project's automation sensor,
running by default, without anyone starting a sensor (issue 75)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import dagster as dg
import pytest

from locus_model.data.contract import safe_model_key
from locus_pipeline.defs.assets.traffic import traffic_evaluations
from locus_pipeline.defs.partitions import traffic_models
from locus_pipeline.devserver import start_dagster_dev, stop_dagster_dev
from locus_pipeline.instance import prepare_dagster_home
from tests.locus_pipeline.defs.assets.traffic_helpers import graded_traffic
from tests.locus_pipeline.drops import defs


@pytest.mark.e2e
def test_relearning_follows_graded_traffic_under_dagster_dev(materialized, tmp_path: Path, monkeypatch) -> None:
    _, _, source = materialized
    home = tmp_path / "home"
    shutil.copytree(source, home, ignore=shutil.ignore_patterns(".locks", "dagster"))
    monkeypatch.setenv("LOCUS_HOME", str(home))
    answered = graded_traffic(home, 8)
    key = safe_model_key(max(answered, key=lambda m: answered[m]))
    assert traffic_models.name is not None  # named in locus_pipeline.defs.partitions
    with dg.DagsterInstance.from_config(str(prepare_dagster_home(home))) as instance:
        instance.add_dynamic_partitions(traffic_models.name, [key])
        dg.materialize([traffic_evaluations], partition_key=key, instance=instance, resources=defs().resources)
    log_path = tmp_path / "dagster.log"
    proc, _ = start_dagster_dev(home, log_path)
    try:
        deadline = time.time() + 240
        relearned = None
        while relearned is None and time.time() < deadline:
            assert proc.poll() is None, log_path.read_text()[-3000:]
            with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:
                relearned = instance.get_latest_materialization_event(dg.AssetKey("traffic_model_embedding"))
            time.sleep(2)
        assert relearned is not None, "no relearning within 240 s\n" + log_path.read_text()[-5000:]
        materialization = relearned.asset_materialization
        assert materialization is not None, relearned  # a materialization event carries one
        assert materialization.partition == key
    finally:
        stop_dagster_dev(proc)

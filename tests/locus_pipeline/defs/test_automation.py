"""The project's automation sensor: declared running (Dagster makes no stopped default one), and relearning caught up
on its first evaluation for graded traffic materialized before it ever ran (issue 75)."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import pytest

from locus_model.data.contract import safe_model_key
from locus_pipeline.defs.assets import traffic
from locus_pipeline.defs.assets.traffic import traffic_evaluations
from locus_pipeline.defs.automation import AUTOMATION_SENSOR
from locus_pipeline.defs.partitions import traffic_models
from tests.locus_pipeline.defs.assets.traffic_helpers import graded_traffic
from tests.locus_pipeline.drops import defs


def test_the_automation_sensor_is_running_by_default_and_covers_relearning() -> None:
    repository = defs().get_repository_def()
    sensors = {s.name: s for s in repository.sensor_defs}
    assert "default_automation_condition_sensor" not in sensors  # Dagster's, stopped by default, is not made
    sensor = sensors[AUTOMATION_SENSOR]
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    targeted = sensor.asset_selection.resolve(repository.asset_graph)
    assert dg.AssetKey("traffic_model_embedding") in targeted


@pytest.fixture()
def home(materialized, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the session's materialized LOCUS_HOME, this process's LOCUS_HOME (the relearning changes it)."""
    _, _, source = materialized
    target = tmp_path / "home"
    shutil.copytree(source, target, ignore=shutil.ignore_patterns(".locks", "dagster"))
    monkeypatch.setenv("LOCUS_HOME", str(target))
    return target


def test_traffic_materialized_before_the_first_evaluation_is_relearned_once(home: Path, monkeypatch) -> None:
    monkeypatch.setattr(traffic, "MIN_NEW_ANSWERS", 5)
    answered = graded_traffic(home, 8)
    key = safe_model_key(max(answered, key=lambda m: answered[m]))
    assert traffic_models.name is not None  # named in locus_pipeline.defs.partitions
    d = defs()
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(traffic_models.name, [key])
        dg.materialize([traffic_evaluations], partition_key=key, instance=instance, resources=d.resources)
        first = dg.evaluate_automation_conditions(defs=d, instance=instance)  # no cursor: the sensor's first tick
        assert set(first.get_requested_partitions(dg.AssetKey("traffic_model_embedding"))) == {key}
        again = dg.evaluate_automation_conditions(defs=d, instance=instance, cursor=first.cursor)
        assert again.total_requested == 0  # caught up once, not on every tick

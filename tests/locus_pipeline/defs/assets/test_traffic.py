"""Relearning from traffic, in pytest on a private copy of the tiny materialized home: a gateway's graded answers ->
traffic_sensor -> traffic_evaluations[key] -> (eager) traffic_model_embedding[key]: the model embedded again with
them, the pool replaced (the gateway reloads it), its check still reproducing the pool, an MLflow run."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import numpy as np
from fastapi.testclient import TestClient

from locus_model.data.contract import safe_model_key
from locus_pipeline.defs.assets import traffic
from locus_pipeline.defs.assets.traffic import traffic_evaluations, traffic_model_embedding
from locus_pipeline.defs.partitions import TRAFFIC_MODELS
from locus_pipeline.defs.sensors import traffic_sensor
from locus_pipeline.serve import ServeConfig, create_app
from locus_pipeline.storage import LocusHome
from tests.locus_pipeline.defs.assets.traffic_helpers import graded_traffic
from tests.locus_pipeline.drops import defs, number, text


def test_a_model_with_enough_graded_answers_is_embedded_again_with_them(home: Path, monkeypatch) -> None:
    monkeypatch.setattr(traffic, "MIN_NEW_ANSWERS", 5)
    answered = graded_traffic(home, 12)
    model = max(answered, key=lambda n: answered[n])
    key = safe_model_key(model)
    store = LocusHome(root=str(home))
    before = store.read_pool().set_index("model").loc[model]
    d = defs()
    with dg.instance_for_test() as instance:
        context = dg.build_sensor_context(instance=instance, resources={"home": store})
        result = traffic_sensor(context)
        assert isinstance(result, dg.SensorResult) and result.dynamic_partitions_requests
        due = sorted(n for n, c in answered.items() if c >= 5)
        assert model in due
        assert sorted(r.tags["locus/model"] for r in result.run_requests or []) == due
        assert result.dynamic_partitions_requests[0].partition_keys == [safe_model_key(n) for n in due]
        again = traffic_sensor(
            dg.build_sensor_context(instance=instance, cursor=result.cursor, resources={"home": store})
        )
        assert isinstance(again, dg.SensorResult) and not again.run_requests  # counted once
        instance.add_dynamic_partitions(TRAFFIC_MODELS, [key])
        before_tick = dg.evaluate_automation_conditions(defs=d, instance=instance)
        assert before_tick.total_requested == 0
        first = dg.materialize([traffic_evaluations], partition_key=key, instance=instance, resources=d.resources)
        meta = first.asset_materializations_for_node("traffic_evaluations")[0].metadata
        assert meta["graded_answers"].value == answered[model] and meta["mean_score"].value == 1.0
        # the declarative condition: the new traffic_evaluations[key] asks for traffic_model_embedding[key]
        evaluated = dg.evaluate_automation_conditions(defs=d, instance=instance, cursor=before_tick.cursor)
        assert evaluated.total_requested == 1
        assert set(evaluated.get_requested_partitions(dg.AssetKey("traffic_model_embedding"))) == {key}
        second = dg.materialize([traffic_model_embedding], partition_key=key, instance=instance, resources=d.resources)
        meta = second.asset_materializations_for_node("traffic_model_embedding")[0].metadata
    after = store.read_pool().set_index("model").loc[model]
    assert after["n_evaluations"] == before["n_evaluations"] + answered[model]
    assert number(meta["embedding_shift"]) > 0 and number(meta["standing_after"]) > number(meta["standing_before"])
    assert text(meta["mlflow_run"]).startswith("http")
    assert not np.array_equal(after["embedding"], before["embedding"])
    # the pool's reproducibility rule re-embeds the relearned row from the same traffic table, bit for bit
    from locus_pipeline.pool_rows import embed_again

    pool = store.read_pool()
    again_rows, pending = embed_again(store, store.pool_checkpoint(pool), pool[pool["model"] == model])
    assert not pending and np.array_equal(np.stack(again_rows["embedding"])[0], after["embedding"])


def graded_by(home: Path, n: int, headers: dict, score: float, models: Path | None = None) -> dict[str, int]:
    """Route n distinct queries as the caller of ``headers``, grading every answer ``score``; answers per model."""
    config = ServeConfig(home=str(home), explore=0.0, poll_seconds=0.05, models_config=str(models) if models else None)
    answered: dict[str, int] = {}
    with TestClient(create_app(config)) as client:
        for i in range(n):
            r = client.post(
                "/route", json={"query": f"traffic question {i}: what is {i} plus {i + 2}?"}, headers=headers
            )
            answered[r.json()["chosen"]] = answered.get(r.json()["chosen"], 0) + 1
            rid = r.headers["x-locus-request-id"]
            assert (
                client.post("/v1/outcomes", json={"request_id": rid, "score": score}, headers=headers).status_code
                == 202
            )
    return answered


def test_one_clients_outcomes_never_reach_the_shared_pool_row(home: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("LOCUS_TEST_MALLORY", "tok-m")
    models = tmp_path / "models.json"
    models.write_text(json.dumps({"clients": {"mallory": {"token_env": "LOCUS_TEST_MALLORY"}}}))
    answered = graded_by(home, 12, {"authorization": "Bearer tok-m"}, 0.0, models)
    model = max(answered, key=lambda n: answered[n])
    key = safe_model_key(model)
    store = LocusHome(root=str(home))
    before = store.read_pool().set_index("model").loc[model]
    d = defs()
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(TRAFFIC_MODELS, [key])
        first = dg.materialize([traffic_evaluations], partition_key=key, instance=instance, resources=d.resources)
        meta = first.asset_materializations_for_node("traffic_evaluations")[0].metadata
        assert meta["graded_answers"].value == 0  # 12 outcomes of one client: its own routing, not the pool's
        dg.materialize([traffic_model_embedding], partition_key=key, instance=instance, resources=d.resources)
    after = store.read_pool().set_index("model").loc[model]
    assert after["n_evaluations"] == before["n_evaluations"]
    np.testing.assert_allclose(after["embedding"], before["embedding"], atol=1e-6)


def test_learn_reset_puts_a_relearned_row_back_and_relearning_runs_again(
    home: Path, tmp_path: Path, monkeypatch
) -> None:
    from locus_pipeline.cli import main as cli_main

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    (tmp_path / "dagster").mkdir()
    answered = graded_traffic(home, 12)  # no credential: the operator's grades, shared
    model = max(answered, key=lambda n: answered[n])
    key = safe_model_key(model)
    store = LocusHome(root=str(home))
    before = store.read_pool().set_index("model").loc[model]
    d = defs()
    with dg.DagsterInstance.get() as instance:
        instance.add_dynamic_partitions(TRAFFIC_MODELS, [key])
        dg.materialize([traffic_evaluations], partition_key=key, instance=instance, resources=d.resources)
        dg.materialize([traffic_model_embedding], partition_key=key, instance=instance, resources=d.resources)
    relearned = store.read_pool().set_index("model").loc[model]
    assert relearned["n_evaluations"] == before["n_evaluations"] + answered[model]
    assert cli_main(["learn", "reset", model, "--home", str(home)]) == 0
    after = store.read_pool().set_index("model").loc[model]
    assert after["n_evaluations"] == before["n_evaluations"]
    np.testing.assert_allclose(after["embedding"], before["embedding"], atol=1e-6)
    with dg.DagsterInstance.get() as instance:  # recorded as materializations, as in the UI
        event = instance.get_latest_materialization_event(dg.AssetKey("traffic_model_embedding"))
        assert event is not None and event.dagster_event is not None
        assert event.dagster_event.partition == key and event.run_id
        run = instance.get_run_by_id(event.run_id)
        assert run is not None and run.tags["locus/trigger"] == "learn-reset"
    answered_again = graded_traffic(home, 6)  # graded after the reset: relearning runs on them alone
    again = max(answered_again, key=lambda n: answered_again[n])
    with dg.DagsterInstance.get() as instance:
        instance.add_dynamic_partitions(TRAFFIC_MODELS, [safe_model_key(again)])
        result = dg.materialize(
            [traffic_evaluations], partition_key=safe_model_key(again), instance=instance, resources=d.resources
        )
    graded = result.asset_materializations_for_node("traffic_evaluations")[0].metadata["graded_answers"].value
    assert graded == answered_again[again] + (answered[again] if again != model else 0)

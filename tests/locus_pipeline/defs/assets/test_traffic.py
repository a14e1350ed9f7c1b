"""Relearning from traffic, in pytest on a private copy of the tiny materialized home: a gateway's graded answers ->
traffic_sensor -> traffic_evaluations[key] -> (eager) traffic_model_embedding[key]: the model embedded again with
them, the pool replaced (the gateway reloads it), its check still reproducing the pool, an MLflow run."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import numpy as np
from fastapi.testclient import TestClient

from locus_model.data.contract import safe_model_key
from locus_pipeline.defs.assets import traffic
from locus_pipeline.defs.assets.traffic import traffic_evaluations, traffic_model_embedding
from locus_pipeline.defs.partitions import traffic_models
from locus_pipeline.defs.sensors import traffic_sensor
from locus_pipeline.serve import ServeConfig, create_app
from locus_pipeline.storage import LocusHome
from tests.locus_pipeline.drops import defs


def graded_traffic(home: Path, n: int) -> dict[str, int]:
    """Route n distinct queries through a gateway on the home, grade every answer 1 (the model keeps the traffic);
    answers per model."""
    app = create_app(ServeConfig(home=str(home), explore=0.0, poll_seconds=0.05))
    answered: dict[str, int] = {}
    with TestClient(app) as client:
        for i in range(n):
            r = client.post("/route", json={"query": f"traffic question {i}: what is {i} times {i + 1}?"})
            answered[r.json()["chosen"]] = answered.get(r.json()["chosen"], 0) + 1
            assert (
                client.post(
                    "/v1/outcomes", json={"request_id": r.headers["x-locus-request-id"], "score": 1.0}
                ).status_code
                == 202
            )
    return answered


def test_a_model_with_enough_graded_answers_is_embedded_again_with_them(home: Path, monkeypatch) -> None:
    monkeypatch.setattr(traffic, "MIN_NEW_ANSWERS", 5)
    answered = graded_traffic(home, 12)
    model = max(answered, key=answered.get)
    key = safe_model_key(model)
    store = LocusHome(root=str(home))
    before = store.read_pool().set_index("model").loc[model]
    d = defs()
    with dg.instance_for_test() as instance:
        context = dg.build_sensor_context(instance=instance, resources={"home": store})
        result = traffic_sensor(context)
        due = sorted(n for n, c in answered.items() if c >= 5)
        assert model in due
        assert sorted(r.tags["locus/model"] for r in result.run_requests) == due
        assert result.dynamic_partitions_requests[0].partition_keys == [safe_model_key(n) for n in due]
        again = traffic_sensor(
            dg.build_sensor_context(instance=instance, cursor=result.cursor, resources={"home": store})
        )
        assert isinstance(again, dg.SensorResult) and not again.run_requests  # counted once
        instance.add_dynamic_partitions(traffic_models.name, [key])
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
    assert meta["embedding_shift"].value > 0 and meta["standing_after"].value > meta["standing_before"].value
    assert meta["mlflow_run"].value.startswith("http")
    assert not np.array_equal(after["embedding"], before["embedding"])
    # the pool's reproducibility rule re-embeds the relearned row from the same traffic table, bit for bit
    from locus_pipeline.pool_rows import embed_again

    pool = store.read_pool()
    again_rows, pending = embed_again(store, store.pool_checkpoint(pool), pool[pool["model"] == model])
    assert not pending and np.array_equal(np.stack(again_rows["embedding"])[0], after["embedding"])

"""TrainingRun: what one tracked training run leaves in MLflow (a home's own sqlite store and artifact root)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from locus_model.model_config import LocusConfig
from locus_model.training import TrainConfig
from locus_pipeline.defs.resources import MlflowTracking
from locus_pipeline.storage import LocusHome
from locus_pipeline.tracking import CURRENT_ALIAS, TrainingRun


def test_a_training_run_logs_params_curves_the_checkpoint_and_registers_a_version(tmp_path) -> None:
    import mlflow

    home = LocusHome(root=str(tmp_path))
    tracking = MlflowTracking(home=home, ui_url="http://mlflow:5000", dagster_url="http://dagster:3000")
    saved = home.save_checkpoint(lambda path: path.write_bytes(b"not a real checkpoint"))
    curve = tmp_path / "training_curve.png"
    curve.write_bytes(b"png")
    figures = [("val_loss", 0.5, "validation BCE"), ("val_routing_acc", 0.75, "routing accuracy")]
    embeddings = pd.DataFrame({"model": ["a", "b"], "embedding": [np.zeros(4, np.float32), np.ones(4, np.float32)]})

    with TrainingRun(tracking, "0123456789abcdef", encoder="hashing-256") as tracked:
        tracked.log_params(LocusConfig(query_dim=8), TrainConfig(seed=3), device="cpu", budget=16)
        for epoch in range(3):
            tracked.log_epoch({"epoch": epoch, "val_loss": 1.0 - 0.1 * epoch, "val_routing_acc": None})
        tracked.log_checkpoint(saved, curve, figures)
        version = tracked.register(saved, embeddings)

    client = mlflow.MlflowClient(tracking.uri)
    run = client.get_run(tracked.run_id)
    dagster_url = "http://dagster:3000/runs/0123456789abcdef"
    assert run.info.run_name == "locus-01234567" and run.info.status == "FINISHED"
    assert {k: run.data.tags[k] for k in ("dagster.run_id", "dagster.run_url", "dagster.asset", "encoder", "checkpoint_id")} == {
        "dagster.run_id": "0123456789abcdef", "dagster.run_url": dagster_url, "dagster.asset": "locus_checkpoint",
        "encoder": "hashing-256", "checkpoint_id": saved.checkpoint_id}
    assert f"[01234567]({dagster_url})" in run.data.tags["mlflow.note.content"]
    params = run.data.params
    assert (params["model.query_dim"], params["train.seed"], params["seed"], params["encoder"], params["device"],
            params["budget"]) == ("8", "3", "3", "hashing-256", "cpu", "16")
    history = client.get_metric_history(run.info.run_id, "epoch/val_loss")
    assert [(m.step, round(m.value, 6)) for m in history] == [(0, 1.0), (1, 0.9), (2, 0.8)]
    # None is not logged; the kept checkpoint's figures are the only other metrics
    assert set(run.data.metrics) == {"epoch/val_loss", "selected/val_loss", "selected/val_routing_acc"}
    assert run.data.metrics["selected/val_routing_acc"] == 0.75
    assert {a.path for a in client.list_artifacts(tracked.run_id, "checkpoint")} == {f"checkpoint/{saved.local.name}"}
    assert {a.path for a in client.list_artifacts(tracked.run_id, "plots")} == {"plots/training_curve.png"}

    current = client.get_model_version_by_alias(tracking.registered_model, CURRENT_ALIAS)
    assert str(current.version) == version == "1" and current.run_id == tracked.run_id
    assert current.tags == {"checkpoint_id": saved.checkpoint_id, "encoder": "hashing-256",
                            "dagster.run_id": "0123456789abcdef", "dagster.run_url": dagster_url}
    assert current.description == f"Checkpoint `{saved.checkpoint_id}` (hashing-256), trained by Dagster run [01234567]({dagster_url})."
    assert "set encoder" in client.get_registered_model(tracking.registered_model).description

    meta = tracked.output_metadata()
    experiment = run.info.experiment_id
    assert meta["mlflow_run"].url == f"http://mlflow:5000/#/experiments/{experiment}/runs/{tracked.run_id}?workflowType=machine_learning"
    assert meta["mlflow_experiment"].url == f"http://mlflow:5000/#/experiments/{experiment}?workflowType=machine_learning"
    assert meta["registered_model_version"] == "locus v1 (alias current)"


def test_a_failed_training_ends_its_run_as_failed(tmp_path) -> None:
    import mlflow
    import pytest

    tracking = MlflowTracking(home=LocusHome(root=str(tmp_path)))
    with pytest.raises(RuntimeError, match="diverged"):
        with TrainingRun(tracking, "feedbeef00", encoder="hashing-256") as tracked:
            raise RuntimeError("diverged")
    assert mlflow.MlflowClient(tracking.uri).get_run(tracked.run_id).info.status == "FAILED"
    assert mlflow.active_run() is None

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
    assert {
        k: run.data.tags[k] for k in ("dagster.run_id", "dagster.run_url", "dagster.asset", "encoder", "checkpoint_id")
    } == {
        "dagster.run_id": "0123456789abcdef",
        "dagster.run_url": dagster_url,
        "dagster.asset": "locus_checkpoint",
        "encoder": "hashing-256",
        "checkpoint_id": saved.checkpoint_id,
    }
    assert f"[01234567]({dagster_url})" in run.data.tags["mlflow.note.content"]
    params = run.data.params
    assert (
        params["model.query_dim"],
        params["train.seed"],
        params["seed"],
        params["encoder"],
        params["device"],
        params["budget"],
    ) == ("8", "3", "3", "hashing-256", "cpu", "16")
    history = client.get_metric_history(run.info.run_id, "epoch/val_loss")
    assert [(m.step, round(m.value, 6)) for m in history] == [(0, 1.0), (1, 0.9), (2, 0.8)]
    # None is not logged; the kept checkpoint's figures are the only other metrics
    assert set(run.data.metrics) == {"epoch/val_loss", "selected/val_loss", "selected/val_routing_acc"}
    assert run.data.metrics["selected/val_routing_acc"] == 0.75
    assert {a.path for a in client.list_artifacts(tracked.run_id, "checkpoint")} == {f"checkpoint/{saved.local.name}"}
    assert {a.path for a in client.list_artifacts(tracked.run_id, "plots")} == {"plots/training_curve.png"}

    current = client.get_model_version_by_alias(tracking.registered_model, CURRENT_ALIAS)
    assert str(current.version) == version == "1" and current.run_id == tracked.run_id
    assert current.tags == {
        "checkpoint_id": saved.checkpoint_id,
        "encoder": "hashing-256",
        "dagster.run_id": "0123456789abcdef",
        "dagster.run_url": dagster_url,
    }
    assert (
        current.description
        == f"Checkpoint `{saved.checkpoint_id}` (hashing-256), trained by Dagster run [01234567]({dagster_url})."
    )
    assert "set encoder" in client.get_registered_model(tracking.registered_model).description

    meta = tracked.output_metadata()
    experiment = run.info.experiment_id
    assert (
        meta["mlflow_run"].url
        == f"http://mlflow:5000/#/experiments/{experiment}/runs/{tracked.run_id}?workflowType=machine_learning"
    )
    assert (
        meta["mlflow_experiment"].url == f"http://mlflow:5000/#/experiments/{experiment}?workflowType=machine_learning"
    )
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


def test_an_onboardings_estimates_are_logged_per_benchmark_with_their_interval(tmp_path) -> None:
    """log_onboarding_estimates: per benchmark estimate / lo / hi (observed and n where it answered) as metrics
    whose keys MLflow accepts whatever the benchmark is called, the tables as artifacts, the models it answers like
    as a param and the most alike as a tag, the run linked to its Dagster run."""
    import mlflow

    from locus_pipeline.newcomers import NewcomerEstimates
    from locus_pipeline.tracking import log_onboarding_estimates, mlflow_key

    tracking = MlflowTracking(home=LocusHome(root=str(tmp_path)), dagster_url="http://dagster:3000")
    hostile = "../x: y/z"
    cap = pd.DataFrame(
        {
            "benchmark": ["law", "computer science", hostile],
            "estimate": [0.4, 0.6, 0.5],
            "lo": [0.3, 0.45, 0.2],
            "hi": [0.5, 0.7, 0.8],
            "observed": [0.5, np.nan, 1.0],
            "n": [12, 0, 2],
        }
    )
    like = pd.DataFrame(
        {"model": ["org/twin", "other"], "agreement": [0.9, 0.7], "shared": [14, 14], "p_nearest": [0.8, 0.2]}
    )
    experiment, run_id = log_onboarding_estimates(
        tracking, "0123456789abcdef", "new/model ü", "abc123", NewcomerEstimates(capability=cap, answers_like=like)
    )
    client = mlflow.MlflowClient(tracking.uri)
    run = client.get_run(run_id)
    assert run.info.experiment_id == experiment and run.info.run_name == "estimates new/model ü"
    metrics, odd = run.data.metrics, mlflow_key(hostile)
    assert "/" not in odd and ".." not in odd and odd != mlflow_key("../x_ y_z")  # never nested, never shared
    assert (metrics["capability/law/estimate"], metrics["capability/law/lo"], metrics["capability/law/hi"]) == (
        0.4,
        0.3,
        0.5,
    )
    assert (metrics["capability/law/observed"], metrics["capability/law/n"]) == (0.5, 12.0)
    assert "capability/computer science/estimate" in metrics and "capability/computer science/observed" not in metrics
    assert metrics[f"capability/{odd}/hi"] == 0.8 and round(metrics["widest_interval"], 9) == 0.6
    assert run.data.params["answers_like"] == "org/twin, other"
    tags = run.data.tags
    assert (tags["locus/kind"], tags["locus/model"], tags["answers_like_most"], tags["checkpoint_id"]) == (
        "onboarding",
        "new/model ü",
        "org/twin",
        "abc123",
    )
    assert tags["dagster.run_url"] == "http://dagster:3000/runs/0123456789abcdef"
    assert {a.path for a in client.list_artifacts(run_id, "estimates")} == {
        "estimates/capability_estimates.json",
        "estimates/answers_like.json",
    }

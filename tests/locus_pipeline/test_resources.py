"""Resources: the MLflow link follows the configured MLflow URL."""

from __future__ import annotations

from locus_pipeline.defs.resources import MlflowTracking
from locus_pipeline.storage import LocusHome


def test_the_mlflow_link_follows_the_configured_port_and_url(tmp_path, monkeypatch) -> None:
    home = LocusHome(root=str(tmp_path))
    monkeypatch.delenv("LOCUS_MLFLOW_URL", raising=False)
    monkeypatch.setenv("MLFLOW_PORT", "5123")
    assert MlflowTracking(home=home).run_url("1", "abc") == "http://127.0.0.1:5123/#/experiments/1/runs/abc?workflowType=machine_learning"
    monkeypatch.setenv("LOCUS_MLFLOW_URL", "https://mlflow.example.org/")
    assert MlflowTracking(home=home).run_url("1", "abc") == "https://mlflow.example.org/#/experiments/1/runs/abc?workflowType=machine_learning"
    assert MlflowTracking(home=home, ui_url="http://h:1").run_url("2", "x") == "http://h:1/#/experiments/2/runs/x?workflowType=machine_learning"



def test_the_dagster_link_follows_dagster_port(tmp_path, monkeypatch) -> None:
    home = LocusHome(root=str(tmp_path))
    monkeypatch.delenv("LOCUS_DAGSTER_URL", raising=False)
    monkeypatch.setenv("DAGSTER_PORT", "3123")
    assert MlflowTracking(home=home).dagster_run_url("r1") == "http://127.0.0.1:3123/runs/r1"
    assert MlflowTracking(home=home, dagster_url="http://h:2/").dagster_run_url("r1") == "http://h:2/runs/r1"


def test_storage_paths_are_stored_relative_and_resolved_under_the_home(tmp_path) -> None:
    home = LocusHome(root=str(tmp_path))
    path = home.checkpoint_file("abc")
    assert home.relative(path) == "checkpoints/locus-abc.pt"
    assert home.resolve("checkpoints/locus-abc.pt") == path


def test_a_missing_or_damaged_table_names_the_file_and_the_fix(tmp_path) -> None:
    import pytest

    from locus_pipeline.storage import StorageError

    home = LocusHome(root=str(tmp_path))
    with pytest.raises(StorageError, match="evaluation_table table does not exist .* How to fix: materialize evaluation_table"):
        home.training_models()  # never an empty set standing in for a missing table
    home.table_path("model_embeddings").parent.mkdir(parents=True)
    home.table_path("model_embeddings").write_bytes(b"PAR1 not a parquet file")
    with pytest.raises(StorageError, match="model_embeddings.parquet cannot be read"):
        home.read_pool()

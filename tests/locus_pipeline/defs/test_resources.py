"""Resources: the MLflow link follows the configured MLflow URL."""

from __future__ import annotations

from locus_pipeline.defs.resources import MlflowTracking
from locus_pipeline.storage import LocusHome


def test_the_mlflow_link_follows_the_configured_port_and_url(tmp_path, monkeypatch) -> None:
    home = LocusHome(root=str(tmp_path))
    monkeypatch.delenv("LOCUS_MLFLOW_URL", raising=False)
    monkeypatch.setenv("MLFLOW_PORT", "5123")
    assert (
        MlflowTracking(home=home).run_url("1", "abc")
        == "http://127.0.0.1:5123/#/experiments/1/runs/abc?workflowType=machine_learning"
    )
    monkeypatch.setenv("LOCUS_MLFLOW_URL", "https://mlflow.example.org/")
    assert (
        MlflowTracking(home=home).run_url("1", "abc")
        == "https://mlflow.example.org/#/experiments/1/runs/abc?workflowType=machine_learning"
    )
    assert (
        MlflowTracking(home=home, ui_url="http://h:1").run_url("2", "x")
        == "http://h:1/#/experiments/2/runs/x?workflowType=machine_learning"
    )


def test_the_dagster_link_follows_dagster_port(tmp_path, monkeypatch) -> None:
    home = LocusHome(root=str(tmp_path))
    monkeypatch.delenv("LOCUS_DAGSTER_URL", raising=False)
    monkeypatch.setenv("DAGSTER_PORT", "3123")
    assert MlflowTracking(home=home).dagster_run_url("r1") == "http://127.0.0.1:3123/runs/r1"
    assert MlflowTracking(home=home, dagster_url="http://h:2/").dagster_run_url("r1") == "http://h:2/runs/r1"


def test_the_links_follow_the_ui_ports_the_home_is_configured_for(tmp_path, monkeypatch) -> None:
    """make dev on 3300 / 5300 writes the home's ui.json; a process without the ports in its environment (locus
    onboard in another shell) links to those servers, the environment wins where it names them."""
    import pytest

    from locus_pipeline.storage import StorageError

    for name in ("MLFLOW_PORT", "DAGSTER_PORT", "LOCUS_MLFLOW_URL", "LOCUS_DAGSTER_URL", "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(name, raising=False)
    home = LocusHome(root=str(tmp_path))
    assert MlflowTracking(home=home).dagster_run_url("r1") == "http://127.0.0.1:3000/runs/r1"  # nothing configured
    home.write_ui_config(dagster_url="http://127.0.0.1:3300/", mlflow_url="http://127.0.0.1:5300")
    tracking = MlflowTracking(home=home)
    assert tracking.dagster_run_url("r1") == "http://127.0.0.1:3300/runs/r1"
    assert tracking.run_url("1", "abc").startswith("http://127.0.0.1:5300/#/experiments/1/runs/abc")
    assert tracking.experiment_url("1").startswith("http://127.0.0.1:5300/#/experiments/1")
    home.write_ui_config(mlflow_url="http://127.0.0.1:5301")  # one of them: the other kept
    assert home.ui_config() == {"dagster_url": "http://127.0.0.1:3300", "mlflow_url": "http://127.0.0.1:5301"}
    monkeypatch.setenv("DAGSTER_PORT", "3123")
    assert MlflowTracking(home=home).dagster_run_url("r1") == "http://127.0.0.1:3123/runs/r1"
    assert MlflowTracking(home=home).mlflow_ui_url == "http://127.0.0.1:5301"
    home.ui_config_path.write_text('{"mlflow_url": 5300}')
    with pytest.raises(StorageError, match="ui.json: mlflow_url must be a JSON object of http"):
        MlflowTracking(home=home).mlflow_ui_url


def test_storage_paths_are_stored_relative_and_resolved_under_the_home(tmp_path) -> None:
    home = LocusHome(root=str(tmp_path))
    path = home.checkpoint_file("abc")
    assert home.relative(path) == "checkpoints/locus-abc.pt"
    assert home.resolve("checkpoints/locus-abc.pt") == path


def test_a_missing_or_damaged_table_names_the_file_and_the_fix(tmp_path) -> None:
    import pytest

    from locus_pipeline.storage import StorageError

    home = LocusHome(root=str(tmp_path))
    with pytest.raises(
        StorageError, match="evaluation_table table does not exist .* How to fix: materialize evaluation_table"
    ):
        home.training_models()  # never an empty set standing in for a missing table
    home.table_path("model_embeddings").parent.mkdir(parents=True)
    home.table_path("model_embeddings").write_bytes(b"PAR1 not a parquet file")
    with pytest.raises(StorageError, match="model_embeddings.parquet cannot be read"):
        home.read_pool()


def test_links_stored_by_an_earlier_run_follow_the_configured_ports(tmp_path, monkeypatch) -> None:
    """make demo stores links with the default ports; make dev on other ports relinks both stores before starting."""
    import dagster as dg
    import mlflow

    from locus_pipeline.instance import relink_mlflow_links

    monkeypatch.delenv("LOCUS_MLFLOW_URL", raising=False)
    monkeypatch.delenv("LOCUS_DAGSTER_URL", raising=False)
    home = LocusHome(root=str(tmp_path))
    demo = MlflowTracking(home=home, ui_url="http://127.0.0.1:5000", dagster_url="http://127.0.0.1:3000")
    with demo.start_run(
        "r",
        tags={
            "dagster.run_url": demo.dagster_run_url("abc"),
            "mlflow.note.content": f"trained by [abc]({demo.dagster_run_url('abc')})",
        },
    ) as run:
        run_id, experiment_id = run.info.run_id, run.info.experiment_id
    client = mlflow.MlflowClient(demo.uri)
    # the store was created with the home's artifact root: even the unused Default experiment keeps to the home
    assert client.get_experiment("0").artifact_location == (tmp_path / "mlflow" / "artifacts" / "0").as_uri()
    client.create_registered_model("locus")
    client.create_model_version(
        "locus",
        source="x",
        run_id=run_id,
        tags={"dagster.run_url": demo.dagster_run_url("abc")},
        description=f"by [abc]({demo.dagster_run_url('abc')})",
    )
    dagster_home = tmp_path / "dagster"
    dagster_home.mkdir()

    @dg.asset
    def checkpoint(context) -> None:
        context.add_output_metadata(
            {
                "mlflow_run": dg.MetadataValue.url(demo.run_url(experiment_id, run_id)),
                "atlas": dg.MetadataValue.url(
                    f"http://127.0.0.1:5000/get-artifact?path=reports/atlas.html&run_uuid={run_id}"
                ),
            }
        )

    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        dg.materialize([checkpoint], instance=instance)

    monkeypatch.setenv("DAGSTER_PORT", "3931")
    monkeypatch.setenv("MLFLOW_PORT", "5031")
    dev = MlflowTracking(home=home)
    assert dev.relink() == 4 and dev.relink() == 0  # two run tags, the version's tag and description; then nothing
    assert relink_mlflow_links(dagster_home, dev.mlflow_ui_url) >= 1
    run = client.get_run(run_id)
    assert run.data.tags["dagster.run_url"] == "http://127.0.0.1:3931/runs/abc"
    assert "(http://127.0.0.1:3931/runs/abc)" in run.data.tags["mlflow.note.content"]
    version = client.get_model_version("locus", "1")
    assert version.description is not None
    assert (
        version.tags["dagster.run_url"] == "http://127.0.0.1:3931/runs/abc" and ":3931/runs/abc" in version.description
    )
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        event = instance.get_latest_materialization_event(dg.AssetKey("checkpoint"))
        assert event is not None and event.asset_materialization is not None
        meta = event.asset_materialization.metadata
    run_link, atlas = meta["mlflow_run"], meta["atlas"]
    assert isinstance(run_link, dg.UrlMetadataValue) and run_link.url == dev.run_url(experiment_id, run_id)
    assert isinstance(atlas, dg.UrlMetadataValue) and atlas.url is not None
    assert atlas.url.startswith("http://127.0.0.1:5031/get-artifact?")

"""The whole graph materialized in pytest on a tiny synthetic pool: outputs, checks, MLflow run contents."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from locus_model.pool_schema import POOL_COLUMNS, POOL_SCHEMA, schema_differences


def test_every_asset_and_check_succeeds(materialized) -> None:
    _, result, _ = materialized
    assert result.success
    done = {
        e.event_specific_data.materialization.asset_key.to_user_string()
        for e in result.get_asset_materialization_events()
    }
    assert {
        "raw_evaluations",
        "evaluation_table",
        "query_encodings",
        "training_split",
        "locus_checkpoint",
        "model_embeddings",
        "routing_evaluation",
    } <= done
    checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
    for name in ("evaluation_table_valid", "pool_embeddings_finite", "pool_embeddings_reproducible"):
        assert checks[name].passed, name
    reproducible = checks["pool_embeddings_reproducible"].metadata
    assert reproducible["models_differing"].value == 0 and reproducible["models_checked"].value > 0
    assert "locus_routing_acc" in checks["locus_beats_best_single"].metadata


def test_pool_table_schema_and_provenance(materialized) -> None:
    _, _, home = materialized
    pool = pd.read_parquet(home / "warehouse" / "model_embeddings.parquet")
    assert tuple(pool.columns) == POOL_COLUMNS
    assert (
        schema_differences(pq.read_schema(home / "warehouse" / "model_embeddings.parquet")) == []
    )  # POOL_SCHEMA's types
    table = pd.read_parquet(home / "warehouse" / "evaluation_table.parquet")
    assert sorted(pool["model"]) == sorted(table["model"].unique())
    z = np.stack(pool["embedding"].to_numpy())
    assert z.shape == (len(pool), 128) and np.isfinite(z).all()
    checkpoint = pd.read_parquet(home / "warehouse" / "locus_checkpoint.parquet").iloc[0]
    assert set(pool["checkpoint_id"]) == {checkpoint["checkpoint_id"]}
    split = pd.read_parquet(home / "warehouse" / "training_split.parquet")
    test_queries = set(split.loc[split["split"] == "test", "query_id"])
    per_model = table[~table["query_id"].isin(test_queries)].groupby("model").size()
    assert (pool.set_index("model")["n_evaluations"] == per_model.reindex(pool["model"]).to_numpy()).all()


def test_pool_is_readable_with_duckdb(materialized) -> None:
    duckdb = pytest.importorskip("duckdb", reason="duckdb is in the dev extra")
    _, _, home = materialized
    count = duckdb.sql(f"select count(*) from '{home / 'warehouse' / 'model_embeddings.parquet'}'").fetchall()[0][0]
    assert count == 24


def test_mlflow_run_contents(materialized) -> None:
    import mlflow

    _, result, home = materialized
    checkpoint = pd.read_parquet(home / "warehouse" / "locus_checkpoint.parquet").iloc[0]
    mlflow.set_tracking_uri(f"sqlite:///{home / 'mlflow' / 'mlflow.db'}")
    client = mlflow.MlflowClient()
    run = client.get_run(checkpoint["mlflow_run_id"])
    assert run.data.tags["dagster.run_id"] == result.run_id
    params = run.data.params
    for key in ("model.d", "train.epochs", "evaluations_digest", "encoder", "seed", "device"):
        assert key in params, key
    assert params["encoder"] == "hashing-256" and params["model.d"] == "128" and params["device"] == "cpu"
    history = client.get_metric_history(run.info.run_id, "epoch/val_routing_acc")
    assert len(history) >= 1 and [m.step for m in history] == sorted(m.step for m in history)
    # the curves' section ("epoch/") sorts before the kept checkpoint's single values ("selected/") in the run page
    assert "selected/val_routing_acc" in run.data.metrics and not [k for k in run.data.metrics if "/" not in k]
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id, "checkpoint")}
    assert f"checkpoint/locus-{checkpoint['checkpoint_id']}.pt" in artifacts
    versions = client.search_model_versions("name = 'locus'")
    assert any(v.run_id == run.info.run_id for v in versions)
    # the Dagster materialization links to the run
    event = next(
        e
        for e in result.get_asset_materialization_events()
        if e.event_specific_data.materialization.asset_key.to_user_string() == "locus_checkpoint"
    )
    url = event.event_specific_data.materialization.metadata["mlflow_run"].value
    assert url.endswith(f"/runs/{run.info.run_id}?workflowType=machine_learning")


def test_mlflow_experiment_model_and_links_back_to_dagster(materialized) -> None:
    """The experiment opens as model training (not GenAI); the registered model has a description, the alias
    `current` on its newest version, and both the run and the version link back to the Dagster run."""
    import mlflow

    _, result, home = materialized
    checkpoint = pd.read_parquet(home / "warehouse" / "locus_checkpoint.parquet").iloc[0]
    mlflow.set_tracking_uri(f"sqlite:///{home / 'mlflow' / 'mlflow.db'}")
    client = mlflow.MlflowClient()
    run = client.get_run(checkpoint["mlflow_run_id"])
    assert client.get_experiment(run.info.experiment_id).tags["mlflow.experimentKind"] == "custom_model_development"
    from locus_pipeline.defs.resources import MlflowTracking
    from locus_pipeline.storage import LocusHome

    dagster_url = MlflowTracking(home=LocusHome(root=str(home))).dagster_run_url(result.run_id)
    assert dagster_url.endswith(f"/runs/{result.run_id}")
    assert (
        run.data.tags["dagster.run_url"] == dagster_url and f"]({dagster_url})" in run.data.tags["mlflow.note.content"]
    )
    model = client.get_registered_model("locus")
    assert model.description is not None and "set encoder" in model.description
    current = client.get_model_version_by_alias("locus", "current")
    assert str(current.version) == checkpoint["model_version"] and current.run_id == run.info.run_id
    assert current.description is not None and dagster_url in current.description
    assert current.tags["dagster.run_url"] == dagster_url


def test_checkpoint_round_trip_reproduces_the_pool(materialized) -> None:
    from locus_model.pool import embed_models
    from locus_model.router import Router
    from locus_pipeline.tables import pool_evaluations

    _, _, home = materialized
    warehouse = home / "warehouse"
    checkpoint = pd.read_parquet(warehouse / "locus_checkpoint.parquet").iloc[0]
    assert not checkpoint["path"].startswith("/")  # stored relative to LOCUS_HOME: a copied home works
    router, extra = Router.load(home / checkpoint["path"])
    assert extra["encoder"] == "hashing-256"
    table, split = (
        pd.read_parquet(warehouse / "evaluation_table.parquet"),
        pd.read_parquet(warehouse / "training_split.parquet"),
    )
    rows = embed_models(
        router,
        pool_evaluations(table, split),
        pd.read_parquet(warehouse / "query_encodings.parquet"),
        checkpoint="x",
        source="training",
    )
    pool = pd.read_parquet(warehouse / "model_embeddings.parquet").set_index("model")
    np.testing.assert_array_equal(np.stack(rows["embedding"]), np.stack(pool.loc[rows["model"], "embedding"]))


def test_routing_evaluation_scores_the_pools_checkpoint_without_training(materialized) -> None:
    _, _, home = materialized
    report = json.loads((home / "reports" / "routing_evaluation.json").read_text())
    checkpoint = pd.read_parquet(home / "warehouse" / "locus_checkpoint.parquet").iloc[0]
    pool = pd.read_parquet(home / "warehouse" / "model_embeddings.parquet")
    models = pd.read_parquet(home / "warehouse" / "model_split.parquet")
    held = sorted(models.loc[models["group"] == "held_out", "model"])
    assert report["settings"]["checkpoint_id"] == checkpoint["checkpoint_id"] == pool["checkpoint_id"].iloc[0]
    assert report["settings"]["locus_trained_here"] is False and report["settings"]["protocol"] == "given_split"
    assert report["settings"]["held_out_model_names"] == held and len(held) == 5  # 0.2 of 24
    assert sorted(pool.loc[pool["source"] == "held_out", "model"]) == held
    split = pd.read_parquet(home / "warehouse" / "training_split.parquet")
    assert report["sizes"]["test_queries"] == [int((split["split"] == "test").sum())]
    assert report["sizes"]["anchors"] == [int(split["anchor"].sum())]
    assert set(report["methods"]) == {"locus", "embedllm_mf", "irt", "knn", "best_single", "oracle"}
    assert {"all", "in_training", "held_out"} <= set(report["methods"]["locus"])
    oracle = report["methods"]["oracle"]["all"]["routing_acc"]["mean"]
    for method, groups in report["methods"].items():
        assert 0 <= groups["all"]["routing_acc"]["mean"] <= oracle + 1e-9, method
    flat = pd.read_parquet(home / "warehouse" / "routing_evaluation.parquet")
    assert {"method", "group", "benchmark", "metric", "mean", "std"} <= set(flat.columns)
    # LOCUS minus each baseline, with its bootstrap interval, survives the flattening
    locus_vs = report["methods"]["locus"]["all"]["vs_methods"]
    assert set(locus_vs) == {"embedllm_mf", "irt", "knn", "best_single"}
    row = flat[(flat["method"] == "locus") & (flat["group"] == "all") & (flat["metric"] == "vs_irt.auc.diff")]
    assert row["mean"].tolist() == [pytest.approx(locus_vs["irt"]["auc"]["diff"])]
    # every method's quality-cost frontier, as locus evaluate --models-file gives it (the synthetic catalog has
    # sizes, no prices: parameter counts are the cost)
    assert report["settings"]["costs"]["basis"] == "params_b"
    assert set(report["frontier"]) == {
        "locus",
        "embedllm_mf",
        "irt",
        "knn",
        "best_single",
        "oracle",
        "threshold_locus",
        "threshold_mf",
        "random_mix",
    }
    assert set(report["frontier"]["locus"]["aiq"]) == {"mean", "ci_low", "ci_high"}
    row = flat[(flat["method"] == "locus") & (flat["metric"] == "frontier.aiq.mean")]
    assert row["mean"].tolist() == [pytest.approx(report["frontier"]["locus"]["aiq"]["mean"])]


def test_routing_evaluation_gives_the_verdict(materialized) -> None:
    """The verdict (does routing pay over the best single model) in the report, the metadata and MLflow."""
    import mlflow

    from locus_model.evaluation.verdict import format_verdict
    from locus_model.markdown import escape_markdown

    _, result, home = materialized
    verdict = json.loads((home / "reports" / "routing_evaluation.json").read_text())["verdict"]
    assert set(verdict) == {
        "pays",
        "best_single",
        "delta",
        "lo",
        "hi",
        "cost_share",
        "cost_note",
        "cheaper",
        "kept_on_best_single",
    }
    meta = _materialization(result, "routing_evaluation")
    assert meta["verdict"].value in (format_verdict(verdict), escape_markdown(format_verdict(verdict)))  # whole
    assert meta["verdict_figures"].value == verdict
    row = pd.read_parquet(home / "warehouse" / "locus_checkpoint.parquet").iloc[0]
    run = mlflow.MlflowClient(f"sqlite:///{home}/mlflow/mlflow.db").get_run(row["mlflow_run_id"]).data
    assert run.tags["verdict"] == format_verdict(verdict) and run.tags["verdict.best_single"] == verdict["best_single"]
    assert (
        run.metrics["verdict/delta"] == pytest.approx(verdict["delta"])
        and run.metrics["verdict/pays"] == verdict["pays"]
    )


def _materialization(result, asset: str):
    [event] = [e for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == asset]
    return event.materialization.metadata


def test_table_assets_carry_their_column_schema(materialized) -> None:
    """The UI's Columns view: the pool's schema with the meaning of each column, known before a run too;
    every warehouse table's columns with their dtypes."""
    from locus_pipeline.definitions import defs

    _, result, _ = materialized
    schema = _materialization(result, "model_embeddings")["dagster/column_schema"].value
    assert tuple(c.name for c in schema.columns) == POOL_COLUMNS
    assert [c.type for c in schema.columns] == [str(f.type) for f in POOL_SCHEMA] and all(
        c.description for c in schema.columns
    )
    spec = next(s for s in defs().resolve_all_asset_specs() if s.key.to_user_string() == "model_embeddings")
    assert tuple(c.name for c in spec.metadata["dagster/column_schema"].columns) == POOL_COLUMNS
    assert spec.owners == ["team:locus"]
    table = _materialization(result, "evaluation_table")["dagster/column_schema"].value
    assert {"model", "query_id", "score"} <= {c.name for c in table.columns}


def test_checkpoint_figures_are_the_kept_models_in_dagster_and_mlflow(materialized) -> None:
    """The asset's Plots tab charts float entries across materializations; they are the saved checkpoint's figures
    (after the predictor fine-tuning), the same as the MLflow run's selected/... metrics."""
    import mlflow
    from dagster import FloatMetadataValue

    _, result, home = materialized
    meta = _materialization(result, "locus_checkpoint")
    row = pd.read_parquet(home / "warehouse" / "locus_checkpoint.parquet").iloc[0]
    kept, epoch = json.loads(row["kept_metrics"]), json.loads(row["best_metrics"])
    assert isinstance(meta["val_routing_acc"], FloatMetadataValue)
    assert meta["epoch_val_routing_acc"].value == pytest.approx(epoch["val_routing_acc"], abs=1e-4)
    assert "finetune_step" in kept and meta["val_loss"].value == kept["val_loss"]  # the tiny config fine-tunes
    assert meta["val_loss"].value <= meta["finetune_val_loss_before"].value  # the lower val BCE is kept
    logged = mlflow.MlflowClient(f"sqlite:///{home}/mlflow/mlflow.db").get_run(row["mlflow_run_id"]).data.metrics
    assert {k: logged[f"selected/{k}"] for k in kept} == kept
    assert "what it measures" in meta["figures"].value and "best_epoch" in meta


def test_no_text_metadata_is_cut_in_the_ui(materialized) -> None:
    """The asset page cuts a text entry to one line: every text entry of the main job's materializations is short
    enough to show whole, longer ones go as markdown (shown_whole), as the UI walk's item 11 checks in a browser."""
    from dagster import TextMetadataValue

    from locus_pipeline.defs.metadata import TEXT_SHOWN

    _, result, _ = materialized
    cut = [
        f"{e.asset_key.to_user_string()}.{k} ({len(v.value)} chars)"
        for e in result.get_asset_materialization_events()
        for k, v in e.materialization.metadata.items()
        if isinstance(v, TextMetadataValue) and len(v.value) > TEXT_SHOWN
    ]
    assert not cut


def test_training_runs_on_the_configured_threads(materialized) -> None:
    """The tiny config trains on 1 torch thread (``threads``) and the run logs it in Dagster and MLflow (that the
    process's setting is restored afterwards: test_reports.py, torch_threads)."""
    import mlflow

    _, result, home = materialized
    assert _materialization(result, "locus_checkpoint")["torch_threads"].value == 1
    row = pd.read_parquet(home / "warehouse" / "locus_checkpoint.parquet").iloc[0]
    assert (
        mlflow.MlflowClient(f"sqlite:///{home}/mlflow/mlflow.db")
        .get_run(row["mlflow_run_id"])
        .data.params["torch_threads"]
        == "1"
    )


def test_the_training_run_states_the_routers_guard(materialized) -> None:
    """MLflow's run and the checkpoint's Dagster metadata describe the router (its groups and blend); the guard is
    a routing policy, not the checkpoint's."""
    import mlflow

    _, result, home = materialized
    row = pd.read_parquet(home / "warehouse" / "locus_checkpoint.parquet").iloc[0]
    run = mlflow.MlflowClient(f"sqlite:///{home}/mlflow/mlflow.db").get_run(row["mlflow_run_id"])
    assert "router/guard_margin" not in run.data.params and "query groups" in run.data.tags["router"]
    assert "guard" not in _materialization(result, "locus_checkpoint")["router"].value


def test_training_logs_where_its_time_went(materialized) -> None:
    """Each training stage that ran has its wall seconds in MLflow (seconds/<stage>) and in the Dagster table."""
    import mlflow

    _, result, home = materialized
    row = pd.read_parquet(home / "warehouse" / "locus_checkpoint.parquet").iloc[0]
    logged = mlflow.MlflowClient(f"sqlite:///{home}/mlflow/mlflow.db").get_run(row["mlflow_run_id"]).data.metrics
    stages = {k.split("/", 1)[1]: v for k, v in logged.items() if k.startswith("seconds/")}
    assert {"latent_warmup", "epochs", "predictor_finetuning", "router"} <= set(stages) and all(
        v > 0 for v in stages.values()
    )
    table = _materialization(result, "locus_checkpoint")["stage_seconds"].value
    assert all(f"| {stage} | {value:.1f} |" in table for stage, value in stages.items()) and "| total |" in table


def test_metadata_paths_are_relative_to_the_home(materialized) -> None:
    """A copied home's metadata names its own files: $LOCUS_HOME/<relative path>, never the original's."""
    _, result, home = materialized
    paths = {
        f"{e.asset_key.to_user_string()}.{k}": v.value
        for e in result.get_asset_materialization_events()
        for e in [e.event_specific_data.materialization]
        for k, v in e.metadata.items()
        if type(v).__name__ == "PathMetadataValue"
    }
    assert {"locus_checkpoint.checkpoint", "locus_checkpoint.path", "routing_evaluation.report"} <= set(paths)
    assert all(p.startswith("$LOCUS_HOME/") and str(home) not in p for p in paths.values()), paths
    assert (home / paths["locus_checkpoint.checkpoint"].removeprefix("$LOCUS_HOME/")).exists()


def test_the_registered_model_loads_as_a_pyfunc_and_scores_queries(materialized) -> None:
    """mlflow.pyfunc.load_model("models:/locus@current"): routes queries, or scores (query, model) pairs, with the
    checkpoint's own router (the predictor blended with the group profiles, routed under the default policy's guard)."""
    import mlflow
    import numpy as np

    from locus_model.data.encoding import encode_queries
    from locus_model.router import Router
    from locus_model.routing import GUARD_MARGIN, routing_scores

    _, _, home = materialized
    mlflow.set_tracking_uri(f"sqlite:///{home}/mlflow/mlflow.db")
    router = mlflow.pyfunc.load_model("models:/locus@current")
    queries = ["What is 2 + 2?", "Name the capital of France."]
    routed = router.predict(pd.DataFrame({"query": queries}))
    assert list(routed.columns) == ["query", "model", "p_correct"] and len(routed) == 2
    row = pd.read_parquet(home / "warehouse" / "locus_checkpoint.parquet").iloc[0]
    trained_router, extra = Router.load(home / row["path"])  # the checkpoint carries its router
    pool = pd.read_parquet(home / "warehouse" / "model_embeddings.parquet")
    scorer = trained_router.scorer(pool[pool["source"] != "onboarded"])
    names = list(scorer.names)
    probs = scorer.proba(encode_queries(queries, encoder=extra["encoder"], progress=False))
    routes = routing_scores(probs, scorer.standing, GUARD_MARGIN).argmax(axis=0)  # as locus serve routes by default
    assert routed["model"].tolist() == [names[i] for i in routes]
    pairs = router.predict(pd.DataFrame({"query": queries, "model": [names[0], names[1]]}))
    np.testing.assert_allclose(pairs["p_correct"], [probs[0, 0], probs[1, 1]], rtol=1e-5)


def test_the_readmes_pyfunc_instruction_runs_as_written(materialized, tmp_path) -> None:
    """docs/ui.md's `MLFLOW_TRACKING_URI=$(locus mlflow-uri) python -c '...'` block, run by bash exactly as written,
    from another folder, with LOCUS_HOME set: it prints the routed query and leaves no mlflow.db behind."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    _, _, home = materialized
    root = Path(__file__).resolve().parents[2]
    readme = (root / "docs" / "ui.md").read_text(encoding="utf-8")
    start = "MLFLOW_TRACKING_URI=$(locus mlflow-uri)"
    command = start + readme.split("```bash\n" + start, 1)[1].split("\n```", 1)[0]
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env.update(
        LOCUS_HOME=str(home),
        PYTHONPATH=str(root),
        HF_HUB_OFFLINE="1",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    )  # locus and python of this venv
    done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "p_correct" in done.stdout and "What is 7 times 8?" in done.stdout
    assert not list(tmp_path.iterdir())  # no stray mlflow.db or mlruns/ in the current folder


def test_the_demo_shows_routing_decisions_at_two_quality_weights(materialized) -> None:
    from locus_pipeline.demo import EXAMPLE_WEIGHTS, routing_examples
    from locus_pipeline.storage import LocusHome

    _, _, home = materialized
    text = routing_examples(LocusHome(root=str(home)), n_queries=12, shown=3)
    lines = text.splitlines()
    assert lines[0].startswith("Routing 12 test questions over the pool's") and "cost basis: params_b" in lines[0]
    assert [line.split(":")[0].strip() for line in lines[1:3]] == [f"w={w:g}" for w in EXAMPLE_WEIGHTS]
    examples = [line for line in lines if line.startswith("      w=1: ")]
    assert len(examples) == 3 and all("w=0.5: " in line and "(P=" in line for line in examples)
    assert "trades P(correct) for cost" in text and "nan" not in text  # an unknown cost says so

"""The analyses group on the tiny materialized pool: reports exist and hold sensible values."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest

REPORTS = (
    "embedding_geometry",
    "family_clusters",
    "portfolios",
    "fallback_report",
    "near_duplicates",
    "capability_search",
    "model_atlas",
)


def _warehouse(home, name: str) -> pd.DataFrame:
    return pd.read_parquet(home / "warehouse" / f"{name}.parquet")


def _metadata(result, asset: str) -> dict:
    [event] = [e for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == asset]
    return event.materialization.metadata


def test_every_analysis_writes_a_report_with_its_plot(materialized):
    _, result, home = materialized
    reports = home / "reports"
    for name in REPORTS:
        text = (reports / f"{name}.md").read_text()
        assert text.startswith("#") and "Summary: " in text and "SYNTHETIC" in text, name
        assert (reports / f"{name}.png").read_bytes()[:4] == b"\x89PNG", name
        assert (home / "warehouse" / f"{name}.parquet").exists(), name
        assert "data:image/png;base64," in _metadata(result, name)["report"].value, name
    index = (reports / "README.md").read_text()
    assert "SYNTHETIC" in index and all(f"({name}.md)" in index for name in REPORTS)


def test_test_query_predictions_cover_pool_times_test_queries(materialized):
    _, _, home = materialized
    preds = _warehouse(home, "test_query_predictions")
    pool = _warehouse(home, "model_embeddings")
    n_test = int((_warehouse(home, "training_split")["split"] == "test").sum())
    assert len(preds) == len(pool) * n_test
    assert preds["prob"].between(0, 1).all() and preds["label"].dropna().isin([0.0, 1.0]).all()
    assert (preds.groupby("model")["label"].count() > 0).all()  # every model has held-out labels (none onboarded)


def test_geometry_and_clustering_values(materialized):
    _, result, home = materialized
    pairs = _warehouse(home, "embedding_geometry")
    m = len(_warehouse(home, "model_embeddings"))
    assert len(pairs) == m * (m - 1) // 2 and pairs["disagreement"].between(0, 1).all()
    meta = _metadata(result, "embedding_geometry")
    assert all(-1 <= meta[k].value <= 1 for k in ("pearson_euclidean", "spearman_cosine", "kendall_euclidean"))
    clusters = _metadata(result, "family_clusters")
    assert clusters["n_families"].value == 3 and -1 <= clusters["adjusted_rand"].value <= 1
    assert "adjusted Rand" in (home / "reports" / "family_clusters.md").read_text()


def test_portfolio_curves_reach_the_full_pool(materialized):
    _, _, home = materialized
    curves = _warehouse(home, "portfolios")
    m = len(_warehouse(home, "model_embeddings"))
    for method in ("k_center", "k_medoids"):
        c = curves[curves["method"] == method].sort_values("x")
        assert c["x"].tolist() == list(range(1, m + 1))
        full = c["full_pool_accuracy"].iloc[0]
        assert c["routing_accuracy"].iloc[-1] == pytest.approx(full)  # k = M is the whole pool
        assert c["smallest_matching"].sum() == 1 and c.loc[c["smallest_matching"], "x"].iloc[0] <= m
        assert c["random_portfolio_accuracy"].iloc[-1] == pytest.approx(full)  # every random M-subset is the pool
        assert c["portfolio"].iloc[-1].count(", ") == m - 1
    greedy = curves[curves["method"] == "coverage_greedy"].sort_values("x")
    assert len(greedy) >= 2 and (greedy["params_b"] <= greedy["x"] + 1e-6).all()  # within budget


def test_fallback_share_is_a_sensible_fraction(materialized):
    _, result, home = materialized
    share = _metadata(result, "fallback_report")["share_kept"].value
    # (0, 1.05] with a trained predictor; the 3-epoch tiny router is near chance, so a substitute can beat it
    assert 0 < share < 2
    summary = _warehouse(home, "fallback_report").set_index("substitute")
    nearest = summary.loc["nearest embedding neighbour"]
    assert nearest["share_kept"] == pytest.approx(share, rel=1e-3)  # the metadata shows 4 significant digits
    assert nearest["routing_accuracy"] == pytest.approx(
        nearest["share_kept"] * summary.loc["none (full router)", "routing_accuracy"]
    )


def test_near_duplicates_finds_the_exact_reupload(materialized):
    _, _, home = materialized
    pairs = _warehouse(home, "near_duplicates")
    catalog = _warehouse(home, "model_catalog")
    scores = _warehouse(home, "evaluation_table").pivot(index="query_id", columns="model", values="score")
    # the small synthetic pool has two re-uploads; the "exact" one answers like its original on every shared query
    dup = catalog[catalog["duplicate_of"].fillna("") != ""]
    exact = [
        (m, o)
        for m, o in zip(dup["model"], dup["duplicate_of"])
        if (scores[m] == scores[o])[scores[m].notna() & scores[o].notna()].all()
    ]
    assert len(exact) == 1
    a, b = exact[0]
    row = pairs[
        ((pairs["model_a"] == a) & (pairs["model_b"] == b)) | ((pairs["model_a"] == b) & (pairs["model_b"] == a))
    ]
    assert row["near_duplicate"].item() and row["known_duplicate"].item()
    assert row.index[0] < max(1, len(pairs) // 20)  # among the lowest-scored 5% of pairs
    assert row["pool_cosine_distance"].item() == pairs["pool_cosine_distance"].min()  # the closest pool pair


def test_capability_search_returns_real_models_with_accuracies(materialized):
    _, _, home = materialized
    found = _warehouse(home, "capability_search")
    pool = set(_warehouse(home, "model_embeddings")["model"])
    assert len(found) == 5 and set(found["model"]) <= pool
    assert found["target_distance"].is_monotonic_increasing
    assert {"synth-gsm8k", "synth-mmlu"} <= set(found.columns)


def test_atlas_is_self_contained(materialized):
    _, _, home = materialized
    page = (home / "reports" / "atlas.html").read_text()
    assert not re.search(r"<script[^>]+src=[\"']https?:", page)
    assert "Plotly" in page and 'data-n-models="' in page
    atlas = _warehouse(home, "model_atlas")
    assert atlas["in_portfolio"].any()


def test_locus_search_cli(materialized, capsys):
    from locus_pipeline.cli import main

    _, _, home = materialized
    assert (
        main(["search", "--target", "synth-gsm8k=0.9,synth-mmlu=0.5", "--k", "3", "--home", str(home), "--json"]) == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["target"] == {"synth-gsm8k": 0.9, "synth-mmlu": 0.5}
    assert len(out["neighbours"]) == 3 and {"model", "target_distance", "embedding_distance", "synth-gsm8k"} <= set(
        out["neighbours"][0]
    )
    gaps = [abs(n["synth-gsm8k"] - 0.9) + abs(n["synth-mmlu"] - 0.5) for n in out["neighbours"]]
    assert gaps == sorted(gaps) and out["neighbours"][0]["target_distance"] == pytest.approx(gaps[0] / 2)
    assert main(["search", "--target", "synth-gsm8k=0.9", "--home", str(home)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["rank", "model", "target_distance", "embedding_distance", "synth-gsm8k"]
    assert lines[1].split() == ["target", "(target", "profile)", "0.900"]  # the target first, beside the found models
    assert lines[2].split()[0] == "1" and "Ranked by target_distance" in "\n".join(lines)
    assert main(["search", "--target", "nonsense-bench=0.5", "--home", str(home)]) == 2
    assert "nonsense-bench" in capsys.readouterr().err


def test_parse_target():
    from locus_pipeline.reports import parse_target

    assert parse_target("a=0.9, b-c=0.5") == {"a": 0.9, "b-c": 0.5}
    with pytest.raises(ValueError, match="BENCHMARK=ACCURACY"):
        parse_target("a=1.5")
    np.testing.assert_equal(parse_target("x=0"), {"x": 0.0})


def test_onboarded_models_stay_in_geometry_and_leave_label_based_analyses(materialized, tmp_path):
    """A copy of the materialized home gains an onboarded model (no held-out labels); re-running the pool and
    the analyses group keeps it in clustering, near-duplicates and the atlas, and leaves it out of the rest."""
    import shutil

    import dagster as dg

    from locus_model.data.contract import safe_model_key
    from locus_model.onboarding import as_store
    from locus_pipeline.definitions import defs
    from locus_pipeline.defs.resources import MlflowTracking, QueryEncoder, WarehouseIOManager
    from locus_pipeline.storage import LocusHome

    instance, _, home = materialized
    copy = tmp_path / "home"
    shutil.copytree(home, copy, ignore=shutil.ignore_patterns("mlflow", "reports"))
    table = _warehouse(copy, "evaluation_table")
    train = set(_warehouse(copy, "training_split").query("split == 'train'")["query_id"])
    clone = table[(table["model"] == table["model"].iloc[0]) & table["query_id"].isin(train)].head(128)
    root = LocusHome(root=str(copy))
    root.record_evaluations(
        safe_model_key("onboarded-clone"),
        as_store(
            clone.assign(model="onboarded-clone")[["model", "query_id", "query", "benchmark", "score"]], None, "test"
        ),
    )

    resources = {
        "home": root,
        "io_manager": WarehouseIOManager(home=root),
        "query_encoder": QueryEncoder(home=root),
        "mlflow": MlflowTracking(home=root),
    }
    d = defs()
    selection = dg.AssetSelection.assets("model_embeddings") | dg.AssetSelection.groups("analyses")
    result = dg.materialize(
        list(d.assets),
        selection=selection,
        resources=resources,
        instance=instance,
        run_config={"ops": {"near_duplicates": {"config": {"resamples": 2}}}},
    )
    assert result.success
    pool = _warehouse(copy, "model_embeddings")
    assert "onboarded-clone" in set(pool["model"])
    m = len(pool)
    preds = _warehouse(copy, "test_query_predictions")
    assert preds.loc[preds["model"] == "onboarded-clone", "label"].isna().all()
    assert len(_warehouse(copy, "embedding_geometry")) == (m - 1) * (m - 2) // 2
    assert "onboarded-clone" in (copy / "reports" / "portfolios.md").read_text()  # listed as left out
    assert "onboarded-clone" in set(_warehouse(copy, "family_clusters")["model"])
    assert "onboarded-clone" in set(_warehouse(copy, "model_atlas")["model"])
    nd = _warehouse(copy, "near_duplicates")
    assert len(nd) == m * (m - 1) // 2


def test_cost_frontier_runs_from_cheapest_to_best_with_parameter_counts_as_the_cost(materialized):
    _, _, home = materialized
    frontier = _warehouse(home, "cost_frontier")
    assert set(frontier["cost_basis"]) == {"params_b"}  # the synthetic models file has sizes, no prices
    assert frontier["quality_weight"].min() == 0.0 and frontier["quality_weight"].max() == 1.0
    cheapest = frontier.sort_values("quality_weight").iloc[0]
    best = frontier.sort_values("quality_weight").iloc[-1]
    assert cheapest["mean_cost"] <= best["mean_cost"]  # w = 0 takes the cheapest model
    catalog = _warehouse(home, "model_catalog").set_index("model")
    assert cheapest["mean_cost"] == pytest.approx(catalog.loc[cheapest["cheapest"], "params_b"])
    report = (home / "reports" / "cost_frontier.md").read_text()
    assert "parameter count" in report and "95% of the best single model's accuracy" in report
    assert (home / "reports" / "cost_frontier.png").stat().st_size > 0


def _png_width(path) -> int:
    return int.from_bytes(path.read_bytes()[16:20], "big")  # IHDR width


def test_reports_show_summary_and_figure_first_at_modal_width(materialized):
    """The UI's report modal (1,280 px): summary, then the figure (at most 1,100 px wide), then the rest."""
    _, result, home = materialized
    for name in REPORTS:
        shown = _metadata(result, name)["report"].value
        lines = [line for line in shown.splitlines() if line]
        assert lines[0].startswith("# ") and lines[1].startswith("Summary: "), name
        assert lines[2].startswith("![") and "data:image/png;base64," in lines[2], name
        assert _png_width(home / "reports" / f"{name}.png") <= 1100, name


def test_report_tables_in_the_ui_are_previews(materialized):
    from locus_pipeline.defs.metadata import PREVIEW_ROWS

    _, result, home = materialized
    for name in REPORTS:
        shown = _metadata(result, name)["report"].value
        blocks = re.split(r"\n(?!\|)", shown)  # runs of table lines stay together
        for block in blocks:
            rows = [line for line in block.splitlines() if line.startswith("|")]
            assert len(rows) <= PREVIEW_ROWS + 2, name  # header + separator + preview
        assert "dagster/row_count" in _metadata(result, name), name
    # portfolios' curves are longer than a preview on the tiny pool: cut in the UI, whole in the file
    shown = _metadata(result, "portfolios")["report"].value
    assert "more rows: the full table is the asset's output (`warehouse/portfolios.parquet`)" in shown
    full = (home / "reports" / "portfolios.md").read_text()
    assert full.count("\n|") > shown.count("\n|")


def test_analyses_read_no_raw_evaluations_edge():
    """The graph reads left to right: the data note comes through LocusHome, not a lineage edge per analysis."""
    from locus_pipeline.definitions import defs

    deps = {
        s.key.to_user_string(): {d.asset_key.to_user_string() for d in s.deps} for s in defs().resolve_all_asset_specs()
    }
    for name in REPORTS + ("analysis_reports",):
        assert "raw_evaluations" not in deps[name], name


def test_the_atlas_is_an_mlflow_artifact_linked_from_the_pool(materialized):
    """The atlas reachable from the UI: an artifact of the checkpoint's MLflow run, linked (a URL entry) from the
    pool's and the atlas's materializations."""
    import mlflow
    from dagster import UrlMetadataValue

    _, result, home = materialized
    checkpoint = _warehouse(home, "locus_checkpoint").iloc[0]
    client = mlflow.MlflowClient(f"sqlite:///{home / 'mlflow' / 'mlflow.db'}")
    run_id = checkpoint["mlflow_run_id"]
    assert "reports/atlas.html" in {a.path for a in client.list_artifacts(run_id, "reports")}
    experiment = client.get_run(run_id).info.experiment_id
    for asset in ("model_embeddings", "model_atlas"):
        link = _metadata(result, asset)["atlas"]
        assert isinstance(link, UrlMetadataValue), asset
        assert f"/#/experiments/{experiment}/runs/{run_id}/artifacts/reports/atlas.html" in link.value, asset


def test_the_portfolio_config_defaults_are_the_librarys():
    from locus_model.analysis.portfolio_curves import DENSE_K
    from locus_pipeline.defs.assets.analyses import PortfolioConfig

    assert PortfolioConfig().max_k_medoids == DENSE_K and PortfolioConfig().max_k == 0

"""What the embedding space is for (arXiv 2601.21082, downstream uses): one asset per analysis.

Each asset reads the pool (model_embeddings) and what it needs, calls one function of locus_model.analysis,
writes LOCUS_HOME/reports/<name>.md + <name>.png, returns its table (warehouse Parquet) and shows the report
as Dagster metadata. test_query_predictions is shared: P(correct) of every pool model on the test
queries, beside its labels. Onboarded models have no held-out labels: label-based analyses (geometry,
portfolios, fallback) leave them out, the others (clustering, near-duplicates, search, atlas) keep them.
"""

import dagster as dg
import numpy as np
import pandas as pd
from pydantic import Field

from locus_model.analysis import (
    cluster_pool,
    distance_vs_disagreement,
    fallback,
    known_duplicates,
    resample_embeddings,
)
from locus_model.analysis import (
    near_duplicates as score_pairs,
)
from locus_model.analysis import (
    portfolios as curves,
)
from locus_model.analysis._common import markdown_table
from locus_model.analysis.atlas import model_atlas as write
from locus_model.analysis.portfolio_curves import smallest_matching_portfolio
from locus_model.data.catalog import params_for_models
from locus_model.stats.metrics import correctness_accuracy, routing_accuracy
from locus_pipeline.defs.metadata import (
    ATLAS_ARTIFACT,
    OWNERS,
    atlas_link,
    home_path,
    shorten_tables,
    shown_whole,
    ui_png_markdown,
)
from locus_pipeline.defs.resources import MlflowTracking
from locus_pipeline.storage import LocusHome

GROUP = "analyses"

# ----------------------------------------------------------------------------- shared plumbing


def data_note(home: LocusHome) -> str:
    """What the numbers are computed on (reports.data_note), read from the raw_evaluations table through
    LocusHome: the note is no data dependency, so no lineage edge is drawn for it."""
    # why: torch stays out of the code location's load (test_the_code_location_loads_without_torch)
    from locus_pipeline.reports import data_note as note

    raw = home.read_table("raw_evaluations", columns=["source", "root"])
    return note(str(raw["source"].iloc[0]), str(raw["root"].iloc[0]))


def publish(
    context: dg.AssetExecutionContext,
    home: LocusHome,
    name: str,
    *,
    title: str,
    summary: str,
    body: str,
    png=None,
    **metadata,
) -> None:
    """Write reports/<name>.md (summary, figure, data note, body) and attach it as Dagster metadata: the summary
    and the figure first (scaled to UI_FIGURE_PX wide, so the UI's modal shows all of it), long tables shortened
    to a preview (the full table is the asset's Parquet output)."""
    # why: torch stays out of the code location's load (test_the_code_location_loads_without_torch)
    from locus_pipeline.reports import render_report

    text = render_report(name, title=title, summary=summary, body=body, note=data_note(home), png=png)
    md_path = home.write_text("reports", f"{name}.md", text)
    shown = text if png is None else text.replace(f"![{name}]({png.name})", ui_png_markdown(png))
    figures = {
        k: float(f"{v:.4g}") if isinstance(v, float) and np.isfinite(v) else shown_whole(v) for k, v in metadata.items()
    }  # 4 digits
    context.add_output_metadata(
        {
            "summary": dg.MetadataValue.md(summary),
            "report": dg.MetadataValue.md(shorten_tables(shown, name)),
            "report_path": home_path(home, md_path),
            **figures,
        }
    )


def publish_result(
    context: dg.AssetExecutionContext,
    home: LocusHome,
    name: str,
    title: str,
    result,
    *,
    body: str | None = None,
    **metadata,
) -> None:
    """publish an analysis result as it renders itself: headline, figure (reports/<name>.png), to_markdown, figures."""
    png = result.plot(home.dir("reports") / f"{name}.png")
    publish(
        context,
        home,
        name,
        title=title,
        summary=result.headline(),
        body=result.to_markdown() if body is None else body,
        png=png,
        **result.figures(),
        **metadata,
    )


def labelled_pool(model_embeddings: pd.DataFrame, test_query_predictions: pd.DataFrame):
    """(names, embeddings, Predictions, excluded names): pool models with held-out labels only, as the pool was
    when test_query_predictions read it. Models onboarded since are left for the next refresh (their rows carry no
    labels anyway); a pool rebuilt since (another checkpoint) is a failure that says so."""
    # why: torch stays out of the code location's load (test_the_code_location_loads_without_torch)
    from locus_model.pool import checkpoints_of, pool_matrix
    from locus_pipeline.reports import prediction_matrices

    snapshot, current = checkpoints_of(test_query_predictions), checkpoints_of(model_embeddings)
    if snapshot != current:
        raise dg.Failure(
            description=f"the pool was re-embedded with checkpoint {sorted(current)} after test_query_predictions "
            f"read it with {sorted(snapshot)}",
            metadata={"how_to_fix": "nothing to do: the refresh requested after the rebuild replaces this one"},
        )
    pool = model_embeddings[
        model_embeddings["model"].astype(str).isin(set(test_query_predictions["model"].astype(str)))
    ]
    names, z = pool_matrix(pool)
    preds = prediction_matrices(test_query_predictions, names)
    keep = preds.labelled
    return (
        [n for n, k in zip(names, keep) if k],
        z[keep],
        preds.subset(keep),
        [n for n, k in zip(names, keep) if not k],
    )


def catalog_column(names: list[str], model_catalog: pd.DataFrame, column: str = "family") -> list[str]:
    """The catalog's `column` (family, variant ...) for each name, "" where unknown."""
    values = model_catalog.assign(model=model_catalog["model"].astype(str)).set_index("model")[column]
    return ["" if pd.isna(v) else str(v) for v in values.reindex(names)]


# ----------------------------------------------------------------------------- held-out predictions


@dg.asset(kinds={"pytorch"}, group_name=GROUP, owners=OWNERS)
def test_query_predictions(
    context: dg.AssetExecutionContext,
    model_embeddings: pd.DataFrame,
    evaluation_table: pd.DataFrame,
    query_encodings: pd.DataFrame,
    training_split: pd.DataFrame,
    home: LocusHome,
) -> pd.DataFrame:
    """One row per (pool model, held-out test query): model, query_id, benchmark, prob (the router's P(correct)
    from the pool embedding and group profile), route_score (prob under the router's guard: what ranks), label (NaN
    where unknown, e.g. onboarded models), checkpoint_id. The analyses of one refresh use the pool as this asset read
    it."""
    # why: torch stays out of the code location's load (test_the_code_location_loads_without_torch)
    from locus_pipeline.reports import prediction_matrices
    from locus_pipeline.reports import test_query_predictions as predict

    checkpoint = home.pool_checkpoint(model_embeddings)
    table = predict(checkpoint.router.scorer(model_embeddings), evaluation_table, query_encodings, training_split)
    preds = prediction_matrices(table, model_embeddings["model"].astype(str).tolist())
    lab = preds.subset(preds.labelled)
    context.add_output_metadata(
        {
            "models": len(preds.names),
            "models_with_labels": len(lab.names),
            "test_queries": len(preds.query_ids),
            "routing_accuracy_full_pool": float(routing_accuracy(lab.route, lab.labels)),  # under the guard, as served
            "correctness_accuracy": float(correctness_accuracy(lab.probs, lab.labels)),
            "checkpoint_id": checkpoint.checkpoint_id,
        }
    )
    return table.assign(checkpoint_id=checkpoint.checkpoint_id)


# ----------------------------------------------------------------------------- distance vs behaviour


@dg.asset(kinds={"scipy"}, group_name=GROUP, owners=OWNERS)
def embedding_geometry(
    context: dg.AssetExecutionContext,
    model_embeddings: pd.DataFrame,
    test_query_predictions: pd.DataFrame,
    home: LocusHome,
) -> pd.DataFrame:
    """Per model pair: Euclidean and cosine embedding distance vs the correctness disagreement rate on the
    test queries; Pearson, Spearman and Kendall over pairs (paper: Pearson 0.887 Euclidean)."""
    names, z, preds, excluded = labelled_pool(model_embeddings, test_query_predictions)
    result = distance_vs_disagreement(z, preds.labels, names=names, left_out=excluded)
    publish_result(
        context,
        home,
        "embedding_geometry",
        "Embedding distance vs behaviour",
        result,
        correlations=dg.MetadataValue.md(markdown_table(result.correlation_table(), digits=4)),
    )
    return result.table()


# ----------------------------------------------------------------------------- family clustering


class FamilyClusteringConfig(dg.Config):
    method: str = Field(
        default="average",
        description="scipy linkage: average (UPGMA, default), complete, single, or ward (needs metric euclidean).",
    )
    metric: str = Field(default="cosine", description="Distance between model embeddings: cosine or euclidean.")


@dg.asset(kinds={"scipy"}, group_name=GROUP, owners=OWNERS)
def family_clusters(
    context: dg.AssetExecutionContext,
    config: FamilyClusteringConfig,
    model_embeddings: pd.DataFrame,
    model_catalog: pd.DataFrame,
    home: LocusHome,
) -> pd.DataFrame:
    """Hierarchical clustering of the whole pool (dendrogram by model name); where families are known (models
    file, or the synthetic pool's own), the tree cut at the number of families is scored by purity and adjusted Rand.
    A models file with a `variant` column (base / chat / math / code ..., as the synthetic pool's) is scored too: the
    paper finds math- and code-finetuned models cluster together across base families."""
    # why: torch stays out of the code location's load (test_the_code_location_loads_without_torch)
    from locus_model.pool import pool_matrix

    names, z = pool_matrix(model_embeddings)
    groupings = ["family"] + (["variant"] if "variant" in model_catalog.columns else [])
    result = cluster_pool(
        z,
        names,
        {g: catalog_column(names, model_catalog, g) for g in groupings},
        method=config.method,
        metric=config.metric,
    )
    publish_result(context, home, "family_clusters", "Family clustering", result)
    return result.table()


# ----------------------------------------------------------------------------- portfolios


class PortfolioConfig(dg.Config):
    max_k: int = Field(
        default=0,
        description="Largest portfolio size on the k-center / k-medoids curves; "
        "0 = the whole pool (every size up to 50, then 20 sizes spaced geometrically up to the pool: "
        "locus_model.analysis.portfolio_curves.portfolio_sizes).",
    )
    max_k_medoids: int = Field(
        default=50,
        description="Largest k-medoids portfolio (PAM: each size is a "
        "search over (M, M) distances); 0 = as far as the k-center curve.",
    )
    n_budgets: int = Field(
        default=12,
        description="Parameter budgets on the coverage-greedy curve: geometric "
        "from the smallest model to the whole pool's parameters.",
    )
    tolerance: float = Field(
        default=0.005,
        description="A portfolio matches the full pool within this much routing accuracy (0.005 = 0.5 point).",
    )
    n_random: int = Field(default=5, description="Random portfolios per size (the baseline curve).")
    seed: int = Field(default=0, description="Seed of the random portfolios.")


@dg.asset(kinds={"numpy"}, group_name=GROUP, owners=OWNERS)
def portfolios(
    context: dg.AssetExecutionContext,
    config: PortfolioConfig,
    model_embeddings: pd.DataFrame,
    test_query_predictions: pd.DataFrame,
    model_catalog: pd.DataFrame,
    home: LocusHome,
) -> pd.DataFrame:
    """k-center and k-medoids portfolios (curve over k) and coverage-greedy per parameter (curve over a
    total-parameter budget): routing accuracy when routing among the portfolio only, on the test queries,
    and the smallest portfolio within `tolerance` of the full pool. Parameter counts: the models file's
    params_b, else parsed from the name ("7b", "8x7b", "350m"); models with neither are never budgeted.
    Pools of more than 50 models get every k up to 50, then sizes spaced geometrically up to the pool
    (portfolio_sizes); k-medoids stops at max_k_medoids."""
    names, z, preds, excluded = labelled_pool(model_embeddings, test_query_predictions)
    result = curves(
        z,
        preds.probs,
        preds.labels,
        names=names,
        params_b=params_for_models(names, model_catalog[["model", "params_b"]]),
        max_k=config.max_k,
        max_k_medoids=config.max_k_medoids,
        n_budgets=config.n_budgets,
        tolerance=config.tolerance,
        n_random=config.n_random,
        seed=config.seed,
        left_out=excluded,
    )
    publish_result(context, home, "portfolios", "Portfolio selection", result)
    return result.table()


# ----------------------------------------------------------------------------- fallback


class FallbackConfig(dg.Config):
    n_random: int = Field(default=20, description="Draws of the random-substitute baseline.")
    seed: int = Field(default=0, description="Seed of the random substitutes.")
    metric: str = Field(default="euclidean", description="Nearest neighbour by euclidean or cosine distance.")


@dg.asset(kinds={"numpy"}, group_name=GROUP, owners=OWNERS)
def fallback_report(
    context: dg.AssetExecutionContext,
    config: FallbackConfig,
    model_embeddings: pd.DataFrame,
    test_query_predictions: pd.DataFrame,
    home: LocusHome,
) -> pd.DataFrame:
    """When the routed model is unavailable, its nearest embedding neighbour answers: the share of routing
    accuracy kept (paper: 85%) against a random substitute and the router's own second choice."""
    names, z, preds, excluded = labelled_pool(model_embeddings, test_query_predictions)
    result = fallback(
        z,
        preds.probs,
        preds.labels,
        names=names,
        seed=config.seed,
        n_random=config.n_random,
        metric=config.metric,
        left_out=excluded,
    )
    publish_result(context, home, "fallback_report", "Fallback routing", result)
    return result.summary().assign(n_queries=result.n_queries)


# ----------------------------------------------------------------------------- near-duplicates


class NearDuplicatesConfig(dg.Config):
    resamples: int = Field(
        default=8,
        description="Independently resampled evaluation subsets per model (R); "
        "the score's spread across seeds shrinks with R (about +-15% at R=5 on the synthetic pool).",
    )
    fraction: float = Field(default=0.5, description="Share of a model's evaluation set kept in each resample.")
    threshold: float = Field(
        default=1.1,
        description="Near-duplicate when between-model distance / mean "
        "within-model resampling spread is at most this (1 = indistinguishable).",
    )
    seed: int = Field(default=0, description="Seed of the resamples.")
    max_pairs: int = Field(
        default=100_000,
        description="Model pairs kept in the output, lowest score first "
        "(every pair is scored; a pool of 2,001 models has 2.0 million pairs).",
    )


@dg.asset(kinds={"pytorch"}, group_name=GROUP, owners=OWNERS)
def near_duplicates(
    context: dg.AssetExecutionContext,
    config: NearDuplicatesConfig,
    model_embeddings: pd.DataFrame,
    evaluation_table: pd.DataFrame,
    query_encodings: pd.DataFrame,
    training_split: pd.DataFrame,
    model_catalog: pd.DataFrame,
    home: LocusHome,
) -> pd.DataFrame:
    """Fingerprinting: every model embedded from `resamples` random subsets of the evaluation set its pool
    embedding came from; pairs whose distance stays within the models' own resampling spread are flagged.
    Also shows the cosine distance of the pool embeddings (paper: near-duplicates < 1e-5) and, where the
    models file has a duplicate_of column (the synthetic pool), which known re-uploads were found."""
    # why: torch stays out of the code location's load (test_the_code_location_loads_without_torch)
    from locus_model.infer import embed_evaluation_sets, torch_threads
    from locus_model.pool import pool_matrix
    from locus_pipeline.reports import pool_evaluation_sets

    checkpoint = home.pool_checkpoint(model_embeddings)
    model = checkpoint.model
    onboarded = home.onboarded_evaluations()
    onboarded_enc = (
        home.encode(onboarded, checkpoint.encoder, runtime=checkpoint.runtime)[0] if len(onboarded) else None
    )
    sets = pool_evaluation_sets(
        model_embeddings, evaluation_table, training_split, query_encodings, onboarded, onboarded_enc
    )
    with torch_threads(1):  # R batched forward passes over the M subsets (see torch_threads)
        resampled = resample_embeddings(
            None,
            sets.sets,
            config.resamples,
            config.fraction,
            config.seed,
            embed_many=lambda subsets: embed_evaluation_sets(model, sets.encodings, subsets),
        )
    result = score_pairs(
        resampled, sets.names, threshold=config.threshold, max_pairs=config.max_pairs, fraction=config.fraction
    ).beside_pool(*pool_matrix(model_embeddings), known=known_duplicates(model_catalog), not_resampled=sets.missing)
    publish_result(context, home, "near_duplicates", "Near-duplicates", result)
    return result.pairs


# ----------------------------------------------------------------------------- capability-profile search


class CapabilitySearchConfig(dg.Config):
    target: dict[str, float] = Field(
        default_factory=dict,
        description="Benchmark -> accuracy in [0, 1], e.g. "
        "{'synth-gsm8k': 0.9, 'synth-mmlu': 0.5}; empty = every benchmark at the "
        "pool's median accuracy.",
    )
    k: int = Field(default=5, description="Nearest pool models to return.")
    n_per_benchmark: int = Field(default=64, description="Synthetic evaluations per benchmark.")
    seed: int = Field(default=0, description="Seed of the synthetic evaluation set.")


@dg.asset(kinds={"pytorch"}, group_name=GROUP, owners=OWNERS)
def capability_search(
    context: dg.AssetExecutionContext,
    config: CapabilitySearchConfig,
    model_embeddings: pd.DataFrame,
    evaluation_table: pd.DataFrame,
    query_encodings: pd.DataFrame,
    training_split: pd.DataFrame,
    home: LocusHome,
) -> pd.DataFrame:
    """A synthetic evaluation set with the target per-benchmark accuracy (non-test queries), embedded with the
    pool's checkpoint; the k nearest pool models with their actual per-benchmark accuracy (same as `locus search`)."""
    # why: torch stays out of the code location's load (test_the_code_location_loads_without_torch)
    from locus_pipeline.reports import capability_search_from_tables

    result = capability_search_from_tables(
        config.target,
        pool=model_embeddings,
        table=evaluation_table,
        encodings=query_encodings,
        split=training_split,
        model=home.pool_checkpoint(model_embeddings).model,
        onboarded=home.onboarded_evaluations(),
        k=config.k,
        n_per_benchmark=config.n_per_benchmark,
        seed=config.seed,
    )
    png = result.plot(home.dir("reports") / "capability_search.png")
    publish(
        context,
        home,
        "capability_search",
        title="Capability-profile search",
        body=result.to_markdown(),
        png=png,
        summary=result.headline("pool median" if not config.target else "given"),
        target=dg.MetadataValue.json(result.target),
    )
    return result.neighbours


# ----------------------------------------------------------------------------- the atlas


@dg.asset(kinds={"plotly"}, group_name=GROUP, owners=OWNERS)
def model_atlas(
    context: dg.AssetExecutionContext,
    model_embeddings: pd.DataFrame,
    model_catalog: pd.DataFrame,
    evaluation_table: pd.DataFrame,
    portfolios: pd.DataFrame,
    home: LocusHome,
    mlflow: MlflowTracking,
) -> pd.DataFrame:
    """reports/atlas.html (also an artifact of the pool checkpoint's MLflow run, linked from here, the pool and
    every onboarded model): one self-contained page (Plotly inlined, opens offline) placing every pool model by
    a PCA of its embedding, the smallest k-center portfolio matching the full pool drawn as diamonds; clicking
    a model lists its nearest neighbours and its accuracy on each of the pool's benchmarks it answered, with the
    number of answers (an onboarded model's other tasks, e.g. an lm-eval drop's, apart, for that model only), and
    its capability estimates with their 90% intervals (an onboarded model's, stored by its onboarding; a model of the
    training source shows its observed accuracy)."""
    # why: torch stays out of the code location's load (test_the_code_location_loads_without_torch)
    from locus_model.pool import pool_matrix
    from locus_pipeline.reports import per_benchmark_accuracy, per_benchmark_answers

    names, z = pool_matrix(model_embeddings)
    onboarded = home.onboarded_evaluations()
    atlas = write(
        home.dir("reports") / "atlas.html",
        embeddings=z,
        names=names,
        families=catalog_column(names, model_catalog),
        per_benchmark_acc=per_benchmark_accuracy(evaluation_table, onboarded),
        per_benchmark_n=per_benchmark_answers(evaluation_table, onboarded),
        pool_benchmarks=sorted(evaluation_table["benchmark"].astype(str).unique()),
        portfolio=smallest_matching_portfolio(portfolios, "k_center"),
        onboarded=model_embeddings.loc[model_embeddings["source"] == "onboarded", "model"].astype(str).tolist(),
        estimates=home.capability_estimates(),
        title="LOCUS model atlas" + (" (SYNTHETIC pool)" if "SYNTHETIC" in data_note(home) else ""),
    )
    checkpoint_id = str(model_embeddings["checkpoint_id"].iloc[0])
    current = home.read_table("locus_checkpoint")
    run = current.loc[current["checkpoint_id"].astype(str) == checkpoint_id, "mlflow_run_id"]
    if len(run) and mlflow.experiment_of_run(str(run.iloc[0])) is not None:  # where the pool's atlas link points
        mlflow.log_artifact(str(run.iloc[0]), atlas.path, ATLAS_ARTIFACT.rsplit("/", 1)[0])
    publish_result(
        context,
        home,
        "model_atlas",
        "Model atlas",
        atlas,
        body=atlas.to_markdown(f"$LOCUS_HOME/{home.relative(atlas.path)}"),
        atlas_path=home_path(home, atlas.path),
        **atlas_link(home, mlflow, checkpoint_id),
    )
    return atlas.table()


# ----------------------------------------------------------------------------- the index


REPORTS = (
    "embedding_geometry",
    "family_clusters",
    "portfolios",
    "fallback_report",
    "near_duplicates",
    "capability_search",
    "model_atlas",
    "cost_frontier",
)


@dg.asset(kinds={"markdown"}, group_name=GROUP, owners=OWNERS, deps=list(REPORTS))
def analysis_reports(context: dg.AssetExecutionContext, home: LocusHome) -> pd.DataFrame:
    """reports/README.md: every analysis report with its one-line summary, and the other files in reports/."""
    # why: torch stays out of the code location's load (test_the_code_location_loads_without_torch)
    from locus_pipeline.reports import render_index

    folder = home.dir("reports")
    texts = {
        n: (folder / f"{n}.md").read_text(encoding="utf-8") if (folder / f"{n}.md").exists() else None for n in REPORTS
    }
    index, text = render_index(texts, [p.name for p in folder.iterdir() if p.is_file()], data_note(home))
    path = home.write_text("reports", "README.md", text + "\n")
    context.add_output_metadata({"index": dg.MetadataValue.md(text), "path": home_path(home, path)})
    return index

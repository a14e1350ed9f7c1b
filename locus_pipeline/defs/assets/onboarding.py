"""Onboarding: one model from a dropped evaluation file -> its model embedding in the pool (no training).

An onboarding run (onboarding_job, one partition = one model key) materializes, in order:
1. ``onboarded_evaluations[key]``: the file's rows join the model's store (newest file wins per query_id);
2. ``model_embeddings``: the pool, with only this model's row recomputed by one forward pass (and its blocking
   reproducibility check, on the new state);
3. ``onboarded_model_embedding[key]``: the model's row, its five nearest models and its per-benchmark profile,
   with a warning (metadata, run log, the check ``onboarded_model_trustworthy``) when the drop is small or its
   queries unlike the pool's (locus_model.onboarding.onboarding_warnings); for an onboarded model, its capability
   estimates (docs/estimates.md), stored for the atlas and logged to an MLflow run (tracking.log_onboarding_estimates).
See docs/onboarding.md.
"""


import dagster as dg
import pandas as pd
from pydantic import Field

from locus_model.markdown import escape_frame, escape_markdown
from locus_pipeline.defs.metadata import OWNERS, atlas_link, home_path
from locus_pipeline.defs.partitions import onboarded_models
from locus_pipeline.defs.resources import MlflowTracking
from locus_pipeline.storage import LocusHome
from locus_pipeline.tracking import log_onboarding_estimates

GROUP = "onboarding"
TRUST_CHECK = "onboarded_model_trustworthy"
PRECISION_CHECK = "onboarded_estimates_precise"
MISSING = "—"  # a cell with no figure (a neighbour never evaluated on that benchmark), never "nan"
NEIGHBOURS = 5
STABILITY_DRAWS = 20  # bootstrap resamples of an onboarded model's evaluations for its neighbours' stability


class OnboardingConfig(dg.Config):
    """Set by the onboarding sensor; leave both empty to re-embed the partition's model from its stored evaluations."""

    accepted_file: str = Field(default="", description="Stem of the accepted file in LOCUS_HOME/incoming/accepted/ holding the model's new rows.")
    model: str = Field(default="", description="The model name exactly as in the file (the partition key is its safe form).")


def _failure(err) -> dg.Failure:
    """An EvaluationDataError as a run failure that shows file, row, column and fix in the UI."""
    return dg.Failure(
        description=str(err),
        metadata={"file": str(err.file), "row": str(err.row), "column": str(err.column), "problem": err.problem, "how_to_fix": str(err.fix)},
    )


@dg.asset(owners=OWNERS, partitions_def=onboarded_models, group_name=GROUP, kinds={"parquet"})
def onboarded_evaluations(context: dg.AssetExecutionContext, config: OnboardingConfig, home: LocusHome) -> dg.MaterializeResult:
    """Every evaluation of one onboarded model so far (LOCUS_HOME/onboarded/<model_key>.parquet): the rows of each
    accepted file for it, one row per query_id, the newest file (by the time it was received) winning."""
    import numpy as np

    from locus_model.data.contract import safe_model_key
    from locus_model.data.errors import EvaluationDataError
    from locus_model.onboarding import as_store
    from locus_pipeline.intake import DropFolder, accepted_rows, changed_since_intake, intake_order, read_manifest

    key = context.partition_key
    if config.model and safe_model_key(config.model) != key:
        raise dg.Failure(
            description=f"model {config.model!r} has the key {safe_model_key(config.model)!r}, not this partition {key!r}",
            metadata={"how_to_fix": "launch the partition whose key is the model's safe key (the sensor does this)"},
        )
    new_rows = 0
    if config.accepted_file:
        folder = DropFolder(home)
        try:
            manifest = read_manifest(folder, config.accepted_file)
            rows = accepted_rows(folder, config.accepted_file, config.model)
        except EvaluationDataError as err:
            raise _failure(err) from err
        changed = changed_since_intake(folder, manifest)
        if changed:  # half a file must never be onboarded: the sensor takes the whole file in again once it settles
            raise dg.Failure(
                description=f"{manifest.original_name} changed after it was taken in: {changed}. Nothing was onboarded "
                            "from it; the drop-folder sensor takes the whole file in again once it settles.",
                metadata={"accepted_file": config.accepted_file, "how_to_fix": "write the file as <name>.part, then rename "
                          "it to <name> when it is complete (docs/onboarding.md); nothing to do for this run"},
            )
        received = intake_order(manifest)  # newest = taken in last, not the file's modification time
        store = home.record_evaluations(key, as_store(rows, received, config.accepted_file))
        new_rows = len(rows)
    else:
        store = home.read_store(key)
    profile = store.groupby("benchmark")["score"].agg(evaluations="size", accuracy="mean")
    return dg.MaterializeResult(metadata={
        "model": str(store["model"].iloc[0]),
        "evaluations": len(store),
        "new_evaluations_in_file": new_rows,
        "accepted_file": config.accepted_file or "(none: re-embedding from the store)",
        "mean_score": round(float(np.mean(store["score"])), 4),
        "benchmarks": dg.MetadataValue.md(escape_frame(profile.round(4)).to_markdown()),
        "dagster/row_count": len(store),
        "path": home_path(home, home.store_path(key)),
    })


def profile_markdown(shown: pd.DataFrame, name: str, neighbours: list[str]) -> str:
    """The per-benchmark profile (benchmark_profile: rows the model, its neighbours and ``n (<name>)``) as a narrow
    Markdown table that fits the UI's page: one row per benchmark, columns the model's accuracy, its evaluations
    (n) and its neighbours' accuracy by rank (#1 ...), named under the table; a missing accuracy is MISSING."""
    short = {name: "model", f"n ({name})": "n", **{n: f"#{i}" for i, n in enumerate(neighbours, 1)}}
    table = shown.rename(index=short).T  # (benchmarks, model / #1 ... / n)
    order = [c for c in ("model", "n", *(f"#{i}" for i in range(1, len(neighbours) + 1))) if c in table.columns]
    cells = table[order].astype(object).where(table[order].notna(), MISSING)
    if "n" in cells:
        cells["n"] = [MISSING if v is MISSING else int(v) for v in cells["n"]]
    cells = escape_frame(cells).set_axis(order, axis=1)  # the benchmarks escaped; the short headers as they are
    lines = [cells.rename_axis("benchmark").to_markdown(), "",
             f"model: {escape_markdown(name)}; n: its evaluations per benchmark; "
             + "; ".join(f"#{i}: {escape_markdown(n)}" for i, n in enumerate(neighbours, 1)) + " (nearest_models)"]
    if table.drop(columns=["n"], errors="ignore").isna().to_numpy().any():
        lines.append(f"{MISSING}: that model has no evaluation on that benchmark (no accuracy to show)")
    return "\n".join(lines)


@dg.asset(owners=OWNERS, partitions_def=onboarded_models, group_name=GROUP, kinds={"pytorch"}, deps=["model_embeddings"],
          check_specs=[dg.AssetCheckSpec(TRUST_CHECK, asset="onboarded_model_embedding",
                                         description="The model's embedding rests on enough evaluations (the checkpoint's "
                                                     "training budget, the pool's routable floor) of queries like the "
                                                     "pool's (warning only)"),
                       dg.AssetCheckSpec(PRECISION_CHECK, asset="onboarded_model_embedding",
                                         description="Every per-benchmark capability estimate's 90% interval is at most "
                                                     "20 points wide (warning only: ask the model more questions)")])
def onboarded_model_embedding(context: dg.AssetExecutionContext, home: LocusHome, mlflow: MlflowTracking):
    """The onboarded model as the pool holds it: its row, its five nearest models (Euclidean distance between
    model embeddings) and its per-benchmark profile beside theirs. A model of the training source keeps its
    training embedding (its new evaluations are only recorded in its store)."""
    from locus_model.onboarding import benchmark_profile, nearest_models, neighbour_stability
    from locus_pipeline.reports import WIDE_INTERVAL, estimates_markdown, newcomer_estimates, per_benchmark_accuracy

    key = context.partition_key
    pool = home.read_pool()
    rows = pool[pool["model_key"] == key]
    if rows.empty:
        raise dg.Failure(description=f"no model with key {key!r} is in the pool",
                         metadata={"how_to_fix": "run the whole onboarding_job for this partition (it embeds the model first)"})
    row = rows.iloc[0]
    name = str(row["model"])
    neighbours = nearest_models(pool, name, NEIGHBOURS)
    training = home.read_table("evaluation_table", columns=["model", "query_id", "benchmark", "score"])
    accuracy = per_benchmark_accuracy(training, home.onboarded_evaluations())
    stability, n_rows, warnings, trust, estimated, precision = {}, {}, [], {}, {}, None
    if str(row["source"]) == "onboarded":  # its evaluations are its store: how much can they say?
        store = home.read_store(key)
        n_rows = store.groupby("benchmark")["score"].size().to_dict()
        checkpoint = home.pool_checkpoint(pool)
        encodings, _ = home.encode(store, checkpoint.encoder)  # cached: the onboarding run encoded them
        result = neighbour_stability(checkpoint.model, store, encodings, pool, name, k=NEIGHBOURS, draws=STABILITY_DRAWS)
        nearest = str(neighbours["model"].iloc[0]) if len(neighbours) else ""
        stability = {"nearest_model_stability": round(result.share_top1(nearest), 3),
                     "neighbours_under_resampling": dg.MetadataValue.md(result.to_markdown(nearest))}
        warnings, trust = trust_warnings(home, store, encodings, int(row["n_evaluations"]))
        estimates = newcomer_estimates(checkpoint.model, store, encodings, training, home.read_table("query_encodings"), pool)
        capability, like = estimates_markdown(estimates)
        cap = estimates.capability
        width = cap["hi"] - cap["lo"]
        wide = cap[width > WIDE_INTERVAL]
        if len(wide):
            vague = (f"the estimate of {len(wide)} benchmark(s) spans over {WIDE_INTERVAL:.0%} (widest: "
                            f"{wide['benchmark'].iloc[int(width[wide.index].argmax())]}, {width.max():.0%}): "
                     "its answers there are too few to place it; ask it more questions")
            context.log.warning(f"{name}: {vague}")
        precision = {"widest_interval": round(float(width.max()), 3), "threshold_interval": WIDE_INTERVAL,
                     "wide_benchmarks": ", ".join(wide["benchmark"].astype(str)) or "none"}
        home.write_capability_estimates(key, cap.assign(model=name, checkpoint_id=str(row["checkpoint_id"])))
        experiment, run_id = log_onboarding_estimates(mlflow, context.run_id, name, str(row["checkpoint_id"]), estimates)
        estimated = {"capability_estimates": dg.MetadataValue.md(capability), "answers_like": dg.MetadataValue.md(like),
                     "answers_like_most": str(estimates.answers_like["model"].iloc[0]) if len(estimates.answers_like) else "",
                     "widest_interval": round(float(width.max()), 3),
                     "mlflow_run": dg.MetadataValue.url(mlflow.run_url(experiment, run_id))}
        for line in warnings:
            context.log.warning(f"{name}: {line}")
    shown = benchmark_profile(accuracy, name, neighbours["model"].tolist(), n_rows)
    metadata = {
        "model": name,
        "source": str(row["source"]),
        "n_evaluations": int(row["n_evaluations"]),
        "routable": bool(row["routable"]),
        "warnings": dg.MetadataValue.md("\n".join(f"- {escape_markdown(w)}" for w in warnings) or "none"),
        "checkpoint_id": str(row["checkpoint_id"]),
        "nearest_model": str(neighbours["model"].iloc[0]) if len(neighbours) else "",
        **({"distance_to_nearest": round(float(neighbours["distance"].iloc[0]), 4)} if len(neighbours) else {}),
        "nearest_models": dg.MetadataValue.md(escape_frame(neighbours.round(4)).to_markdown(index=False)),
        "per_benchmark_profile": dg.MetadataValue.md(profile_markdown(shown, name, neighbours["model"].tolist())),
        **stability,
        **estimated,
        "pool_models": len(pool),
        **atlas_link(home, mlflow, str(row["checkpoint_id"])),  # the model shows there after the reports refresh
    }
    yield dg.Output(neighbours.assign(of_model=name, checkpoint_id=str(row["checkpoint_id"])), metadata=metadata)
    yield dg.AssetCheckResult(check_name=TRUST_CHECK, passed=not warnings, severity=dg.AssetCheckSeverity.WARN,
                              metadata={"n_evaluations": int(row["n_evaluations"]), "routable": bool(row["routable"]),
                                        **trust, "warnings": "; ".join(warnings) or "none"})
    precision = precision or {"wide_benchmarks": "none", "note": "a model of the training source: no estimates (its "
                                                                 "answers over the pool's queries are its accuracy)"}
    yield dg.AssetCheckResult(check_name=PRECISION_CHECK, passed=precision["wide_benchmarks"] == "none",
                              severity=dg.AssetCheckSeverity.WARN, metadata=precision)


def trust_warnings(home: LocusHome, store: pd.DataFrame, encodings: pd.DataFrame, n_evaluations: int) -> tuple[list[str], dict]:
    """(onboarding_warnings for the model's store, the figures beside their thresholds for the check): its count
    against the checkpoint's training budget (the training split's anchors) and the routable floor, its queries'
    overlap with the training source's (query_encodings)."""
    from locus_model.data.query_encodings import encoding_matrix
    from locus_model.onboarding import OVERLAP_WARN_RATIO, onboarding_warnings, query_overlap
    from locus_model.pool_schema import MIN_ROUTABLE_EVALUATIONS

    budget = int(home.read_table("training_split", columns=["anchor"])["anchor"].sum())
    mine = encoding_matrix(encodings, store["query_id"].astype(str).unique(), what="the onboarded model's queries: ")
    overlap = query_overlap(mine, encoding_matrix(home.read_table("query_encodings")))
    figures = {"threshold_budget": budget, "threshold_routable": MIN_ROUTABLE_EVALUATIONS,
               "query_overlap": round(overlap.overlap, 3), "query_overlap_pool_baseline": round(overlap.baseline, 3),
               "query_overlap_ratio": round(overlap.ratio, 3), "threshold_query_overlap_ratio": OVERLAP_WARN_RATIO}
    return onboarding_warnings(n_evaluations, budget, overlap), figures

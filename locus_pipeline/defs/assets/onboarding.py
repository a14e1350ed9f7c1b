"""Onboarding: one model from a dropped evaluation file -> its model embedding in the pool (no training).

An onboarding run (onboarding_job, one partition = one model key) materializes, in order:
1. ``onboarded_evaluations[key]``: the file's rows join the model's store (newest file wins per query_id);
2. ``model_embeddings``: the pool, with only this model's row recomputed by one forward pass (and its blocking
   reproducibility check, on the new state);
3. ``onboarded_model_embedding[key]``: the model's row, its five nearest models and its per-benchmark profile.
See docs/onboarding.md.
"""


import dagster as dg
import pandas as pd
from pydantic import Field

from locus_model.markdown import escape_frame
from locus_pipeline.defs.metadata import OWNERS, atlas_link, home_path
from locus_pipeline.defs.partitions import onboarded_models
from locus_pipeline.defs.resources import MlflowTracking
from locus_pipeline.storage import LocusHome

GROUP = "onboarding"
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


@dg.asset(owners=OWNERS, partitions_def=onboarded_models, group_name=GROUP, kinds={"pytorch"}, deps=["model_embeddings"])
def onboarded_model_embedding(context: dg.AssetExecutionContext, home: LocusHome, mlflow: MlflowTracking) -> pd.DataFrame:
    """The onboarded model as the pool holds it: its row, its five nearest models (Euclidean distance between
    model embeddings) and its per-benchmark profile beside theirs. A model of the training source keeps its
    training embedding (its new evaluations are only recorded in its store)."""
    from locus_model.onboarding import benchmark_profile, nearest_models, neighbour_stability
    from locus_pipeline.reports import per_benchmark_accuracy

    key = context.partition_key
    pool = home.read_pool()
    rows = pool[pool["model_key"] == key]
    if rows.empty:
        raise dg.Failure(description=f"no model with key {key!r} is in the pool",
                         metadata={"how_to_fix": "run the whole onboarding_job for this partition (it embeds the model first)"})
    row = rows.iloc[0]
    name = str(row["model"])
    neighbours = nearest_models(pool, name, NEIGHBOURS)
    training = home.read_table("evaluation_table", columns=["model", "benchmark", "score"])
    accuracy = per_benchmark_accuracy(training, home.onboarded_evaluations())
    stability, n_rows = {}, {}
    if str(row["source"]) == "onboarded":  # its evaluations are its store: how much can they say?
        store = home.read_store(key)
        n_rows = store.groupby("benchmark")["score"].size().to_dict()
        checkpoint = home.pool_checkpoint(pool)
        encodings, _ = home.encode(store, checkpoint.encoder)  # cached: the onboarding run encoded them
        result = neighbour_stability(checkpoint.model, store, encodings, pool, name, k=NEIGHBOURS, draws=STABILITY_DRAWS)
        nearest = str(neighbours["model"].iloc[0]) if len(neighbours) else ""
        stability = {"nearest_model_stability": round(result.share_top1(nearest), 3),
                     "neighbours_under_resampling": dg.MetadataValue.md(result.to_markdown(nearest))}
    shown = benchmark_profile(accuracy, name, neighbours["model"].tolist(), n_rows)
    context.add_output_metadata({
        "model": name,
        "source": str(row["source"]),
        "n_evaluations": int(row["n_evaluations"]),
        "checkpoint_id": str(row["checkpoint_id"]),
        "nearest_model": str(neighbours["model"].iloc[0]) if len(neighbours) else "",
        "distance_to_nearest": round(float(neighbours["distance"].iloc[0]), 4) if len(neighbours) else float("nan"),
        "nearest_models": dg.MetadataValue.md(escape_frame(neighbours.round(4)).to_markdown(index=False)),
        "per_benchmark_profile": dg.MetadataValue.md(escape_frame(shown).to_markdown()),
        **stability,
        "pool_models": len(pool),
        **atlas_link(home, mlflow, str(row["checkpoint_id"])),  # the model shows there after the reports refresh
    })
    return neighbours.assign(of_model=name, checkpoint_id=str(row["checkpoint_id"]))

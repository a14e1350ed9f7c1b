"""Onboarding: the models of a dropped evaluation file -> their model embeddings in the pool (no training).

An onboarding run (onboarding_job) covers one dropped file, or the small files of one sensor tick
(``accepted_files``): a range of partitions, one per model key (one run whatever the number of models;
docs/onboarding.md, the queue's order). It materializes, in order:
1. ``onboarded_evaluations[key]`` for each model: the file's rows join the model's store (newest file wins per
   query_id);
2. ``model_embeddings``: the pool, once, with only these models' rows recomputed by one forward pass (and its
   blocking reproducibility check, on the new state);
3. ``onboarded_model_embedding[key]`` for each model: its row, its five nearest models and its per-benchmark
   profile, with a warning (metadata, run log, the check ``onboarded_model_trustworthy``) when the drop is small
   or its queries unlike the pool's (locus_model.onboarding.onboarding_warnings); for an onboarded model, its
   capability estimates (docs/estimates.md), stored for the atlas and logged to an MLflow run
   (tracking.log_onboarding_estimates).
Each model keeps its own materializations, metadata and check results. A model that fails in step 2 or 3 is
left out and named, the others are onboarded, and the run fails at its end (docs/onboarding.md). A failure of
step 1 is the file's (its manifest or parts unreadable, the file changed): nothing of it goes further.
"""

import warnings

import dagster as dg
import pandas as pd
from pydantic import Field

from locus_model.data.errors import EvaluationDataError
from locus_model.markdown import escape_frame
from locus_pipeline.defs.assets.newcomer import PRECISION_CHECK, TRUST_CHECK, PoolView, newcomer
from locus_pipeline.defs.assets.pool import pool_failures_in_run
from locus_pipeline.defs.metadata import COLUMN_DOCS, OWNERS, home_path, table_schema
from locus_pipeline.defs.partitions import onboarded_models
from locus_pipeline.defs.resources import MlflowTracking
from locus_pipeline.storage import LocusHome

GROUP = "onboarding"


class OnboardingConfig(dg.Config):
    """Set by the onboarding sensor; leave it empty to re-embed the partitions' models from their stored evaluations."""

    accepted_file: str = Field(
        default="",
        description="Stem of the accepted file in LOCUS_HOME/incoming/accepted/ "
        "holding the models' new rows; the run's partitions are its models' keys.",
    )
    accepted_files: list[str] = Field(
        default_factory=list,
        description="Several accepted files in one run (the "
        "sensor coalesces the small drops of a tick), in intake order, after "
        "accepted_file; the run's partitions are all their models' keys.",
    )


# A backfill launched in the UI over many partitions runs as one run too (the sensor's runs are ranges already).
ONE_RUN = dg.BackfillPolicy.single_run()


def _failure(err) -> dg.Failure:
    """An EvaluationDataError as a run failure that shows file, row, column and fix in the UI."""
    return dg.Failure(
        description=str(err),
        metadata={
            "file": str(err.file),
            "row": str(err.row),
            "column": str(err.column),
            "problem": err.problem,
            "how_to_fix": str(err.fix),
        },
    )


@dg.asset(owners=OWNERS, partitions_def=onboarded_models, group_name=GROUP, kinds={"parquet"}, backfill_policy=ONE_RUN)
def onboarded_evaluations(
    context: dg.AssetExecutionContext, config: OnboardingConfig, home: LocusHome
) -> dg.MaterializeResult:
    """Every evaluation of each onboarded model of the run so far (LOCUS_HOME/onboarded/<model_key>.parquet): the
    rows of each accepted file for it, one row per query_id, the newest file (by the time it was received) winning."""
    # why: torch stays out of the code location's load (test_the_code_location_loads_without_torch)
    from locus_model.onboarding import as_store
    from locus_pipeline.intake import DropFolder, accepted_rows, changed_since_intake, intake_order, read_manifest

    keys = context.partition_keys
    stems = [stem for stem in dict.fromkeys([config.accepted_file, *config.accepted_files]) if stem]
    folder, files = DropFolder(home), []  # (stem, received, {model_key: model}) per file, in intake order
    for stem in stems:
        try:
            manifest = read_manifest(folder, stem)
        except EvaluationDataError as err:
            raise _failure(err) from err
        changed = changed_since_intake(folder, manifest)
        if changed:  # half a file must never be onboarded: the sensor takes the whole file in again once it settles
            raise dg.Failure(
                description=f"{manifest.original_name} changed after it was taken in: {changed}. Nothing was onboarded "
                "from it; the drop-folder sensor takes the whole file in again once it settles.",
                metadata={
                    "accepted_file": stem,
                    "how_to_fix": "write the file as <name>.part, then rename "
                    "it to <name> when it is complete (docs/onboarding.md); nothing to do for this run",
                },
            )
        # newest = taken in last, not the file's modification time
        files.append((stem, intake_order(manifest), {entry.model_key: entry.model for entry in manifest.models}))
    if files:
        foreign = [key for key in keys if not any(key in names for _, _, names in files)]
        if foreign:
            shown = ", ".join(stems) if len(stems) < 4 else f"{stems[0]} and {len(stems) - 1} more"
            raise dg.Failure(
                description=f"{shown} hold(s) no model with key(s) {', '.join(foreign[:10])}",
                metadata={
                    "accepted_file": shown,
                    "how_to_fix": "launch the partitions of "
                    "the file's models (the sensor does this), or leave accepted_file empty",
                },
            )
    for key in keys:
        rows, store, source = None, None, ""
        for stem, received, names in sorted(files, key=lambda f: f[1]):  # each file's rows, oldest first
            if key not in names:
                continue
            try:
                rows = accepted_rows(folder, stem, names[key])
            except EvaluationDataError as err:
                raise _failure(err) from err
            store, source = home.record_evaluations(key, as_store(rows, received, stem)), stem
        if store is None:
            store = home.read_store(key)
        context.add_asset_metadata(store_metadata(home, key, store, source, rows), partition_key=key)
    return dg.MaterializeResult(metadata={"models_in_run": len(keys)})


def store_metadata(
    home: LocusHome, key: str, store: pd.DataFrame, accepted_file: str, rows: pd.DataFrame | None
) -> dict:
    """One model's onboarded_evaluations metadata: its store, what the file added."""
    profile = store.groupby("benchmark")["score"].agg(evaluations="size", accuracy="mean")
    return {
        "model": str(store["model"].iloc[0]),
        "evaluations": len(store),
        "new_evaluations_in_file": 0 if rows is None else len(rows),
        "accepted_file": accepted_file or "(none: re-embedding from the store)",
        "mean_score": round(float(store["score"].mean()), 4),
        "benchmarks": dg.MetadataValue.md(escape_frame(profile.round(4)).to_markdown()),
        "dagster/row_count": len(store),
        "path": home_path(home, home.store_path(key)),
    }


with warnings.catch_warnings():  # a check with partitions is a Dagster preview: each model's results on its partition
    warnings.simplefilter("ignore", dg.PreviewWarning)
    NEWCOMER_CHECKS = [
        dg.AssetCheckSpec(
            TRUST_CHECK,
            asset="onboarded_model_embedding",
            partitions_def=onboarded_models,
            description="The model's embedding rests on enough evaluations (the checkpoint's training "
            "budget, the pool's routable floor) of queries like the pool's (warning only)",
        ),
        dg.AssetCheckSpec(
            PRECISION_CHECK,
            asset="onboarded_model_embedding",
            partitions_def=onboarded_models,
            description="Every per-benchmark capability estimate's 90% interval is at most 20 points "
            "wide (warning only: ask the model more questions)",
        ),
    ]


@dg.asset(
    owners=OWNERS,
    partitions_def=onboarded_models,
    group_name=GROUP,
    kinds={"pytorch"},
    deps=["model_embeddings"],
    backfill_policy=ONE_RUN,
    check_specs=NEWCOMER_CHECKS,
    output_required=False,
)  # each model's materialization is yielded alone: a model that failed gets none
def onboarded_model_embedding(context: dg.AssetExecutionContext, home: LocusHome, mlflow: MlflowTracking):
    """Each onboarded model of the run as the pool holds it (newcomer.newcomer): its row, its five nearest models
    (Euclidean distance between model embeddings) and its per-benchmark profile beside theirs, one materialization
    and one result of each check per model. A model that fails, or that the run's pool step left out, is named;
    the others are materialized, then the run fails with the list."""
    failed = dict(pool_failures_in_run(context))
    view, written = PoolView(home), False
    for key in context.partition_keys:
        if key in failed:
            continue
        try:
            result = newcomer(context.log, context.run_id, home, mlflow, view, key, context.asset_key)
        except Exception as err:  # one model's failure must not lose the others: named below, the run fails
            failed[key] = f"{type(err).__name__}: {err}"
            context.log.error(f"model key {key}: not onboarded: {failed[key]}")
            continue
        path = home.write_table(context.asset_key.to_user_string(), result.neighbours, partition=key)
        written = True
        yield dg.AssetMaterialization(
            asset_key=context.asset_key,
            partition=key,
            metadata={
                **result.metadata,
                "path": home_path(home, path),
                "dagster/row_count": len(result.neighbours),
                "dagster/column_schema": table_schema(
                    result.neighbours, COLUMN_DOCS.get(context.asset_key.to_user_string())
                ),
            },
        )
        yield from result.checks
    if written:
        home.upload_changes()  # a remote home: the tables go to the bucket
    if not failed:  # the checks' step outputs (their results, per model, are the evaluations above)
        for check in context.assets_def.check_keys:
            yield dg.Output(None, output_name=context.assets_def.get_output_name_for_asset_check_key(check))
    else:
        raise dg.Failure(
            description=f"{len(failed)} of {len(context.partition_keys)} model(s) of this run were not "
            f"onboarded: {', '.join(sorted(failed)[:20])}; the others were",
            metadata={
                "failed_models": dg.MetadataValue.json(failed),
                "how_to_fix": "read each model's reason here and in the run log; fix its rows and "
                "drop its file again (only the failed models need to be in it)",
            },
        )

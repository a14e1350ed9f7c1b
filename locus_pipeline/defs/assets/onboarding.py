"""Onboarding: one model from a dropped evaluation file -> its model embedding in the pool (no training)."""


import dagster as dg
import pandas as pd
from pydantic import Field

from locus_pipeline.defs.partitions import onboarded_models
from locus_pipeline.defs.resources import LocusHome


class OnboardingConfig(dg.Config):
    """Set by the onboarding sensor; leave both empty to re-embed the partition's model from its stored evaluations."""

    accepted_file: str = Field(default="", description="Stem of the accepted file in LOCUS_HOME/incoming/accepted/ holding the model's new rows.")
    model: str = Field(default="", description="The model name exactly as in the file (the partition key is its safe form).")


@dg.asset(
    partitions_def=onboarded_models,
    group_name="onboarding",
    kinds={"pytorch", "parquet"},
    deps=["locus_checkpoint", "model_embeddings"],
)
def onboarded_model_embedding(context: dg.AssetExecutionContext, config: OnboardingConfig, home: LocusHome) -> pd.DataFrame:
    """The model's row in the pool (LOCUS_HOME/warehouse/model_embeddings.parquet), computed by one forward pass of
    the pool's checkpoint from all of the model's evaluations so far (newest file wins per query_id).

    Every other pool row stays bit-identical. A model of the training pool keeps its training embedding (its new
    evaluations are recorded in LOCUS_HOME/onboarded/ only). See docs/onboarding.md."""
    from locus_model.evaluations import EvaluationDataError, safe_model_key
    from locus_model.onboarding import onboard_from_manifest, reembed_onboarded

    key = context.partition_key
    if config.model and safe_model_key(config.model) != key:
        raise dg.Failure(
            description=f"model {config.model!r} has the key {safe_model_key(config.model)!r}, not this partition {key!r}",
            metadata={"how_to_fix": "launch the partition whose key is the model's safe key (the sensor does this)"},
        )
    try:
        if config.accepted_file:
            result = onboard_from_manifest(home.path, config.accepted_file, config.model)
        else:
            result = reembed_onboarded(home.path, key)
    except EvaluationDataError as err:  # shown as the run's failure reason in the UI
        raise dg.Failure(
            description=str(err),
            metadata={"file": str(err.file), "row": str(err.row), "column": str(err.column), "problem": err.problem, "how_to_fix": str(err.fix)},
        ) from err
    note = {
        "new": "new model added to the pool",
        "replaced": "embedding recomputed from all evaluations so far (newest file wins per query_id)",
        "kept-training": "model of the training pool: its training embedding is kept, the new evaluations are only recorded "
        "in LOCUS_HOME/onboarded/ (add them to the training source and re-materialize model_embeddings to use them)",
    }[result.action]
    if result.action == "kept-training":
        context.log.warning(f"{result.model}: {note}")
    context.add_output_metadata(
        {
            "model": result.model,
            "action": result.action,
            "note": note,
            "n_evaluations": result.n_evaluations,
            "new_evaluations_in_file": result.new_evaluations,
            "newly_encoded_queries": result.newly_encoded,
            "nearest_pool_model": result.nearest_model,
            "distance_to_nearest": float(result.nearest_distance),
            "checkpoint_id": result.checkpoint_id,
            "accepted_file": config.accepted_file or "(re-embedded from the store)",
        }
    )
    return result.row

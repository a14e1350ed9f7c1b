"""Jobs: the main job materializes the whole unpartitioned graph (what `make demo` runs); the pool's own changes
(a rebuild, one onboarding, one removal)."""

import dagster as dg

from locus_pipeline.defs.assets.pool import REMOVAL_JOB
from locus_pipeline.defs.partitions import onboarded_models

locus_job = dg.define_asset_job(
    "locus_job",
    selection=dg.AssetSelection.all() - dg.AssetSelection.groups("onboarding", "traffic"),
    description="Raw evaluations -> validated table -> query encodings -> training -> embedding pool -> evaluation and "
    "analyses.",
)

pool_job = dg.define_asset_job(
    "pool_job",
    selection=dg.AssetSelection.assets("model_embeddings").upstream() - dg.AssetSelection.groups("onboarding"),
    description="Only what the embedding pool needs: ingestion -> encodings -> training -> model_embeddings.",
)

onboarding_job = dg.define_asset_job(
    "onboarding_job",
    selection=dg.AssetSelection.groups("onboarding") | dg.AssetSelection.assets("model_embeddings"),
    partitions_def=onboarded_models,
    executor_def=dg.in_process_executor,  # three small steps: no second process to start (saves seconds per model)
    description="Onboard one model (partition = its key) from an accepted file: record its evaluations, embed it by "
    "one forward pass of the pool's checkpoint into the pool, show its nearest models.",
)

reports_refresh_job = dg.define_asset_job(
    "reports_refresh_job",
    selection=dg.AssetSelection.groups("analyses"),
    description="Re-materialize the analyses (reports) from the current pool, e.g. after onboarding.",
)

pool_removal_job = dg.define_asset_job(
    REMOVAL_JOB,
    selection=dg.AssetSelection.assets("model_embeddings"),
    executor_def=dg.in_process_executor,
    config={"ops": {"model_embeddings": {"config": {"remove_model": ""}}}},
    description="Remove one onboarded model from the pool (launchpad: ops.model_embeddings.config.remove_model = its "
    "name; or `locus pool remove NAME`). Its evaluations stay in incoming/accepted/ and onboarded/removed/; "
    "the reports refresh follows, and `locus serve` stops routing to it at its next reload.",
)

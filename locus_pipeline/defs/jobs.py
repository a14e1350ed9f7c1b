"""Jobs: the main job materializes the whole unpartitioned graph (what `make demo` runs)."""

import dagster as dg

locus_job = dg.define_asset_job(
    "locus_job",
    selection=dg.AssetSelection.all() - dg.AssetSelection.groups("onboarding"),
    description="Raw evaluations -> validated table -> query encodings -> training -> embedding pool -> evaluation and analyses.",
)

pool_job = dg.define_asset_job(
    "pool_job",
    selection=dg.AssetSelection.assets("model_embeddings").upstream(),
    description="Only what the embedding pool needs: ingestion -> encodings -> training -> model_embeddings.",
)

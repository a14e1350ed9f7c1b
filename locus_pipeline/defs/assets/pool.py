"""The model embedding pool: every model embedded by the current checkpoint, one table."""


import dagster as dg
import pandas as pd

from locus_pipeline.defs.resources import LocusHome


@dg.asset(kinds={"pytorch", "parquet"}, group_name="pool")
def model_embeddings(
    context: dg.AssetExecutionContext,
    evaluation_table: pd.DataFrame,
    query_encodings: pd.DataFrame,
    training_split: pd.DataFrame,
    locus_checkpoint: pd.DataFrame,
    home: LocusHome,
) -> pd.DataFrame:
    """The pool (LOCUS_HOME/warehouse/model_embeddings.parquet): one embedding per model, all from one checkpoint.

    Training-pool models are embedded from all their evaluations outside the held-out test queries;
    onboarded models (dropped files) from all their evaluations so far. A new checkpoint re-embeds them all.
    """
    from locus_model.model import load_checkpoint
    from locus_model.onboarding import onboarded_evaluations
    from locus_model.pool import embed_models
    from locus_model.workflow import pool_evaluations

    ckpt = locus_checkpoint.iloc[0]
    model, _ = load_checkpoint(ckpt["path"])
    trained = embed_models(model, pool_evaluations(evaluation_table, training_split), query_encodings, checkpoint=ckpt["checkpoint_id"], source="training")
    onboarded = onboarded_evaluations(home.path)
    onboarded = onboarded[~onboarded["model"].isin(trained["model"])] if len(onboarded) else onboarded
    parts = [trained]
    if len(onboarded):
        from locus_model.onboarding import encodings_for

        parts.append(embed_models(model, onboarded, encodings_for(onboarded, str(ckpt["encoder"]), home.path), checkpoint=ckpt["checkpoint_id"], source="onboarded"))
    pool = pd.concat(parts, ignore_index=True)
    context.add_output_metadata(
        {
            "models": len(pool),
            "onboarded_models": int((pool["source"] == "onboarded").sum()),
            "checkpoint_id": str(ckpt["checkpoint_id"]),
            "preview": dg.MetadataValue.md(pool.drop(columns=["embedding"]).head(15).to_markdown(index=False)),
        }
    )
    return pool

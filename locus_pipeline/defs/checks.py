"""Asset checks: each reports the actual value beside its threshold."""


import dagster as dg
import numpy as np
import pandas as pd

from locus_pipeline.defs.assets.evaluation import routing_evaluation
from locus_pipeline.defs.assets.ingestion import evaluation_table
from locus_pipeline.defs.assets.pool import model_embeddings


@dg.asset_check(asset=evaluation_table, description="The stored table passes the evaluation data contract again.")
def evaluation_table_valid(evaluation_table: pd.DataFrame) -> dg.AssetCheckResult:
    from locus_model.evaluations import EvaluationDataError, validate_evaluations

    try:
        validate_evaluations(evaluation_table, source="warehouse/evaluation_table.parquet")
        problem = ""
    except EvaluationDataError as err:
        problem = str(err)
    return dg.AssetCheckResult(
        passed=not problem,
        metadata={"rows": len(evaluation_table), "problem": problem or "none", "scores_in_0_1": bool(evaluation_table["score"].between(0, 1).all())},
    )


@dg.asset_check(asset=model_embeddings, description="Every model in the pool has a finite embedding.")
def pool_embeddings_finite(model_embeddings: pd.DataFrame) -> dg.AssetCheckResult:
    z = np.stack(model_embeddings["embedding"].to_numpy())
    bad = int((~np.isfinite(z)).any(axis=1).sum())
    return dg.AssetCheckResult(passed=bad == 0, metadata={"models_with_non_finite_embedding": bad, "threshold": 0, "models": len(z)})


@dg.asset_check(
    asset=model_embeddings,
    blocking=True,
    additional_ins={"evaluation_table": dg.AssetIn("evaluation_table"), "query_encodings": dg.AssetIn("query_encodings"),
                    "training_split": dg.AssetIn("training_split"), "locus_checkpoint": dg.AssetIn("locus_checkpoint")},
    description="Re-embedding every training-pool model from the same evaluations reproduces its embedding exactly.",
)
def pool_embeddings_reproducible(
    model_embeddings: pd.DataFrame,
    evaluation_table: pd.DataFrame,
    query_encodings: pd.DataFrame,
    training_split: pd.DataFrame,
    locus_checkpoint: pd.DataFrame,
) -> dg.AssetCheckResult:
    from locus_model.model import load_checkpoint
    from locus_model.pool import embed_models
    from locus_model.workflow import pool_evaluations

    model, _ = load_checkpoint(locus_checkpoint["path"].iloc[0])
    stored = model_embeddings[model_embeddings["source"] == "training"].set_index("model")
    again = embed_models(model, pool_evaluations(evaluation_table, training_split), query_encodings, checkpoint="check", source="training").set_index("model")
    a = np.stack(stored.loc[again.index, "embedding"].to_numpy()).astype(np.float32)
    b = np.stack(again["embedding"].to_numpy()).astype(np.float32)
    differing = int((a != b).any(axis=1).sum())
    return dg.AssetCheckResult(
        passed=differing == 0,
        metadata={"models_checked": len(b), "models_not_bit_identical": differing, "threshold": 0, "max_abs_diff": float(np.abs(a - b).max())},
    )


@dg.asset_check(asset=routing_evaluation, description="LOCUS routing accuracy above the best single model (warning only).")
def locus_beats_best_single(routing_evaluation: pd.DataFrame) -> dg.AssetCheckResult:
    head = routing_evaluation[(routing_evaluation["benchmark"] == "") & (routing_evaluation["group"] == "all")]
    acc = head[head["metric"] == "routing_acc"].set_index("method")["mean"]
    diff = head[(head["method"] == "locus") & (head["metric"].str.startswith("vs_best_single"))].set_index("metric")["mean"]
    return dg.AssetCheckResult(
        passed=bool(acc.get("locus", np.nan) > acc.get("best_single", np.nan)),
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "locus_routing_acc": float(acc.get("locus", np.nan)),
            "threshold_best_single_routing_acc": float(acc.get("best_single", np.nan)),
            "bootstrap_ci_low": float(diff.get("vs_best_single.ci_low", np.nan)),
            "bootstrap_ci_high": float(diff.get("vs_best_single.ci_high", np.nan)),
        },
    )

"""Asset checks: each reports the actual value beside its threshold."""


import dagster as dg
import numpy as np
import pandas as pd

from locus_pipeline.defs.assets.evaluation import routing_evaluation
from locus_pipeline.defs.assets.ingestion import evaluation_table
from locus_pipeline.defs.assets.pool import embed_onboarded, embed_training_source, model_embeddings
from locus_pipeline.storage import LocusHome


@dg.asset_check(asset=evaluation_table, description="The stored table passes the evaluation data contract again.")
def evaluation_table_valid(evaluation_table: pd.DataFrame) -> dg.AssetCheckResult:
    from locus_model.data.contract import validate_evaluations
    from locus_model.data.errors import EvaluationDataError

    try:
        validate_evaluations(evaluation_table, source="the evaluation_table asset")
        problem = ""
    except EvaluationDataError as err:
        problem = str(err)
    return dg.AssetCheckResult(
        passed=not problem,
        metadata={"rows": len(evaluation_table), "problem": problem or "none", "scores_in_0_1": bool(evaluation_table["score"].between(0, 1).all())},
    )


@dg.asset_check(asset=model_embeddings, description="Every model in the pool has a finite embedding.")
def pool_embeddings_finite(home: LocusHome) -> dg.AssetCheckResult:
    pool = home.read_pool()
    z = np.stack(pool["embedding"].to_numpy())
    bad = int((~np.isfinite(z)).any(axis=1).sum())
    return dg.AssetCheckResult(passed=bad == 0, metadata={"models_with_non_finite_embedding": bad, "threshold": 0, "models": len(z)})


@dg.asset_check(
    asset=model_embeddings,
    blocking=True,
    description="Re-embedding pool rows from their evaluations (training source or onboarded store) with the pool's "
                "checkpoint reproduces them bit for bit: every row after a rebuild, the onboarded model after an onboarding.",
)
def pool_embeddings_reproducible(context: dg.AssetCheckExecutionContext, home: LocusHome) -> dg.AssetCheckResult:
    from locus_model.data.matrix import fingerprint_evaluations
    from locus_model.pool import check_pool

    with home.lock("pool"):  # the state the last materialization left, not one half-way through another write
        pool = home.read_pool()
        check_pool(pool)
        checkpoint = home.pool_checkpoint(pool)
        key = context.run.tags.get("dagster/partition")
        rows = pool if key is None else pool[pool["model_key"] == key]
        from_source = rows[rows["source"] != "onboarded"]
        again = [embed_training_source(home, checkpoint, set(from_source["model"].astype(str)))] if len(from_source) else []
        pending = []  # onboarded models whose store already holds newer rows: their own onboarding run re-embeds them
        current = []  # stores whose rows the pool row was embedded from
        for r in rows[rows["source"] == "onboarded"].itertuples():
            store = home.read_store(r.model_key)
            if fingerprint_evaluations(store) != r.evaluations_fingerprint:
                pending.append(r.model)
            else:
                current.append(store)
        if current:
            again.append(embed_onboarded(home, checkpoint, current, set()))
    again = pd.concat(again, ignore_index=True).set_index("model") if again else pd.DataFrame(columns=["embedding"])
    stored = pool.set_index("model").loc[again.index]
    a = np.stack(stored["embedding"].to_numpy()).astype(np.float32) if len(again) else np.zeros((0, 1), np.float32)
    b = np.stack(again["embedding"].to_numpy()).astype(np.float32) if len(again) else np.zeros((0, 1), np.float32)
    differing = int((a != b).any(axis=1).sum())
    return dg.AssetCheckResult(
        passed=differing == 0,
        metadata={"models_checked": len(b), "models_not_bit_identical": differing, "threshold": 0,
                  "max_abs_diff": float(np.abs(a - b).max()) if len(b) else 0.0, "checkpoint_id": checkpoint.checkpoint_id,
                  "scope": "every row" if key is None else f"model key {key}",
                  "pending_onboarded_models": ", ".join(pending) or "none"},
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

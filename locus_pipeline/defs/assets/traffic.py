"""Relearning from traffic: the answers `locus serve` routed and someone graded become evaluations of the model that
gave them (docs/serve.md, "Learning from outcomes"), and the model is embedded again with them.

Per pool model with graded traffic (a partition of ``traffic_models``, added by ``traffic_sensor`` once the model has
gained ``MIN_NEW_ANSWERS`` graded answers since its last relearning):
1. ``traffic_evaluations[key]``: the model's graded answers from the home's traffic log (LocusHome.traffic_evaluations,
   the answers routed with the pool's checkpoint; a dropped file's queries encoded here), one row per query, only
   those that count for everyone (storage/traffic.py ``shared_evidence``: a grader's, or where at least two clients
   by credential agree; one client alone steers its own routing, never the pool row); after a reset none may be
   left, and the row goes back to the evaluations' embedding;
2. ``traffic_model_embedding[key]`` (declarative automation: after each new ``traffic_evaluations[key]``): the model's
   pool row embedded again, by one forward pass, from its evaluations and these answers; the pool is replaced
   (``locus serve`` reloads it within a poll, no restart), the metadata and an MLflow run say how its estimates moved.
The checkpoint, the evaluation table and the onboarded stores are never changed by traffic; a pool rebuild embeds
from the evaluations alone again (the next relearning adds the traffic back).
"""

import dagster as dg
import numpy as np
import pandas as pd

from locus_model.markdown import escape_frame
from locus_pipeline.defs.metadata import OWNERS, home_path
from locus_pipeline.defs.partitions import traffic_models
from locus_pipeline.defs.resources import MlflowTracking
from locus_pipeline.storage import LocusHome

GROUP = "traffic"
MIN_NEW_ANSWERS = 50  # graded answers a model gains before it is embedded again (traffic_sensor)


# Declarative automation: a partition is requested when its traffic_evaluations partition was newly materialized (the
# sensor's threshold decided it was due), unless a run of it is in progress. Not eager(): that also waits on
# model_embeddings' own materialization status, which a relearning does not need (it reads the pool it updates).
# On its first evaluation (the automation sensor's first tick: defs/automation.py) newly_updated sees nothing, so a
# partition whose traffic_evaluations was materialized before then is requested once by the second term (issue 75).
AFTER_NEW_TRAFFIC = (
    (
        dg.AutomationCondition.any_deps_match(
            dg.AutomationCondition.newly_updated() | dg.AutomationCondition.will_be_requested()
        ).allow(dg.AssetSelection.assets("traffic_evaluations"))
        | (
            dg.AutomationCondition.initial_evaluation()
            & dg.AutomationCondition.any_deps_match(~dg.AutomationCondition.missing()).allow(
                dg.AssetSelection.assets("traffic_evaluations")
            )
        ).with_label("graded traffic from before the first evaluation")
    )
    & ~dg.AutomationCondition.in_progress()
).with_label("after new graded traffic")


def pool_row(home: LocusHome, key: str, pool: pd.DataFrame | None = None) -> pd.Series:
    pool = home.read_pool() if pool is None else pool
    rows = pool[pool["model_key"].astype(str) == key]
    if rows.empty:
        raise dg.Failure(
            description=f"no pool model has the key {key!r} (removed since its traffic was graded?)",
            metadata={"how_to_fix": "nothing to do for a removed model; otherwise check the pool"},
        )
    return rows.iloc[0]


@dg.asset(owners=OWNERS, partitions_def=traffic_models, group_name=GROUP, kinds={"parquet"})
def traffic_evaluations(context: dg.AssetExecutionContext, home: LocusHome) -> dg.MaterializeResult:
    """One pool model's graded answers in locus serve's traffic (traffic/ under LOCUS_HOME) that count for everyone
    (a grader's, or clients that agree), as evaluations: model, query_id (traffic-<the query's keyed hash prefix>),
    score, source, time, graded_by (the clients) and the query's encoding (the text is not kept). None after a
    reset: an empty table, and the row is embedded again from its evaluations alone."""
    key = context.partition_key
    row = pool_row(home, key)
    name, checkpoint_id = str(row["model"]), str(row["checkpoint_id"])
    table = home.traffic_evaluations(checkpoint_id)
    table = table[table["model"] == name].reset_index(drop=True)
    texts = table["encoding"].isna()
    if texts.any() and len(table):  # a dropped file's (model, query) rows: encoded with the checkpoint's encoder
        checkpoint = home.pool_checkpoint()
        encoded, _ = home.encode(table[texts][["query_id", "query"]], checkpoint.encoder, runtime=checkpoint.runtime)
        vectors = dict(zip(encoded["query_id"], encoded["encoding"]))
        table.loc[texts, "encoding"] = table.loc[texts, "query_id"].map(vectors)
    table = table.assign(encoding=[np.asarray(v, np.float32) for v in table["encoding"]])
    out = table[["model", "query_id", "score", "source", "time", "graded_by", "encoding"]]
    path = home.write_table("traffic_evaluations", out, partition=key)
    by_source = out.groupby("source")["score"].agg(answers="size", mean_score="mean").round(4)
    return dg.MaterializeResult(
        metadata={
            "model": name,
            "graded_answers": len(out),
            "mean_score": round(float(out["score"].mean()), 4) if len(out) else None,
            "from_graders": int(table["grader"].sum()),
            "from_agreeing_clients": int((~table["grader"].astype(bool)).sum()),
            "by_source": dg.MetadataValue.md(escape_frame(by_source).to_markdown() if len(out) else "none"),
            "dagster/row_count": len(out),
            "path": home_path(home, path),
        }
    )


@dg.asset(
    owners=OWNERS,
    partitions_def=traffic_models,
    group_name=GROUP,
    kinds={"pytorch"},
    deps=[traffic_evaluations, "model_embeddings"],
    automation_condition=AFTER_NEW_TRAFFIC,
)
def traffic_model_embedding(
    context: dg.AssetExecutionContext, home: LocusHome, mlflow: MlflowTracking
) -> dg.MaterializeResult:
    """One pool model embedded again from its evaluations and its graded traffic (one forward pass; the pool is
    replaced under its lock): its row before and after, how far its embedding and its standing moved."""
    # why: torch stays out of the code location's load (test_the_code_location_loads_without_torch)
    from locus_model.pool import upsert_rows
    from locus_pipeline.pool_rows import relearned_rows

    key = context.partition_key
    traffic = home.read_table("traffic_evaluations", partition=key)
    moved: dict = {}

    def change(current: pd.DataFrame | None) -> pd.DataFrame:
        if current is None:
            raise dg.Failure(description="there is no pool", metadata={"how_to_fix": "materialize locus_job first"})
        before = pool_row(home, key, current)
        checkpoint = home.pool_checkpoint(current)
        after = relearned_rows(home, checkpoint, str(before["model"]), str(before["source"]), traffic)
        standing = checkpoint.router.standing(np.stack([before["group_profile"], after["group_profile"].iloc[0]]))
        moved.update(
            model=str(before["model"]),
            before=before,
            after=after.iloc[0],
            standing=standing,
            groups=list(checkpoint.router.groups.names),
        )
        return upsert_rows(current, after)

    home.update_pool(change)
    before, after = moved["before"], moved["after"]
    shift = float(
        np.linalg.norm(np.asarray(after["embedding"], np.float64) - np.asarray(before["embedding"], np.float64))
    )
    profiles = pd.DataFrame(
        {
            "group": moved["groups"],
            "before": np.round(before["group_profile"], 4),
            "after": np.round(after["group_profile"], 4),
        }
    )
    metrics = {
        "traffic_answers": float(len(traffic)),
        "traffic_mean_score": float(traffic["score"].mean()) if len(traffic) else 0.0,
        "evaluations_before": float(before["n_evaluations"]),
        "evaluations_after": float(after["n_evaluations"]),
        "embedding_shift": shift,
        "standing_before": float(moved["standing"][0]),
        "standing_after": float(moved["standing"][1]),
    }
    with mlflow.start_run(
        f"relearning {moved['model']}",
        {
            "locus/kind": "relearning",
            "locus/model": moved["model"],
            "dagster.run_id": context.run_id,
            "dagster.run_url": mlflow.dagster_run_url(context.run_id),
            "dagster.asset": "traffic_model_embedding",
            "checkpoint_id": str(after["checkpoint_id"]),
        },
    ) as run:
        import mlflow as mlflow_module  # why: seconds to import; only a relearning run needs it

        mlflow_module.log_metrics(metrics)
        url = mlflow.run_url(run.info.experiment_id, run.info.run_id)
    return dg.MaterializeResult(
        metadata={
            "model": moved["model"],
            **{k: round(v, 4) for k, v in metrics.items()},
            "group_profiles": dg.MetadataValue.md(escape_frame(profiles).to_markdown(index=False)),
            "mlflow_run": dg.MetadataValue.url(url),
        }
    )

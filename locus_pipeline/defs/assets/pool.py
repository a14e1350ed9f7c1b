"""The model embedding pool: every model embedded by one checkpoint, one table, one owner.

Every change of the pool is a materialization of ``model_embeddings``:
- unpartitioned (``locus_job``, ``pool_job``, the UI): a rebuild with the current checkpoint: training-source
  models (in training or held out) from their evaluations outside the test queries, onboarded models from their
  stores;
- in an onboarding run (``onboarding_job``, one run per dropped file over its models' partitions): only those
  models' rows, embedded in one pass with the checkpoint the pool already carries (one pool write per run);
- a removal (``pool_removal_job``, or `locus pool remove NAME`, with ``remove_model`` set): one onboarded model's
  row leaves the pool (its evaluations stay in incoming/accepted/ and onboarded/removed/).
Both read and write under the pool lock (LocusHome.update_pool), so no update is ever lost, whatever the order.
"""

import dagster as dg
import pandas as pd
from pydantic import Field

from locus_model.data.contract import safe_model_key
from locus_model.markdown import escape_frame
from locus_pipeline.defs.metadata import OWNERS, atlas_link, home_path, pool_schema
from locus_pipeline.defs.partitions import onboarded_models, run_model_keys
from locus_pipeline.defs.resources import MlflowTracking
from locus_pipeline.storage import LocusHome, StorageError

POOL_GROUP = "pool"
REMOVAL_JOB = "pool_removal_job"
NEW_EVALUATIONS = "models_with_new_evaluations"  # metadata: the rows the reproducibility check re-embeds in full


def onboard_change(home: LocusHome, keys: list[str], changed: dict):
    """The pool change of an onboarding run: the rows of models ``keys`` from their stores, embedded in one pass
    with the checkpoint the pool already carries (a model of the training source keeps its training row). A model
    whose row cannot be made is left out and named in ``changed["failed_models"]``; the others go in. What
    happened goes into ``changed``."""
    # why: torch stays out of the code location's load (test_the_code_location_loads_without_torch)
    from locus_model.pool import models_with_new_evaluations, upsert_rows

    def change(current: pd.DataFrame | None) -> pd.DataFrame:
        if current is None:
            raise dg.Failure(
                description="there is no pool yet to onboard into",
                metadata={"how_to_fix": "materialize locus_job (make demo) first"},
            )
        checkpoint = home.pool_checkpoint(current)
        training = home.training_models()
        actions, failed, stores = {}, {}, {}
        for key in keys:
            try:
                store = home.read_store(key)
            except Exception as err:  # one model's unreadable store must not lose the others: named, left out
                failed[key] = f"its store: {type(err).__name__}: {err}"
                continue
            name = str(store["model"].iloc[0])
            if name in training:
                actions[name] = "kept-training"
            else:
                actions[name] = "replaced" if (current["model"] == name).any() else "new"
                stores[key] = store
        rows = embedded_rows(home, checkpoint, stores, failed)
        new = upsert_rows(current, rows) if rows is not None and len(rows) else current
        changed.update(actions=actions, **({"failed_models": failed} if failed else {}))
        if len(keys) == 1 and actions:  # one model: its name and what happened to it, as fields of their own
            ((name, action),) = actions.items()
            changed.update(model=name, model_key=keys[0], action=action)
        changed[NEW_EVALUATIONS] = models_with_new_evaluations(current, new)
        return new

    return change


def embedded_rows(home: LocusHome, checkpoint, stores: dict[str, pd.DataFrame], failed: dict) -> pd.DataFrame | None:
    """The pool rows of onboarded models (model key -> store): one forward pass for all of them; when that fails,
    one per model, and a model that fails alone is named in ``failed`` (model key -> reason) and left out."""
    from locus_pipeline.pool_rows import onboarded_rows  # why: torch stays out of the code location's load

    try:
        return onboarded_rows(home, checkpoint, list(stores.values()), set())
    except Exception:  # which model? each alone, so that one bad model does not keep the others out of the pool
        if len(stores) == 1:
            raise
    rows = []
    for key, store in stores.items():
        try:
            rows.append(onboarded_rows(home, checkpoint, [store], set()))
        except Exception as err:  # this model's own failure: named in the metadata and by the run's last step
            failed[key] = f"its embedding: {type(err).__name__}: {err}"
    return pd.concat(rows, ignore_index=True) if rows else None


def rebuild_change(home: LocusHome, changed: dict):
    """The pool change of a rebuild: every model embedded with the current locus_checkpoint."""
    # why: torch stays out of the code location's load (test_the_code_location_loads_without_torch)
    from locus_model.pool import models_with_new_evaluations
    from locus_pipeline.pool_rows import onboarded_rows, training_source_rows

    def change(current: pd.DataFrame | None) -> pd.DataFrame:
        checkpoint = home.load_checkpoint(home.current_checkpoint().checkpoint_id)
        trained = training_source_rows(home, checkpoint)
        stores = [home.read_store(k) for k in home.onboarded_keys()]
        onboarded = onboarded_rows(home, checkpoint, stores, set(trained["model"]))
        new = pd.concat([trained] + ([onboarded] if onboarded is not None else []), ignore_index=True)
        changed.update(
            {"action": "rebuilt", NEW_EVALUATIONS: models_with_new_evaluations(current, new)},
            previous_checkpoint=str(current["checkpoint_id"].iloc[0]) if current is not None and len(current) else "",
        )
        return new

    return change


def pool_metadata_in_run(instance: dg.DagsterInstance, run_id: str, field: str):
    """The value of metadata ``field`` of the pool's (last) materialization in run ``run_id``; None when the run
    did not materialize the pool or its materialization has no such field."""
    found = None
    for event in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION):
        materialization = event.asset_materialization
        if materialization is not None and materialization.asset_key == dg.AssetKey("model_embeddings"):
            value = materialization.metadata.get(field)
            found = value.value if value is not None else found
    return found


def pool_failures_in_run(context: dg.AssetExecutionContext) -> dict[str, str]:
    """Model key -> reason of each model this run's pool step left out of the pool."""
    return dict(pool_metadata_in_run(context.instance, context.run.run_id, "failed_models") or {})


def pool_summary(pool: pd.DataFrame) -> dict:
    by_source = pool["source"].value_counts()
    newest = pool.sort_values("embedded_at", ascending=False).head(10)
    return {
        "models": len(pool),
        "training_models": int(by_source.get("training", 0)),
        "held_out_models": int(by_source.get("held_out", 0)),
        "onboarded_models": int(by_source.get("onboarded", 0)),
        "checkpoint_id": str(pool["checkpoint_id"].iloc[0]) if len(pool) else "",
        "dagster/row_count": len(pool),
        "newest": dg.MetadataValue.md(
            escape_frame(newest[["model", "source", "n_evaluations", "embedded_at"]]).to_markdown(index=False)
        ),
    }


class PoolChangeConfig(dg.Config):
    """What a run changes in the pool besides a rebuild or an onboarding: a removal."""

    remove_model: str = Field(
        default="",
        description="An onboarded model to remove from the pool, its name exactly "
        "as the pool's `model` column has it (pool_removal_job; `locus pool remove NAME`). "
        "Empty: a rebuild, or the onboarding run's model.",
    )


def removal(home: LocusHome, context: dg.AssetExecutionContext, name: str, changed: dict) -> pd.DataFrame:
    """The pool change of a removal (LocusHome.remove_onboarded), what happened in ``changed``."""
    if run_model_keys(context.instance, context.run.tags):
        raise dg.Failure(
            description=f"remove_model={name!r} in an onboarding run (partitions {context.run.tags})",
            metadata={"how_to_fix": f"launch {REMOVAL_JOB} (or `locus pool remove NAME`) instead"},
        )

    try:
        pool, kept = home.remove_onboarded(name)
    except StorageError as err:
        raise dg.Failure(description=str(err)) from err
    key = safe_model_key(name)  # its onboarding partition goes too: the UI shows no removed model as onboarded
    if context.instance.has_dynamic_partition(onboarded_models.name, key):
        context.instance.delete_dynamic_partition(onboarded_models.name, key)
    changed.update(
        action="removed",
        model=name,
        store_set_aside=kept,
        partition_removed=key,
        evaluations_kept="incoming/accepted/ (the files as dropped) and " + (kept or "no store"),
    )
    return pool


@dg.asset(
    kinds={"pytorch", "parquet"},
    group_name=POOL_GROUP,
    pool="model_embeddings",
    owners=OWNERS,
    tags={"layer": "pool"},
    metadata={"dagster/column_schema": pool_schema(), "dagster/table_name": "warehouse/model_embeddings.parquet"},
    deps=[
        "evaluation_table",
        "query_encodings",
        "training_split",
        "model_split",
        "locus_checkpoint",
        "onboarded_evaluations",
    ],
)
def model_embeddings(
    context: dg.AssetExecutionContext, config: PoolChangeConfig, home: LocusHome, mlflow: MlflowTracking
) -> dg.MaterializeResult:
    """The pool (LOCUS_HOME/warehouse/model_embeddings.parquet): one model embedding per model, all from one
    checkpoint. A rebuild embeds every model with the current locus_checkpoint; an onboarding run (a partition or
    a range of them = model keys) embeds only those models, with the pool's own checkpoint; a removal (remove_model)
    takes one
    onboarded model out. Schema: locus_model.pool."""
    changed: dict = {}
    if config.remove_model:
        pool = removal(home, context, config.remove_model, changed)
    elif context.job_name == REMOVAL_JOB:
        raise dg.Failure(
            description=f"{REMOVAL_JOB} without a model to remove",
            metadata={"how_to_fix": "set ops.model_embeddings.config.remove_model in the launchpad"},
        )
    else:
        keys = run_model_keys(context.instance, context.run.tags)
        pool = home.update_pool(onboard_change(home, keys, changed) if keys else rebuild_change(home, changed))
    for name, action in changed.get("actions", {}).items():
        if action == "kept-training":
            context.log.warning(
                f"{name} is a model of the training source: its pool row stays the training "
                "embedding; the new evaluations are recorded in its store only"
            )
    for key, reason in changed.get("failed_models", {}).items():
        context.log.error(f"model key {key} is left out of the pool: {reason}")
    for field in ("actions", "failed_models"):
        if field in changed:
            changed[field] = dg.MetadataValue.json(changed[field])
    new = changed.pop(NEW_EVALUATIONS, [])
    return dg.MaterializeResult(
        metadata={
            **pool_summary(pool),
            **changed,
            "path": home_path(home, home.pool_path),
            "rows_with_new_evaluations": len(new),
            NEW_EVALUATIONS: dg.MetadataValue.json(new),
            "dagster/column_schema": pool_schema(),
            **atlas_link(home, mlflow, str(pool["checkpoint_id"].iloc[0])),
        }
    )

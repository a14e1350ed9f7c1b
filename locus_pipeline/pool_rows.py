"""Pool rows from what the home holds, embedded by the library (locus_model.pool.embed_models) with a given
checkpoint: the training source's models from the evaluation table (outside the test queries), onboarded models
from their stores. What the pool asset writes and what its reproducibility check embeds again."""

from __future__ import annotations

import pandas as pd

from locus_model.data.contract import safe_model_key
from locus_model.data.matrix import evaluations_digest
from locus_model.pool import embed_models
from locus_pipeline.storage import LocusHome
from locus_pipeline.tables import pool_evaluations


def training_source_rows(home: LocusHome, checkpoint, models: set[str] | None = None) -> pd.DataFrame:
    """Pool rows of the training source's models (source "training" or "held_out"); ``models``: only these."""
    table, split = home.read_table("evaluation_table"), home.read_table("training_split")
    if models is not None:
        table = table[table["model"].astype(str).isin(models)]
    groups = home.read_table("model_split").set_index("model")["group"]
    rows = embed_models(
        checkpoint.router,
        pool_evaluations(table, split),
        home.read_table("query_encodings"),
        checkpoint=checkpoint.checkpoint_id,
        source="training",
    )
    rows.loc[rows["model"].map(groups).eq("held_out").to_numpy(), "source"] = "held_out"
    return rows


def onboarded_rows(home: LocusHome, checkpoint, stores: list[pd.DataFrame], training: set[str]) -> pd.DataFrame | None:
    """Pool rows of onboarded models (one forward pass over each one's store, as read by the caller);
    training-source names are skipped."""
    stores = [s for s in stores if len(s) and str(s["model"].iloc[0]) not in training]
    if not stores:
        return None
    evaluations = pd.concat(stores, ignore_index=True)
    encodings, _ = home.encode(evaluations, checkpoint.encoder, runtime=checkpoint.runtime)
    return embed_models(
        checkpoint.router, evaluations, encodings, checkpoint=checkpoint.checkpoint_id, source="onboarded"
    )


def relearned_rows(home: LocusHome, checkpoint, name: str, source: str, traffic: pd.DataFrame) -> pd.DataFrame:
    """The pool row of model ``name`` from its evaluations (the training source's outside the test queries, or an
    onboarded model's store) and its graded traffic (``traffic``: the traffic_evaluations table's rows of it, each
    with its query encoding): one forward pass, the source kept. What the model was trained on is not changed."""
    if source == "onboarded":
        table = home.read_store(safe_model_key(name))
        encodings, _ = home.encode(table, checkpoint.encoder, runtime=checkpoint.runtime)
    else:
        table = home.read_table("evaluation_table")
        table = pool_evaluations(table[table["model"].astype(str) == name], home.read_table("training_split"))
        encodings = home.read_table("query_encodings")
    traffic = traffic[~traffic["query_id"].isin(set(table["query_id"].astype(str)))]  # never one query twice
    evaluations = pd.concat(
        [
            table[[c for c in ("model", "query_id", "score", "benchmark") if c in table.columns]],
            traffic[["model", "query_id", "score"]].assign(benchmark=""),
        ],
        ignore_index=True,
    )
    encodings = pd.concat(
        [encodings[encodings["query_id"].isin(set(table["query_id"].astype(str)))], traffic[["query_id", "encoding"]]],
        ignore_index=True,
    )
    return embed_models(checkpoint.router, evaluations, encodings, checkpoint=checkpoint.checkpoint_id, source=source)


def embed_again(home: LocusHome, checkpoint, rows: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """``rows`` of the pool embedded again from the evaluations they were computed from: (the new rows, the
    onboarded models left out because their store already holds newer evaluations than their row; their own
    onboarding run embeds them)."""
    again, pending, current = [], [], []
    from_source = rows[rows["source"] != "onboarded"]
    if len(from_source):
        fresh = training_source_rows(home, checkpoint, set(from_source["model"].astype(str)))
        stored = dict(zip(from_source["model"].astype(str), from_source["evaluations_digest"]))
        for r in fresh[fresh["evaluations_digest"] != fresh["model"].map(stored)].itertuples():
            # embedded with its graded traffic (traffic_model_embedding): again from the same traffic table
            if home.table_path("traffic_evaluations", r.model_key).exists():
                relearned = relearned_rows(
                    home,
                    checkpoint,
                    str(r.model),
                    str(r.source),
                    home.read_table("traffic_evaluations", partition=r.model_key),
                )
                fresh = pd.concat([fresh[fresh["model"] != r.model], relearned], ignore_index=True)
        again.append(fresh)
    for r in rows[rows["source"] == "onboarded"].itertuples():
        store = home.read_store(r.model_key)
        if evaluations_digest(store) != r.evaluations_digest:
            pending.append(str(r.model))
        else:
            current.append(store)
    if current:
        again.append(onboarded_rows(home, checkpoint, current, set()))
    return (pd.concat(again, ignore_index=True) if again else rows.iloc[:0]), pending

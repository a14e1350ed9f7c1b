"""The pipeline's steps as plain functions over tables: query split and anchors, training arrays,
the evaluations a pool embedding is computed from. The pipeline's assets are thin adapters around these.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from locus_model.evaluate import Fold, choose_held_out, kfold_splits, table_split
from locus_model.evaluations import EvaluationMatrix


def query_split(table: pd.DataFrame, *, budget: int, seed: int, test_fraction: float = 0.1, val_fraction: float = 0.1) -> pd.DataFrame:
    """One row per query: query_id, split (train/val/test), anchor (one of the ``budget`` training anchors).

    A table with its own ``split`` column (EmbedLLM) keeps it; otherwise queries are split at random
    (seeded): ``test_fraction`` held-out test queries, ``val_fraction`` of the rest for validation.
    The anchors are one random set of ``budget`` training queries shared by every model (the reference
    protocol); training uses each model's evaluations on them.
    """
    matrix_queries = table.drop_duplicates("query_id").sort_values("query_id", kind="stable")
    query_ids = matrix_queries["query_id"].astype(str).to_numpy()
    if "split" in matrix_queries.columns:
        fold = table_split(matrix_queries["split"].to_numpy(str), budget=budget, seed=seed)[0]
    else:
        if not 0 < test_fraction < 0.5:
            raise ValueError(f"test_fraction={test_fraction} must be in (0, 0.5)")
        fold = kfold_splits(len(query_ids), folds=max(2, round(1 / test_fraction)), budget=budget, seed=seed, val_fraction=val_fraction)[0]
    split = np.full(len(query_ids), "train", dtype=object)
    split[fold.val], split[fold.test] = "val", "test"
    anchor = np.zeros(len(query_ids), dtype=bool)
    anchor[fold.anchors] = True
    return pd.DataFrame({"query_id": query_ids, "split": split.astype(str), "anchor": anchor})


def subset_queries(table: pd.DataFrame, n: int, *, seed: int) -> pd.DataFrame:
    """The rows of ``n`` queries drawn at random (seeded), stratified by benchmark: each benchmark keeps its share
    of the queries (largest remainders), so a subset of a large source keeps its mix of topics."""
    queries = table[["query_id", "benchmark"]].drop_duplicates("query_id").astype(str).sort_values("query_id")
    if n >= len(queries):
        return table
    if n < 1:
        raise ValueError(f"max_queries={n}: give a positive number of queries (0 = all)")
    rng = np.random.default_rng(seed)
    counts = queries["benchmark"].value_counts().sort_index()
    quota = counts * n / len(queries)
    take = np.floor(quota).astype(int)
    take[(quota - take).sort_values(ascending=False, kind="stable").index[: n - int(take.sum())]] += 1
    chosen = [rng.choice(group["query_id"].to_numpy(), size=int(take[b]), replace=False)
              for b, group in queries.groupby("benchmark", sort=True)]
    keep = set(np.concatenate(chosen).tolist())
    return table[table["query_id"].astype(str).isin(keep)].reset_index(drop=True)


def given_fold(split: pd.DataFrame, query_ids: list[str]) -> Fold:
    """The query split (query_split's table) as a Fold of indices into ``query_ids`` (an EvaluationMatrix's)."""
    by_query = split.assign(query_id=split["query_id"].astype(str)).set_index("query_id").reindex(query_ids)
    if by_query["split"].isna().any():
        raise ValueError("the query split does not cover every query of the evaluation table: compute the split from this table")
    kind, anchor = by_query["split"].to_numpy(str), by_query["anchor"].to_numpy(bool)
    train, val, test = (np.flatnonzero(kind == s) for s in ("train", "val", "test"))
    return Fold(0, train, np.flatnonzero(anchor), val, test)


def model_split(table: pd.DataFrame, *, holdout: float, seed: int) -> pd.DataFrame:
    """One row per model (sorted by name): model, group -- "held_out" for a random ``holdout`` share that is
    never trained on (embedded by one forward pass, as a new model would be), "in_training" for the rest."""
    models = sorted(table["model"].astype(str).unique())
    held = set(choose_held_out(len(models), holdout, seed).tolist())
    return pd.DataFrame({"model": models, "group": ["held_out" if i in held else "in_training" for i in range(len(models))]})


@dataclass
class TrainingArrays:
    matrix: EvaluationMatrix
    encodings: np.ndarray  # (Q, D) in matrix.query_ids order
    train_scores: np.ndarray  # (M, Q): scores on the anchors, NaN elsewhere
    val_scores: np.ndarray  # (M, Q): scores on validation queries, NaN elsewhere


def training_arrays(table: pd.DataFrame, encodings: pd.DataFrame, split: pd.DataFrame) -> TrainingArrays:
    """Dense arrays for train_locus: anchors -> train cells, validation queries -> val cells."""
    matrix = EvaluationMatrix.from_table(table.drop(columns=["split"], errors="ignore"))
    enc = aligned_encodings(encodings, matrix.query_ids)
    by_query = split.set_index("query_id").reindex(matrix.query_ids)
    if by_query["split"].isna().any():
        raise ValueError("the query split does not cover every query of the evaluation table: compute the split from this table")
    anchor = by_query["anchor"].to_numpy(bool)
    val = (by_query["split"] == "val").to_numpy()
    train_scores = np.where(anchor[None, :], matrix.scores, np.nan).astype(np.float32)
    val_scores = np.where(val[None, :], matrix.scores, np.nan).astype(np.float32)
    return TrainingArrays(matrix, enc, train_scores, val_scores)


def aligned_encodings(encodings: pd.DataFrame, query_ids: list[str]) -> np.ndarray:
    """(Q, D) encodings in the order of ``query_ids``; a clear error if one is missing."""
    index = pd.Index(encodings["query_id"].astype(str))
    rows = index.get_indexer(query_ids)
    if (rows < 0).any():
        missing = [q for q, r in zip(query_ids, rows) if r < 0][:5]
        raise KeyError(f"no query encoding for query_id(s) {missing}: encode every query of the table")
    return np.stack(encodings["encoding"].to_numpy()[rows]).astype(np.float32)


def pool_evaluations(table: pd.DataFrame, split: pd.DataFrame) -> pd.DataFrame:
    """The evaluations pool embeddings are computed from: all of a model's evaluations outside the test queries."""
    test = set(split.loc[split["split"] == "test", "query_id"].astype(str))
    return table[~table["query_id"].astype(str).isin(test)]


def training_curve_png(history: list[dict], path: Path) -> str:
    """Plot train/val loss and validation routing accuracy per epoch to ``path``; returns a markdown image."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    frame = pd.DataFrame(history)
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(9, 3.2))
    for column in ("train_loss", "val_loss"):
        if column in frame:
            ax_loss.plot(frame["epoch"], frame[column], label=column)
    ax_loss.set_xlabel("epoch"), ax_loss.set_ylabel("BCE"), ax_loss.legend()
    for column in ("val_routing_acc", "val_correctness_acc"):
        if column in frame:
            ax_acc.plot(frame["epoch"], frame[column], label=column)
    ax_acc.set_xlabel("epoch"), ax_acc.set_ylabel("accuracy"), ax_acc.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return png_markdown(path)


def png_markdown(path: Path) -> str:
    """A PNG embedded as a markdown image (data URI), so a markdown viewer shows it inline."""
    data = base64.b64encode(Path(path).read_bytes()).decode()
    return f"![{Path(path).stem}](data:image/png;base64,{data})"

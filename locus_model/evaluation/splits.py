"""Splits of an evaluation table: test queries (k-fold or the table's own split), validation queries, the
budget's anchor queries, and the held-out models (never trained on, onboarded from their anchor evaluations).

The protocol works on indices (:class:`Fold`) and chooses them with :func:`query_folds`, :func:`model_groups` and
:func:`anchor_counts`; the pipeline stores the same split as tables (:func:`query_split`, :func:`model_split`) and
reads them back (:func:`given_fold`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from locus_model.data.contract import SPLITS, benchmark_group
from locus_model.data.matrix import EvaluationMatrix


@dataclass(frozen=True)
class Fold:
    """Query indices of one fold: training queries, the anchors drawn from them, validation and test."""

    index: int
    train: np.ndarray  # (Qtr,) training queries (anchors come from these)
    anchors: np.ndarray  # (N,) the budget: every model's usable evaluations are on these queries
    val: np.ndarray  # (Qv,) LOCUS early stopping / baseline model selection
    test: np.ndarray  # (Qte,)

    def budget_and_val(self, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # (M, Q) each
        """What a method is fitted on: ``scores`` (M, Q) on the anchors only, and on the val queries only (NaN
        elsewhere)."""
        budget, val = np.full_like(scores, np.nan), np.full_like(scores, np.nan)
        budget[:, self.anchors] = scores[:, self.anchors]
        val[:, self.val] = scores[:, self.val]
        return budget, val


def _draw_anchors(train: np.ndarray, budget: int, rng: np.random.Generator, where: str) -> np.ndarray:
    if budget < 1:
        raise ValueError(f"budget={budget}: the number of evaluations per model must be >= 1")
    if budget > len(train):
        raise ValueError(
            f"{where}: budget={budget} anchors but only {len(train)} training queries; "
            "lower --budget, use fewer folds, or evaluate on a larger query pool"
        )
    return np.sort(rng.choice(train, size=budget, replace=False))


def kfold_splits(n_queries: int, *, folds: int, budget: int, seed: int, val_fraction: float = 0.1) -> list[Fold]:
    """K query folds; per fold a validation slice of the non-test queries and ``budget`` anchors from the rest."""
    if folds < 2:
        raise ValueError(f"folds={folds}: k-fold needs at least 2 folds (use folds=None for a table's own split)")
    if n_queries < folds:
        raise ValueError(f"{n_queries} queries cannot be split into {folds} folds; use fewer folds")
    order = np.random.default_rng(seed).permutation(n_queries)
    out = []
    for f, test in enumerate(np.array_split(order, folds)):
        rng = np.random.default_rng([seed, f])
        rest = rng.permutation(np.setdiff1d(order, test))
        n_val = max(1, int(round(val_fraction * len(rest)))) if val_fraction > 0 else 0
        val, train = np.sort(rest[:n_val]), np.sort(rest[n_val:])
        anchors = _draw_anchors(train, budget, rng, f"fold {f + 1}/{folds}")
        out.append(Fold(f, train, anchors, val, np.sort(test)))
    return out


def table_split(split: np.ndarray, *, budget: int, seed: int) -> list[Fold]:
    """The table's own train/val/test split as a single fold (EmbedLLM's reference protocol)."""
    split = np.asarray(split).astype(str)
    train, val, test = (np.flatnonzero(split == s) for s in SPLITS)
    if len(test) == 0:
        raise ValueError("the table's split column has no 'test' queries; use k-fold (folds=5) instead")
    anchors = _draw_anchors(train, budget, np.random.default_rng(seed), "the table's train split")
    return [Fold(0, train, anchors, val, test)]


def choose_held_out(n_models: int, fraction: float, seed: int) -> np.ndarray:
    """Sorted indices of the held-out models: round(fraction * M), at least 1 when fraction > 0."""
    if not 0 <= fraction < 1:
        raise ValueError(f"holdout_models={fraction} must be in [0, 1)")
    if fraction == 0:
        return np.zeros(0, dtype=np.int64)
    n = max(1, int(round(fraction * n_models)))
    if n_models - n < 2:
        raise ValueError(
            f"holding out {n} of {n_models} models leaves fewer than 2 to "
            "train on; lower --holdout-models or add models"
        )
    rng = np.random.default_rng([seed, 7919])  # its own stream: the held-out set does not move with the folds
    return np.sort(rng.choice(n_models, size=n, replace=False))


def query_split(
    table: pd.DataFrame, *, budget: int, seed: int, test_fraction: float = 0.1, val_fraction: float = 0.1
) -> pd.DataFrame:
    """One row per query: query_id, split (train/val/test), anchor (one of the ``budget`` training anchors).

    A table with its own ``split`` column (EmbedLLM) keeps it; otherwise queries are split at random
    (seeded): ``test_fraction`` test queries, ``val_fraction`` of the rest for validation.
    The anchors are one random set of ``budget`` training queries shared by every model (the protocol
    of the authors' code release); training uses each model's evaluations on them.
    """
    matrix_queries = table.drop_duplicates("query_id").sort_values("query_id", kind="stable")
    query_ids = matrix_queries["query_id"].astype(str).to_numpy()
    if "split" in matrix_queries.columns:
        fold = table_split(matrix_queries["split"].to_numpy(str), budget=budget, seed=seed)[0]
    else:
        if not 0 < test_fraction < 0.5:
            raise ValueError(f"test_fraction={test_fraction} must be in (0, 0.5)")
        fold = kfold_splits(
            len(query_ids), folds=max(2, round(1 / test_fraction)), budget=budget, seed=seed, val_fraction=val_fraction
        )[0]
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
    chosen = [
        rng.choice(group["query_id"].to_numpy(), size=int(take[b]), replace=False)
        for b, group in queries.groupby("benchmark", sort=True)
    ]
    keep = set(np.concatenate(chosen).tolist())
    return table[table["query_id"].astype(str).isin(keep)].reset_index(drop=True)


def given_fold(split: pd.DataFrame, query_ids: list[str]) -> Fold:
    """The query split (query_split's table) as a Fold of indices into ``query_ids`` (an EvaluationMatrix's)."""
    by_query = split.assign(query_id=split["query_id"].astype(str)).set_index("query_id").reindex(query_ids)
    if by_query["split"].isna().any():
        raise ValueError(
            "the query split does not cover every query of the evaluation table: compute the split from this table"
        )
    kind, anchor = by_query["split"].to_numpy(str), by_query["anchor"].to_numpy(bool)
    train, val, test = (np.flatnonzero(kind == s) for s in SPLITS)
    return Fold(0, train, np.flatnonzero(anchor), val, test)


def model_split(table: pd.DataFrame, *, holdout: float, seed: int) -> pd.DataFrame:
    """One row per model (sorted by name): model, group -- "held_out" for a random ``holdout`` share that is
    never trained on (embedded by one forward pass, as a new model would be), "in_training" for the rest."""
    models = sorted(table["model"].astype(str).unique())
    held = set(choose_held_out(len(models), holdout, seed).tolist())
    return pd.DataFrame(
        {"model": models, "group": ["held_out" if i in held else "in_training" for i in range(len(models))]}
    )


# ----------------------------------------------------------------------------------------------------------
# the protocol's protocol: which folds, which model groups, enough anchors


def query_folds(
    matrix: EvaluationMatrix, *, fold: Fold | None, folds: int | None, budget: int, seed: int, val_fraction: float
) -> tuple[str, list[Fold], np.ndarray]:
    """(protocol, the folds, each query's benchmark as reported): a given fold, the table's own split or k-fold."""
    if fold is not None:
        return "given_split", [fold], np.asarray(matrix.benchmarks).astype(str)
    if folds is None:
        if matrix.split is None:
            raise ValueError(
                "folds=None uses the table's own train/val/test split, but the table has no 'split' column; "
                "pass folds=5 (k-fold over queries) or an EmbedLLM folder"
            )
        splits = table_split(matrix.split, budget=budget, seed=seed)
        return "table_split", splits, np.array([benchmark_group(b) for b in matrix.benchmarks])
    splits = kfold_splits(matrix.scores.shape[1], folds=folds, budget=budget, seed=seed, val_fraction=val_fraction)
    return "kfold", splits, np.asarray(matrix.benchmarks).astype(str)


def model_groups(
    matrix: EvaluationMatrix,
    *,
    held_out: Sequence[str] | None,
    holdout_models: float,
    seed: int,
    extra_groups: Mapping[str, Sequence[str]] | None,
) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """(in-training rows, held-out rows, {group: rows}) of the models."""
    n_models = len(matrix.models)
    if held_out is not None:
        unknown_models = sorted(set(held_out) - set(matrix.models))
        if unknown_models:
            raise ValueError(f"held-out models {unknown_models[:3]} are not in the table")
        held = np.array(sorted(matrix.models.index(m) for m in held_out), dtype=np.int64)
    else:
        held = choose_held_out(n_models, holdout_models, seed)
    trained = np.setdiff1d(np.arange(n_models), held)
    groups = {"all": np.arange(n_models), "in_training": trained}
    if len(held):
        groups["held_out"] = held
    for group, names in (extra_groups or {}).items():
        if group in groups:
            raise ValueError(f"extra group {group!r} clashes with a built-in group; choose another name")
        missing = [n for n in names if n not in matrix.models]
        if missing or not names:
            raise ValueError(
                f"extra group {group!r}: unknown or no model names {missing[:3]}; use names from the table"
            )
        groups[group] = np.array(sorted(matrix.models.index(n) for n in names))
    return trained, held, groups


def anchor_counts(scores: np.ndarray, splits: list[Fold], models: list[str]) -> np.ndarray:  # (folds, M)
    """Evaluations each model has on each fold's anchors; every model needs at least one."""
    counts = []
    for fold in splits:
        counts.append((~np.isnan(scores[:, fold.anchors])).sum(axis=1))  # (M,)
        if (counts[-1] == 0).any():
            name = models[int(np.flatnonzero(counts[-1] == 0)[0])]
            raise ValueError(
                f"fold {fold.index + 1}: model {name!r} has no evaluation among the {len(fold.anchors)} anchor "
                "queries; raise the budget or drop models with very few evaluations"
            )
    return np.stack(counts)

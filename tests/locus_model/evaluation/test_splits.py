"""The pipeline's splits as tables: queries (train / val / test and the anchors), models (held out or not)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from locus_model.evaluation.splits import given_fold, model_split, query_split, subset_queries


def table(n_models: int = 10, n_queries: int = 50, split: bool = False) -> pd.DataFrame:
    rows = [
        {"model": f"m{m}", "query_id": f"q{q:02d}", "query": f"text {q}", "benchmark": "ab"[q % 2], "score": 1.0}
        for m in range(n_models)
        for q in range(n_queries)
    ]
    frame = pd.DataFrame(rows)
    if split:
        frame["split"] = np.where(
            frame["query_id"] < "q30", "train", np.where(frame["query_id"] < "q40", "val", "test")
        )
    return frame


def test_query_split_holds_out_test_queries_and_draws_the_anchors_from_training() -> None:
    out = query_split(table(), budget=12, seed=0, test_fraction=0.2, val_fraction=0.25)
    assert len(out) == 50 and out["query_id"].is_unique
    assert out["split"].value_counts().to_dict() == {"train": 30, "val": 10, "test": 10}
    assert out["anchor"].sum() == 12 and (out.loc[out["anchor"], "split"] == "train").all()
    assert out.equals(query_split(table(), budget=12, seed=0, test_fraction=0.2, val_fraction=0.25))  # seeded


def test_query_split_keeps_a_tables_own_split() -> None:
    out = query_split(table(split=True), budget=5, seed=1).set_index("query_id")
    assert out.loc["q00", "split"] == "train" and out.loc["q35", "split"] == "val" and out.loc["q45", "split"] == "test"
    assert out["anchor"].sum() == 5 and (out.loc[out["anchor"], "split"] == "train").all()


def test_given_fold_reads_the_split_back_as_indices() -> None:
    split = query_split(table(), budget=8, seed=3, test_fraction=0.2)
    ids = sorted(split["query_id"])
    fold = given_fold(split, ids)
    by_id = split.set_index("query_id")
    assert {ids[i] for i in fold.test} == set(by_id.index[by_id["split"] == "test"])
    assert {ids[i] for i in fold.anchors} == set(by_id.index[by_id["anchor"]])
    with pytest.raises(ValueError, match="does not cover every query"):
        given_fold(split, ids + ["unknown"])


def test_model_split_holds_out_a_seeded_share_of_models() -> None:
    out = model_split(table(), holdout=0.2, seed=0)
    assert out["model"].tolist() == sorted(out["model"]) and (out["group"] == "held_out").sum() == 2
    assert out.equals(model_split(table(), holdout=0.2, seed=0))
    assert set(model_split(table(), holdout=0.0, seed=0)["group"]) == {"in_training"}


def test_subset_queries_keeps_each_benchmarks_share() -> None:
    frame = table(n_models=2, n_queries=40)
    frame.loc[frame["query_id"] >= "q30", "benchmark"] = "c"  # a: 15, b: 15, c: 10 queries
    out = subset_queries(frame, 20, seed=0)
    per_bench = out.drop_duplicates("query_id")["benchmark"].value_counts().to_dict()
    assert per_bench == {"a": 8, "b": 7, "c": 5} or per_bench == {"a": 7, "b": 8, "c": 5}
    assert len(out) == 2 * 20 and subset_queries(frame, 100, seed=0) is frame


def test_a_fold_gives_the_scores_on_its_anchors_and_on_its_val_queries_only() -> None:
    from locus_model.evaluation.splits import Fold

    scores = np.arange(12, dtype=np.float32).reshape(2, 6)
    fold = Fold(index=0, train=np.array([0, 1, 2]), anchors=np.array([0, 2]), val=np.array([3]), test=np.array([4, 5]))
    budget, val = fold.budget_and_val(scores)
    assert np.array_equal(np.flatnonzero(~np.isnan(budget[0])), [0, 2]) and np.array_equal(
        budget[:, [0, 2]], scores[:, [0, 2]]
    )
    assert np.array_equal(np.flatnonzero(~np.isnan(val[1])), [3]) and np.array_equal(val[:, 3], scores[:, 3])
    assert not np.isnan(scores).any()  # the input is not touched

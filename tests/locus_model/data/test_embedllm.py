"""EmbedLLM folders read as the long table: round trip, order, merged benchmarks, the last-occurrence rule,
streaming."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from locus_model.data.embedllm import merge_benchmark, read_embedllm
from locus_model.data.embedllm_files import is_embedllm_folder
from tests.locus_model.data.embedllm_folder import MODELS, canonical, small_table


def test_round_trip_gives_the_same_table(folder: Path) -> None:
    table, report = read_embedllm(folder)
    pd.testing.assert_frame_equal(canonical(table), canonical(small_table()))
    assert list(table.columns) == ["model", "query_id", "query", "benchmark", "score", "split", "category"]
    assert table["score"].dtype == np.float64
    assert isinstance(table["query"].dtype, pd.CategoricalDtype)
    assert report.n_models == 3 and report.n_queries == 12 and report.duplicates_dropped == 0
    assert report.queries_per_split == {"train": 8, "val": 2, "test": 2}
    assert report.n_rows == len(small_table())
    assert is_embedllm_folder(folder)


def test_rows_come_in_question_order_then_model_order(folder: Path) -> None:
    order = pd.read_csv(folder / "question_order.csv")
    order.iloc[::-1].to_csv(folder / "question_order.csv", index=False)  # reverse the query order
    table, _ = read_embedllm(folder)
    assert pd.unique(table["query_id"].astype(str)).tolist() == [str(q) for q in range(11, -1, -1)]
    first = table[table["query_id"] == "11"]["model"].astype(str).tolist()
    assert first == [m for m in MODELS if m in first]


def test_benchmarks_are_merged_and_raw_category_kept(folder: Path) -> None:
    table, _ = read_embedllm(folder)
    assert set(table["benchmark"].astype(str)) == {"mmlu", "gpqa", "gsm8k", "truthfulqa_mc1"}
    assert set(table.loc[table["benchmark"] == "mmlu", "category"].astype(str)) == {"mmlu_anatomy", "mmlu_virology"}
    assert merge_benchmark(" MMLU_College_Physics ") == "mmlu" and merge_benchmark("gpqa_diamond") == "gpqa"


def test_duplicate_pairs_keep_the_last_occurrence(folder: Path) -> None:
    train = pd.read_csv(folder / "train.csv")
    first = train.iloc[0].copy()
    # the same (prompt_id, model_id) listed again under another category with the opposite label, twice
    again = first.copy()
    again["label"], again["category"] = 1 - first["label"], "mmlu_variant"
    last = first.copy()
    last["label"], last["category"] = first["label"], "gpqa_variant"
    pd.concat([train, again.to_frame().T, last.to_frame().T, again.to_frame().T]).to_csv(
        folder / "train.csv", index=False
    )
    table, report = read_embedllm(folder)
    assert report.duplicates_dropped_per_split == {"train": 3, "val": 0, "test": 0}
    assert report.rows_read_per_split["train"] == len(train) + 3
    assert report.rows_read - report.duplicates_dropped == report.n_rows
    cell = table[(table["query_id"] == str(first["prompt_id"])) & (table["model"] == first["model_name"])]
    assert len(cell) == 1 and cell["score"].item() == 1 - first["label"]  # the last row wins
    # query-level fields come from the query's last row, the same for every model
    rows = table[table["query_id"] == str(first["prompt_id"])]
    assert set(rows["category"].astype(str)) == {"mmlu_variant"} and set(rows["benchmark"].astype(str)) == {"mmlu"}
    assert report.n_queries_with_several_categories == 1
    assert report.n_rows == len(small_table())


@pytest.mark.parametrize("chunk_rows", [1, 3, 7])
def test_streamed_reading_matches_one_chunk(folder: Path, chunk_rows: int) -> None:
    train = pd.read_csv(folder / "train.csv")
    pd.concat([train, train.iloc[[0, 5]].assign(label=lambda d: 1 - d["label"])]).to_csv(
        folder / "train.csv", index=False
    )
    whole, whole_report = read_embedllm(folder, chunk_rows=10_000)
    streamed, streamed_report = read_embedllm(folder, chunk_rows=chunk_rows, progress=True)
    pd.testing.assert_frame_equal(streamed, whole)
    assert streamed_report == whole_report and whole_report.duplicates_dropped == 2


def test_prompt_ids_not_in_question_order_are_counted_and_kept(folder: Path) -> None:
    order = pd.read_csv(folder / "question_order.csv")
    order[order["prompt_id"] != 3].to_csv(folder / "question_order.csv", index=False)
    table, report = read_embedllm(folder)
    assert report.n_queries_not_in_question_order == 1
    assert table["query_id"].astype(str).iloc[-1] == "3"  # queries it lacks come last


def test_table_passes_the_evaluation_validator_and_builds_a_matrix(folder: Path) -> None:
    from locus_model.data.contract import validate_evaluations
    from locus_model.data.matrix import EvaluationMatrix

    table, _ = read_embedllm(folder)
    assert len(validate_evaluations(table, source=str(folder))) == len(table)
    matrix = EvaluationMatrix.from_table(table)
    assert matrix.scores.shape == (3, 12) and np.isnan(matrix.scores).sum() == 3 * 12 - len(table)

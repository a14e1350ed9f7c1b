"""Writing a long table as an EmbedLLM folder: headers, splits, repeats, tables it cannot hold."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from locus_model.data.embedllm import read_embedllm
from locus_model.data.embedllm_writer import write_embedllm
from locus_model.data.errors import EvaluationDataError
from tests.locus_model.data.embedllm_folder import MODELS, canonical, small_table


def test_written_files_have_embedllm_headers(folder: Path) -> None:
    assert list(pd.read_csv(folder / "model_order.csv").columns) == ["model_id", "model_name"]
    assert list(pd.read_csv(folder / "question_order.csv").columns) == ["prompt_id", "prompt"]
    train = pd.read_csv(folder / "train.csv")
    assert {"model_id", "model_name", "prompt_id", "prompt", "category_id", "category", "label"} == set(train.columns)
    assert set(train["label"].unique()) <= {0, 1}
    assert pd.read_csv(folder / "model_order.csv")["model_name"].tolist() == MODELS


def test_repeated_rows_are_written_as_repeats_and_read_back_last_wins(tmp_path: Path) -> None:
    table = small_table()
    repeats = table.iloc[[0, 4]].assign(score=lambda d: 1.0 - d["score"])  # same pairs, flipped, written later
    write_embedllm(pd.concat([table, repeats], ignore_index=True), tmp_path / "r")
    back, report = read_embedllm(tmp_path / "r")
    assert report.duplicates_dropped == 2 and len(back) == len(table)
    expected = table.copy()
    expected.loc[[0, 4], "score"] = 1.0 - expected.loc[[0, 4], "score"]
    pd.testing.assert_frame_equal(canonical(back), canonical(expected))


def test_write_takes_split_as_str_or_mapping_and_renumbers_non_integer_ids(tmp_path: Path) -> None:
    table = small_table().drop(columns="split")
    table["query_id"] = "q-" + table["query_id"]
    write_embedllm(table, tmp_path / "a", split="test")
    back, report = read_embedllm(tmp_path / "a")
    assert report.rows_read_per_split == {"train": 0, "val": 0, "test": len(table)}
    assert set(back["query_id"].astype(str)) == {str(i) for i in range(12)}  # renumbered 0..Q-1
    mapping = {f"q-{q}": ("val" if q % 2 else "train") for q in range(12)}
    write_embedllm(table, tmp_path / "b", split=mapping)
    _, report = read_embedllm(tmp_path / "b")
    assert report.queries_per_split == {"train": 6, "val": 6, "test": 0}
    full = small_table()  # one split per row, as the synthetic pool's generator passes it
    write_embedllm(full.drop(columns="split"), tmp_path / "c", split=full["split"])
    back, _ = read_embedllm(tmp_path / "c")
    pd.testing.assert_frame_equal(canonical(back), canonical(full))


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (lambda t: t.assign(score=t["score"] * 0.5), "score"),
        (lambda t: t.assign(split="holdout"), "split"),
        (lambda t: t.assign(split=np.where(np.arange(len(t)) == 1, "test", t["split"])), "more than one split"),
    ],
)
def test_write_rejects_tables_embedllm_cannot_hold(tmp_path: Path, bad, match: str) -> None:
    with pytest.raises(EvaluationDataError, match=match):
        write_embedllm(bad(small_table()), tmp_path / "x")

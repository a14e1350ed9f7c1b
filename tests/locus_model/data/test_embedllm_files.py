"""EmbedLLM's five files: every bad value, missing file or column, truncated CSV named with how to fix it."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from locus_model.data.embedllm import read_embedllm
from locus_model.data.embedllm_files import EMBEDLLM_REVISION, is_embedllm_folder
from locus_model.data.errors import EvaluationDataError
from tests.locus_model.data.embedllm_folder import small_table


def edit_csv(path: Path, row: int, column: str, value: object) -> None:
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    df.loc[row - 1, column] = value
    df.to_csv(path, index=False)


@pytest.mark.parametrize(
    ("file", "row", "column", "value", "problem"),
    [
        ("train.csv", 4, "label", "2", "not 0 or 1"),
        ("val.csv", 2, "label", "", "not 0 or 1"),
        ("train.csv", 5, "model_id", "3", "not in model_order.csv"),
        ("test.csv", 1, "prompt_id", "abc", "not an integer"),
        ("val.csv", 1, "prompt_id", "0", "also in train.csv"),
        ("test.csv", 2, "prompt_id", "8", "also in val.csv"),
        ("model_order.csv", 3, "model_name", "org/alpha-7b", "listed twice"),
        ("model_order.csv", 3, "model_name", "", "empty"),
        ("question_order.csv", 2, "prompt_id", "0", "listed twice"),
    ],
)
def test_bad_values_name_file_row_and_column(
    folder: Path, file: str, row: int, column: str, value: str, problem: str
) -> None:
    edit_csv(folder / file, row, column, value)
    with pytest.raises(EvaluationDataError, match=problem) as info:
        read_embedllm(folder, chunk_rows=2)
    err = info.value
    assert err.file is not None
    assert (Path(err.file).name, err.row, err.column) == (file, row, column)
    assert "How to fix" in str(err)


@pytest.mark.parametrize("file", ["train.csv", "model_order.csv", "question_order.csv"])
def test_missing_file_says_how_to_get_it(folder: Path, file: str) -> None:
    (folder / file).unlink()
    assert not is_embedllm_folder(folder)
    with pytest.raises(EvaluationDataError, match="missing") as info:
        read_embedllm(folder)
    assert info.value.file is not None and Path(info.value.file).name == file
    assert EMBEDLLM_REVISION in str(info.value) and "download_embedllm" in str(info.value)


@pytest.mark.parametrize(("file", "column"), [("val.csv", "label"), ("model_order.csv", "model_name")])
def test_missing_column_is_named(folder: Path, file: str, column: str) -> None:
    pd.read_csv(folder / file).drop(columns=column).to_csv(folder / file, index=False)
    with pytest.raises(EvaluationDataError, match="column is missing") as info:
        read_embedllm(folder)
    assert info.value.file is not None
    assert (Path(info.value.file).name, info.value.column) == (file, column)


def test_truncated_csv_is_a_clear_error(folder: Path) -> None:
    text = (folder / "train.csv").read_text()
    (folder / "train.csv").write_text(text + '7,0,org/alpha-7b,1,"an unterminated prompt\n')
    with pytest.raises(EvaluationDataError, match="cannot be parsed"):
        read_embedllm(folder)


def test_is_embedllm_folder_on_other_paths(tmp_path: Path) -> None:
    assert not is_embedllm_folder(tmp_path / "nope")
    assert not is_embedllm_folder(tmp_path)
    small_table().to_csv(tmp_path / "evaluations.csv", index=False)
    assert not is_embedllm_folder(tmp_path / "evaluations.csv")

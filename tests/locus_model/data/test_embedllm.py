"""EmbedLLM format: round trip, last-occurrence rule, validation errors, streaming, offline download."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from locus_model.data.embedllm import EMBEDLLM_REVISION, is_embedllm_folder, merge_benchmark, read_embedllm
from locus_model.data.embedllm_download import download_embedllm, EmbedLLMDownloadError
from locus_model.data.embedllm_writer import write_embedllm
from locus_model.data.errors import EvaluationDataError

MODELS = ["org/alpha-7b", "org/beta-13b", "gamma"]
CATEGORIES = ["mmlu_anatomy", "mmlu_virology", "gpqa_main", "gsm8k", "truthfulqa_mc1"]


def small_table(n_queries: int = 12, seed: int = 0) -> pd.DataFrame:
    """3 models x n_queries, prompt_ids 0..n-1, train/val/test by query, some cells missing."""
    rng = np.random.default_rng(seed)
    rows = []
    for q in range(n_queries):
        category = CATEGORIES[q % len(CATEGORIES)]
        split = "train" if q < n_queries - 4 else ("val" if q < n_queries - 2 else "test")
        for m, model in enumerate(MODELS):
            if (q + m) % 7 == 6:
                continue  # models need not share queries
            rows.append({
                "model": model, "query_id": str(q), "query": f'Question {q}, with "quotes",\nand a newline?',
                "benchmark": merge_benchmark(category), "score": float(rng.integers(0, 2)),
                "split": split, "category": category,
            })
    return pd.DataFrame(rows)


def canonical(table: pd.DataFrame) -> pd.DataFrame:
    columns = ["model", "query_id", "query", "benchmark", "score", "split", "category"]
    out = table[columns].astype({c: str for c in columns if c != "score"})
    return out.sort_values(["query_id", "model"]).reset_index(drop=True)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    write_embedllm(small_table(), tmp_path / "embedllm")
    return tmp_path / "embedllm"


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


def test_written_files_have_embedllm_headers(folder: Path) -> None:
    assert list(pd.read_csv(folder / "model_order.csv").columns) == ["model_id", "model_name"]
    assert list(pd.read_csv(folder / "question_order.csv").columns) == ["prompt_id", "prompt"]
    train = pd.read_csv(folder / "train.csv")
    assert {"model_id", "model_name", "prompt_id", "prompt", "category_id", "category", "label"} == set(train.columns)
    assert set(train["label"].unique()) <= {0, 1}
    assert pd.read_csv(folder / "model_order.csv")["model_name"].tolist() == MODELS


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
        folder / "train.csv", index=False)
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


def test_repeated_rows_are_written_as_repeats_and_read_back_last_wins(tmp_path: Path) -> None:
    table = small_table()
    repeats = table.iloc[[0, 4]].assign(score=lambda d: 1.0 - d["score"])  # same pairs, flipped, written later
    write_embedllm(pd.concat([table, repeats], ignore_index=True), tmp_path / "r")
    back, report = read_embedllm(tmp_path / "r")
    assert report.duplicates_dropped == 2 and len(back) == len(table)
    expected = table.copy()
    expected.loc[[0, 4], "score"] = 1.0 - expected.loc[[0, 4], "score"]
    pd.testing.assert_frame_equal(canonical(back), canonical(expected))


@pytest.mark.parametrize("chunk_rows", [1, 3, 7])
def test_streamed_reading_matches_one_chunk(folder: Path, chunk_rows: int) -> None:
    train = pd.read_csv(folder / "train.csv")
    pd.concat([train, train.iloc[[0, 5]].assign(label=lambda d: 1 - d["label"])]).to_csv(
        folder / "train.csv", index=False)
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
    full = small_table()  # one split per row, as the demo generator passes it
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
    assert (Path(err.file).name, err.row, err.column) == (file, row, column)
    assert "How to fix" in str(err)


@pytest.mark.parametrize("file", ["train.csv", "model_order.csv", "question_order.csv"])
def test_missing_file_says_how_to_get_it(folder: Path, file: str) -> None:
    (folder / file).unlink()
    assert not is_embedllm_folder(folder)
    with pytest.raises(EvaluationDataError, match="missing") as info:
        read_embedllm(folder)
    assert Path(info.value.file).name == file
    assert EMBEDLLM_REVISION in str(info.value) and "download_embedllm" in str(info.value)


@pytest.mark.parametrize(("file", "column"), [("val.csv", "label"), ("model_order.csv", "model_name")])
def test_missing_column_is_named(folder: Path, file: str, column: str) -> None:
    pd.read_csv(folder / file).drop(columns=column).to_csv(folder / file, index=False)
    with pytest.raises(EvaluationDataError, match="column is missing") as info:
        read_embedllm(folder)
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


@pytest.mark.parametrize(
    "env",
    [{"HF_HUB_OFFLINE": "1"}, {"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:9"}],
    ids=["offline-flag", "unreachable-endpoint"],
)
def test_download_fails_fast_offline_with_manual_instructions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str]
) -> None:
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_ENDPOINT", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    start = time.monotonic()
    with pytest.raises(EmbedLLMDownloadError) as info:
        download_embedllm(tmp_path / "dest", timeout_s=5)
    assert time.monotonic() - start < 5
    message = str(info.value)
    assert f"https://huggingface.co/datasets/RZ412/EmbedLLM/tree/{EMBEDLLM_REVISION}" in message
    assert str(tmp_path / "dest") in message and "model_order.csv" in message


def test_download_returns_a_complete_folder_without_network(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert download_embedllm(folder) == folder


def test_table_passes_the_evaluation_validator_and_builds_a_matrix(folder: Path) -> None:
    from locus_model.data.contract import validate_evaluations
    from locus_model.data.matrix import EvaluationMatrix

    table, _ = read_embedllm(folder)
    assert len(validate_evaluations(table, source=str(folder))) == len(table)
    matrix = EvaluationMatrix.from_table(table)
    assert matrix.scores.shape == (3, 12) and np.isnan(matrix.scores).sum() == 3 * 12 - len(table)

"""The evaluation data contract: reading, validation errors naming file/row/column, the dense matrix."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from locus_model.data.contract import safe_model_key, validate_evaluations
from locus_model.data.errors import EvaluationDataError
from locus_model.data.long_format import read_evaluations, read_models_file
from locus_model.data.matrix import EvaluationMatrix, evaluations_digest, evaluations_digests
from tests.locus_model.data.files import error_of, write

HEADER = "model,query_id,query,benchmark,score\n"
ROWS = [
    "m1,q1,What is 2+2?,gsm8k,1\n",
    "m1,q2,Who wrote Hamlet?,mmlu,0\n",
    "m2,q1,What is 2+2?,gsm8k,0\n",
    "m2,q2,Who wrote Hamlet?,mmlu,1\n",
]


def test_reads_csv_gzip_and_parquet_alike(tmp_path: Path) -> None:
    csv = write(tmp_path, HEADER + "".join(ROWS))
    gz = write(tmp_path, gzip.compress((HEADER + "".join(ROWS)).encode()), "evals.csv.gz")
    table = read_evaluations(csv)[0]
    table.to_parquet(tmp_path / "evals.parquet")
    assert list(table.columns) == ["model", "query_id", "query", "benchmark", "score"]
    assert len(table) == 4 and table["score"].tolist() == [1.0, 0.0, 0.0, 1.0]
    pd.testing.assert_frame_equal(read_evaluations(gz)[0], table)
    pd.testing.assert_frame_equal(read_evaluations(tmp_path / "evals.parquet")[0], table)


def test_original_file_is_untouched(tmp_path: Path) -> None:
    path = write(tmp_path, HEADER + "".join(ROWS) + ROWS[0])
    before = path.read_bytes()
    read_evaluations(path)
    assert path.read_bytes() == before


def test_exact_repeats_are_collapsed_and_counted(tmp_path: Path) -> None:
    table, report = read_evaluations(write(tmp_path, HEADER + "".join(ROWS) + ROWS[0] + ROWS[3]))
    assert len(table) == 4 and report.rows_read == 6 and report.repeats_dropped == 2


def test_streamed_chunks_give_the_same_table(tmp_path: Path) -> None:
    path = write(tmp_path, HEADER + "".join(ROWS))
    pd.testing.assert_frame_equal(read_evaluations(path, chunk_rows=1)[0], read_evaluations(path)[0])


def test_empty_file(tmp_path: Path) -> None:
    err = error_of(write(tmp_path, ""))
    assert "empty" in str(err) and "evals.csv" in str(err)


def test_header_only(tmp_path: Path) -> None:
    err = error_of(write(tmp_path, HEADER))
    assert "no evaluation rows" in str(err)


def test_missing_columns(tmp_path: Path) -> None:
    err = error_of(write(tmp_path, "model,query_id,query,score\nm1,q1,x,1\n"))
    assert err.column == "benchmark" and "missing column" in str(err) and "How to fix" in str(err)


@pytest.mark.parametrize("bad", ["1.5", "-0.1", "nan", "", "yes"])
def test_scores_outside_unit_interval_or_nan(tmp_path: Path, bad: str) -> None:
    err = error_of(write(tmp_path, HEADER + ROWS[0] + f"m1,q2,Who wrote Hamlet?,mmlu,{bad}\n"))
    assert (err.row, err.column) == (2, "score") and "[0, 1]" in str(err)


def test_conflicting_duplicate_scores(tmp_path: Path) -> None:
    err = error_of(write(tmp_path, HEADER + "".join(ROWS) + "m1,q1,What is 2+2?,gsm8k,0\n"))
    assert (err.row, err.column) == (5, "score") and "two different scores" in str(err)


def test_one_query_id_with_two_texts(tmp_path: Path) -> None:
    err = error_of(write(tmp_path, HEADER + "".join(ROWS) + "m3,q1,What is 3+3?,gsm8k,1\n"))
    assert (err.row, err.column) == (5, "query") and "two different texts" in str(err)


def test_not_utf8(tmp_path: Path) -> None:
    body = (HEADER + ROWS[0]).encode() + "m2,q3,Caf\u00e9 cr\u00e8me?,mmlu,1\n".encode("latin-1")
    err = error_of(write(tmp_path, body))
    assert err.row == 2 and "UTF-8" in str(err)


@pytest.mark.parametrize("name", ["", " padded", "tab\tname", "line\u2028sep", ".."])
def test_unsafe_model_names_are_rejected(name: str) -> None:
    df = pd.DataFrame({"model": [name], "query_id": ["q"], "query": ["t"], "benchmark": ["b"], "score": [1.0]})
    with pytest.raises(EvaluationDataError) as info:
        validate_evaluations(df, source="mem.csv")
    assert info.value.column == "model" and info.value.row == 1


@pytest.mark.parametrize("name", ["../../etc/passwd", "org/model-7b", "my model", "模型-7b", "a..b"])
def test_safe_model_key_is_a_plain_path_component(name: str) -> None:
    key = safe_model_key(name)
    assert "/" not in key and ".." not in key and " " not in key and key.isascii()
    assert (Path("/x") / key).parent == Path("/x")
    assert safe_model_key(name) == key


def test_safe_model_key_keeps_plain_names_and_separates_lookalikes() -> None:
    assert safe_model_key("llama-2-7b_chat.v1") == "llama-2-7b_chat.v1"
    assert safe_model_key("org/model") != safe_model_key("org-model") != safe_model_key("org model")


def test_models_file(tmp_path: Path) -> None:
    models = read_models_file(write(tmp_path, "model,params_b,family\nm1,7,llama\nm2,,\n", "models.csv"))
    assert models["params_b"].iloc[0] == 7 and np.isnan(models["params_b"].iloc[1])
    with pytest.raises(EvaluationDataError) as info:
        read_models_file(write(tmp_path, "model,params_b,family\nm1,seven,llama\n", "bad.csv"))
    assert (info.value.row, info.value.column) == (1, "params_b")


def test_folder_of_files_reports_the_file_of_a_conflict(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    write(tmp_path / "in", HEADER + "".join(ROWS), "a.csv")
    write(tmp_path / "in", HEADER + "m1,q1,What is 2+2?,gsm8k,0\n", "b.csv")
    err = error_of(tmp_path / "in")
    assert "b.csv" in str(err.file) and err.row == 1


def test_matrix_and_evaluations_digest(tmp_path: Path) -> None:
    table = read_evaluations(write(tmp_path, HEADER + "".join(ROWS[:3])))[0]
    matrix = EvaluationMatrix.from_table(table)
    assert matrix.models == ["m1", "m2"] and matrix.query_ids == ["q1", "q2"]
    np.testing.assert_array_equal(matrix.scores, np.array([[1, 0], [0, np.nan]], np.float32))
    assert evaluations_digest(table) == evaluations_digest(table.iloc[::-1])
    assert evaluations_digest(table) != evaluations_digest(table.assign(score=[1.0, 1.0, 0.0]))


def test_evaluations_digests_equal_each_models_own_digest() -> None:
    rng = np.random.default_rng(0)
    table = pd.DataFrame(
        {
            "model": rng.choice(["b", "a", "c"], 60),
            "query_id": [f"q{i}" for i in rng.permutation(60)],
            "score": rng.integers(0, 2, 60).astype(float),
        }
    )
    digests = evaluations_digests(table.sample(frac=1, random_state=1))  # any row order
    assert digests == {m: evaluations_digest(table[table["model"] == m]) for m in ("a", "b", "c")}
    assert len(set(digests.values())) == 3 and evaluations_digests(table.iloc[:0]) == {}


def test_a_query_text_over_the_limit_is_rejected_naming_its_row() -> None:
    from locus_model.data.contract import MAX_QUERY_CHARS, validate_evaluations
    from locus_model.data.errors import EvaluationDataError

    table = pd.DataFrame(
        {
            "model": ["a", "a"],
            "query_id": ["q1", "q2"],
            "query": ["ok", "z" * (MAX_QUERY_CHARS + 1)],
            "benchmark": "b",
            "score": [1.0, 0.0],
        }
    )
    with pytest.raises(EvaluationDataError, match="characters long") as err:
        validate_evaluations(table)
    assert err.value.row == 2 and err.value.column == "query" and len(str(err.value)) < 1000
    assert (
        validate_evaluations(table.assign(query=["ok", "z" * MAX_QUERY_CHARS]))["query"].str.len().max()
        == MAX_QUERY_CHARS
    )

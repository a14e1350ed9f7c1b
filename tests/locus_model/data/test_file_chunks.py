"""Reading damaged evaluation files: every failure is an EvaluationDataError naming the file, the row (and the
editor's line), the column and the fix -- never a gzip, zlib, UnicodeDecode, pyarrow or pandas traceback."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from locus_model.data.contract import validate_evaluations
from locus_model.data.errors import EvaluationDataError, editor_line
from locus_model.data.file_chunks import ends_with_newline, iter_evaluation_chunks
from locus_model.data.long_format import read_evaluations
from tests.locus_model.data.files import error_of as read_error
from tests.locus_model.data.files import write

HEADER = "model,query_id,query,benchmark,score\n"
ROWS = [
    "m1,q1,What is 2+2?,gsm8k,1\n",
    'm1,q2,"Who wrote ""Hamlet""?\nA. Marlowe\nB. Shakespeare",mmlu,0\n',  # one row on three lines
    "m2,q1,What is 2+2?,gsm8k,0\n",
    'm2,q2,"Who wrote ""Hamlet""?\nA. Marlowe\nB. Shakespeare",mmlu,1\n',
    "org/m\u00e9 3,q3,Caf\u00e9\tcr\u00e8me?,food,0.5\n",
]
GOOD = HEADER + "".join(ROWS)


def error_of(path: Path) -> EvaluationDataError:
    """The reader's error for ``path``, which must name the file and say how to fix it."""
    err = read_error(path)
    assert err.file is not None and Path(err.file).name == path.name and "How to fix" in str(err)
    return err


def many_rows(n: int = 3000) -> str:
    return HEADER + "".join(f"m{i % 7},q{i // 7},question number {i // 7} of many,bench,{i % 2}\n" for i in range(n))


# ---------------------------------------------------------------------------------------------- rows and lines


def test_rows_are_data_rows_and_lines_are_the_editors(tmp_path: Path) -> None:
    err = error_of(write(tmp_path, HEADER + ROWS[0] + "m1,q9,x,b,2\n"))
    assert (err.row, err.line) == (2, 3) and "row 2 (line 3), column 'score'" in str(err)
    # a value spanning lines moves the following rows down in the editor, not in the row count
    err = error_of(write(tmp_path, HEADER + ROWS[0] + ROWS[1] + "m1,q9,x,b,2\n"))
    assert (err.row, err.line) == (3, 6)
    assert editor_line(tmp_path / "evals.csv", 2) == 3 and editor_line(tmp_path / "evals.csv", 99) is None


# ---------------------------------------------------------------------------------------------- 1. cut or corrupt


def test_gzip_cut_in_the_middle(tmp_path: Path) -> None:
    data = gzip.compress(many_rows().encode())
    err = error_of(write(tmp_path, data[: len(data) // 2], "evals.csv.gz"))
    assert "gzip" in err.problem and "cut off or corrupt" in err.problem


@pytest.mark.parametrize("at", [0.3, 0.6, 0.98])
def test_gzip_with_flipped_bytes(tmp_path: Path, at: float) -> None:
    data = bytearray(gzip.compress(many_rows().encode()))
    i = int(len(data) * at)
    data[i : i + 3] = bytes(b ^ 0xFF for b in data[i : i + 3])
    err = error_of(write(tmp_path, bytes(data), "evals.csv.gz"))
    assert "gzip" in err.problem


def test_csv_gz_that_is_not_gzip(tmp_path: Path) -> None:
    err = error_of(write(tmp_path, GOOD, "evals.csv.gz"))
    assert "gzip" in err.problem and "Not a gzipped file" in err.problem


def parquet_bytes(tmp_path: Path) -> bytes:
    n = 2000
    pd.DataFrame(
        {
            "model": [f"m{i % 5}" for i in range(n)],
            "query_id": [f"q{i // 5}" for i in range(n)],
            "query": [f"text {i // 5}" for i in range(n)],
            "benchmark": "b",
            "score": (np.arange(n) % 2).astype(float),
        }
    ).to_parquet(tmp_path / "good.parquet", index=False)
    return (tmp_path / "good.parquet").read_bytes()


def test_parquet_cut_or_with_flipped_bytes(tmp_path: Path) -> None:
    good = parquet_bytes(tmp_path)
    assert "not a readable Parquet" in error_of(write(tmp_path, good[: len(good) // 2], "cut.parquet")).problem
    flipped = bytearray(good)
    flipped[300:304] = bytes(b ^ 0xFF for b in flipped[300:304])  # inside a compressed data page
    assert "not a readable Parquet" in error_of(write(tmp_path, bytes(flipped), "flipped.parquet")).problem


# ---------------------------------------------------------------------------------------------- 2. NUL and control
# characters


@pytest.mark.parametrize(
    ("row", "column"),
    [
        ("a\0b,q1,x,b,1\n", "model"),
        ("m,2\0zz,x,b,1\n", "query_id"),
        ("m,q1,x\0y,b,1\n", "query"),
        ("m,q1,x,b\0,1\n", "benchmark"),
        ("m,q1,x,b,1\0\n", "score"),
    ],
)
def test_nul_bytes_are_rejected_with_row_and_column(tmp_path: Path, row: str, column: str) -> None:
    err = error_of(write(tmp_path, HEADER + ROWS[0] + row))
    assert (err.row, err.line, err.column) == (2, 3, column) and "NUL" in err.problem


def test_nul_bytes_in_a_gzip_file(tmp_path: Path) -> None:
    err = error_of(write(tmp_path, gzip.compress((HEADER + ROWS[0] + "m,2\0zz,x,b,1\n").encode()), "evals.csv.gz"))
    assert (err.row, err.column) == (2, "query_id") and "NUL" in err.problem


@pytest.mark.parametrize("column", ["model", "query_id", "benchmark"])
@pytest.mark.parametrize("char", ["\x01", "\x1b", "\x7f", "\x85", "\t"])
def test_control_characters_outside_the_query_text_are_rejected(column: str, char: str) -> None:
    df = pd.DataFrame({"model": ["m"], "query_id": ["q"], "query": ["t"], "benchmark": ["b"], "score": [1.0]})
    df[column] = f"a{char}b"
    with pytest.raises(EvaluationDataError) as info:
        validate_evaluations(df, source="mem.csv")
    assert (info.value.row, info.value.column) == (1, column)


def test_query_text_keeps_tabs_newlines_and_benchmark_escapes(tmp_path: Path) -> None:
    # MMLU-Pro's real questions hold \x07 and \x08 from mis-escaped LaTeX ("\alpha", "\bullet"): they stay
    text = "Find x:\n\tA. \x07lpha\n\tB. 3 g\x08ullet cm"
    df = pd.DataFrame({"model": ["m"], "query_id": ["q"], "query": [text], "benchmark": ["b"], "score": [1.0]})
    assert validate_evaluations(df)["query"].tolist() == [text]
    table, _ = read_evaluations(write(tmp_path, GOOD))
    assert (
        table["query"].iloc[1] == 'Who wrote "Hamlet"?\nA. Marlowe\nB. Shakespeare' and "\t" in table["query"].iloc[4]
    )


# ---------------------------------------------------------------------------------------------- 3. parse errors


def test_a_row_with_too_many_fields(tmp_path: Path) -> None:
    err = error_of(write(tmp_path, HEADER + ROWS[0] + ROWS[1] + "m1,q3,x,b,1,extra\n"))
    assert (err.row, err.line) == (3, 6) and "6 fields, the header has 5" in err.problem


def test_a_first_row_with_too_many_fields(tmp_path: Path) -> None:
    # pandas would take the extra field for an index column, or warn and drop it
    err = error_of(write(tmp_path, HEADER + "m1,q1,x,b,1,extra\n" + ROWS[2]))
    assert (err.row, err.line) == (1, 2) and "6 fields" in err.problem


def test_an_unclosed_quote(tmp_path: Path) -> None:
    err = error_of(write(tmp_path, HEADER + ROWS[0] + ROWS[1] + 'm1,q3,"never closed,b,1\n' + ROWS[2]))
    assert (err.row, err.line) == (3, 6) and "never closed" in err.problem


def test_parse_errors_in_later_chunks_keep_their_row(tmp_path: Path) -> None:
    path = write(tmp_path, many_rows(50) + "m1,q99,x,b,1,extra\n")
    with pytest.raises(EvaluationDataError) as info:
        read_evaluations(path, chunk_rows=7)
    assert (info.value.row, info.value.line) == (51, 52)


# ---------------------------------------------------------------------------------------------- 4. header and empty
# text


def test_a_duplicated_header_is_rejected(tmp_path: Path) -> None:
    err = error_of(write(tmp_path, "model,query_id,query,benchmark,score,score\nm1,q1,x,b,1,0\n"))
    assert err.column == "score" and "more than once" in err.problem


@pytest.mark.parametrize("text", ['""', '"   "', '" \t "'])
def test_empty_or_blank_query_text_is_rejected(tmp_path: Path, text: str) -> None:
    err = error_of(write(tmp_path, HEADER + ROWS[0] + f"m1,q2,{text},b,1\n"))
    assert (err.row, err.column) == (2, "query") and "empty query text" in err.problem


# ---------------------------------------------------------------------------------------------- 5. a cut last line


def test_a_last_line_without_newline_is_read_but_can_be_refused(tmp_path: Path) -> None:
    cut = write(tmp_path, HEADER + ROWS[0] + "m1,q2,x,b,1")
    assert not ends_with_newline(cut) and ends_with_newline(write(tmp_path, GOOD, "whole.csv"))
    assert len(read_evaluations(cut)[0]) == 2  # read_evaluations accepts it: many tools omit the final newline
    with pytest.raises(EvaluationDataError) as info:
        list(iter_evaluation_chunks(cut, require_final_newline=True))
    assert info.value.line == 3 and "no newline" in info.value.problem
    gz = write(tmp_path, gzip.compress((HEADER + ROWS[0] + "m1,q2,x,b,1").encode()), "evals.csv.gz")
    assert len(list(iter_evaluation_chunks(gz, require_final_newline=True))) == 1  # gzip checks its own end


# ---------------------------------------------------------------------------------------------- fuzz


def _damage(data: bytes, draw) -> bytes:  # noqa: ANN001
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["cut", "flip", "insert", "delete"]))
        at = draw(st.integers(0, max(len(out) - 1, 0)))
        if kind == "cut":
            del out[at:]
        elif kind == "flip" and out:
            out[at] = draw(st.integers(0, 255))
        elif kind == "insert":
            out[at:at] = draw(st.binary(min_size=1, max_size=4))
        else:
            del out[at : at + draw(st.integers(1, 8))]
    return bytes(out)


def _read_or_explain(path: Path) -> None:
    try:
        table, _ = read_evaluations(path)
    except EvaluationDataError as err:
        assert err.file is not None and err.problem and str(err)
        return
    assert list(table.columns)[:5] == ["model", "query_id", "query", "benchmark", "score"] and len(table) > 0
    assert table["score"].between(0, 1).all()


FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(data=st.data())
def test_fuzz_damaged_csv_never_crashes_the_reader(tmp_path: Path, data: st.DataObject) -> None:
    _read_or_explain(write(tmp_path, _damage(GOOD.encode(), data.draw)))


@FUZZ
@given(data=st.data())
def test_fuzz_damaged_csv_gz_never_crashes_the_reader(tmp_path: Path, data: st.DataObject) -> None:
    damaged = _damage(gzip.compress(GOOD.encode(), mtime=0), data.draw)
    if data.draw(st.booleans()):  # damage the text inside an intact gzip stream too
        damaged = gzip.compress(_damage(GOOD.encode(), data.draw), mtime=0)
    _read_or_explain(write(tmp_path, damaged, "evals.csv.gz"))


def test_optional_columns_split_and_category(tmp_path: Path) -> None:
    table, _ = read_evaluations(
        write(
            tmp_path,
            "model,query_id,query,benchmark,score,split,category\nm1,q1,x,b,1,train,\nm1,q2,y,b,0,test,algebra\n",
        )
    )
    assert table["split"].tolist() == ["train", "test"] and table["category"].tolist() == ["", "algebra"]
    err = error_of(write(tmp_path, "model,query_id,query,benchmark,score,split\nm1,q1,x,b,1,train\nm1,q2,y,b,0,\n"))
    assert (err.row, err.column) == (2, "split")


def test_errors_survive_pickling_with_their_fields(tmp_path: Path) -> None:
    import pickle

    err = error_of(write(tmp_path, HEADER + ROWS[0] + "m1,q9,x,b,2\n"))
    again = pickle.loads(pickle.dumps(err))
    assert (again.file, again.row, again.line, again.column, again.fix, str(again)) == (
        err.file,
        err.row,
        err.line,
        err.column,
        err.fix,
        str(err),
    )

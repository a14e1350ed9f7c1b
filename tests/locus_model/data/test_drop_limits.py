"""The limits of one drop (issue 59, item 2): rows, models, inflated bytes and JSON document bytes, each refused with
an EvaluationDataError naming the file (and row), counted as the readers stream, before the work grows with what
the drop declares. Built small: small limits, files a little over them."""

from __future__ import annotations

import gzip
import json
import zipfile
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from locus_model.data.errors import EvaluationDataError
from locus_model.data.file_chunks import iter_evaluation_chunks
from locus_model.data.harnesses import read_harness_output
from locus_model.data.limits import DropLimits
from locus_model.data.long_format import read_evaluations
from tests.locus_model.data import hostile


def table(rows: int, models: int = 1) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "model": [f"m{i % models}" for i in range(rows)],
            "query_id": [f"q{i}" for i in range(rows)],
            "query": "What is 2+2?",
            "benchmark": "b",
            "score": 1.0,
        }
    )


def test_a_parquet_file_over_the_rows_limit_is_refused_from_its_footer(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "many.parquet"
    table(2000).to_parquet(path)

    def no_rows(*args, **kwargs):  # noqa: ANN002, ANN003
        raise AssertionError("a row was read")

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", no_rows)
    with pytest.raises(EvaluationDataError, match="has 2,000 rows: the drop would have more than 1,000") as err:
        next(iter_evaluation_chunks(path, limits=DropLimits(max_rows=1000)))
    assert err.value.file == path and "How to fix" in str(err.value)
    monkeypatch.undo()
    assert len(read_evaluations(path, limits=DropLimits(max_rows=2000))[0]) == 2000


def test_a_csv_gz_is_counted_while_streaming_and_stops_at_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "many.csv.gz"
    with gzip.open(path, "wt") as handle:
        table(2000).to_csv(handle, index=False)
    seen = []
    with pytest.raises(EvaluationDataError, match="more than 1,000 evaluation rows") as err:
        for chunk in iter_evaluation_chunks(path, chunk_rows=100, limits=DropLimits(max_rows=1000)):
            seen.append(len(chunk))
    assert sum(seen) == 1000 and err.value.row == 1001 and err.value.file == path  # stopped at the limit
    with pytest.raises(EvaluationDataError, match="unpacks to more than 10,000 bytes"):
        list(iter_evaluation_chunks(path, limits=DropLimits(max_unpacked_bytes=10_000)))


def test_rows_and_models_of_a_folder_are_counted_together(tmp_path: Path) -> None:
    folder = tmp_path / "drop"
    folder.mkdir()
    table(600, models=2).to_csv(folder / "a.csv", index=False)
    other = table(600, models=3)
    other["query_id"] += "b"
    other.to_csv(folder / "b.csv", index=False)
    with pytest.raises(EvaluationDataError, match="more than 1,000 evaluation rows") as err:
        read_evaluations(folder, limits=DropLimits(max_rows=1000))
    assert err.value.file == folder / "b.csv" and err.value.row == 401
    with pytest.raises(EvaluationDataError, match="names more than 2 models \\(the next one is 'm2'\\)") as err:
        read_evaluations(folder, limits=DropLimits(max_models=2))
    assert (err.value.file, err.value.row, err.value.column) == (folder / "b.csv", 3, "model")
    assert len(read_evaluations(folder, limits=DropLimits(max_rows=1200, max_models=3))[0]) == 1200


def test_a_json_document_over_the_limit_is_refused_before_it_is_parsed(tmp_path: Path, monkeypatch) -> None:
    log = hostile.inspect_json(tmp_path, padding="x" * 200_000)
    monkeypatch.setattr(json, "loads", lambda *a, **k: pytest.fail("parsed"))
    with pytest.raises(EvaluationDataError, match="a JSON document larger than 100,000 bytes") as err:
        read_harness_output(log, limits=DropLimits(max_document_bytes=100_000))
    assert err.value.file == log


def test_an_eval_member_that_inflates_past_the_limit_stops_inflating(tmp_path: Path) -> None:
    zstandard = pytest.importorskip("zstandard")
    packed = zstandard.ZstdCompressor().compress(b" " * 5_000_000 + b"{}")  # a few hundred bytes
    log = hostile.patch_zip(
        hostile.inspect_eval(tmp_path, {"header.json": packed}, compression=zipfile.ZIP_STORED), method=93
    )  # Inspect's zstd members
    assert log.stat().st_size < 2_000
    with pytest.raises(EvaluationDataError, match="a JSON document larger than 1,000,000 bytes") as err:
        read_harness_output(log, limits=DropLimits(max_document_bytes=1_000_000))
    assert "header.json" in str(err.value.file)
    with pytest.raises(EvaluationDataError, match="unpacks to more than 2,000,000 bytes"):
        read_harness_output(log, limits=DropLimits(max_unpacked_bytes=2_000_000))


def test_harness_records_and_models_are_limited(tmp_path: Path) -> None:
    folder = hostile.lm_eval_folder(tmp_path)
    rows = len(read_harness_output(folder)[0])
    with pytest.raises(EvaluationDataError, match=f"more than {rows - 1:,} evaluation rows"):
        read_harness_output(folder, limits=DropLimits(max_rows=rows - 1))
    with pytest.raises(EvaluationDataError, match="file has more than 1 lines"):
        read_harness_output(folder, limits=DropLimits(max_rows=1))
    with pytest.raises(EvaluationDataError, match="names more than 0 models"):
        read_harness_output(folder, limits=DropLimits(max_models=0))
    lighteval = hostile.FIXTURES / "lighteval"
    with pytest.raises(EvaluationDataError, match="rows, more than the 1 a drop may have"):
        read_harness_output(lighteval, limits=DropLimits(max_rows=1))


def test_a_harness_table_streamed_again_in_the_same_read_is_counted_once(tmp_path: Path) -> None:
    from locus_model.data.limits import bounded

    folder = hostile.lm_eval_folder(tmp_path)
    rows = len(read_harness_output(folder)[0])
    with bounded(DropLimits(max_rows=rows)):  # as the drop folder does: read the harness output, then split its table
        table, _ = read_harness_output(folder)
        table.to_parquet(tmp_path / "table.parquet")
        assert sum(len(c) for c in iter_evaluation_chunks(tmp_path / "table.parquet")) == rows

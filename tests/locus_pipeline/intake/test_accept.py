"""One dropped file taken in (locus_pipeline.intake.accept): validated, split by model, accepted or rejected with
row, column and fix, nothing lost, model identity kept, memory bounded."""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path

import pandas as pd
import pytest

import locus_pipeline.intake.folder as ob  # where sha256_entry looks up sha256_file
from locus_model.data.contract import safe_model_key
from locus_pipeline import intake
from locus_pipeline.intake import DropFolder, claimed_keys, intake_file
from tests.locus_pipeline.intake.helpers import HEADER, csv_text, drop


def test_a_file_that_changes_while_read_is_left_for_later(folder: DropFolder, monkeypatch) -> None:
    path = drop(folder, "growing.csv", csv_text([("m", "q1", 1)]))
    real = ob.sha256_file

    def sha_then_writer_appends(p: Path) -> str:
        digest = real(p)
        with open(p, "a") as handle:  # the writer is still going
            handle.write('"m",q2,"question q2",bench,0\n')
        return digest

    monkeypatch.setattr(ob, "sha256_file", sha_then_writer_appends)
    result = intake_file(path, folder)
    assert result.status == "changed" and path.exists()
    assert not any(folder.accepted.iterdir()) and not any(folder.rejected.iterdir())


def test_accepted_file_is_split_by_model_with_a_manifest(folder: DropFolder) -> None:
    content = csv_text(
        [("a/model", "q1", 1), ("a/model", "q2", 0), ("b", "q1", 0.5), ("a/model", "q2", 0)]
    )  # one exact repeat
    path = drop(folder, "evals.csv", content)
    result = intake_file(path, folder)
    assert result.status == "accepted" and not path.exists()
    assert result.stored is not None and result.manifest is not None
    assert result.stored.read_text() == content  # the original bytes, moved, not rewritten
    stem = result.manifest.stem
    assert stem.endswith("-evals.csv") and result.sha256[:8] in stem
    manifest = intake.read_manifest(folder, stem)
    assert manifest == result.manifest and manifest.rows == 4
    assert [(m.model, m.rows, m.evaluations) for m in manifest.models] == [("a/model", 3, 2), ("b", 1, 1)]
    rows = intake.accepted_rows(folder, stem, "a/model")
    assert rows["query_id"].tolist() == ["q1", "q2"] and rows["score"].tolist() == [1.0, 0.0]
    assert intake.manifest_stems(folder) == [stem]


BAD = {
    "empty file": (b"", None, None, "empty"),
    "header only": (HEADER.encode(), 1, None, "no evaluation rows"),
    "wrong columns": (b"name,qid,text,bench,value\nm,q1,x,b,1\n", None, "model", "missing column"),
    "score out of range": (csv_text([("m", "q1", 1), ("m", "q2", 1.5)]).encode(), 2, "score", "not a number in [0, 1]"),
    "score not a number": (csv_text([("m", "q1", "yes")]).encode(), 1, "score", "not a number"),
    "non-UTF-8": (HEADER.encode() + b'm,q1,"caf\xe9",b,1\n', 1, None, "not valid UTF-8"),
    "conflicting scores": (csv_text([("m", "q1", 1), ("m", "q1", 0)]).encode(), 2, "score", "two different scores"),
    "two texts for one query_id": (
        HEADER.encode() + b"m,q1,one,b,1\nn,q1,two,b,1\n",
        2,
        "query",
        "two different texts",
    ),
    "cut inside a quoted field (partial write)": (
        csv_text([("m", "q1", 1)]).encode() + b'"m",q2,"quest',
        None,
        None,
        "the last line has no newline",
    ),
    "cut before the score (partial write)": (
        csv_text([("m", "q1", 1)]).encode() + b"m,q2,quest",
        None,
        None,
        "the last line has no newline",
    ),
    "cut at a row boundary inside the last row": (
        csv_text([("m", "q1", 1), ("m", "q2", 0)]).encode()[:-3],
        None,
        None,
        "looks cut off",
    ),
    "model name with surrounding spaces": (csv_text([(" m ", "q1", 1)]).encode(), 1, "model", "whitespace"),
    "corrupt parquet": (b"PAR1 not really", None, None, "not a readable Parquet"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_files_are_rejected_with_row_column_and_fix(folder: DropFolder, case: str) -> None:
    content, row, column, problem = BAD[case]
    name = "bad.parquet" if case == "corrupt parquet" else "bad.csv"
    path = drop(folder, name, content)
    result = intake_file(path, folder)
    assert result.status == "rejected" and not path.exists()
    assert result.stored is not None
    assert result.stored.parent == folder.rejected and result.stored.read_bytes() == content  # kept, unchanged
    reason = (folder.rejected / f"{result.stored.name}.reason.txt").read_text()
    assert reason == result.reason and problem in reason and "how to fix:" in reason
    if row is not None:
        assert f"row: {row} " in reason
    if column is not None:
        assert f"column: {column}" in reason
    assert intake.manifest_stems(folder) == []


def test_unsupported_file_type_is_rejected(folder: DropFolder) -> None:
    result = intake_file(drop(folder, "evals.xlsx", b"\x00\x01"), folder)
    assert result.status == "rejected" and result.reason is not None and "unsupported file type" in result.reason


def test_the_same_bytes_twice_onboard_nothing_the_second_time(folder: DropFolder) -> None:
    content = csv_text([("m", "q1", 1)])
    first = intake_file(drop(folder, "a.csv", content), folder)
    second = intake_file(drop(folder, "a-again.csv", content), folder)
    assert first.manifest is not None and second.manifest is not None and second.stored is not None
    assert second.status == "duplicate" and second.manifest.duplicate_of == first.manifest.stem
    assert second.manifest.models == [] and second.stored.exists()  # kept, with a manifest saying why


@pytest.mark.parametrize("name", ["../../etc/passwd", "org/model 7b", "modèle-ü 𝛼", "a\\b:c*?", "..", "x/../../y"])
def test_hostile_model_names_stay_inside_the_drop_folder(folder: DropFolder, name: str) -> None:
    result = intake_file(drop(folder, "names.csv", csv_text([(name, "q1", 1)])), folder)
    if name == "..":
        assert result.status == "rejected" and result.reason is not None and "path component" in result.reason
        return
    assert result.status == "accepted" and result.manifest is not None
    key = result.manifest.models[0].model_key
    assert key == safe_model_key(name) and "/" not in key and "\\" not in key and ".." not in key and key.isascii()
    part = folder.accepted / f"{result.manifest.stem}.parts" / f"{key}.parquet"
    assert part.resolve().parent == (folder.accepted / f"{result.manifest.stem}.parts").resolve()
    assert intake.accepted_rows(folder, result.manifest.stem, name)["model"].tolist() == [name]


def _intake_peak(folder: DropFolder, n_models: int, n_queries: int) -> tuple[int, int]:
    filler = "x" * 400  # long query text, as in real benchmarks
    lines = [HEADER] + [
        f'm{m},q{q},"{q} {filler}",b{q % 3},{(q * m) % 2}\n' for m in range(n_models) for q in range(n_queries)
    ]
    path = drop(folder, f"big-{n_models}.csv", "".join(lines))
    size = path.stat().st_size
    del lines
    gc.collect()
    tracemalloc.start()
    result = intake_file(path, folder, chunk_rows=1000)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert result.status == "accepted" and result.manifest is not None
    assert result.manifest.rows == n_models * n_queries
    return peak, size


def test_streaming_intake_memory_does_not_grow_with_the_file(folder: DropFolder) -> None:
    """Memory follows one chunk and the distinct queries, not the number of rows (see bench/ for 1 GB)."""
    small_peak, small_size = _intake_peak(folder, 4, 1000)  # ~1.7 MB
    big_peak, big_size = _intake_peak(folder, 64, 1000)  # ~27 MB: 16x the rows, same queries
    assert big_peak < 1.5 * small_peak, (small_peak, big_peak)
    assert big_peak < 0.5 * big_size, f"peak {big_peak / 1e6:.1f} MB for a {big_size / 1e6:.1f} MB file"


def test_one_long_text_costs_its_own_size_not_rows_times_its_size(folder: DropFolder) -> None:
    """Text columns are never made fixed-width (<U: rows x longest text x 4 bytes): 2,000 rows with one 50,000-char
    query (under the limit) were a 400 MB array; now the peak stays near the file's size."""
    rows = [f"m{q % 4},q{q},question {q},b,{q % 2}\n" for q in range(2000)]
    rows[7] = f"m3,q7,{'x' * 50_000},b,1\n"
    path = drop(folder, "long.csv", HEADER + "".join(rows))
    gc.collect()
    tracemalloc.start()
    result = intake_file(path, folder, chunk_rows=1000)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert result.status == "accepted" and result.manifest is not None and result.manifest.rows == 2000
    assert peak < 40e6, f"peak {peak / 1e6:.0f} MB for a {result.manifest.bytes / 1e6:.2f} MB file"


def test_a_1mb_query_in_10000_rows_is_rejected_with_its_row_and_the_drop_folder_moves_on(folder: DropFolder) -> None:
    """The per-query text limit (MAX_QUERY_CHARS): the file is rejected naming the row and the column, and the
    good file beside it is accepted in the same pass (the tick used to fail on a 37 GiB allocation, forever)."""
    from locus_model.data.contract import MAX_QUERY_CHARS

    rows = [f"m{q % 5},q{q},question {q},b,{q % 2}\n" for q in range(10_000)]
    rows[4321] = f"m1,q4321,{'y' * 1_000_000},b,1\n"
    bad = drop(folder, "huge.csv", HEADER + "".join(rows))
    good = drop(folder, "good.csv", csv_text([("m9", "q1", 1), ("m9", "q2", 0)]))
    gc.collect()
    tracemalloc.start()
    results = [intake_file(path, folder, chunk_rows=50_000) for path in (bad, good)]
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert [r.status for r in results] == ["rejected", "accepted"]
    reason = results[0].reason
    assert reason is not None
    assert "row: 4322 " in reason and "column: query" in reason  # 1-based data row
    assert f"1,000,000 characters long (at most {MAX_QUERY_CHARS:,})" in reason and len(reason) < 2000
    assert peak < 200e6, f"peak {peak / 1e6:.0f} MB"


COLLIDING = ("org llama 7b", safe_model_key("org llama 7b"))  # a name, and another name that is its safe key


@pytest.mark.parametrize("first, second", [COLLIDING, COLLIDING[::-1]])
def test_a_name_whose_key_names_another_model_is_rejected_in_either_order(
    folder: DropFolder, first: str, second: str
) -> None:
    assert safe_model_key(first) == safe_model_key(second) and first != second
    accepted = intake_file(
        drop(folder, "first.csv", csv_text([(first, "q1", 1)])), folder, claimed=claimed_keys(folder.home, folder)
    )
    assert accepted.status == "accepted"
    later = intake_file(
        drop(folder, "second.csv", csv_text([(second, "q1", 0)])), folder, claimed=claimed_keys(folder.home, folder)
    )
    assert later.status == "rejected" and later.reason is not None
    assert f"already names the model {first!r}" in later.reason and "column: model" in later.reason
    assert len(intake.manifest_stems(folder)) == 1  # only the first file's models will be onboarded


def test_a_training_model_key_is_claimed_too(folder: DropFolder) -> None:
    warehouse = folder.home.path / "warehouse"
    warehouse.mkdir()
    pd.DataFrame(
        {"model": [COLLIDING[0]], "query_id": ["q1"], "query": ["x"], "benchmark": ["b"], "score": [1.0]}
    ).to_parquet(warehouse / "evaluation_table.parquet")
    result = intake_file(
        drop(folder, "f.csv", csv_text([(COLLIDING[1], "q1", 1)])), folder, claimed=claimed_keys(folder.home, folder)
    )
    assert result.status == "rejected" and result.reason is not None and repr(COLLIDING[0]) in result.reason

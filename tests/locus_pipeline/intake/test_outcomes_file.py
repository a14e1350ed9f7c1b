"""A dropped file of graded outcomes (<name>.outcomes.csv / .jsonl): validated, its rows appended to the home's
outcome log with ids from the file's bytes, the file accepted with a manifest that starts no onboarding run."""

from __future__ import annotations

import pytest

from locus_pipeline.intake import DropFolder, intake_file
from locus_pipeline.intake.tick import intake_tick
from tests.locus_pipeline.intake.helpers import drop


def logged(folder: DropFolder) -> list[dict]:
    return [r for _, _, r in folder.home.traffic_tail("outcomes").read()]


def test_rows_by_request_id_or_by_model_and_query_go_to_the_outcome_log(folder: DropFolder) -> None:
    by_id = drop(folder, "week1.outcomes.csv", "request_id,score,source\nreq-a,1,judge\nreq-b,0.25,\n")
    result = intake_file(by_id, folder)
    assert result.status == "accepted" and result.manifest.rows == 2 and result.manifest.models == []
    assert [(r["request_id"], r["score"], r["source"]) for r in logged(folder)] == [
        ("req-a", 1.0, "judge"),
        ("req-b", 0.25, "file"),
    ]
    rows = drop(folder, "graded.outcomes.jsonl", '{"model": "m1", "query": "2+2?", "score": 0}\n')
    outcome = intake_tick(folder)
    assert [m.original_name for m in outcome.accepted] == ["graded.outcomes.jsonl"] and not rows.exists()
    (record,) = [r for r in logged(folder) if "model" in r]
    assert record["model"] == "m1" and record["query"] == "2+2?" and record["request_id"].startswith("file-")
    assert "graded outcomes" in outcome.message()


@pytest.mark.parametrize(
    "content, where",
    [
        ("request_id,score\nreq-a,1.5\n", "row 1"),
        ("request_id,score\n,1\n", "column 'request_id'"),
        ("model,score\nm1,1\n", "columns"),
        ("request_id,score,source\nreq-a,1,me\n", "column 'source'"),
        ("request_id,score\n", "no outcome"),
    ],
)
def test_a_bad_outcomes_file_is_rejected_with_where_and_how_to_fix(folder: DropFolder, content, where) -> None:
    result = intake_file(drop(folder, "bad.outcomes.csv", content), folder)
    assert result.status == "rejected" and where in result.reason and "How to fix" in result.reason
    assert not folder.home.traffic_folder("outcomes").exists()

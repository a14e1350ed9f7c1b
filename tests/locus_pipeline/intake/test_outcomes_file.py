"""A dropped file of graded outcomes (<name>.outcomes.csv / .jsonl): validated, its rows appended to the home's
outcome log with ids from the file's bytes, the file accepted with a manifest that starts no onboarding run."""

from __future__ import annotations

import pandas as pd
import pytest

from locus_pipeline.intake import DropFolder, intake_file
from locus_pipeline.intake.tick import intake_tick
from locus_pipeline.storage.traffic import Retention, SegmentWriter
from tests.locus_pipeline.intake.helpers import drop


def logged(folder: DropFolder) -> list[dict]:
    return [r for _, _, r in folder.home.traffic_tail("outcomes").read()]


@pytest.fixture()
def served(folder: DropFolder) -> DropFolder:
    """The home has a pool (m1, m2) and a gateway issued req-a and req-b."""
    home = folder.home
    (home.path / "warehouse").mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"model": ["m1", "m2"], "model_key": ["m1", "m2"]}).to_parquet(home.pool_path)
    writer = SegmentWriter(home.traffic_folder("decisions"), "gw", Retention())
    writer.append([{"request_id": rid, "answered_by": "m1"} for rid in ("req-a", "req-b")], sync=True)
    writer.close()
    return folder


def test_rows_by_request_id_or_by_model_and_query_go_to_the_outcome_log(served: DropFolder) -> None:
    folder = served
    by_id = drop(folder, "week1.outcomes.csv", "request_id,score,source\nreq-a,1,judge\nreq-b,0.25,\n")
    result = intake_file(by_id, folder)
    assert result.manifest is not None
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
    log = b"".join(p.read_bytes() for p in folder.home.traffic_folder("outcomes").iterdir())
    assert b"2+2?" not in log and record["query_key"].encode() in log  # the text in traffic/queries/, not the log
    assert "graded outcomes" in outcome.message()
    assert all(r["client"] == "operator" and r["grader"] for r in logged(folder))  # the folder's owner grades


@pytest.mark.parametrize(
    "content, said",
    [
        (
            "model,query,score\nm1,a,1\nghost-model,b,1\n../../../../tmp/pwn,c,0\n",
            "2 of 3 rows name models not in the pool ('ghost-model', '../../../../tmp/pwn')",
        ),
        (
            "request_id,score\n" + "".join(f"req-{i},1\n" for i in range(1000)) + "req-a,1\n",
            "1,000 of 1,001 rows name a request id that the decision log does not hold",
        ),
    ],
    ids=["models-not-in-the-pool", "never-issued-ids"],
)
def test_a_file_naming_models_outside_the_pool_or_unknown_ids_is_refused_in_one_line(
    served: DropFolder, content: str, said: str
) -> None:
    result = intake_file(drop(served, "victim.outcomes.csv", content), served)
    assert result.status == "rejected" and result.reason is not None
    assert said in result.reason and "nothing of it is learned" in result.reason
    assert [r for r in logged(served) if "score" in r] == []


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
    assert result.status == "rejected" and result.reason is not None
    assert where in result.reason and "How to fix" in result.reason
    assert not folder.home.traffic_folder("outcomes").exists()

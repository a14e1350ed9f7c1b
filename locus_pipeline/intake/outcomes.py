"""A file of graded outcomes dropped in the drop folder (``<name>.outcomes.csv`` or ``<name>.outcomes.jsonl``): what
`locus serve` learns from, as if each row had been posted to ``POST /v1/outcomes``.

Rows are either ``request_id, score[, source]`` (answers of the gateway, by the id it gave them) or ``model, query,
score`` (an answer of a pool model to a query, graded; the gateway finds its query group and the router's P itself).
Scores are in [0, 1]. The rows go to the home's outcome log (storage/traffic.py) with ids made from the file's
sha256 and the row, so a file taken in twice counts once; the file itself goes to accepted/ like any drop (its
manifest lists no model: it starts no onboarding run).

Who grades: the drop folder's owner, the operator (``client: operator``, a grader, as ``locus serve --token`` is),
whatever the file's name says. A file is refused whole, with one line saying how many rows and why, when a row names
a model that is not in the pool (no partition, no run is ever made for it) or a request id the decision log does not
hold (never issued by a gateway on this home, or past the log's retention).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pandas as pd

from locus_model.data.errors import EvaluationDataError
from locus_pipeline.storage.traffic import OPERATOR, SOURCES

OUTCOMES_SUFFIXES = (".outcomes.csv", ".outcomes.jsonl")
MAX_ROWS = 1_000_000
FIX = (
    "give each row request_id and score (an answer of locus serve, by its x-locus-request-id), or model, query "
    "and score; scores in [0, 1] (docs/serve.md, Outcomes)"
)


def is_outcomes_file(name: str) -> bool:
    return name.lower().endswith(OUTCOMES_SUFFIXES)


def read_outcomes(path: Path, sha256: str, home=None) -> list[dict]:
    """The file's rows as outcome-log records, or an EvaluationDataError naming the row, the column and the fix;
    with ``home`` (a LocusHome) the rows are checked against its pool and its decision log (:func:`check_against`)."""
    try:
        if path.name.lower().endswith(".csv"):
            frame = pd.read_csv(
                path,
                dtype={"request_id": str, "model": str, "query": str, "source": str},
                keep_default_na=False,
                nrows=MAX_ROWS + 1,
            )
        else:
            frame = pd.read_json(path, lines=True, dtype=False, nrows=MAX_ROWS + 1)
    except (ValueError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise EvaluationDataError(
            f"not a readable table of outcomes ({type(err).__name__}: {str(err)[:200]})", file=path, fix=FIX
        ) from None
    if len(frame) > MAX_ROWS:
        raise EvaluationDataError(
            f"more than {MAX_ROWS:,} outcomes in one file", file=path, fix="split it into several files"
        )
    if len(frame) == 0:
        raise EvaluationDataError("no outcome in the file", file=path, fix=FIX)
    columns = set(frame.columns)
    by_id = "request_id" in columns
    needed = {"request_id", "score"} if by_id else {"model", "query", "score"}
    allowed = needed | {"source"}
    if not needed <= columns or not columns <= allowed:
        raise EvaluationDataError(
            f"columns {sorted(columns)}: expected {sorted(needed)} (and optionally source)",
            file=path,
            column=", ".join(sorted((needed - columns) | (columns - allowed))),
            fix=FIX,
        )
    now, stamp = time.time(), sha256[:16]
    records = []
    for i, row in enumerate(frame.to_dict("records")):
        score = row["score"]
        if isinstance(score, str):
            try:
                score = float(score)
            except ValueError:
                score = math.nan
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not 0 <= score <= 1:
            raise EvaluationDataError(
                f"score {row['score']!r} is not a number in [0, 1]", file=path, row=i + 1, column="score", fix=FIX
            )
        source = str(row.get("source") or "file")
        if source not in SOURCES:
            raise EvaluationDataError(
                f"source {source!r} is not one of {list(SOURCES)}", file=path, row=i + 1, column="source", fix=FIX
            )
        keys = ("request_id",) if by_id else ("model", "query")
        for key in keys:
            if not isinstance(row[key], str) or not row[key].strip():
                raise EvaluationDataError(f"{key} is empty", file=path, row=i + 1, column=key, fix=FIX)
        record = {
            "score": float(score),
            "source": source,
            "time": now,
            "file": stamp,
            "client": OPERATOR,
            "grader": True,
        }
        if by_id:
            record["request_id"] = row["request_id"].strip()
        else:
            record.update(request_id=f"file-{stamp}-{i + 1}", model=row["model"], query=row["query"])
        records.append(record)
    if home is not None:
        check_against(home, path, records)
    return records


def check_against(home, path: Path, records: list[dict]) -> None:
    """Refuse (EvaluationDataError, one line) a file whose rows name models not in the pool or request ids that
    the decision log does not hold, saying how many of its rows and a few of the names."""
    named = [r for r in records if "model" in r]
    if named:
        pool = set()
        if home.has_pool():
            pool = set(home.read_table("model_embeddings", columns=["model"])["model"].astype(str))
        strangers = [r["model"] for r in named if r["model"] not in pool]
        if strangers:
            names = list(dict.fromkeys(strangers))
            shown = ", ".join(repr(m[:60]) for m in names[:3]) + (", ..." if len(names) > 3 else "")
            raise EvaluationDataError(
                f"{len(strangers):,} of {len(records):,} rows name models not in the pool ({shown}): the file is "
                "refused, nothing of it is learned",
                file=path,
                column="model",
                fix="grade only models of the pool, named as GET /v1/models names them",
            )
    by_id = [r["request_id"] for r in records if "model" not in r]
    if by_id:
        issued = {str(r["request_id"]) for _, _, r in home.traffic_tail("decisions").read() if "request_id" in r}
        unknown = sum(rid not in issued for rid in by_id)
        if unknown:
            raise EvaluationDataError(
                f"{unknown:,} of {len(records):,} rows name a request id that the decision log does not hold (never "
                "issued by a gateway on this home, or past the traffic log's retention): the file is refused, "
                "nothing of it is learned",
                file=path,
                column="request_id",
                fix="keep only the x-locus-request-id values of this home's gateways' answers",
            )

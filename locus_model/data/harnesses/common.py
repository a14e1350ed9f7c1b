"""What the four harness readers share: the report, stable query ids, score mapping, JSON loading, errors.

Every reader gives the long table of the contract (model, query_id, query, benchmark, score), validated with
:func:`locus_model.data.contract.validate_evaluations`; every failure is an EvaluationDataError naming the file,
the record (``row``: 1-based line of a .jsonl, position in a JSON list, or Parquet row), the field (``column``)
and a fix. The rules per format are stated in data/README.md ("Evaluation harness outputs").
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator, Mapping

import pandas as pd

from locus_model.data.contract import model_name_problem, validate_evaluations
from locus_model.data.errors import EvaluationDataError
from locus_model.data.limits import FIX_SPLIT, Budget, budget, parse_json, read_bounded

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


@dataclass(frozen=True)
class HarnessSummary:
    """What a harness reader found, beside the table."""

    harness: str  # lm_eval | inspect | lighteval | helm
    files: tuple[str, ...]  # files read, in reading order
    models: tuple[str, ...]
    # task -> the metric (or scorer, stat) its score came from; None where a task's files held no record (lighteval)
    tasks: Mapping[str, str | None] = field(default_factory=dict)
    rows: int = 0
    records_read: int = 0
    records_skipped: int = 0  # records not used, by rule (other filters, perturbed instances, later trials ...)

    def as_dict(self) -> dict:
        return asdict(self)


def text_hash(value: object, n: int = 12) -> str:
    """A short sha256 of a text or of a JSON value (keys sorted): the same doc gives the same hash in every file."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:n]


def make_query_id(harness: str, task: str, version: object, item: object, content: object) -> str:
    """``<harness>:<task>:v<version>:<item>:<12 hex of the doc>``: the task, its version (the part left out when the
    harness has none), the doc's id within the task, and a hash of the doc itself (so a changed dataset under the
    same task name and version never shares an id)."""
    versioned = "" if version is None else f"v{version}:"
    return f"{harness}:{task}:{versioned}{item}:{text_hash(content)}"


def with_options(question: str, options: list[str] | None) -> str:
    """The query text: the question, then "A. <option>" per line when the doc has answer options."""
    question = question.strip()
    if not options:
        return question
    return question + "\n" + "\n".join(f"{LETTERS[i]}. {str(o).strip()}" for i, o in enumerate(options[: len(LETTERS)]))


def bad(file: Path | str, record: int | None, field_name: str | None, problem: str, fix: str) -> EvaluationDataError:
    """An error at one record of a harness file (``row`` = the record, ``line`` too for .jsonl files)."""
    line = record if str(file).endswith(".jsonl") else None
    prefix = f"record {record}: " if record is not None else ""
    return EvaluationDataError(prefix + problem, file=file, row=record, line=line, column=field_name, fix=fix)


def _not_json(file: Path, err: ValueError, fix: str, record: int | None = None) -> EvaluationDataError:
    if isinstance(err, UnicodeDecodeError):
        what = "the file" if record is None else "the line"
        return bad(
            file, record, None, f"{what} is not valid UTF-8 ({err})", "the harness writes UTF-8: copy the file again"
        )
    if isinstance(err, json.JSONDecodeError):
        where = f" at line {err.lineno}, column {err.colno}" if record is None else f" at column {err.colno}"
        error = bad(file, record, None, f"not valid JSON ({err.msg}{where})", fix)
        return error if record is not None else EvaluationDataError(error.problem, file=file, line=err.lineno, fix=fix)
    return bad(file, record, None, f"not valid JSON ({err})", fix)  # e.g. a number of more than 4,300 digits


def load_json(file: Path, *, fix: str) -> object:
    """A whole JSON file (a regular file within the document size and depth limits, data.limits), or an
    EvaluationDataError saying why it cannot be read."""
    if not file.is_file():
        raise EvaluationDataError(
            "not a regular file (a pipe, socket or device?)", file=file, fix="drop regular files only"
        )
    with open(file, "rb") as handle:
        data = read_bounded(handle, file, unpacking=False)
    try:
        return parse_json(data, file)
    except EvaluationDataError:
        raise
    except ValueError as err:
        raise _not_json(file, err, fix) from None


def iter_jsonl(file: Path, *, fix: str) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-blank line of a JSON-lines file; a bad line, or one past the rows limit, is
    an error at that line."""
    limit, current = budget().limits.max_document_bytes, budget()
    with open(file, "rb") as handle:
        for number, raw in enumerate(iter(lambda: handle.readline(limit + 1), b""), start=1):
            if len(raw) > limit:
                raise bad(file, number, None, f"the line is longer than {limit:,} bytes", FIX_SPLIT)
            if number > current.limits.max_rows:
                raise bad(file, number, None, f"the file has more than {current.limits.max_rows:,} lines", FIX_SPLIT)
            if number % 1000 == 0:
                current.check_time(file)
            if not raw.strip():
                continue
            try:
                value = parse_json(raw, file, line=number)
            except EvaluationDataError:
                raise
            except ValueError as err:
                raise _not_json(file, err, fix, number) from None
            if not isinstance(value, dict):
                raise bad(file, number, None, f"a JSON {type(value).__name__}, not an object", fix)
            yield number, value


def unit_score(value: object, file: Path | str, record: int | None, metric: str, fix: str) -> float:
    """A per-record metric value as a score in [0, 1]: booleans are 0/1, numbers must lie in [0, 1]."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int) and 0 <= value <= 1:  # compared as an int: a 400-digit one has no float
        return float(value)
    if isinstance(value, float) and not math.isnan(value) and 0.0 <= value <= 1.0:
        return value
    shown = (
        repr(value)
        if not isinstance(value, int) or abs(value) < 10**12
        else f"an integer of about {int(value.bit_length() * 0.30103)} digits"
    )
    raise bad(file, record, metric, f"{metric} is {shown[:80]}, not a score in [0, 1]", fix)


def check_model_name(name: object, file: Path | str, where: str) -> str:
    problem = model_name_problem(name)
    if problem:
        raise EvaluationDataError(
            f"the model name from {where}: {problem}",
            file=file,
            column="model",
            fix="fix the name in the harness output, or pass model= to the reader",
        )
    return str(name)


def finish(rows: list[tuple[str, str, str, str, float]], source: Path | str, *, fix: str) -> pd.DataFrame:
    """The validated long table of (model, query_id, query, benchmark, score) rows; no rows is an error."""
    if not rows:
        raise EvaluationDataError("no evaluation records found", file=source, fix=fix)
    current = budget()
    # the rows are checked against the limit, not added to the read's count: the drop folder streams this table
    # again (split by model), and counts it then
    Budget(current.limits).count_rows(len(rows), source)
    current.count_models(((name, None) for name in dict.fromkeys(row[0] for row in rows)), source)
    table = pd.DataFrame(rows, columns=["model", "query_id", "query", "benchmark", "score"])
    return validate_evaluations(table, source=str(source))

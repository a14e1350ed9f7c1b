"""MMLU-Pro's own per-model outputs: read them into the long evaluation table.

MMLU-Pro (Wang et al., NeurIPS 2024 Datasets & Benchmarks, arXiv 2406.01574; github.com/TIGER-AI-Lab/MMLU-Pro,
Apache-2.0) is 12,032 ten-option multiple-choice questions in 14 categories. Its harness writes, per model, JSON
lists of records, one per question:

    evaluate_from_local.py   <save_dir>/<model>/CoT/<subjects>/<category>.json
    evaluate_from_api.py     <output_dir>/<category>_result.json   (and <category>_summary.json, skipped)
    published eval_results   model_outputs_<model>_<k>shots.json   (one file per model, every category)

A record holds the dataset row (question_id, question, options with "N/A" removed, answer = gold letter,
answer_index, cot_content, category, src) plus pred (the extracted letter, or null) and the raw generation
(model_outputs or generated_text). This reader needs question_id, question, options, answer, category and pred.

One row per (model, question) comes out:
    model      the model name (rule: read_mmlu_pro_outputs)
    query_id   "mmlupro-<question_id>"
    query      the question (stripped) followed by its lettered options, "A. <option>" per line, options verbatim
    benchmark  the record's category
    score      1.0 when pred equals answer, else 0.0; a null or empty pred (no answer extracted) is 0.0.
               MMLU-Pro's own scorer instead draws a seeded random letter for those; counting them wrong gives
               no credit for an unanswered question (the vendored data/mmlu-pro matrix uses the same rule).
This is how data/mmlu-pro/evaluations.parquet was built from the published files; the reader rebuilds it exactly.
Format details: data/mmlu-pro/README.md.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from locus_model.data.contract import model_name_problem, validate_evaluations
from locus_model.data.errors import EvaluationDataError

LETTERS = "ABCDEFGHIJKLMNOP"  # the harness's choice letters (MMLU-Pro uses up to J)
REQUIRED_FIELDS = ("question_id", "question", "options", "answer", "category", "pred")
QUERY_ID_PREFIX = "mmlupro-"
# published file names: model_outputs_<model>_<k>shots.json (also "_5-shots", "_0shots_<time>")
_PUBLISHED_NAME = re.compile(r"^model_outputs_(?P<model>.+?)_\d+-?shots?(?:_.*)?$")
_HARNESS_MARKER = "CoT"  # evaluate_from_local.py writes <save_dir>/<model>/CoT/<subjects>/<category>.json
_SNIFF_BYTES = 65_536
_SNIFF_FILES = 20

_FIX_LAYOUT = (
    "give MMLU-Pro's result files: JSON lists of records with question_id, question, options, answer, category, "
    "pred (see data/mmlu-pro/README.md)"
)


@dataclass(frozen=True)
class MmluProSummary:
    """What read_mmlu_pro_outputs found, beside the table."""

    files: tuple[str, ...]  # result files read, in reading order
    models: int
    queries: int
    rows: int  # rows of the returned table, one per (model, question)
    records_read: int  # question records in the files
    repeats_dropped: int  # records repeating a (model, question_id) with the same answer and score
    entries_skipped: int  # bare strings in a record list (summary keys that leaked into published files)
    no_answer: int  # records whose pred is null or empty (scored 0)
    queries_with_several_texts: int  # question_ids whose text differs between files (the commonest text kept)
    queries_with_several_answers: int  # question_ids whose gold answer differs between models' files

    def as_dict(self) -> dict:
        return asdict(self)


# ----------------------------------------------------------------------------------------------------------
# finding files and naming models


def _is_summary(path: Path) -> bool:
    return path.name == "summary.json" or path.name.endswith("_summary.json")


def _result_files(path: Path) -> list[Path]:
    """The result files under a folder (any depth), sorted; hidden entries and *_summary.json skipped."""
    files = [
        p
        for p in path.rglob("*.json")
        if p.is_file() and not _is_summary(p) and not any(part.startswith(".") for part in p.relative_to(path).parts)
    ]
    return sorted(files, key=lambda p: p.relative_to(path).as_posix())


def model_name_of(file: Path, root: Path) -> str:
    """The model a result file belongs to, from its name or where it lies under ``root`` (the path given).

    1. ``model_outputs_<model>_<k>shots.json`` (the published files) -> ``<model>``;
    2. a file under ``.../<model>/CoT/...`` (evaluate_from_local.py's layout) -> ``<model>``;
    3. a file directly in ``root`` -> the name of ``root`` (for a single file: its folder's name);
    4. a file deeper under ``root`` -> the first folder below ``root`` (one folder per model).
    """
    match = _PUBLISHED_NAME.match(file.name.removesuffix(".json"))
    if match:
        return match["model"]
    file, root = file.resolve(), root.resolve()
    parts = file.parent.parts
    if _HARNESS_MARKER in parts[1:]:
        i = len(parts) - 1 - parts[::-1].index(_HARNESS_MARKER)
        return parts[i - 1]
    if file.parent == root:
        return root.name
    return file.relative_to(root).parts[0]


def _sniff(file: Path) -> bool:
    """Whether a file's first bytes look like a list of MMLU-Pro result records (no full parse)."""
    try:
        with open(file, "rb") as handle:
            head = handle.read(_SNIFF_BYTES).decode("utf-8", errors="ignore")
    except OSError:
        return False
    return head.lstrip().startswith("[") and all(f'"{key}"' in head for key in ("question_id", "options", "pred"))


def is_mmlu_pro_folder(path: str | Path) -> bool:
    """True when ``path`` is a folder holding MMLU-Pro result files (or is one such .json file).

    Cheap: looks at the first 64 KiB of at most 20 result files (*.json, any depth, summaries skipped) for a JSON
    list whose records name question_id, options and pred. Never raises.
    """
    path = Path(path)
    try:
        if path.is_file():
            return path.suffix == ".json" and _sniff(path)
        if not path.is_dir():
            return False
        for n, file in enumerate(p for p in path.rglob("*.json") if not _is_summary(p)):
            if n >= _SNIFF_FILES:
                return False
            if _sniff(file):
                return True
    except OSError:
        return False
    return False


# ----------------------------------------------------------------------------------------------------------
# reading one file


def build_query(question: str, options: list[str]) -> str:
    """The query text: the question without surrounding whitespace, then "A. <option>" per line, verbatim."""
    return question.strip() + "\n" + "\n".join(f"{LETTERS[i]}. {option}" for i, option in enumerate(options))


def _load(file: Path) -> list:
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise EvaluationDataError(
            f"the file is not valid UTF-8 ({err})", file=file, fix="re-save it as UTF-8 (the harness writes UTF-8 JSON)"
        ) from None
    try:
        entries = json.loads(text)
    except json.JSONDecodeError as err:
        raise EvaluationDataError(
            f"not valid JSON ({err.msg} at line {err.lineno}, column {err.colno})",
            file=file,
            fix="the file is truncated or not a result file; rerun the evaluation or remove the file",
        ) from None
    if not isinstance(entries, list):
        raise EvaluationDataError(
            f"the file holds a JSON {type(entries).__name__}, not a list of records",
            file=file,
            fix=f"{_FIX_LAYOUT}; summary files are skipped only when named summary.json or <category>_summary.json",
        )
    return entries


def _bad(file: Path, record: int, field: str, problem: str, fix: str) -> EvaluationDataError:
    """An error at one record: row = the record's 1-based position in the file's JSON list."""
    return EvaluationDataError(f"record {record}: {problem}", file=file, row=record, column=field, fix=fix)


def _parse_record(entry: dict, file: Path, record: int) -> tuple[int, str, str, str, str | None]:
    """(question_id, query text, category, gold letter, pred) of one record, or an error naming its field."""
    for field in REQUIRED_FIELDS:
        if field not in entry:
            raise _bad(
                file,
                record,
                field,
                f"the record has no '{field}' (it has {sorted(entry)})",
                f"every record needs {', '.join(REQUIRED_FIELDS)}; pred may be null",
            )
    qid = entry["question_id"]
    if isinstance(qid, str) and qid.strip().isdigit():
        qid = int(qid)
    if isinstance(qid, bool) or not isinstance(qid, int) or qid < 0:
        raise _bad(
            file,
            record,
            "question_id",
            f"question_id {entry['question_id']!r} is not a non-negative integer",
            "use MMLU-Pro's question_id as the dataset gives it",
        )
    question = entry["question"]
    if not isinstance(question, str) or not question.strip():
        raise _bad(
            file,
            record,
            "question",
            f"question {question!r} is not a non-empty text",
            "every record needs its question text",
        )
    options = entry["options"]
    if not isinstance(options, list) or not options:
        raise _bad(
            file,
            record,
            "options",
            f"options is a {type(options).__name__}, not a non-empty list of texts",
            "options must be the JSON list of option texts, as the harness writes it",
        )
    if len(options) > len(LETTERS):
        raise _bad(
            file,
            record,
            "options",
            f"{len(options)} options, more than the {len(LETTERS)} letters",
            f"a question has at most {len(LETTERS)} options",
        )
    bad = next((i for i, option in enumerate(options) if not isinstance(option, str)), None)
    if bad is not None:
        raise _bad(
            file,
            record,
            "options",
            f"option {bad + 1} is a {type(options[bad]).__name__}, not a text",
            "every option must be a JSON string",
        )
    category = entry["category"]
    if not isinstance(category, str) or not category.strip():
        raise _bad(
            file,
            record,
            "category",
            f"category {category!r} is not a non-empty text",
            "use MMLU-Pro's category (math, law, ...)",
        )
    answer = entry["answer"]
    if not isinstance(answer, str) or answer not in LETTERS[: len(options)]:
        raise _bad(
            file,
            record,
            "answer",
            f"answer {answer!r} is not one of the letters {LETTERS[0]}..{LETTERS[len(options) - 1]} "
            f"of its {len(options)} options",
            "answer must be the gold option's letter",
        )
    pred = entry["pred"]
    if pred is not None and not isinstance(pred, str):
        raise _bad(
            file,
            record,
            "pred",
            f"pred {pred!r} is a {type(pred).__name__}, not a letter or null",
            "pred is the extracted answer letter, or null when none was extracted",
        )
    return qid, build_query(question, options), category, answer, pred or None


# ----------------------------------------------------------------------------------------------------------
# reading a file or a folder


def _result_files_of(path: Path, model: str | None) -> tuple[Path, list[Path]]:
    """(the folder model names are derived below, the result files to read): ``path`` checked, and ``model``."""
    if not path.exists():
        raise EvaluationDataError("no such file or folder", file=path, fix="check the path")
    problem = None if model is None else model_name_problem(model)
    if problem:
        raise EvaluationDataError(
            problem,
            file=path,
            column="model",
            fix="pass a printable model name without surrounding spaces",
        )
    files = _result_files(path) if path.is_dir() else [path]
    if not files:
        raise EvaluationDataError("the folder has no MMLU-Pro result files (*.json)", file=path, fix=_FIX_LAYOUT)
    return (path if path.is_dir() else path.parent), files


@dataclass
class _Records:
    """The question records read so far, one per (model, question_id), and what the reading counted."""

    files: list[Path]
    # (model, question_id) -> (gold answer, index of its file, score, category, record number)
    rows: dict[tuple[str, int], tuple[str, int, float, str, int]] = dataclasses.field(default_factory=dict)
    texts: dict[int, Counter] = dataclasses.field(
        default_factory=dict
    )  # qid -> query texts, insertion order = reading order
    answers: dict[int, set[str]] = dataclasses.field(default_factory=dict)
    records_read: int = 0
    repeats: int = 0
    skipped: int = 0
    no_answer: int = 0

    def add(self, name: str, f: int, record: int, entry: object) -> None:
        """Entry ``record`` (1-based) of file ``f`` as model ``name``'s: a repeat with the same answer and score is
        counted once, with another answer or score it is an error; a bare string is skipped (counted)."""
        file = self.files[f]
        if isinstance(entry, str):
            self.skipped += 1
            return
        if not isinstance(entry, dict):
            raise _bad(
                file,
                record,
                "record",
                f"a JSON {type(entry).__name__}, not an object",
                "every entry of the list must be a record object",
            )
        qid, text, category, answer, pred = _parse_record(entry, file, record)
        self.records_read += 1
        self.no_answer += pred is None
        score = 1.0 if pred == answer else 0.0
        key = (name, qid)
        if key in self.rows:
            old_answer, old_file, old_score, _, old_record = self.rows[key]
            where = f"record {old_record} of {self.files[old_file]}"
            if old_answer != answer:
                raise _bad(
                    file,
                    record,
                    "answer",
                    f"question_id {qid} of model {name!r} appears again with answer {answer!r}; "
                    f"{where} has {old_answer!r}",
                    "keep one record per question_id and model; remove results of an older dataset revision",
                )
            if old_score != score:
                raise _bad(
                    file,
                    record,
                    "pred",
                    f"question_id {qid} of model {name!r} appears again with a different result "
                    f"(pred {pred!r}); {where} scored {old_score:g}",
                    "keep one record per question_id and model (merge or rerun the evaluation)",
                )
            self.repeats += 1
            return
        self.rows[key] = (answer, f, score, category, record)
        self.texts.setdefault(qid, Counter())[text] += 1
        self.answers.setdefault(qid, set()).add(answer)

    def table(self) -> pd.DataFrame:
        """The long table, each question's text the one found in most files (ties: the first read)."""
        query_of = {qid: counter.most_common(1)[0][0] for qid, counter in self.texts.items()}
        return pd.DataFrame(
            {
                "model": [m for m, _ in self.rows],
                "query_id": [f"{QUERY_ID_PREFIX}{qid}" for _, qid in self.rows],
                "query": [query_of[qid] for _, qid in self.rows],
                "benchmark": [value[3] for value in self.rows.values()],
                "score": [value[2] for value in self.rows.values()],
            }
        )


def read_mmlu_pro_outputs(path: str | Path, *, model: str | None = None) -> tuple[pd.DataFrame, MmluProSummary]:
    """Read MMLU-Pro result files into the long evaluation table; returns (table, report).

    ``path``: one result file, or a folder searched at any depth for *.json (hidden entries and summary files,
    ``summary.json`` / ``<category>_summary.json``, skipped). The model of each file is ``model`` when given
    (then everything read is that one model), else derived by :func:`model_name_of`: the published name
    ``model_outputs_<model>_<k>shots.json``, else the folder before ``CoT`` in the harness layout, else the
    folder named by ``path`` for files directly in it, else the first folder below ``path``.

    Rules: one model's repeated question_id with the same answer and score is kept once (counted), with a
    different answer or score it is an error. When files disagree on a question's text (MMLU-Pro fixed typos
    between dataset revisions) the text found in most files wins, ties going to the first file read; each
    model keeps the score against its own file's gold answer. Bare strings in a record list are skipped
    (counted). The table is then validated with the evaluation contract (validate_evaluations).

    Raises EvaluationDataError naming the file, the record (``row``: 1-based position in the file's JSON list)
    and the field (``column``), with a fix.
    """
    path = Path(path)
    root, files = _result_files_of(path, model)
    records = _Records(files)
    for f, file in enumerate(files):
        name = model if model is not None else model_name_of(file, root)
        problem = model_name_problem(name)
        if problem:
            raise EvaluationDataError(
                f"model name from the path: {problem}",
                file=file,
                column="model",
                fix="rename the folder or file, or pass model=",
            )
        for record, entry in enumerate(_load(file), start=1):
            records.add(name, f, record, entry)
    if not records.rows:
        raise EvaluationDataError("no question records in the result files", file=path, fix=_FIX_LAYOUT)
    table = validate_evaluations(records.table(), source=str(path))
    report = MmluProSummary(
        files=tuple(map(str, files)),
        models=table["model"].nunique(),
        queries=table["query_id"].nunique(),
        rows=len(table),
        records_read=records.records_read,
        repeats_dropped=records.repeats,
        entries_skipped=records.skipped,
        no_answer=records.no_answer,
        queries_with_several_texts=sum(len(c) > 1 for c in records.texts.values()),
        queries_with_several_answers=sum(len(a) > 1 for a in records.answers.values()),
    )
    return table, report

"""lighteval details (``lighteval ... --output-dir OUT --save-details``) as the long evaluation table.

Hugging Face's lighteval (github.com/huggingface/lighteval; read here as 0.13 writes it) saves, per run,
``OUT/results/<model>/results_<time>.json`` (``config_general.model_name``, ``config_tasks`` with each task's
``version``) and ``OUT/details/<model>/<time>/details_<task>_<time>.parquet``, one row per doc with three struct
columns: ``doc`` (``query`` = the doc's own prompt, without the few-shot examples, which lighteval adds later;
``choices``, ``gold_index``, ``id``, ``task_name``, ``original_query``), ``model_response`` and ``metric``
({metric name: value}). Releases before 0.8 wrote flat columns instead (``example``, ``choices``, ``metrics``,
a dict or its JSON text): both are read. The task is ``<name>|<few-shot count>`` (older: ``<suite>|<name>|<n>``).

Rules (data/README.md, "lighteval"):
    model      ``model=`` when given, else the results file's ``config_general.model_name`` (the results file of
               the same run time), else the folder name under details/
    query_id   ``lighteval:<task>:v<version>:<doc id>:<12 hex of sha256 of the query text>`` (the few-shot count is
               part of the task: a 0-shot and a 5-shot run are different evaluations)
    query      ``doc.original_query`` when set (the question before a template was applied), else ``doc.query``,
               with "A. <choice>" lines for the doc's choices when it has more than one
    benchmark  the task's name without its suite and few-shot count ("leaderboard|arc:challenge|25" -> "arc:challenge")
    score      the first of METRICS in the ``metric`` column, in [0, 1]; a task with none of them is refused;
               ``metric=`` picks another
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from locus_model.data.errors import EvaluationDataError
from locus_model.data.harnesses.common import (
    HarnessSummary,
    bad,
    check_model_name,
    finish,
    load_json,
    make_query_id,
    unit_score,
    with_options,
)
from locus_model.data.limits import FIX_SPLIT, budget

METRICS = (
    "acc",
    "em",
    "exact_match",
    "quasi_exact_match",
    "prefix_exact_match",
    "quasi_prefix_exact_match",
    "extractive_match",
    "pass@1",
    "acc_norm",
    "loglikelihood_acc",
    "mc1",
    "accuracy",
)
_DETAILS = re.compile(r"^details_(?P<task>.+)_(?P<time>\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}\.\d+)\.parquet$")
FIX_LAYOUT = (
    "give the folder lighteval --output-dir wrote with --save-details: details/<model>/<time>/"
    "details_<task>_<time>.parquet and results/<model>/results_<time>.json (see data/README.md)"
)


def detail_files(path: Path) -> list[Path]:
    return sorted(
        (
            p
            for p in path.rglob("details_*.parquet")
            if _DETAILS.match(p.name) and p.is_file() and not any(s.startswith(".") for s in p.relative_to(path).parts)
        ),
        key=lambda p: p.as_posix(),
    )


def is_lighteval_output(path: str | Path) -> bool:
    """A folder holding at least one details_<task>_<time>.parquet (at any depth). Never raises."""
    try:
        return Path(path).is_dir() and bool(detail_files(Path(path)))
    except OSError:
        return False


def benchmark_of(task: str) -> str:
    parts = task.split("|")
    if len(parts) >= 2 and parts[-1].isdigit():
        parts = parts[:-1]
    return parts[-1] if len(parts) > 1 else parts[0]


def _results_for(path: Path, stamp: str) -> tuple[Path | None, dict]:
    for file in path.rglob(f"results_{stamp}.json"):
        results = load_json(file, fix="the results file is cut off: run lighteval again")
        if isinstance(results, dict):
            return file, results
    return None, {}


def _object(value: object) -> dict:
    """A JSON object, or {} for anything else (a field of another type is read as absent)."""
    return value if isinstance(value, dict) else {}


def _plain(value: object) -> object:
    """Parquet structs and lists (numpy arrays after pandas) as plain Python values."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _records(file: Path) -> list[tuple[int, object, object]]:
    """(row, doc, metrics) per row of a details file, in either layout; a file of more rows than the rows limit is
    refused from its footer, before any row is read."""
    import pyarrow.parquet as pq  # why: pyarrow only for lighteval's Parquet details

    try:
        declared = pq.ParquetFile(file).metadata.num_rows
        if declared <= budget().limits.max_rows:
            frame = pd.read_parquet(file)
    except Exception as err:  # noqa: BLE001 (pyarrow raises several types for a cut or damaged file)
        raise EvaluationDataError(
            f"not a readable Parquet file ({type(err).__name__}: {err})",
            file=file,
            fix="the details file is cut off or damaged: copy it again",
        ) from None
    if declared > budget().limits.max_rows:
        raise EvaluationDataError(
            f"the file has {declared:,} rows, more than the {budget().limits.max_rows:,} a drop may have",
            file=file,
            fix=FIX_SPLIT,
        )
    if "doc" in frame.columns and "metric" in frame.columns:
        return [(i, _plain(d), _plain(m)) for i, (d, m) in enumerate(zip(frame["doc"], frame["metric"]), start=1)]
    if "metrics" in frame.columns and ("example" in frame.columns or "full_prompt" in frame.columns):
        out: list[tuple[int, object, object]] = []
        for i, row in enumerate(frame.to_dict("records"), start=1):
            metrics = row["metrics"]
            if isinstance(metrics, str):
                try:
                    metrics = json.loads(metrics)
                except json.JSONDecodeError:
                    raise bad(file, i, "metrics", "the metrics value is not JSON", FIX_LAYOUT) from None
            doc = {
                "query": row.get("example") or row.get("full_prompt"),
                "choices": _plain(row.get("choices")),
                "id": row.get("id", i - 1),
            }
            out.append((i, doc, _plain(metrics)))
        return out
    raise EvaluationDataError(
        f"the details file has the columns {list(frame.columns)}, not doc/metric (or example/metrics)",
        file=file,
        fix=FIX_LAYOUT,
    )


def read_lighteval_details(
    path: str | Path, *, model: str | None = None, metric: str | None = None
) -> tuple[pd.DataFrame, HarnessSummary]:
    """Read a lighteval output folder (details and results, any depth) into the long table."""
    path = Path(path)
    files = detail_files(path) if path.is_dir() else ([path] if _DETAILS.match(path.name) and path.is_file() else [])
    root = path if path.is_dir() else path.parent
    if not files:
        raise EvaluationDataError(
            "no details_<task>_<time>.parquet files (was --save-details given?)", file=path, fix=FIX_LAYOUT
        )
    rows: list[tuple[str, str, str, str, float]] = []
    tasks: dict[str, str | None] = {}  # None: the task's details files held no record
    read: list[str] = []
    records = 0
    for file in files:
        found = _DETAILS.match(file.name)
        assert found is not None, file  # detail_files and the single file above keep only matching names
        task, stamp = found["task"], found["time"]
        results_file, results = _results_for(root, stamp)
        if model is not None:
            name = model
        elif results_file is not None and _object(results.get("config_general")).get("model_name"):
            name = check_model_name(results["config_general"]["model_name"], results_file, "config_general.model_name")
        elif file.parent.parent.parent.name == "details":  # details/<model>/<time>/details_...
            name = check_model_name(file.parent.parent.name, file, "the folder name under details/")
        else:
            raise EvaluationDataError(
                "the model's name is neither in a results file of this run nor in the path details/<model>/<time>/",
                file=file,
                fix="drop the whole output folder, or pass model=",
            )
        check_model_name(name, file, "model=")
        config = _object(_object(results.get("config_tasks")).get(task))
        version = config.get("version", _object(results.get("versions")).get(task))
        used = metric
        for row, doc, metrics in _records(file):
            records += 1
            if not isinstance(doc, dict):
                raise bad(file, row, "doc", "the doc value is not a record", FIX_LAYOUT)
            if not isinstance(metrics, dict):
                raise bad(
                    file, row, "metric", "the metric value is not a mapping of metric names to values", FIX_LAYOUT
                )
            if used is None:
                used = next((m for m in METRICS if m in metrics), None)
                if used is None:
                    raise bad(
                        file,
                        row,
                        "metric",
                        f"task {task!r} reports {sorted(metrics)}: none is an accuracy-like "
                        f"score in [0, 1] (one of {list(METRICS)})",
                        "leave this task out of the drop, or give metric= naming a per-doc metric in [0, 1]",
                    )
            if used not in metrics:
                raise bad(
                    file,
                    row,
                    "metric",
                    f"the row has no {used!r} (it has {sorted(metrics)})",
                    "every row of a task has the same metrics: the file is mixed or edited; run lighteval again",
                )
            score = unit_score(
                metrics[used], file, row, f"metric.{used}", "lighteval writes 0/1 per doc for this metric"
            )
            question = doc.get("original_query") or doc.get("query")
            if not isinstance(question, str) or not question.strip():
                raise bad(file, row, "doc.query", "the doc has no query text", FIX_LAYOUT)
            choices = doc.get("choices") if isinstance(doc.get("choices"), list) and len(doc["choices"]) > 1 else None
            text = with_options(question, choices)
            doc_id = doc.get("id") if doc.get("id") not in (None, "") else row - 1
            rows.append(
                (name, make_query_id("lighteval", task, version, doc_id, text), text, benchmark_of(task), score)
            )
        tasks[task] = used
        read += [str(file)] + (
            [str(results_file)] if results_file is not None and str(results_file) not in read else []
        )
    table = finish(rows, path, fix=FIX_LAYOUT)
    report = HarnessSummary(
        "lighteval", tuple(read), tuple(sorted(table["model"].unique())), tasks, len(table), records, 0
    )
    return table, report

"""lm-evaluation-harness output (``lm_eval ... --output_path OUT --log_samples``) as the long evaluation table.

EleutherAI's harness (github.com/EleutherAI/lm-evaluation-harness; read here as 0.4.x writes it) puts, per model,
``OUT/<model_name_sanitized>/results_<time>.json`` (the model's name and args, the task versions and configs) and
``samples_<task>_<time>.jsonl`` beside it, one line per (doc, filter): ``doc_id``, ``doc`` (the dataset row),
``target``, ``arguments`` (the full prompt with its few-shot examples), ``resps``, ``filtered_resps``, ``filter``,
``metrics`` (the names) and one value per metric (``acc``, ``acc_norm``, ``exact_match`` ...). The Open LLM
Leaderboard's per-model "details" are these files.

Rules (data/README.md, "lm-evaluation-harness"):
    model      ``model=`` when given, else the results file's ``model_name``, else ``config.model_args``'
               ``pretrained`` (or ``model``/``path``), else ``config.model``
    query_id   ``lm-eval:<task>:v<version>:<doc_id>:<12 hex of sha256 of the doc, keys sorted>``
    query      the doc's question (the first text field of QUESTION_FIELDS), with "A. <choice>" lines when the doc
               has a list of choices; else the doc's own prompt: the first request's context after the last
               few-shot delimiter (the few-shot examples are never part of the query)
    benchmark  the task name
    score      the first of METRICS the task reports, per doc, in [0, 1]; a task reporting none of them (bleu,
               perplexity ...) is refused with the reason; ``metric=`` picks another one
    filter     a task with several filters (e.g. strict-match, flexible-extract) uses "none" if present, else
               the first name in sorted order; the other filters' lines are skipped (counted)
Several runs in one folder: a run is a results file and the samples files with its time stamp; a doc scored in
two runs of the same model keeps the newest run's score.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from locus_model.data.errors import EvaluationDataError
from locus_model.data.harnesses.common import (
    HarnessSummary,
    bad,
    check_model_name,
    finish,
    iter_jsonl,
    load_json,
    make_query_id,
    unit_score,
    with_options,
)

METRICS = ("acc", "exact_match", "acc_norm", "em", "exact", "pass@1", "accuracy", "correct")  # accuracy-like, in [0, 1]
QUESTION_FIELDS = (
    "question",
    "query",
    "problem",
    "prompt",
    "input",
    "instruction",
    "text",
    "ctx",
    "sentence",
    "goal",
    "premise",
    "passage",
)
CHOICE_FIELDS = ("choices", "options", "endings", "mc1_targets")
_TIME = r"\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}\.\d+"
_RESULTS = re.compile(rf"^results_(?P<time>{_TIME})\.json$")
_SAMPLES = re.compile(rf"^samples_(?P<task>.+)_(?P<time>{_TIME})\.jsonl$")
FIX_LAYOUT = (
    "give the folder lm_eval --output_path wrote with --log_samples: results_<time>.json and "
    "samples_<task>_<time>.jsonl side by side (see data/README.md)"
)


def _files(path: Path) -> tuple[list[Path], list[Path]]:
    files = [
        p for p in path.rglob("*") if p.is_file() and not any(s.startswith(".") for s in p.relative_to(path).parts)
    ]
    results = sorted((p for p in files if _RESULTS.match(p.name)), key=lambda p: p.as_posix())
    samples = sorted((p for p in files if _SAMPLES.match(p.name)), key=lambda p: p.as_posix())
    return results, samples


def _match(pattern: re.Pattern[str], file: Path) -> re.Match[str]:
    """The match of a file that :func:`_files` selected by this pattern."""
    found = pattern.match(file.name)
    assert found is not None, file  # _files keeps only the names that match
    return found


def is_lm_eval_output(path: str | Path) -> bool:
    """A folder holding at least one lm-eval samples_<task>_<time>.jsonl (at any depth). Never raises."""
    path = Path(path)
    try:
        return path.is_dir() and any(_SAMPLES.match(p.name) for p in path.rglob("samples_*.jsonl"))
    except OSError:
        return False


def _model_of(results: dict, file: Path) -> str:
    if isinstance(results.get("model_name"), str) and results["model_name"]:
        return check_model_name(results["model_name"], file, "model_name")
    found = results.get("config")
    config = found if isinstance(found, dict) else {}
    args = config.get("model_args")
    if isinstance(args, str):  # "pretrained=org/name,dtype=float16"
        args = dict(part.split("=", 1) for part in args.split(",") if "=" in part)
    for key in ("pretrained", "model", "path"):
        if isinstance(args, dict) and args.get(key):
            return check_model_name(str(args[key]), file, f"config.model_args.{key}")
    if config.get("model"):
        return check_model_name(str(config["model"]), file, "config.model")
    raise EvaluationDataError(
        "the results file names no model (no model_name, config.model_args or config.model)",
        file=file,
        column="model",
        fix="pass model= to the reader, or keep the results file lm_eval wrote",
    )


def doc_question(doc: object, context: str | None, delimiter: str) -> str | None:
    """The query text of one doc (see the module's rules), or None when neither the doc nor the prompt gives one."""
    if isinstance(doc, dict):
        question = next((doc[k] for k in QUESTION_FIELDS if isinstance(doc.get(k), str) and doc[k].strip()), None)
        if question is not None:
            options = next((doc[k] for k in CHOICE_FIELDS if k in doc), None)
            if isinstance(options, dict):  # ARC: {"text": [...], "label": [...]}; TruthfulQA: {"choices": [...]}
                options = options.get("text", options.get("choices"))
            if not (isinstance(options, list) and options and all(isinstance(o, (str, int, float)) for o in options)):
                options = None
            return with_options(question, options)
    if isinstance(context, str) and context.strip():
        return context.rsplit(delimiter, 1)[-1].strip() if delimiter else context.strip()
    return None


def _first_context(arguments: object) -> str | None:
    """The first request's context: 0.4.x writes {"gen_args_0": {"arg_0": ctx, ...}}, older ones [[ctx, ...], ...]."""
    first = (
        next(iter(arguments.values()), None)
        if isinstance(arguments, dict)
        else (arguments[0] if isinstance(arguments, list) and arguments else None)
    )
    if isinstance(first, dict):
        first = first.get("arg_0")
    elif isinstance(first, list) and first:
        first = first[0]
    return first if isinstance(first, str) else None


def _read_samples(
    file: Path, task: str, version: object, metric: str | None, delimiter: str, report: dict
) -> tuple[dict[str, tuple[str, float]], str]:
    """query_id -> (query, score) of one samples file, and the metric used."""
    fix = "the file is cut off or not an lm-eval samples file: run lm_eval again"
    filters, first = set(), None  # a first pass: the filters and the metrics (streamed: nothing but these is kept)
    for number, sample in iter_jsonl(file, fix=fix):
        filters.add(str(sample.get("filter", "none")))
        first = first or (number, sample)
    if first is None:
        raise EvaluationDataError("the samples file is empty", file=file, fix="run lm_eval again with --log_samples")
    chosen = "none" if "none" in filters else sorted(filters)[0]
    listed = first[1].get("metrics", [])
    if not isinstance(listed, list):
        raise bad(
            file, first[0], "metrics", f"'metrics' is a JSON {type(listed).__name__}, not a list of metric names", fix
        )
    names = [str(m) for m in listed] or [k for k in first[1] if k in METRICS]
    if metric is None:
        metric = next((m for m in METRICS if m in names or m in first[1]), None)
        if metric is None:
            raise bad(
                file,
                first[0],
                "metrics",
                f"task {task!r} reports {names or 'no metrics'}: none is an accuracy-like per-doc score in [0, 1] "
                f"(one of {list(METRICS)})",
                "leave this task out of the drop, or give metric= naming a per-doc metric in [0, 1]",
            )
    out: dict[str, tuple[str, float]] = {}
    for number, sample in iter_jsonl(file, fix=fix):
        if str(sample.get("filter", "none")) != chosen:
            report["skipped"] += 1
            continue
        report["records"] += 1
        for key in ("doc_id", "doc"):
            if key not in sample:
                raise bad(
                    file,
                    number,
                    key,
                    f"the line has no '{key}' (it has {sorted(sample)})",
                    "this is not an lm-eval samples line: keep the files lm_eval --log_samples wrote",
                )
        if metric not in sample:
            raise bad(
                file,
                number,
                metric,
                f"the line has no '{metric}' value (it has {sorted(sample)})",
                "every line of a task reports the same metrics: the file is mixed or edited; run lm_eval again",
            )
        score = unit_score(
            sample[metric], file, number, metric, "lm-eval writes 0/1 or a fraction per doc for this metric"
        )
        text = doc_question(sample["doc"], _first_context(sample.get("arguments")), delimiter)
        if text is None:
            raise bad(
                file,
                number,
                "doc",
                "neither the doc nor the prompt holds a question text",
                f"the doc needs a text field (one of {list(QUESTION_FIELDS)}) or the line its arguments",
            )
        query_id = make_query_id("lm-eval", task, version, sample["doc_id"], sample["doc"])
        if query_id in out and out[query_id][1] != score:
            raise bad(
                file,
                number,
                metric,
                f"doc_id {sample['doc_id']} appears twice with different {metric}",
                "a samples file has one line per doc and filter: the file is mixed; run lm_eval again",
            )
        out[query_id] = (text, score)
    return out, metric


def read_lm_eval_output(
    path: str | Path, *, model: str | None = None, metric: str | None = None
) -> tuple[pd.DataFrame, HarnessSummary]:
    """Read an lm-eval output folder (any depth: one folder per model, several runs each) into the long table."""
    path = Path(path)
    if not path.is_dir():
        raise EvaluationDataError("not a folder", file=path, fix=FIX_LAYOUT)
    results_files, samples_files = _files(path)
    if not samples_files:
        raise EvaluationDataError(
            "no samples_<task>_<time>.jsonl files"
            + (" (only results files: was --log_samples given?)" if results_files else ""),
            file=path,
            fix=FIX_LAYOUT,
        )
    runs = {(f.parent, _match(_RESULTS, f)["time"]): f for f in results_files}
    counts = {"records": 0, "skipped": 0}
    cells: dict[tuple[str, str], tuple[str, str, float, str]] = {}  # (model, query_id) -> (query, task, score, time)
    tasks: dict[str, str] = {}
    read: list[Path] = []
    for file in sorted(samples_files, key=lambda f: (_match(_SAMPLES, f)["time"], f.as_posix())):  # oldest run first
        found = _match(_SAMPLES, file)
        task, stamp = found["task"], found["time"]
        results_file = runs.get((file.parent, stamp))
        results: dict = {}
        if results_file is not None:
            loaded = load_json(results_file, fix="the results file is cut off: run lm_eval again")
            if not isinstance(loaded, dict):
                raise EvaluationDataError("the results file is not a JSON object", file=results_file, fix=FIX_LAYOUT)
            results = loaded
        elif model is None:
            raise EvaluationDataError(
                f"no results_{stamp}.json beside this samples file: the model's name is there",
                file=file,
                fix="drop the whole folder lm_eval wrote (results and samples), or pass model=",
            )
        if model is not None:
            name = model
        else:
            assert results_file is not None  # a samples file without its results file and without model= raised above
            name = _model_of(results, results_file)
        check_model_name(name, file, "model=")
        configs = results.get("configs", {}) if isinstance(results.get("configs"), dict) else {}
        versions = results.get("versions", {}) if isinstance(results.get("versions"), dict) else {}
        config = configs.get(task, {}) if isinstance(configs.get(task), dict) else {}
        version = versions.get(
            task, (config.get("metadata") or {}).get("version") if isinstance(config.get("metadata"), dict) else None
        )
        delimiter = (
            config.get("fewshot_delimiter", "\n\n")
            if isinstance(config.get("fewshot_delimiter", "\n\n"), str)
            else "\n\n"
        )
        evaluations, used = _read_samples(file, task, version, metric, delimiter, counts)
        tasks[task] = used
        read.extend([results_file, file] if results_file is not None and results_file not in read else [file])
        for query_id, (text, score) in evaluations.items():
            cells[(name, query_id)] = (text, task, score, stamp)  # a later run overwrites: newest wins
    rows = [(m, q, text, task, score) for (m, q), (text, task, score, _) in cells.items()]
    table = finish(rows, path, fix=FIX_LAYOUT)
    report = HarnessSummary(
        "lm_eval",
        tuple(map(str, read)),
        tuple(sorted(table["model"].unique())),
        tasks,
        len(table),
        counts["records"],
        counts["skipped"],
    )
    return table, report

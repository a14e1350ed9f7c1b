"""HELM run folders (``helm-run ... --suite S`` -> ``benchmark_output/runs/S/<run>/``) as the long evaluation table.

Stanford CRFM's HELM (github.com/stanford-crfm/helm; read here as 0.5.x writes it) writes one folder per run spec,
named by it (``mmlu:subject=anatomy,method=multiple_choice_joint,model=openai_gpt2``), holding ``run_spec.json``
(name, adapter_spec with the model, groups), ``scenario_state.json`` (``request_states``: per request the
``instance`` with ``id``, ``input.text``, ``references`` [{output.text, tags}], ``split``, optional
``perturbation``, and the ``train_trial_index``) and ``per_instance_stats.json`` (a list of {instance_id,
train_trial_index, optional perturbation, stats: [{name: {name, split}, count, sum, mean, ...}]}).

Rules (data/README.md, "HELM"):
    model      ``model=`` when given, else run_spec.json's ``adapter_spec.model`` (else scenario_state's)
    query_id   ``helm:<run spec without model=/model_deployment=>:<instance id>:<12 hex of sha256 of the query>``
    query      the instance's ``input.text``, with "A. <reference>" lines for multiple-choice adapters
               (``adapter_spec.method`` starting with "multiple_choice")
    benchmark  run_spec.json's first group (e.g. "mmlu"), else the run spec's name before ':'
    score      the first of METRICS in the instance's stats (its mean), in [0, 1]; a run with none of them
               (BLEU, ROUGE, toxicity ...) is refused; ``metric=`` picks another. Only unperturbed instances of
               the first trial (train_trial_index 0) count; the others are skipped (counted)
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
    load_json,
    make_query_id,
    unit_score,
    with_options,
)

METRICS = (
    "exact_match",
    "quasi_exact_match",
    "prefix_exact_match",
    "quasi_prefix_exact_match",
    "math_equiv",
    "math_equiv_chain_of_thought",
    "exact_match_indicator",
    "final_number_exact_match",
)
FIX_LAYOUT = (
    "give HELM's run folders as helm-run wrote them (benchmark_output/runs/<suite>/<run>/ with run_spec.json, "
    "scenario_state.json and per_instance_stats.json)"
)
_MODEL_ARG = re.compile(r"(?:^|,)(?:model|model_deployment)=[^,]*")


def run_folders(path: Path) -> list[Path]:
    return sorted(
        p.parent
        for p in path.rglob("per_instance_stats.json")
        if (p.parent / "scenario_state.json").is_file()
        and not any(s.startswith(".") for s in p.relative_to(path).parts)
    )


def is_helm_output(path: str | Path) -> bool:
    """A folder holding at least one HELM run folder (scenario_state.json + per_instance_stats.json). Never raises."""
    try:
        return Path(path).is_dir() and bool(run_folders(Path(path)))
    except OSError:
        return False


def task_key(run_name: str) -> str:
    """The run spec's name without its model: the same scenario, adapter and arguments for every model."""
    scenario, _, args = run_name.partition(":")
    args = _MODEL_ARG.sub("", args).strip(",")
    return f"{scenario}:{args}" if args else scenario


def _mean(stat: dict, file: Path, record: int) -> object:
    """A stat's mean (else sum / count), checked as numbers; unit_score then checks the range."""
    count, mean = stat.get("count"), stat.get("mean")
    if mean is not None:
        return mean
    total = stat.get("sum", 0)
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (count, total)):
        raise bad(
            file, record, "stats", f"a stat's count ({count!r}) and sum ({total!r}) are not numbers"[:200], FIX_LAYOUT
        )
    return total / count


def _read_run(
    folder: Path, model: str | None, metric: str | None, counts: dict
) -> tuple[str, str, list[tuple[str, str, float]], str | None]:
    """(model, benchmark, [(query_id, query, score)], metric) of one run folder; the metric is None when ``metric``
    is None and the run has no instance stats to find it in."""
    spec_file, state_file, stats_file = (
        folder / "run_spec.json",
        folder / "scenario_state.json",
        folder / "per_instance_stats.json",
    )
    spec = load_json(spec_file, fix=FIX_LAYOUT) if spec_file.exists() else {}
    if not isinstance(spec, dict):
        raise EvaluationDataError("run_spec.json is not a JSON object", file=spec_file, fix=FIX_LAYOUT)
    state = load_json(state_file, fix="the file is cut off: helm-run may still be running; copy the run folder again")
    stats = load_json(stats_file, fix="the file is cut off: helm-run may still be running; copy the run folder again")
    if not isinstance(state, dict) or not isinstance(state.get("request_states"), list):
        raise EvaluationDataError("scenario_state.json has no request_states list", file=state_file, fix=FIX_LAYOUT)
    if not isinstance(stats, list):
        raise EvaluationDataError("per_instance_stats.json is not a list", file=stats_file, fix=FIX_LAYOUT)
    adapter = spec.get("adapter_spec") or state.get("adapter_spec") or {}
    if not isinstance(adapter, dict):
        raise EvaluationDataError(
            "adapter_spec is not a JSON object",
            file=spec_file if spec.get("adapter_spec") else state_file,
            column="adapter_spec",
            fix=FIX_LAYOUT,
        )
    if model is None:
        where = (
            "run_spec.json adapter_spec.model" if spec.get("adapter_spec") else "scenario_state.json adapter_spec.model"
        )
        model = check_model_name(adapter.get("model"), spec_file if spec.get("adapter_spec") else state_file, where)
    run_name = spec.get("name") or folder.name
    key = task_key(run_name)
    groups = spec.get("groups") if isinstance(spec.get("groups"), list) else []
    benchmark = str(groups[0]) if groups else run_name.split(":", 1)[0]
    multiple_choice = str(adapter.get("method", "")).startswith("multiple_choice")

    texts: dict[str, str] = {}
    for number, request_state in enumerate(state["request_states"], start=1):
        instance = request_state.get("instance") if isinstance(request_state, dict) else None
        if not isinstance(instance, dict) or "id" not in instance:
            raise bad(state_file, number, "instance.id", "the request state has no instance with an id", FIX_LAYOUT)
        if instance.get("perturbation") or request_state.get("train_trial_index", 0) != 0 or instance["id"] in texts:
            continue
        given = instance.get("input")
        question = given.get("text") if isinstance(given, dict) else None
        if not isinstance(question, str) or not question.strip():
            raise bad(
                state_file, number, "instance.input.text", f"instance {instance['id']!r} has no input text", FIX_LAYOUT
            )
        listed = instance.get("references")
        references = listed if isinstance(listed, list) else []
        options = (
            [
                r["output"].get("text", "") if isinstance(r, dict) and isinstance(r.get("output"), dict) else ""
                for r in references
            ]
            if multiple_choice
            else None
        )
        texts[instance["id"]] = with_options(question, options)

    rows, used = [], metric
    for number, entry in enumerate(stats, start=1):
        counts["records"] += 1
        if not isinstance(entry, dict) or "instance_id" not in entry:
            raise bad(stats_file, number, "instance_id", "the entry has no instance_id", FIX_LAYOUT)
        if entry.get("perturbation") or entry.get("train_trial_index", 0) != 0:
            counts["skipped"] += 1
            continue
        values: dict[object, object] = {}  # stat name -> its mean
        stats_list = entry.get("stats", [])
        if not isinstance(stats_list, list):
            raise bad(
                stats_file,
                number,
                "stats",
                f"the entry's stats are a JSON {type(stats_list).__name__}, not a list",
                FIX_LAYOUT,
            )
        for stat in stats_list:
            name = stat.get("name", {}) if isinstance(stat, dict) else {}
            if isinstance(name, dict) and not name.get("perturbation") and stat.get("count"):
                values.setdefault(name.get("name"), _mean(stat, stats_file, number))
        if used is None:
            used = next((m for m in METRICS if m in values), None)
            if used is None:
                raise bad(
                    stats_file,
                    number,
                    "stats",
                    f"run {run_name!r} reports {sorted(map(str, values))[:12]}: none is an accuracy-like score in [0, "
                    f"1] (one of {list(METRICS)})",
                    "leave this run out of the drop, or give metric= naming a stat in [0, 1]",
                )
        if used not in values:
            raise bad(
                stats_file,
                number,
                used,
                f"instance {entry['instance_id']!r} has no {used!r} stat",
                "every instance of a run has the same stats: the file is mixed or edited; run helm-run again",
            )
        instance_id = entry["instance_id"]
        if instance_id not in texts:
            raise bad(
                stats_file,
                number,
                "instance_id",
                f"instance {instance_id!r} is not in scenario_state.json",
                "keep the run folder's files together, as helm-run wrote them",
            )
        score = unit_score(values[used], stats_file, number, used, "HELM writes exact-match stats as 0/1 per instance")
        rows.append((make_query_id("helm", key, None, instance_id, texts[instance_id]), texts[instance_id], score))
    return model, benchmark, rows, used


def read_helm_runs(
    path: str | Path, *, model: str | None = None, metric: str | None = None
) -> tuple[pd.DataFrame, HarnessSummary]:
    """Read one HELM run folder, or every run folder under ``path``, into the long table."""
    path = Path(path)
    folders = run_folders(path) if path.is_dir() else []
    if not folders:
        raise EvaluationDataError(
            "no HELM run folder (scenario_state.json + per_instance_stats.json) found", file=path, fix=FIX_LAYOUT
        )
    counts = {"records": 0, "skipped": 0}
    rows, tasks, files = [], {}, []
    for folder in folders:
        name, benchmark, evaluations, used = _read_run(folder, model, metric, counts)
        check_model_name(name, folder, "model=")
        tasks[task_key(folder.name)] = used
        files += [str(folder / "scenario_state.json"), str(folder / "per_instance_stats.json")]
        rows += [(name, query_id, text, benchmark, score) for query_id, text, score in evaluations]
    table = finish(rows, path, fix=FIX_LAYOUT)
    report = HarnessSummary(
        "helm",
        tuple(files),
        tuple(sorted(table["model"].unique())),
        tasks,
        len(table),
        counts["records"],
        counts["skipped"],
    )
    return table, report

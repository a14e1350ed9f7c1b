"""Harness outputs (lm-eval, Inspect AI, lighteval, HELM) read as the long table, on fixtures the real tools wrote
(tests/fixtures/harnesses, scripts/make_harness_fixtures.py): models, stable query ids, query text, scores, errors."""

from __future__ import annotations

import json
import shutil
import tarfile
import zipfile
from pathlib import Path

import pandas as pd
import pytest

from locus_model.data.errors import EvaluationDataError
from locus_model.data.harnesses import detect_harness, read_harness_output
from locus_model.data.long_format import read_evaluations

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "harnesses"
MODELS = {
    "lm_eval": ("dummy-a", "dummy-b"),
    "inspect": ("mockllm/model-a", "mockllm/model-b"),
    "lighteval": ("dummy-a", "dummy-b"),
    "helm": ("simple/model1", "simple/model2"),
}
QUERIES = {"lm_eval": 9, "inspect": 9, "lighteval": 5, "helm": 5}


@pytest.fixture()
def copy(tmp_path: Path):
    def make(harness: str) -> Path:
        return Path(shutil.copytree(FIXTURES / harness, tmp_path / harness))

    return make


@pytest.mark.parametrize("harness", list(MODELS))
def test_each_fixture_gives_both_models_the_same_query_ids(harness: str) -> None:
    assert detect_harness(FIXTURES / harness) == harness
    table, report = read_harness_output(FIXTURES / harness)
    assert report.harness == harness and report.models == MODELS[harness]
    assert list(table.columns) == ["model", "query_id", "query", "benchmark", "score"]
    ids = {m: set(rows["query_id"]) for m, rows in table.groupby("model")}
    assert sorted(ids) == sorted(MODELS[harness]) and len(set(map(frozenset, ids.values()))) == 1  # the same ids
    assert len(next(iter(ids.values()))) == QUERIES[harness] and table["score"].isin([0.0, 1.0]).all()
    assert table.groupby("query_id")["query"].nunique().max() == 1
    pd.testing.assert_frame_equal(read_evaluations(FIXTURES / harness)[0], table)  # the one reader entry point


def test_lm_eval_query_is_the_docs_question_not_the_few_shot_prompt() -> None:
    table = read_harness_output(FIXTURES / "lm_eval")[0]
    row = table[(table["model"] == "dummy-a") & (table["benchmark"] == "locus_capitals")].iloc[0]
    assert row["query"] == "What is the capital of France?\nA. Berlin\nB. Paris\nC. Rome\nD. Madrid"
    assert row["query_id"].startswith("lm-eval:locus_capitals:v1.0:0:") and "Italy" not in row["query"]
    sample = json.loads(
        next((FIXTURES / "lm_eval" / "dummy-a").glob("samples_locus_capitals_*.jsonl")).read_text().splitlines()[0]
    )
    assert "Italy" in sample["arguments"]["gen_args_0"]["arg_0"]  # the 2-shot prompt holds the examples
    assert row["score"] == sample["acc"]  # acc, not acc_norm
    _, report = read_harness_output(FIXTURES / "lm_eval")
    assert report.tasks == {"locus_arithmetic": "exact_match", "locus_capitals": "acc"}


def test_inspect_scores_map_as_inspect_does_and_the_model_name_is_overridable() -> None:
    table = read_harness_output(FIXTURES / "inspect")[0]
    a = table[table["model"] == "mockllm/model-a"].set_index("query")["score"]
    # the mock answers of scripts/make_harness_fixtures.py: model-a knows France, Japan, Kenya, 2 + 2, 3 * 5
    assert a["What is the capital of France?\nA. Berlin\nB. Paris\nC. Rome\nD. Madrid"] == 1.0
    assert a["What is the capital of Peru?\nA. Lima\nB. Quito\nC. Bogota\nD. Santiago"] == 0.0
    assert a["3 * 5 ="] == 1.0 and a["10 - 7 ="] == 0.0
    (log,) = [p for p in (FIXTURES / "inspect").glob("*_capitals_*.eval")]
    renamed = read_harness_output(log, model="team/model-a")[0]
    assert set(renamed["model"]) == {"team/model-a"} and len(renamed) == 5


@pytest.mark.parametrize("kind", ["zip", "tar.gz"])
def test_an_archive_reads_as_its_folder(tmp_path: Path, kind: str) -> None:
    archive = tmp_path / f"out.{kind}"
    files = sorted(p for p in (FIXTURES / "lm_eval").rglob("*") if p.is_file())
    if kind == "zip":
        with zipfile.ZipFile(archive, "w") as z:
            for p in files:
                z.write(p, Path("out") / p.relative_to(FIXTURES / "lm_eval"))
    else:
        with tarfile.open(archive, "w:gz") as t:
            t.add(FIXTURES / "lm_eval", arcname="out")
    assert detect_harness(archive) == "lm_eval"
    pd.testing.assert_frame_equal(read_harness_output(archive)[0], read_harness_output(FIXTURES / "lm_eval")[0])


def test_an_archive_member_outside_the_archive_is_refused(tmp_path: Path) -> None:
    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("../samples_x_2026-01-01T00-00-00.000001.jsonl", "{}\n")
    with pytest.raises(EvaluationDataError, match="points outside the archive"):
        read_harness_output(archive)


def _first_samples(folder: Path, task: str = "locus_capitals") -> Path:
    return next(folder.rglob(f"samples_{task}_*.jsonl"))


def test_lm_eval_errors_name_file_record_field_and_fix(copy) -> None:
    folder = copy("lm_eval")
    samples = _first_samples(folder / "dummy-a")
    lines = samples.read_text().splitlines()
    bad = json.loads(lines[2])
    bad["acc"] = 1.5
    samples.write_text("\n".join(lines[:2] + [json.dumps(bad)] + lines[3:]) + "\n")
    with pytest.raises(EvaluationDataError) as err:
        read_harness_output(folder)
    assert err.value.file == samples and err.value.row == 3 and err.value.column == "acc"
    assert "not a score in [0, 1]" in str(err.value) and err.value.fix
    samples.write_text("\n".join(lines[:3]) + "\n" + lines[3][:40] + "\n")  # cut mid-line
    with pytest.raises(EvaluationDataError, match="record 4: not valid JSON") as err:
        read_harness_output(folder)
    assert err.value.line == 4
    # a task whose only per-doc metric is not accuracy-like
    other = _first_samples(folder / "dummy-b", "locus_arithmetic")
    rows = [json.loads(line) for line in other.read_text().splitlines()]
    for row in rows:
        row["metrics"], row["bleu"] = ["bleu"], 12.5
        del row["exact_match"]
    other.write_text("".join(json.dumps(r) + "\n" for r in rows))
    shutil.rmtree(folder / "dummy-a")
    with pytest.raises(EvaluationDataError, match=r"reports \['bleu'\]: none is an accuracy-like") as err:
        read_harness_output(folder)
    assert err.value.column == "metrics" and err.value.fix is not None and "leave this task out" in err.value.fix


def test_lm_eval_samples_without_results_or_results_without_samples(copy) -> None:
    folder = copy("lm_eval")
    for results in folder.rglob("results_*.json"):
        results.unlink()
    with pytest.raises(EvaluationDataError, match="no results_.*json beside this samples file"):
        read_harness_output(folder)
    assert set(read_harness_output(folder, model="m")[0]["model"]) == {"m"}
    for samples in folder.rglob("samples_*.jsonl"):
        samples.unlink()
    (folder / "dummy-a" / "results_2026-01-01T00-00-00.000001.json").write_text("{}")
    with pytest.raises(EvaluationDataError, match="not an evaluation harness output"):
        read_harness_output(folder)


def test_inspect_errors(copy, tmp_path: Path) -> None:
    folder = copy("inspect")
    (log,) = folder.glob("*_capitals_*.json")
    data = json.loads(log.read_text())
    data["status"] = "error"
    log.write_text(json.dumps(data))
    with pytest.raises(EvaluationDataError, match="status is 'error'") as err:
        read_harness_output(log)
    assert err.value.column == "status" and err.value.fix is not None and "eval-retry" in err.value.fix
    data["status"] = "success"
    data["samples"][1]["scores"]["choice"]["value"] = "maybe"
    log.write_text(json.dumps(data))
    with pytest.raises(EvaluationDataError) as err:
        read_harness_output(log)
    assert (
        err.value.row == 2
        and err.value.column == "scores.choice.value"
        and err.value.fix is not None
        and "C/I/P/N" in err.value.fix
    )
    (packed,) = folder.glob("*_capitals_*.eval")
    unfinished = tmp_path / "unfinished.eval"
    with zipfile.ZipFile(packed) as source, zipfile.ZipFile(unfinished, "w") as target:
        for name in source.namelist():
            if name != "header.json":
                target.writestr(name, "{}")
    with pytest.raises(EvaluationDataError, match="no header.json: the eval did not finish"):
        read_harness_output(unfinished)


def test_lighteval_errors(copy) -> None:
    folder = copy("lighteval")
    details = next(folder.rglob("details_*.parquet"))
    frame = pd.read_parquet(details)
    frame["metric"] = [{"bleu": 3.0}] * len(frame)
    frame.to_parquet(details)
    with pytest.raises(EvaluationDataError, match=r"reports \['bleu'\]: none is an accuracy-like") as err:
        read_harness_output(folder)
    assert err.value.file == details and err.value.row == 1 and err.value.column == "metric"
    details.write_bytes(details.read_bytes()[:200])
    with pytest.raises(EvaluationDataError, match="not a readable Parquet file"):
        read_harness_output(folder)


def test_helm_errors(copy) -> None:
    folder = copy("helm")
    run = next(p for p in folder.iterdir() if p.name.endswith("simple_model1"))
    stats_file = run / "per_instance_stats.json"
    stats = json.loads(stats_file.read_text())
    for entry in stats:
        entry["stats"] = [
            s
            for s in entry["stats"]
            if s["name"]["name"]
            not in ("exact_match", "quasi_exact_match", "prefix_exact_match", "quasi_prefix_exact_match")
        ]
    stats_file.write_text(json.dumps(stats))
    with pytest.raises(EvaluationDataError, match="none is an accuracy-like score") as err:
        read_harness_output(folder)
    assert err.value.file == stats_file and err.value.row == 1
    (run / "scenario_state.json").write_text('{"adapter_spec": {}, "request_st')
    with pytest.raises(EvaluationDataError, match="not valid JSON") as err:
        read_harness_output(folder)
    assert (
        err.value.file == run / "scenario_state.json"
        and err.value.fix is not None
        and "helm-run may still be running" in err.value.fix
    )


def test_a_folder_of_something_else_is_no_harness_output(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    assert detect_harness(tmp_path) is None
    with pytest.raises(EvaluationDataError, match="not an evaluation harness output"):
        read_harness_output(tmp_path)

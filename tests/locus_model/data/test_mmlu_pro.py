"""MMLU-Pro result files: model naming, scoring, query-text parity with data/mmlu-pro, bad files, models.csv."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from locus_model.data.catalog import build_catalog
from locus_model.data.errors import EvaluationDataError
from locus_model.data.long_format import read_models_file
from locus_model.data.mmlu_pro import (
    build_query,
    is_mmlu_pro_folder,
    model_name_of,
    read_mmlu_pro_outputs,
)

MMLU_PRO = Path(__file__).resolve().parents[3] / "data" / "mmlu-pro"
PARQUET = MMLU_PRO / "evaluations.parquet"
MODELS_CSV = MMLU_PRO / "models.csv"

# Seven real records of MMLU-Pro's published eval_results/model_outputs_Yi-6B_5shots.json (TIGER-AI-Lab/MMLU-Pro,
# Apache-2.0; generated_text shortened), chosen for what the query text must get right: a question with
# surrounding spaces (75), options with trailing (264) or leading (3544) spaces, a newline inside the question
# (319), a single option (2129), a control character inside options (11355), a question whose text differs in
# other models' files (94, a later dataset revision fixed its spacing).
REAL_RECORDS = [
    {
        "question_id": 75,
        "question": " Which of the following are the three broad groups of "
        "organizational characteristics segmentation criteria?",
        "options": [
            "Organizational size, industry type, and geographical location.",
            "Organizational size, industry type, and age of company.",
            "Organizational size, industry type, and customer base.",
            "Organizational size, industry type, and annual revenue.",
            "Organizational size, industry type, and business strategy.",
            "None of the above.",
            "Organizational size, industry type, and gender.",
            "Organizational size, industry type, and number of branches.",
            "Psychographics, purchaser, and behavioural criteria.",
            "Organizational size, industry type, and number of employees.",
        ],
        "answer": "A",
        "answer_index": 0,
        "cot_content": "",
        "category": "business",
        "src": "ori_mmlu-marketing",
        "pred": "A",
        "generated_text": "dustry type, and geographical location. The answer is (A).\n\n",
    },
    {
        "question_id": 264,
        "question": "On August 4, a store purchased five sofas invoiced at $7,000, terms 2/10 , n/30 . The invoice was "
        "paid August 13. The store paid",
        "options": [
            "$6,300 ",
            "$7,200",
            "$7,400",
            "$7,140 ",
            "$6,700",
            "$6,900",
            "$6,860 ",
            "$7,500",
            "$7,000 ",
            "$6,500",
        ],
        "answer": "G",
        "answer_index": 6,
        "cot_content": "",
        "category": "business",
        "src": "ori_mmlu-marketing",
        "pred": "G",
        "generated_text": "unting for help. The store paid $6,860. The answer is (G).\n\n",
    },
    {
        "question_id": 319,
        "question": "Suppose we are given the following information. Use this information to calculate abnormal "
        "return. Rf: 4%\nRm: 12%\nBeta of the Portfolio: 1.8\n"
        "Beginning Value of Portfolio: $50,000\n"
        "Ending Value of Portfolio: $60,000\n"
        "What is the abnormal return?",
        "options": ["0.025", "0.035", "0.016", "0.012", "0.030", "0.040", "0.008", "0.010", "0.020", "0.050"],
        "answer": "C",
        "answer_index": 2,
        "cot_content": "",
        "category": "business",
        "src": "theoremQA-Finance",
        "pred": "E",
        "generated_text": ". The abnormal return is 12% - 4% = 8%. The answer is (E).\n\n",
    },
    {
        "question_id": 2129,
        "question": "Name and describe various behavior disorders that can be genetically inherited.",
        "options": [
            "Brain damage, Hemiplegia, cerebral palsy, learning disorders, retardation, Down's Syndrome, and "
            "schizophrenia are examples of behavior disorders that can be genetically inherited."
        ],
        "answer": "A",
        "answer_index": 0,
        "cot_content": "",
        "category": "psychology",
        "src": "stemez-Psychology",
        "pred": "A",
        "generated_text": "ders that can be genetically inherited. The answer is (A).\n\n",
    },
    {
        "question_id": 3544,
        "question": "An electron confined to a metallic nanoparticle is modelled as a particle in a one-dimensional "
        "box of length $L$. If the electron is in the state $n=1$, calculate the probability of finding it in "
        "the following regions: $0 \\leq x \\leq \\frac{1}{2} L$.",
        "options": [
            "$\\frac{1}{4}$",
            "$\\frac{7}{8}$",
            "$\\frac{1}{8}$",
            "$\\frac{3}{4}$",
            "$\\frac{2}{3}$",
            "$\\frac{1}{3}$",
            "$\\frac{3}{8}$",
            "$\\frac{5}{8}$",
            " $\\frac{1}{2}$",
            "$\\frac{5}{6}$",
        ],
        "answer": "I",
        "answer_index": 8,
        "cot_content": "",
        "category": "chemistry",
        "src": "scibench-matter",
        "pred": "I",
        "generated_text": "eq L$, which is equal to $\\frac{1}{2}$. The answer is (I).\n\n",
    },
    {
        "question_id": 11355,
        "question": "Givenf(t) = ^+\\infty\\int_-\\infty h(\\sigma)\\textphi(t - \\sigma)d\\sigma determine the power "
        "spectral density of f(t) in terms of the power spectral "
        "density of \\textphi(t) and the Fourier transform of h(t).",
        "options": [
            "G_f(\\omega) = \x0bertH(\\omega)\x0bert^2 G_\textphi(\\omega)",
            "\\( G_f(\\omega) = \\frac{G_{\\textphi}(\\omega)}{|H(\\omega)|^2} \\)",
            "\\( G_f(\\omega) = H(\\omega) G_{\\textphi}(\\omega)^2 \\)",
            "\\( G_f(\\omega) = |H(\\omega)|^2 / G_{\\textphi}(\\omega) \\)",
            "\\( G_f(\\omega) = \\frac{1}{|H(\\omega)|^2} G_{\\textphi}(\\omega) \\)",
            "\\( G_f(\\omega) = |H(\\omega)| G_{\\textphi}(\\omega)^2 \\)",
            "G_f(\\omega) = \x0bertH(\\omega)\x0bert^2 / G_\textphi(\\omega)",
            "G_f(\\omega) = H(\\omega)^2 G_\textphi(\\omega)",
            "\\( G_f(\\omega) = \\frac{G_{\\textphi}(\\omega)}{H(\\omega)} \\)",
            "G_f(\\omega) = \x0bertH(\\omega)\x0bert G_\textphi(t)",
        ],
        "answer": "A",
        "answer_index": 0,
        "cot_content": "",
        "category": "engineering",
        "src": "stemez-ElectronicCommunications",
        "pred": "E",
        "generated_text": "\\pi} H(\\omega) G_{\\textphi}(\\omega) \\). The answer is (E).\n\n",
    },
    {
        "question_id": 94,
        "question": "MargaretDenaultrecently rented a truck to drive 516 miles in days and 17 hours, using 54 gallons "
        "of gasoline. The rental company charged her $32 per day, $.22 per mile, and $.445 per gal-lon of "
        "gas. Extra hours were charged $2.75 per hour. Find the total cost of the rental.",
        "options": [
            "$308.25",
            "$142.75",
            "$199.99",
            "$225.85",
            "$113.52",
            "$162.47",
            "$346.10",
            "$24.03",
            "$253.40",
            "$280.30",
        ],
        "answer": "J",
        "answer_index": 9,
        "cot_content": "",
        "category": "business",
        "src": "stemez-Business",
        "pred": "G",
        "generated_text": " + $113.52 + $24.03 + $47.25 = $346.10. The answer is (G).\n\n",
    },
]


def record(
    qid: int,
    *,
    answer: str = "B",
    pred: str | None = "B",
    category: str = "math",
    n_options: int = 4,
    question: str | None = None,
) -> dict:
    """A record in the harness's format (evaluate_from_local.py writes these keys)."""
    return {
        "question_id": qid,
        "question": question if question is not None else f"What is {qid} + 1?",
        "options": [f"{qid + k}" for k in range(n_options)],
        "answer": answer,
        "answer_index": "ABCD".index(answer),
        "cot_content": "",
        "category": category,
        "src": f"ori_mmlu-{category}",
        "pred": pred,
        "model_outputs": f"... The answer is ({pred}).",
    }


def write(path: Path, entries) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(entries), encoding="utf-8")
    return path


@pytest.fixture
def harness(tmp_path: Path) -> Path:
    """evaluate_from_local.py's layout: <save_dir>/<model>/CoT/all/<category>.json, two models."""
    root = tmp_path / "results"
    write(root / "Llama-2-7b-hf" / "CoT" / "all" / "math.json", [record(1), record(2, pred="C"), record(3, pred=None)])
    write(root / "Llama-2-7b-hf" / "CoT" / "all" / "law.json", [record(10, category="law", pred="")])
    write(root / "Yi-6B" / "CoT" / "all" / "math.json", [record(1, pred="A"), record(2)])
    write(root / "summary" / "Yi-6B-CoT-all_summary.json", {"total": {"corr": 1.0}})
    return root


# ------------------------------------------------------------------------------------------------ reading


def test_harness_folder_reads_as_a_long_table(harness: Path) -> None:
    table, report = read_mmlu_pro_outputs(harness)
    assert list(table.columns) == ["model", "query_id", "query", "benchmark", "score"]
    got = {(m, q): s for m, q, s in zip(table["model"], table["query_id"], table["score"])}
    assert got == {
        ("Llama-2-7b-hf", "mmlupro-10"): 0.0,  # empty pred: no answer extracted
        ("Llama-2-7b-hf", "mmlupro-1"): 1.0,
        ("Llama-2-7b-hf", "mmlupro-2"): 0.0,
        ("Llama-2-7b-hf", "mmlupro-3"): 0.0,  # null pred
        ("Yi-6B", "mmlupro-1"): 0.0,
        ("Yi-6B", "mmlupro-2"): 1.0,
    }
    assert table.loc[table["query_id"] == "mmlupro-10", "benchmark"].iloc[0] == "law"
    assert table.loc[table["query_id"] == "mmlupro-2", "query"].iloc[0] == "What is 2 + 1?\nA. 2\nB. 3\nC. 4\nD. 5"
    assert (report.models, report.queries, report.rows, report.no_answer) == (2, 4, 6, 2)
    assert len(report.files) == 3  # the summary file is skipped by name


def test_published_file_name_gives_the_model(tmp_path: Path) -> None:
    file = write(tmp_path / "model_outputs_Meta-Llama-3_1-8B-Instruct_5shots.json", [record(1)])
    assert set(read_mmlu_pro_outputs(file)[0]["model"]) == {"Meta-Llama-3_1-8B-Instruct"}


def test_api_layout_one_folder_per_model_and_summaries_skipped(tmp_path: Path) -> None:
    write(tmp_path / "gpt-4o" / "math_result.json", [record(1)])
    write(tmp_path / "gpt-4o" / "math_summary.json", {"math": {"corr": 1.0, "wrong": 0.0}})
    write(tmp_path / "claude-3-opus" / "math_result.json", [record(1, pred="D")])
    table, _ = read_mmlu_pro_outputs(tmp_path)
    assert dict(zip(table["model"], table["score"])) == {"claude-3-opus": 0.0, "gpt-4o": 1.0}
    assert set(read_mmlu_pro_outputs(tmp_path / "gpt-4o")[0]["model"]) == {"gpt-4o"}  # files directly in the folder


def test_explicit_model_name_wins(harness: Path) -> None:
    file = harness / "Yi-6B" / "CoT" / "all" / "math.json"
    assert set(read_mmlu_pro_outputs(file, model="my model/v1")[0]["model"]) == {"my model/v1"}


@pytest.mark.parametrize(
    ("relative", "root", "model"),
    [
        ("model_outputs_Yi-6b-Chat_5shots.json", "", "Yi-6b-Chat"),
        ("x/model_outputs_gemini-3.1-pro_5-shots.json", "", "gemini-3.1-pro"),
        ("model_outputs_flash_0shots_00_35_03.json", "", "flash"),
        ("save/Mistral-7B-v0.1/CoT/all/math.json", "save", "Mistral-7B-v0.1"),
        ("save/Mistral-7B-v0.1/CoT/all/math.json", "save/Mistral-7B-v0.1/CoT/all", "Mistral-7B-v0.1"),
        ("runs/gemma-7b/math_result.json", "runs", "gemma-7b"),
        ("runs/gemma-7b/math_result.json", "runs/gemma-7b", "gemma-7b"),
    ],
)
def test_model_name_rule(tmp_path: Path, relative: str, root: str, model: str) -> None:
    assert model_name_of(tmp_path / relative, tmp_path / root if root else (tmp_path / relative).parent) == model


def test_repeats_collapse_and_stray_strings_are_skipped(tmp_path: Path) -> None:
    # the published DeepSeek-Coder-V2 file holds bare strings ("total", category names) between its records
    file = write(tmp_path / "m" / "math.json", [record(1), "total", record(1), "math", record(2)])
    table, report = read_mmlu_pro_outputs(file)
    assert len(table) == 2 and report.repeats_dropped == 1 and report.entries_skipped == 2


def test_disagreeing_question_texts_keep_the_commonest(tmp_path: Path) -> None:
    old, new = "What is 1+1 ?", "What is 1 + 1?"
    write(tmp_path / "a" / "math.json", [record(1, question=old)])
    write(tmp_path / "b" / "math.json", [record(1, question=new, answer="C", pred="C")])
    write(tmp_path / "c" / "math.json", [record(1, question=new)])
    table, report = read_mmlu_pro_outputs(tmp_path)
    assert set(table["query"]) == {build_query(new, [str(k) for k in range(1, 5)])}
    assert dict(zip(table["model"], table["score"])) == {"a": 1.0, "b": 1.0, "c": 1.0}  # each against its own gold
    assert (report.queries_with_several_texts, report.queries_with_several_answers) == (1, 1)


# ------------------------------------------------------------------------------------------------ parity


def test_query_text_and_scores_match_the_vendored_parquet(tmp_path: Path) -> None:
    file = write(tmp_path / "model_outputs_Yi-6B_5shots.json", REAL_RECORDS)
    table = read_mmlu_pro_outputs(file)[0].set_index("query_id")
    ids = [f"mmlupro-{r['question_id']}" for r in REAL_RECORDS]
    ref = pd.read_parquet(PARQUET, filters=[("model", "==", "Yi-6B"), ("query_id", "in", ids)]).set_index("query_id")
    assert sorted(ref.index) == sorted(ids)
    for qid in ids:
        assert table.loc[qid, "query"] == ref.loc[qid, "query"], qid
        assert table.loc[qid, "benchmark"] == ref.loc[qid, "benchmark"], qid
        assert table.loc[qid, "score"] == ref.loc[qid, "score"], qid


# ------------------------------------------------------------------------------------------------ bad files


def _options_not_a_list() -> dict:
    r = record(1)
    r["options"] = "['1', '2', '3', '4']"
    return r


def _without(field: str) -> dict:
    r = record(1)
    del r[field]
    return r


BAD = {
    "record missing question": ([record(5), _without("question")], 2, "question", "has no 'question'"),
    "record missing pred": ([_without("pred")], 1, "pred", "has no 'pred'"),
    "options not a list": ([_options_not_a_list()], 1, "options", "not a non-empty list"),
    "option not a text": ([record(1) | {"options": ["a", 2]}], 1, "options", "option 2 is a int"),
    "answer not a letter": ([record(1) | {"answer": "b"}], 1, "answer", "not one of the letters A..D"),
    "answer past the options": ([record(1) | {"answer": "E"}], 1, "answer", "of its 4 options"),
    "pred not a text": ([record(1) | {"pred": 1}], 1, "pred", "not a letter or null"),
    "question_id not an integer": ([record(1) | {"question_id": 1.5}], 1, "question_id", "not a non-negative integer"),
    "empty category": ([record(1) | {"category": " "}], 1, "category", "not a non-empty text"),
    "entry not an object": ([record(1), 7], 2, "record", "a JSON int, not an object"),
    "same question, two answers": (
        [record(1), record(2), record(1, answer="C")],
        3,
        "answer",
        "appears again with answer 'C'",
    ),
    "same question, two results": (
        [record(1), record(1, pred="A")],
        2,
        "pred",
        "appears again with a different result",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_records_name_file_record_and_field(tmp_path: Path, case: str) -> None:
    entries, row, field, words = BAD[case]
    file = write(tmp_path / "m" / "math.json", entries)
    with pytest.raises(EvaluationDataError) as caught:
        read_mmlu_pro_outputs(tmp_path)
    err = caught.value
    assert err.file is not None
    assert (Path(err.file), err.row, err.column) == (file, row, field)
    assert words in str(err) and f"record {row}" in str(err) and "How to fix" in str(err)


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b'[{"question_id": 1, "question": "trunc', "not valid JSON"),
        (b"", "not valid JSON"),
        ('[{"question": "caf\u00e9"}]'.encode("latin-1"), "not valid UTF-8"),
        (b'{"math": {"corr": 1.0}}', "holds a JSON dict, not a list of records"),
    ],
)
def test_unreadable_files_are_named(tmp_path: Path, content: bytes, words: str) -> None:
    file = tmp_path / "m" / "math.json"
    file.parent.mkdir()
    file.write_bytes(content)
    with pytest.raises(EvaluationDataError, match=words) as caught:
        read_mmlu_pro_outputs(file)
    assert caught.value.file is not None and Path(caught.value.file) == file and "How to fix" in str(caught.value)


def test_empty_folder_and_missing_path(tmp_path: Path) -> None:
    write(tmp_path / "only" / "math_summary.json", {"math": {}})
    with pytest.raises(EvaluationDataError, match="no MMLU-Pro result files"):
        read_mmlu_pro_outputs(tmp_path / "only")
    write(tmp_path / "empty" / "math.json", [])
    with pytest.raises(EvaluationDataError, match="no question records"):
        read_mmlu_pro_outputs(tmp_path / "empty")
    with pytest.raises(EvaluationDataError, match="no such file"):
        read_mmlu_pro_outputs(tmp_path / "absent")


def test_is_mmlu_pro_folder(harness: Path, tmp_path: Path) -> None:
    assert is_mmlu_pro_folder(harness)
    assert is_mmlu_pro_folder(harness / "Yi-6B" / "CoT" / "all" / "math.json")
    assert not is_mmlu_pro_folder(harness / "summary")
    assert not is_mmlu_pro_folder(tmp_path / "absent")
    (tmp_path / "csv").mkdir()
    (tmp_path / "csv" / "evaluations.csv").write_text("model,query_id,query,benchmark,score\nm,q,t,b,1\n")
    assert not is_mmlu_pro_folder(tmp_path / "csv")
    write(tmp_path / "other" / "data.json", [{"id": 1, "text": "not a result record"}])
    assert not is_mmlu_pro_folder(tmp_path / "other")


# ------------------------------------------------------------------------------------------------ models.csv


def test_models_file_lists_every_model_of_the_matrix_with_known_sizes() -> None:
    models = read_models_file(MODELS_CSV)
    in_matrix = set(pd.read_parquet(PARQUET, columns=["model"])["model"].unique())
    assert set(models["model"]) == in_matrix and len(models) == 29
    assert set(models["variant"]) <= {"base", "instruct", "chat", "code", "math"}
    assert (models["family"] != "").all() and (models["source"].astype(str) != "").all()
    unknown = set(models.loc[models["params_b"].isna(), "model"])
    assert unknown == {"gemini-1.5-flash-002", "gemini-1.5-pro-002"}  # undisclosed: left empty, never guessed
    size = dict(zip(models["model"], models["params_b"]))
    assert size["Mixtral-8x7B-v0.1"] == 46.7 and size["DeepSeek-Coder-V2"] == 236 and size["jamba-1.5-large"] == 398


def test_models_file_feeds_the_catalog() -> None:
    table = pd.DataFrame({"model": ["Mixtral-8x7B-Instruct-v0.1", "gemini-1.5-pro-002", "Yi-6B"], "score": 1.0})
    catalog = build_catalog(table, MODELS_CSV).set_index("model")
    assert catalog.loc["Mixtral-8x7B-Instruct-v0.1", "params_b"] == 46.7  # not 56, the name's 8 x 7
    assert np.isnan(catalog.loc["gemini-1.5-pro-002", "params_b"])
    assert catalog.loc["Yi-6B", "family"] == "yi"

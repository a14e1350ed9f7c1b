"""The MMLU-Pro query bank: MMLU-Pro's answer extraction, the grader, the prompt and its round trip, and the vendored
recorded answers against the vendored matrix."""

from __future__ import annotations

import random
from pathlib import Path

import pandas as pd
import pytest

from locus_model.data.mmlu_pro import build_query
from locus_model.data.mmlu_pro_bank import (
    extract_answer,
    grade_answer,
    query_of_prompt,
    question_prompt,
    read_answer_bank,
    split_query,
)

MMLU_PRO = Path(__file__).resolve().parents[3] / "data" / "mmlu-pro"


@pytest.mark.parametrize(
    "text, letter, rule",
    [
        ("Let's see. The answer is (C).", "C", "answer is"),
        ("so the answer is D because", "D", "answer is"),
        ("**The answer is (E)**", "E", "answer is"),  # the scorer removes ** first
        ("the answer is (B). Later: the answer is (C).", "B", "answer is"),  # the first match
        ("Answer: F\nmore text", "F", "Answer:"),
        ("answer: A then Answer: G", "G", "Answer:"),  # .* is greedy: the last on the line
        ("I think it is B, or maybe J", "J", "last letter"),
        ("no letters here", None, "none"),
        ("The Answer Is (c)", None, "none"),  # lower-case letters are not answers
    ],
)
def test_extract_answer_follows_the_scorers_three_rules(text: str, letter: str | None, rule: str) -> None:
    assert extract_answer(text) == (letter, rule)


def test_the_linear_last_letter_rule_is_the_scorers_regex() -> None:
    from locus_model.data.mmlu_pro_bank import _FINAL

    rng = random.Random(0)
    alphabet = "ABCJKaj .(),\n-_1"  # cannot spell "answer": every text reaches rule 3
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        match = _FINAL.search(text)
        assert extract_answer(text)[0] == (match.group(0) if match else None), text


def test_the_linear_answer_colon_rule_is_the_scorers_regex() -> None:
    from locus_model.data.mmlu_pro_bank import _AGAIN
    from locus_model.data.mmlu_pro_bank import _again as _answer_colon

    rng = random.Random(1)
    pieces = ["Answer:", "answer:", "nswer:", " ", "\n", "A", "C", "J", "K", "x", "Answer: ", ":"]
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        match = _AGAIN.search(text)
        assert _answer_colon(text) == (match.group(1) if match else None), repr(text)


def test_grading_a_long_one_line_answer_costs_what_a_plain_one_does() -> None:
    """The scorer's rule 2 regex is quadratic on one long line without a letter after "Answer:" (~40 s at 80,000
    characters); grading is linear: one such line costs about what the same size in short lines does."""
    import time

    size = 200_000
    hostile = "Answer: (" + "x" * size  # one line, "Answer:" without its letter, no letter anywhere
    plain = ("x" * 79 + "\n") * (size // 80)

    def seconds(text: str) -> float:
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            grade_answer(text, "C")
            best = min(best, time.perf_counter() - start)
        return best

    assert grade_answer(hostile, "C").reason == "no answer letter found"
    # why: the cost is the property under test (a timed comparison, not a deadline): 20x margin, ~1,000x if quadratic
    assert seconds(hostile) < 20 * seconds(plain) + 0.01


def test_grading_keeps_the_reason() -> None:
    assert grade_answer("The answer is (C).", "C").score == 1.0
    wrong = grade_answer("The answer is (D).", "C")
    assert wrong.score == 0.0 and wrong.letter == "D" and "wrong" in wrong.reason and "gold C" in wrong.reason
    assert grade_answer("", "C").reason == "empty answer" and grade_answer("   ", "C").score == 0.0
    assert grade_answer("no idea", "C").reason == "no answer letter found"
    beyond = grade_answer("The answer is (J).", "A", n_options=4)
    assert beyond.score == 0.0 and "beyond the 4 options" in beyond.reason


def test_a_prompt_is_in_mmlu_pros_style_and_gives_back_its_query() -> None:
    query = build_query("  What is 2 + 2?\n", ["3", "4", "five\nor so"])
    prompt = question_prompt(query, "math")
    assert prompt.startswith("The following are multiple choice questions (with answers) about math.")
    assert "Question: What is 2 + 2?\nOptions: A. 3\nB. 4\nC. five\nor so\nAnswer: Let's think step by step." in prompt
    assert split_query(query) == ("What is 2 + 2?", ["3", "4", "five\nor so"])
    assert query_of_prompt(prompt) == query
    assert query_of_prompt("What is 2 + 2?") is None


@pytest.fixture(scope="module")
def bank():
    return read_answer_bank(MMLU_PRO)


def test_every_vendored_question_round_trips_through_its_prompt(bank) -> None:
    questions = bank.questions
    assert len(questions) == 12_032 and questions["answer"].notna().all()
    assert all(query_of_prompt(question_prompt(q, c)) == q for q, c in zip(questions["query"], questions["benchmark"]))
    assert questions["n_options"].between(1, 10).all()  # MMLU-Pro has 7 questions with 1-2 options
    assert (questions.apply(lambda r: "ABCDEFGHIJ".index(r["answer"]) < r["n_options"], axis=1)).all()


def test_the_recorded_letters_reproduce_the_vendored_matrix(bank) -> None:
    matrix = pd.read_parquet(MMLU_PRO / "evaluations.parquet", columns=["model", "query_id", "score"])
    recorded = bank.recorded.astype({"model": str, "answer": str, "pred": object})
    both = matrix.merge(recorded, on=["model", "query_id"], how="outer", validate="one_to_one", indicator=True)
    assert (both["_merge"] == "both").all() and len(both) == 347_215
    assert ((both["pred"] == both["answer"]).astype(float) == both["score"]).all()
    assert bank.recorded_letter("Yi-6B", "mmlupro-70") == "H"
    with pytest.raises(KeyError):
        bank.recorded_letter(
            "DeepSeek-Coder-V2",
            next(
                q
                for q in bank.questions["query_id"]
                if q not in set(recorded.query_id[recorded.model == "DeepSeek-Coder-V2"])
            ),
        )


def test_the_linear_answer_rule_is_the_scorers_regex() -> None:
    from locus_model.data.mmlu_pro_bank import _AGAIN

    rng = random.Random(1)
    pieces = ["answer:", "Answer:", "answer: ", "A", "C", "J", "K", " ", "\n", "x", "nswer:", "a"]  # never "answer is"
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 14)))
        match = _AGAIN.search(text)
        if match:
            assert extract_answer(text) == (match.group(1), "Answer:"), text
        else:
            assert extract_answer(text)[1] != "Answer:", text
    assert extract_answer("answer: Answer: C") == ("C", "Answer:")  # overlapping matches: the last start wins


def test_grading_a_long_one_line_answer_is_linear() -> None:
    """A 200,000-character answer on one line costs about what the same text broken into lines costs (the scorer's
    rule 2 regex took ~40 s at 80,000 characters: it scanned to the line's end from every start)."""
    import time

    def cpu(text: str) -> float:
        times = []
        for _ in range(3):
            start = time.process_time()
            extract_answer(text)
            times.append(time.process_time() - start)
        return min(times)

    one_line = "x y z " * 33_334
    lines = ("x y z " * 13 + "\n") * (len(one_line) // 79)
    assert cpu(one_line) <= 5 * max(cpu(lines), 0.01)

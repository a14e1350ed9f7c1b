"""The MMLU-Pro query bank: each question's gold letter, the prompt to ask it, the answer-letter extraction of
MMLU-Pro's scorer, a grader, and the 29 vendored models' recorded answer letters.

MMLU-Pro (Wang et al., NeurIPS 2024 Datasets & Benchmarks, arXiv 2406.01574; github.com/TIGER-AI-Lab/MMLU-Pro,
Apache-2.0). The extraction follows ``extract_answer`` / ``extract_again`` / ``extract_final`` of its
``evaluate_from_api.py`` (identical in ``evaluate_from_local.py`` and ``compute_accuracy.py``'s level 2):

    1. ``answer is \\(?([A-J])\\)?``        the first "answer is (X)" / "answer is X"
    2. ``.*[aA]nswer:\\s*([A-J])``          the last "Answer: X" on a line
    3. ``\\b[A-J]\\b(?!.*\\b[A-J]\\b)``       the last stand-alone capital letter A-J anywhere
    otherwise no letter.

Differences from the scorer (data/mmlu-pro/README.md): no letter is graded wrong (the scorer draws a seeded random
letter); letters beyond a question's options are graded wrong with their reason (the scorer compares them to the
gold letter, which they never equal either); the prompt is zero-shot (the scorer's 5-shot examples come from the
dataset's validation split, which is not vendored here).

Files (data/mmlu-pro/): ``evaluations.parquet`` (model, query_id, query, benchmark, score) and
``answers.parquet`` (model, query_id, answer = the gold letter of the model's own result file, pred = its recorded
letter, null when the harness extracted none). ``pred == answer`` is ``score`` row for row.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from locus_model.data.errors import EvaluationDataError
from locus_model.data.mmlu_pro import LETTERS

CHOICES = LETTERS[:10]  # MMLU-Pro's letters, A-J
_FIRST = re.compile(r"answer is \(?([A-J])\)?")
_AGAIN = re.compile(
    r".*[aA]nswer:\s*([A-J])"
)  # the scorer's rule 2, quadratic in a line's length (kept to test _again)
_ANSWER = re.compile(r"[aA]nswer:\s*([A-J])")  # rule 2 without its leading .*: see _again
_FINAL = re.compile(r"\b[A-J]\b(?!.*\b[A-J]\b)", re.DOTALL)  # the scorer's rule 3, quadratic in the length
_LETTER = re.compile(r"\b[A-J]\b")  # rule 3 as its last match: the same letter in linear time (tested)
_OPTION_LINE = re.compile(r"\n(?=[A-J]\. )")

PROMPT_HEADER = (
    "The following are multiple choice questions (with answers) about {category}. Think step by step "
    'and then output the answer in the format of "The answer is (X)" at the end.\n\n'
)


def extract_answer(text: str) -> tuple[str | None, str]:
    """(letter, rule) from a model's answer text, MMLU-Pro's scorer's three rules in order; rule is
    ``answer is``, ``Answer:``, ``last letter`` or ``none`` (letter None). ``**`` is removed first, as the
    scorer's ``evaluate_from_api.py`` does with every response."""
    text = text.replace("**", "")
    match = _FIRST.search(text)
    if match:
        return match.group(1), "answer is"
    again = _again(text)
    if again is not None:
        return again, "Answer:"
    last = None
    for last in _LETTER.finditer(text):
        pass
    return (last.group(0), "last letter") if last else (None, "none")


def _again(text: str) -> str | None:
    """Rule 2, ``.*[aA]nswer:\\s*([A-J])`` searched, in linear time: that regex tries every start on a line and
    scans to its end from each (an 80,000-character line without a match: 40 s); what it finds is the last match
    starting on the first line that has one (``.`` stops at a newline; ``.*`` is greedy). Matches may overlap
    ("answer: Answer: C" gives C), so each search starts one past the last match's start."""
    match = _ANSWER.search(text)
    if match is None:
        return None
    end = text.find("\n", match.start())
    end = len(text) if end < 0 else end
    while (later := _ANSWER.search(text, match.start() + 1)) is not None and later.start() < end:
        match = later
    return match.group(1)


@dataclass(frozen=True)
class Grade:
    """One graded answer: ``score`` 1.0 or 0.0; ``reason`` says why (kept beside every answer)."""

    letter: str | None
    score: float
    reason: str


def grade_answer(text: str | None, gold: str, n_options: int = 10) -> Grade:
    """Grade an answer text against the gold letter: an empty text, no letter, or a letter beyond the question's
    ``n_options`` is graded 0 with that reason, as is a wrong letter."""
    if not text or not text.strip():
        return Grade(None, 0.0, "empty answer")
    letter, rule = extract_answer(text)
    if letter is None:
        return Grade(None, 0.0, "no answer letter found")
    if letter not in CHOICES[:n_options]:
        return Grade(letter, 0.0, f"letter {letter} ({rule}) is beyond the {n_options} options")
    if letter != gold:
        return Grade(letter, 0.0, f"wrong: {letter} ({rule}), gold {gold}")
    return Grade(letter, 1.0, f"correct ({rule})")


def split_query(query: str) -> tuple[str, list[str]]:
    """(question, options) of a query text built by ``mmlu_pro.build_query`` (question, then "A. <option>" lines).
    An option holding a line that itself starts with a later letter and ". " would split wrongly; the vendored
    bank has none (tested)."""
    parts = _OPTION_LINE.split(query)
    question = parts[0]
    options: list[str] = []
    for part in parts[1:]:
        letter = CHOICES[len(options)] if len(options) < len(CHOICES) else None
        if letter is not None and part.startswith(f"{letter}. "):
            options.append(part[3:])
        elif options:  # a line inside an option that looks like a later letter: keep it with the option
            options[-1] += "\n" + part
        else:
            question += "\n" + part
    return question, options


def question_prompt(query: str, category: str) -> str:
    """The prompt asking one question in MMLU-Pro's style (``evaluate_from_api.py``: the instruction, then
    ``format_example``'s "Question: ... Options: A. ... Answer: Let's think step by step."), zero-shot."""
    question, options = split_query(query)
    text = PROMPT_HEADER.format(category=category) + f"Question: {question}\nOptions: "
    text += "".join(f"{CHOICES[i]}. {option}\n" for i, option in enumerate(options))
    return text + "Answer: Let's think step by step."


def query_of_prompt(prompt: str) -> str | None:
    """The query text a :func:`question_prompt` was built from, or None when ``prompt`` is not one."""
    head, sep, rest = prompt.partition("Question: ")
    if not sep or not head.startswith(PROMPT_HEADER[:40]):
        return None
    question, sep, rest = rest.partition("\nOptions: ")
    if not sep or not rest.endswith("Answer: Let's think step by step."):
        return None
    options = rest.removesuffix("Answer: Let's think step by step.").removesuffix("\n")
    return question + "\n" + options


@dataclass(frozen=True)
class AnswerBank:
    """The questions (query_id, query, benchmark, answer = gold letter, n_options; one row each, in query_id
    order) and the recorded models' letters (``recorded``: model, query_id, answer, pred)."""

    questions: pd.DataFrame
    recorded: pd.DataFrame

    def recorded_letter(self, model: str, query_id: str) -> str | None:
        """The letter ``model`` answered (None: it gave none); KeyError when it has no record of the question."""
        rows = self._by_model().get(model)
        if rows is None:
            raise KeyError(f"no recorded model {model!r}; known: {sorted(self._by_model())}")
        pred = rows[query_id]  # KeyError: no record
        return None if pd.isna(pred) else str(pred)

    def _by_model(self) -> dict[str, pd.Series]:
        cache = self.__dict__.get("_cache")
        if cache is None:
            cache = {m: g.set_index("query_id")["pred"] for m, g in self.recorded.groupby("model", observed=True)}
            object.__setattr__(self, "_cache", cache)
        return cache


def read_answer_bank(folder: str | Path) -> AnswerBank:
    """Read data/mmlu-pro (``evaluations.parquet`` + ``answers.parquet``) into an :class:`AnswerBank`. The gold
    letter of a question is the one most models' files give (33 questions differ between dataset revisions)."""
    folder = Path(folder)
    for name in ("evaluations.parquet", "answers.parquet"):
        if not (folder / name).exists():
            raise EvaluationDataError(
                f"no {name} in {folder}", file=folder / name, fix="point at the vendored data/mmlu-pro folder"
            )
    evaluations = pd.read_parquet(folder / "evaluations.parquet", columns=["query_id", "query", "benchmark"])
    questions = evaluations.drop_duplicates("query_id").sort_values("query_id").reset_index(drop=True)
    recorded = pd.read_parquet(folder / "answers.parquet")
    gold = (
        recorded.groupby(["query_id", "answer"], observed=True)
        .size()
        .rename("n")
        .reset_index()
        .sort_values(["query_id", "n", "answer"], ascending=[True, False, True])
        .drop_duplicates("query_id")
    )
    questions = questions.merge(gold[["query_id", "answer"]], on="query_id", how="left", validate="one_to_one")
    questions["n_options"] = [len(split_query(q)[1]) for q in questions["query"]]
    return AnswerBank(questions, recorded)

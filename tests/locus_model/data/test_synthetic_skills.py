"""The synthetic pool's skill model (locus_model.data.synthetic_skills): sizes, columns and split, families,
re-uploads, missing cells and repeats, specialists, by construction."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from locus_model.data.synthetic_skills import BENCHMARKS, SKILLS, make_synthetic_tables


@pytest.fixture(scope="module")
def small():
    return make_synthetic_tables("small", seed=0)


def _accuracy(evaluations: pd.DataFrame, model: str, benchmark: str) -> float:
    rows = evaluations[(evaluations["model"] == model) & (evaluations["benchmark"] == benchmark)]
    return float(rows["score"].mean())


def test_small_and_full_sizes() -> None:
    evaluations, models, truth = make_synthetic_tables("small", seed=0)
    assert len(models) == 24 and evaluations["query_id"].nunique() == 600
    assert sorted(evaluations["benchmark"].unique()) == sorted(b.name for b in BENCHMARKS)
    assert truth.skills.shape == (24, len(SKILLS)) and truth.loadings.shape == (600, len(SKILLS))

    evaluations, models, truth = make_synthetic_tables("full", seed=0)
    assert len(models) >= 100 and evaluations["query_id"].nunique() >= 5_000
    assert evaluations["benchmark"].nunique() == 10
    assert models["family"].nunique() >= 10


def test_columns_scores_and_split(small) -> None:
    evaluations, models, truth = small
    assert list(evaluations.columns) == ["model", "query_id", "query", "benchmark", "score", "split"]
    assert evaluations["score"].dtype == np.float64 and set(evaluations["score"].unique()) == {0.0, 1.0}
    per_query = evaluations.groupby("query_id")["split"].nunique()
    assert (per_query == 1).all()  # split is by query
    counts = evaluations.drop_duplicates("query_id")["split"].value_counts()
    assert (counts["train"], counts["val"], counts["test"]) == (500, 50, 50)  # EmbedLLM's 29,673 / 3,000 / 3,000
    assert list(models.columns[:3]) == ["model", "params_b", "family"]


def test_families_have_base_models_and_finetunes(small) -> None:
    _, models, _ = small
    assert set(models["variant"]) == {"base", "chat", "math", "code", "med"}
    for family, group in models.groupby("family"):
        bases = group[group["variant"] == "base"]
        assert len(bases) >= 2, family  # several parameter counts
        for _, base in bases.iterrows():
            assert (group["model"] == f"{base['model']}-chat").any()
    finetunes = models[models["variant"] != "base"]
    assert all(m.startswith(b) for m, b in zip(finetunes["model"], finetunes["base_model"]))


def test_reuploads_share_skills_and_exact_ones_share_answers(small) -> None:
    evaluations, models, truth = small
    dups = truth.duplicates()
    assert {kind for _, _, kind in dups} == {"exact", "resampled"}
    assert (models["duplicate_of"] != "").sum() == len(dups)
    names = list(models["model"])
    matrix = evaluations.drop_duplicates(["model", "query_id"]).pivot(index="model", columns="query_id", values="score")
    for copy, original, kind in dups:
        np.testing.assert_array_equal(truth.skills[names.index(copy)], truth.skills[names.index(original)])
        both = matrix.loc[[copy, original]].dropna(axis=1).to_numpy()
        agree = (both[0] == both[1]).mean()
        assert agree == 1.0 if kind == "exact" else 0.5 < agree < 1.0
    others = [i for i, n in enumerate(names) if n not in {c for c, _, _ in dups}]
    assert len({tuple(truth.skills[i]) for i in others}) == len(others)  # no accidental twins


def test_missing_cells_and_repeated_rows(small) -> None:
    evaluations, models, truth = small
    pairs = evaluations.drop_duplicates(["model", "query_id"])
    missing = 1 - len(pairs) / (len(models) * len(truth.query_ids))
    assert 0.01 < missing < 0.06
    repeats = evaluations.duplicated().sum()
    assert repeats > 0
    assert repeats == evaluations.duplicated(["model", "query_id"]).sum()  # repeats are exact: no conflicts


@pytest.mark.parametrize("seed", [0, 1])
def test_specialists_beat_their_base_model_on_their_benchmark(seed: int) -> None:
    evaluations, models, truth = make_synthetic_tables("small", seed=seed)
    probs = pd.DataFrame(truth.probabilities(), index=models["model"])
    expected = {"math": "synth-gsm8k", "med": "synth-medmcqa", "chat": "synth-truthfulqa"}
    checked = 0
    for _, row in models[models["variant"].isin(list(expected)) & (models["duplicate_of"] == "")].iterrows():
        bench = expected[row["variant"]]
        on_bench = truth.benchmarks == bench
        assert probs.loc[row["model"], on_bench].mean() > probs.loc[row["base_model"], on_bench].mean() + 0.1
        if row["variant"] != "chat":  # big boosts: visible in the sampled labels too
            assert _accuracy(evaluations, row["model"], bench) > _accuracy(evaluations, row["base_model"], bench)
        checked += 1
    assert checked >= 8


def test_bad_arguments_say_how_to_fix() -> None:
    with pytest.raises(ValueError, match="How to fix"):
        make_synthetic_tables("huge", seed=0)

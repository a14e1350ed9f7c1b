"""Synthetic demo pool: determinism, shape, latent structure by construction, text separability, file formats."""

from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from locus_model.data import long_format
from locus_model.data.demo import (
    BENCHMARKS,
    DEMO_FOLDER,
    generate_demo_pool,
    load_demo_truth,
    make_demo_tables,
    SKILLS,
)
from locus_model.data.embedllm import read_embedllm


@pytest.fixture(scope="module")
def small():
    return make_demo_tables("small", seed=0)


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    return generate_demo_pool(tmp_path_factory.mktemp("demo"), size="small", seed=0, formats=("long",))


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _accuracy(evaluations: pd.DataFrame, model: str, benchmark: str) -> float:
    rows = evaluations[(evaluations["model"] == model) & (evaluations["benchmark"] == benchmark)]
    return float(rows["score"].mean())


def test_same_seed_gives_byte_identical_files_and_other_seed_differs(tmp_path: Path) -> None:
    formats = ("long", "embedllm")
    a = generate_demo_pool(tmp_path / "a", size="small", seed=3, formats=formats)
    b = generate_demo_pool(tmp_path / "b", size="small", seed=3, formats=formats)
    c = generate_demo_pool(tmp_path / "c", size="small", seed=4, formats=formats)
    files_a, files_b = _files(a.root), _files(b.root)
    assert {"evaluations.parquet", "evaluations.csv.gz", "models.csv", "demo_truth.json", "README.txt"} <= set(files_a)
    assert files_a == files_b
    assert files_a["evaluations.parquet"] != _files(c.root)["evaluations.parquet"]


def test_small_and_full_sizes() -> None:
    t0 = time.perf_counter()
    evaluations, models, truth = make_demo_tables("small", seed=0)
    assert time.perf_counter() - t0 < 2.0
    assert len(models) == 24 and evaluations["query_id"].nunique() == 600
    assert sorted(evaluations["benchmark"].unique()) == sorted(b.name for b in BENCHMARKS)
    assert truth.skills.shape == (24, len(SKILLS)) and truth.loadings.shape == (600, len(SKILLS))

    evaluations, models, truth = make_demo_tables("full", seed=0)
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


def test_everything_is_labelled_synthetic(small, pool) -> None:
    evaluations, models, _ = small
    assert models["model"].str.startswith("synth-").all() and models["family"].str.startswith("synth-").all()
    assert evaluations["benchmark"].str.startswith("synth-").all()
    assert pool.root.name == DEMO_FOLDER == "demo-synthetic"
    assert pool.readme.read_text().startswith("THIS DATA IS SYNTHETIC")
    assert load_demo_truth(pool.truth_json).to_dict()["synthetic"] is True


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
    evaluations, models, truth = make_demo_tables("small", seed=seed)
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


def test_query_texts_are_distinct_and_recover_their_benchmark() -> None:
    evaluations, _, truth = make_demo_tables("small", seed=0)
    queries = evaluations.drop_duplicates("query_id").set_index("query_id").loc[truth.query_ids]
    texts = queries["query"].tolist()
    assert len(set(texts)) == len(texts) and min(len(t) for t in texts) > 40
    # Bag-of-words nearest centroid, fit on train queries, scored on val + test queries.
    tokens = [re.findall(r"[a-z]+", t.lower()) for t in texts]
    vocab = {w: i for i, w in enumerate(sorted({w for ts in tokens for w in ts}))}
    x = np.zeros((len(texts), len(vocab)))  # (Q, V)
    for row, ts in enumerate(tokens):
        for w in ts:
            x[row, vocab[w]] += 1
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    labels, train = queries["benchmark"].to_numpy(), queries["split"].to_numpy() == "train"
    names = sorted(set(labels))
    centroids = np.stack([x[train & (labels == b)].mean(0) for b in names])  # (B, V)
    predicted = np.array(names)[np.argmax(x[~train] @ centroids.T, axis=1)]
    assert (predicted == labels[~train]).mean() > 0.9


def test_truth_file_round_trips(pool) -> None:
    truth = load_demo_truth(pool.truth_json)
    np.testing.assert_allclose(truth.probabilities(), pool.truth.probabilities(), atol=1e-4)
    assert truth.duplicates() == pool.truth.duplicates()
    assert list(truth.models["model"]) == list(pool.truth.models["model"])


def test_long_format_files_pass_the_validator(pool, small) -> None:
    evaluations, models, _ = small
    expected = evaluations.drop_duplicates(["model", "query_id"], keep="last")
    for path in (pool.evaluations_parquet, pool.evaluations_csv):
        table = long_format.read_evaluations(path)  # collapses the exact repeats
        assert len(table) == len(expected)
        assert set(zip(table["model"].astype(str), table["query_id"].astype(str), table["score"])) == set(
            zip(expected["model"], expected["query_id"], expected["score"]))
    listed = long_format.read_models_file(pool.models_csv)
    assert list(listed["model"]) == list(models["model"]) and listed["params_b"].notna().all()


def test_embedllm_folder_round_trips(tmp_path: Path, small) -> None:
    demo = generate_demo_pool(tmp_path, size="small", seed=0, formats=("embedllm",))
    assert demo.evaluations_parquet is None and demo.embedllm_dir is not None
    table, _ = read_embedllm(demo.embedllm_dir)
    expected = small[0].drop_duplicates(["model", "query_id"], keep="last")
    key = ["model", "query_id", "score", "split"]
    got = table[key].astype({"model": str, "query_id": str, "split": str}).sort_values(key).reset_index(drop=True)
    pd.testing.assert_frame_equal(got, expected[key].sort_values(key).reset_index(drop=True))


def test_bad_arguments_say_how_to_fix(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="How to fix"):
        make_demo_tables("huge", seed=0)
    with pytest.raises(ValueError, match="How to fix"):
        generate_demo_pool(tmp_path, size="small", formats=("xlsx",))

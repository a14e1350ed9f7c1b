"""The synthetic pool on disk (locus_model.data.synthetic): byte-identical files per seed, labelled synthetic, the
truth file, the long-format and EmbedLLM files through their readers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from locus_model.data import long_format
from locus_model.data.embedllm import read_embedllm
from locus_model.data.synthetic import SYNTHETIC_FOLDER, generate_synthetic_pool
from locus_model.data.synthetic_skills import load_synthetic_truth, make_synthetic_tables


@pytest.fixture(scope="module")
def small():
    return make_synthetic_tables("small", seed=0)


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    return generate_synthetic_pool(tmp_path_factory.mktemp("synthetic"), size="small", seed=0, formats=("long",))


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_same_seed_gives_byte_identical_files_and_other_seed_differs(tmp_path: Path) -> None:
    formats = ("long", "embedllm")
    a = generate_synthetic_pool(tmp_path / "a", size="small", seed=3, formats=formats)
    b = generate_synthetic_pool(tmp_path / "b", size="small", seed=3, formats=formats)
    c = generate_synthetic_pool(tmp_path / "c", size="small", seed=4, formats=formats)
    files_a, files_b = _files(a.root), _files(b.root)
    assert {"evaluations.parquet", "evaluations.csv.gz", "models.csv", "synthetic_truth.json", "README.txt"} <= set(
        files_a
    )
    assert files_a == files_b
    assert files_a["evaluations.parquet"] != _files(c.root)["evaluations.parquet"]


def test_everything_is_labelled_synthetic(small, pool) -> None:
    evaluations, models, _ = small
    assert models["model"].str.startswith("synth-").all() and models["family"].str.startswith("synth-").all()
    assert evaluations["benchmark"].str.startswith("synth-").all()
    assert pool.root.name == SYNTHETIC_FOLDER == "synthetic"
    assert pool.readme.read_text().startswith("THIS DATA IS SYNTHETIC")
    assert load_synthetic_truth(pool.truth_json).to_dict()["synthetic"] is True


def test_truth_file_round_trips(pool) -> None:
    truth = load_synthetic_truth(pool.truth_json)
    np.testing.assert_allclose(truth.probabilities(), pool.truth.probabilities(), atol=1e-4)
    assert truth.duplicates() == pool.truth.duplicates()
    assert list(truth.models["model"]) == list(pool.truth.models["model"])


def test_long_format_files_pass_the_validator(pool, small) -> None:
    evaluations, models, _ = small
    expected = evaluations.drop_duplicates(["model", "query_id"], keep="last")
    for path in (pool.evaluations_parquet, pool.evaluations_csv):
        table, _ = long_format.read_evaluations(path)  # collapses the exact repeats
        assert len(table) == len(expected)
        assert set(zip(table["model"].astype(str), table["query_id"].astype(str), table["score"])) == set(
            zip(expected["model"], expected["query_id"], expected["score"])
        )
    listed = long_format.read_models_file(pool.models_csv)
    assert list(listed["model"]) == list(models["model"]) and listed["params_b"].notna().all()


def test_embedllm_folder_round_trips(tmp_path: Path, small) -> None:
    pool = generate_synthetic_pool(tmp_path, size="small", seed=0, formats=("embedllm",))
    assert pool.evaluations_parquet is None and pool.embedllm_dir is not None
    table, _ = read_embedllm(pool.embedllm_dir)
    expected = small[0].drop_duplicates(["model", "query_id"], keep="last")
    key = ["model", "query_id", "score", "split"]
    got = table[key].astype({"model": str, "query_id": str, "split": str}).sort_values(key).reset_index(drop=True)
    pd.testing.assert_frame_equal(got, expected[key].sort_values(key).reset_index(drop=True))


def test_bad_arguments_say_how_to_fix(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="How to fix"):
        generate_synthetic_pool(tmp_path, size="small", formats=("xlsx",))

"""Onboarding's pieces on frames: a model's store (newest file wins, order-independent) and its nearest models.
The drop folder is tested in tests/locus_pipeline/intake/, onboarding runs in
tests/locus_pipeline/defs/assets/test_onboarding.py."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from locus_model.onboarding import STORE_COLUMNS, as_store, merge_into_store, nearest_models, split_by_model
from tests.locus_model.tiny_locus import one_group_router


def rows_of(model: str, scores: dict[str, float]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "model": model,
            "query_id": list(scores),
            "query": [f"question {q}" for q in scores],
            "benchmark": "bench",
            "score": list(scores.values()),
        }
    )


def stamp(rows: pd.DataFrame, seconds: float, name: str) -> pd.DataFrame:
    return as_store(rows, pd.Timestamp(seconds, unit="s", tz="UTC"), name)


def test_the_newest_file_wins_per_query_whatever_the_order() -> None:
    old, new = stamp(rows_of("m", {"q1": 1, "q2": 1}), 100, "old"), stamp(rows_of("m", {"q2": 0, "q3": 1}), 200, "new")
    forward = merge_into_store(merge_into_store(None, old), new)
    backward = merge_into_store(merge_into_store(None, new), old)  # the older file processed last
    pd.testing.assert_frame_equal(forward, backward)
    assert dict(zip(forward["query_id"], forward["score"])) == {"q1": 1.0, "q2": 0.0, "q3": 1.0}
    assert dict(zip(forward["query_id"], forward["source_file"])) == {"q1": "old", "q2": "new", "q3": "new"}
    assert tuple(forward.columns) == STORE_COLUMNS


def test_nearest_models_by_euclidean_distance() -> None:
    pool = pd.DataFrame(
        {
            "model": ["a", "b", "c", "d"],
            "source": ["training", "training", "onboarded", "held_out"],
            "embedding": [np.array(v, np.float32) for v in ([0, 0], [3, 4], [1, 0], [0, 2])],
        }
    )
    near = nearest_models(pool, "a", k=2)
    assert near["model"].tolist() == ["c", "d"] and near["distance"].tolist() == [1.0, 2.0]
    assert near["rank"].tolist() == [1, 2] and near["source"].tolist() == ["onboarded", "held_out"]
    assert nearest_models(pool, "a", k=10)["model"].tolist() == ["c", "d", "b"]  # never itself
    with pytest.raises(KeyError, match="'z' is not in the pool"):
        nearest_models(pool, "z")


def test_split_by_model_writes_one_validated_part_per_model(tmp_path) -> None:
    path = tmp_path / "evals.csv"
    path.write_text(
        'model,query_id,query,benchmark,score\n"org/a",q1,x,b,1\n"org/a",q2,y,b,0\nb,q1,x,b,0.5\n"org/a",q2,y,b,0\n',
        encoding="utf-8",
    )
    out = tmp_path / "parts"
    rows, models = split_by_model(path, out, chunk_rows=2)
    assert rows == 4 and [(m.model, m.rows, m.evaluations) for m in models] == [("b", 1, 1), ("org/a", 3, 2)]
    part = pd.read_parquet(out / f"{models[1].model_key}.parquet")
    assert part["query_id"].tolist() == ["q1", "q2"] and part["model"].unique().tolist() == ["org/a"]


@pytest.mark.parametrize("buffer_rows", [0, 3, 10**6])  # spilled after every chunk, after some, never
def test_split_by_model_gives_the_same_parts_whether_or_not_it_spills(tmp_path, buffer_rows) -> None:
    rng = np.random.default_rng(0)
    n = 200
    table = pd.DataFrame(
        {
            "model": rng.choice(["m/a", "m b", "c", "dü"], n),
            "query_id": [f"q{i % 37}" for i in range(n)],
            "benchmark": "b",
        }
    )
    table["query"] = "question " + table["query_id"]
    table["score"] = (table["model"].str.len() + table["query_id"].str.len()) % 2  # repeats agree: dropped
    path = tmp_path / "evals.csv"
    table[["model", "query_id", "query", "benchmark", "score"]].to_csv(path, index=False)
    out = tmp_path / f"parts-{buffer_rows}"
    rows, models = split_by_model(path, out, chunk_rows=16, buffer_rows=buffer_rows)
    expected = table.drop_duplicates(["model", "query_id"], keep="last")
    assert rows == n and [m.model for m in models] == sorted(table["model"].unique())
    for m in models:
        part = pd.read_parquet(out / f"{m.model_key}.parquet")
        mine = expected[expected["model"] == m.model].sort_values("query_id", kind="stable")
        assert m.rows == (table["model"] == m.model).sum() and m.evaluations == len(part) == len(mine)
        assert (
            part["query_id"].tolist() == mine["query_id"].tolist()
            and part["score"].tolist() == mine["score"].astype(float).tolist()
        )
        assert list(part.columns) == ["model", "query_id", "query", "benchmark", "score", "_row"]
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{m.model_key}.parquet" for m in models)  # no spill left


@pytest.mark.parametrize("buffer_rows", [0, 10**6])
def test_split_by_model_names_two_scores_for_one_query_whether_or_not_it_spills(tmp_path, buffer_rows) -> None:
    from locus_model.data.errors import EvaluationDataError

    path = tmp_path / "evals.csv"
    path.write_text("model,query_id,query,benchmark,score\na,q1,x,b,1\nb,q1,x,b,1\nb,q2,y,b,1\na,q1,x,b,0\n")
    with pytest.raises(EvaluationDataError, match="two different scores for query_id 'q1'") as err:
        split_by_model(path, tmp_path / f"parts-{buffer_rows}", chunk_rows=2, buffer_rows=buffer_rows)
    assert err.value.row == 4


def test_neighbour_stability_is_certain_for_a_copy_and_shares_sum_to_one():
    """A model whose evaluations are another's exactly has that model nearest in every resample; the top-1 shares
    over the pool sum to 1 and the top-k shares to k."""
    import torch

    from locus_model.model import Locus, LocusConfig
    from locus_model.onboarding import neighbour_stability
    from locus_model.pool import embed_models

    rng = np.random.default_rng(0)
    queries = [f"q{i}" for i in range(60)]
    encodings = pd.DataFrame({"query_id": queries, "encoding": list(rng.normal(size=(60, 8)).astype(np.float32))})
    table = pd.DataFrame(
        [(m, q, float(rng.random() < p)) for m, p in (("a", 0.9), ("b", 0.5), ("c", 0.1), ("d", 0.7)) for q in queries],
        columns=["model", "query_id", "score"],
    )
    torch.manual_seed(0)
    model = Locus(LocusConfig(query_dim=8, d=16, n_blocks=1, n_latents=4, n_heads=2, predictor_hidden=16)).eval()
    pool = embed_models(one_group_router(model), table, encodings, checkpoint="x", source="training")
    copy = table[table["model"] == "a"].assign(model="a-copy")
    result = neighbour_stability(model, copy, encodings, pool, "a-copy", k=2, draws=10)
    shares = result.shares
    assert result.to_markdown("a").startswith("10 bootstrap resamples of a-copy's own 60 evaluations")
    assert f"a is the nearest in {100 * result.share_top1('a'):.0f}% of them" in result.to_markdown("a")
    assert shares["share_top1"].sum() == pytest.approx(1.0) and shares["share_topk"].sum() == pytest.approx(2.0)
    assert shares.iloc[0]["model"] == "a"  # the exact copy's resamples land nearest the original most often


def test_the_benchmark_profile_puts_the_model_first_with_its_counts() -> None:
    from locus_model.onboarding import benchmark_profile

    accuracy = pd.DataFrame({"x": [0.5, 0.25, 1.0], "y": [np.nan, 0.5, 0.75]}, index=["new", "n1", "n2"])
    shown = benchmark_profile(accuracy, "new", ["n2", "n1"], {"x": 4})
    assert shown.index.tolist() == ["new", "n2", "n1", "n (new)"] and shown.columns.tolist() == [
        "x"
    ]  # only its benchmarks
    assert shown.loc["n (new)", "x"] == 4 and benchmark_profile(accuracy, "gone", ["n1"]).shape == (2, 2)


# ----------------------------------------------------------------------------- small or off-topic drops


POOL_PHI = np.array([[1, 0], [1, 0.1], [0, 1], [0.1, 1]], np.float32)  # two pairs of near-identical queries


def test_query_overlap_is_the_mean_best_cosine_against_the_pools_own():
    from locus_model.onboarding import query_overlap

    same = query_overlap(np.array([[2, 0], [0, 3]], np.float32), POOL_PHI)
    assert same.overlap == pytest.approx(1.0) and same.queries == 2
    assert same.baseline == pytest.approx(1 / np.sqrt(1.01), rel=1e-6)  # each pool query's best other: its pair
    opposite = query_overlap(np.array([[-1, -1]], np.float32), POOL_PHI)
    assert opposite.overlap == pytest.approx(-1 / np.sqrt(2), rel=1e-6)  # its best: an axis query
    assert opposite.ratio < 0


def test_a_small_off_topic_drop_gets_every_warning_and_a_full_one_none():
    from locus_model.onboarding import QueryOverlap, onboarding_warnings

    off = QueryOverlap(overlap=0.45, baseline=0.55, queries=9)
    warnings = onboarding_warnings(9, 128, off)
    assert len(warnings) == 3
    assert warnings[0].startswith("9 evaluations, under the pool's floor of 32: kept in the pool but not routed")
    assert warnings[1].startswith(
        "9 evaluations, fewer than the 128 per model recommended: its accuracy is known to "
        "about +-33 points (95%; +-9 at 128, +-9 at the checkpoint's 128 per model)"
    )
    assert "mean best cosine similarity 0.45 against 0.55" in warnings[2] and "ratio 0.82 < 0.9" in warnings[2]
    assert onboarding_warnings(128, 128, QueryOverlap(overlap=0.55, baseline=0.55, queries=128)) == []
    assert onboarding_warnings(40, 128, None) == [onboarding_warnings(40, 128, None)[0]]  # only the count
    # the warning's threshold is the recommended count, whatever the checkpoint was trained with
    assert (
        onboarding_warnings(128, 512, None) == []
        and "+-4 at the checkpoint's 512" in onboarding_warnings(64, 512, None)[0]
    )


def test_the_accuracy_margin_of_n_answers():
    from locus_model.onboarding import accuracy_margin

    assert [round(accuracy_margin(n)) for n in (32, 64, 128, 512)] == [17, 12, 9, 4]

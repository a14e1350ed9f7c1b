"""The pool table: one checkpoint per pool, one row per model; rows embedded in one forward pass."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import torch

from locus_model.data.matrix import evaluations_digest
from locus_model.model import Locus, LocusConfig
from locus_model.pool import (
    REPRODUCTION_TOLERANCE,
    PoolError,
    Reproduction,
    check_pool,
    checkpoints_of,
    compare_embeddings,
    embed_models,
    models_with_new_evaluations,
    pool_matrix,
    reproduction_sample,
    upsert_rows,
)
from locus_model.pool_schema import POOL_COLUMNS, schema_differences
from tests.locus_model.tiny_locus import one_group_router

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def rows(models: list[str], checkpoint: str = "ck-a", value: float = 0.0) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "model": models,
            "model_key": models,
            "embedding": [np.full(4, value, np.float32) for _ in models],
            "group_profile": [np.zeros(0, np.float32) for _ in models],
            "n_evaluations": np.ones(len(models), np.int64),
            "evaluations_digest": "f",
            "checkpoint_id": checkpoint,
            "source": "training",
            "embedded_at": pd.Timestamp(0, tz="UTC"),
            "routable": True,
        }
    )


def test_upsert_replaces_a_model_in_place_and_appends_a_new_one() -> None:
    pool = rows(["a", "b", "c"])
    out = upsert_rows(pool, rows(["b", "d"], value=1.0))
    assert out["model"].tolist() == ["a", "c", "b", "d"]
    names, z = pool_matrix(out)
    assert z[names.index("b")].tolist() == [1.0] * 4 and z[names.index("a")].tolist() == [0.0] * 4
    check_pool(out)


def test_upsert_refuses_rows_of_another_checkpoint() -> None:
    with pytest.raises(PoolError, match=r"checkpoint \['ck-b'\] cannot join a pool embedded with \['ck-a'\]"):
        upsert_rows(rows(["a", "b"]), rows(["c"], checkpoint="ck-b"))
    assert upsert_rows(rows([]), rows(["c"], checkpoint="ck-b"))["model"].tolist() == ["c"]  # an empty pool takes any


@pytest.mark.parametrize(
    "bad, message",
    [
        (pd.concat([rows(["a"]), rows(["b"], checkpoint="ck-b")], ignore_index=True), "mixes checkpoints"),
        (rows(["a", "a"]), "model 'a' appears twice"),
        (rows(["a", "b"]).assign(model_key="k"), "model_key 'k' appears twice"),
        (rows(["a"]).drop(columns=["source"]), r"lacks the columns \['source'\]"),
        (
            rows(["a", "b"]).assign(embedding=[np.zeros(4, np.float32), np.array([0, np.nan, 0, 0], np.float32)]),
            r"model 'b'.s embedding is not finite \(NaN or inf; 1 of 2 rows\)",
        ),
        (
            rows(["a", "b"]).assign(embedding=[np.zeros(4, np.float32), np.zeros(3, np.float32)]),
            r"model 'b'.s embedding has shape \(3,\), not \(4,\)",
        ),
    ],
)
def test_check_pool_refuses_a_broken_pool(bad: pd.DataFrame, message: str) -> None:
    with pytest.raises(PoolError, match=message):
        check_pool(bad)


def test_check_pool_refuses_embeddings_of_another_width_than_the_checkpoints() -> None:
    check_pool(rows(["a"]), dim=4)
    with pytest.raises(PoolError, match=r"model 'a'.s embedding has shape \(4,\), not \(8,\)"):
        check_pool(rows(["a"]), dim=8)


def test_checkpoints_of_lists_each_checkpoint_once() -> None:
    both = pd.concat([rows(["a", "b"], "ck-b"), rows(["c"], "ck-a")], ignore_index=True)
    assert checkpoints_of(both) == ["ck-a", "ck-b"] and checkpoints_of(rows([])) == []


def test_embed_models_gives_one_row_per_model_and_reproduces_itself() -> None:
    torch.manual_seed(0)
    model = Locus(LocusConfig(query_dim=8, d=16, n_blocks=1, n_latents=4, n_heads=2, predictor_hidden=8)).eval()
    rng = np.random.default_rng(0)
    encodings = pd.DataFrame(
        {"query_id": [f"q{i}" for i in range(12)], "encoding": list(rng.normal(size=(12, 8)).astype(np.float32))}
    )
    table = pd.DataFrame(
        {
            "model": ["m2"] * 5 + ["m1"] * 7,
            "query_id": [f"q{i}" for i in range(5)] + [f"q{i}" for i in range(7)],
            "score": rng.integers(0, 2, 12).astype(float),
        }
    )
    out = embed_models(one_group_router(model), table, encodings, checkpoint="ck", source="onboarded")
    assert list(out.columns) == list(POOL_COLUMNS) and out["model"].tolist() == ["m1", "m2"]
    assert out["n_evaluations"].tolist() == [7, 5] and set(out["source"]) == {"onboarded"}
    assert out["evaluations_digest"].tolist() == [evaluations_digest(table[table["model"] == m]) for m in ("m1", "m2")]
    alone = embed_models(
        one_group_router(model), table[table["model"] == "m2"], encodings, checkpoint="ck", source="onboarded"
    )
    np.testing.assert_array_equal(alone["embedding"].iloc[0], out["embedding"].iloc[1])  # the same bits alone
    assert schema_differences(pa.Schema.from_pandas(out)) == []  # the types POOL_SCHEMA states, as written to Parquet
    assert schema_differences(pa.Schema.from_pandas(out.astype({"n_evaluations": "int32"}).drop(columns="source"))) == [
        "source: missing (expected string)",
        "n_evaluations: int32, expected int64",
    ]
    with pytest.raises(KeyError, match="model 'm1': query_id 'zz' has no query encoding"):
        embed_models(
            one_group_router(model), table.assign(query_id="zz"), encodings, checkpoint="ck", source="onboarded"
        )


def test_models_with_new_evaluations_are_the_new_models_and_those_with_other_evaluations() -> None:
    before = rows(["a", "b", "c"])
    after = pd.concat([before.iloc[:2], rows(["d"])], ignore_index=True)
    after.loc[after["model"] == "b", "evaluations_digest"] = "g"
    assert models_with_new_evaluations(before, after) == ["b", "d"]
    assert models_with_new_evaluations(None, after) == ["a", "b", "d"]  # no pool before: every row is new


def test_the_reproduction_sample_is_bounded_whatever_the_pool_and_keeps_every_changed_row() -> None:
    pool = rows([f"m{i:05d}" for i in range(20_000)])
    few = reproduction_sample(pool, ["m00007", "m19999", "not in the pool"], sample=32, max_changed=256, seed=0)
    assert {"m00007", "m19999"} <= set(few.models) and len(few.models) == 34
    assert (few.changed, few.changed_checked, few.others_checked, few.rows) == (2, 2, 32, 20_000)
    assert few.share_of_rebuild == 34 / 20_000
    assert reproduction_sample(pool, ["m00007", "m19999"], seed=0) == few  # seeded: the same rows again
    many = reproduction_sample(pool, pool["model"].iloc[:5_000], sample=32, max_changed=256)
    assert len(many.models) == 32 + 256 and many.changed == 5_000  # 5,000 new rows still cost at most 288
    small = reproduction_sample(pool.iloc[:10], ["m00001"])
    assert small.models == pool["model"].iloc[:10].tolist()  # a small pool is checked whole


def test_compare_embeddings_tolerates_float32_noise_and_names_each_row_that_really_differs() -> None:
    stored = rows(["a", "b", "c"])
    again = rows(["c", "a"])
    assert compare_embeddings(stored, again) == Reproduction(2, [], 0.0, 0, REPRODUCTION_TOLERANCE)
    base = again.at[1, "embedding"]
    again.at[1, "embedding"] = base + np.float32(3.6e-7)  # another process's rounding: not bit-identical, not a change
    noise = compare_embeddings(stored, again)
    assert (
        noise.differing == [] and noise.not_bit_identical == 1 and noise.max_abs_diff == pytest.approx(3.6e-7, rel=0.05)
    )
    again.at[1, "embedding"] = base + np.float32(1e-3)  # a changed row
    result = compare_embeddings(stored, again)
    assert result.differing == ["a"] and result.max_abs_diff == pytest.approx(1e-3, rel=1e-3)
    assert compare_embeddings(stored, again, tolerance=1e-2).differing == []  # the tolerance is the caller's to state
    assert compare_embeddings(stored, again.iloc[:0]).models_checked == 0

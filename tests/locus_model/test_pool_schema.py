"""The pool table's schema (locus_model.pool_schema): columns, types, meanings, old column names."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa

from locus_model.pool_schema import POOL_COLUMNS, POOL_SCHEMA, column_doc, schema_differences, upgrade_pool


def test_a_pool_written_before_the_digest_rename_reads_with_todays_columns():
    old = pd.DataFrame({"model": ["a"], "evaluations_fingerprint": ["f"]})
    assert upgrade_pool(old).columns.tolist() == ["model", "evaluations_digest"]
    assert "evaluations_digest" in POOL_COLUMNS and "evaluations_fingerprint" not in POOL_COLUMNS


def test_schema_differences_name_each_missing_extra_or_retyped_column():
    fields = [f for f in POOL_SCHEMA if f.name != "source"] + [pa.field("extra", pa.string())]
    schema = pa.schema([pa.field(f.name, pa.int32()) if f.name == "n_evaluations" else f for f in fields])
    assert schema_differences(schema) == ["source: missing (expected string)", "n_evaluations: int32, expected int64",
                                          "extra: not a pool column"]
    assert schema_differences(POOL_SCHEMA) == []
    assert all(column_doc(c) for c in POOL_COLUMNS) and "checkpoint" in column_doc("checkpoint_id")


"""The pool table's schema (locus_model.pool_schema): columns, types, meanings."""

from __future__ import annotations

import pyarrow as pa

from locus_model.pool_schema import POOL_COLUMNS, POOL_SCHEMA, column_doc, schema_differences


def test_schema_differences_name_each_missing_extra_or_retyped_column():
    fields = [f for f in POOL_SCHEMA if f.name != "source"] + [pa.field("extra", pa.string())]
    schema = pa.schema([pa.field(f.name, pa.int32()) if f.name == "n_evaluations" else f for f in fields])
    assert schema_differences(schema) == [
        "source: missing (expected string)",
        "n_evaluations: int32, expected int64",
        "extra: not a pool column",
    ]
    assert schema_differences(POOL_SCHEMA) == []
    assert all(column_doc(c) for c in POOL_COLUMNS) and "checkpoint" in column_doc("checkpoint_id")

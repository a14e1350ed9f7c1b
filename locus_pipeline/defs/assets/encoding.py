"""Query encodings phi(x), cached by (encoder, runtime, sha256 of the text): only new text is encoded."""

import dagster as dg
import pandas as pd
from pydantic import Field

from locus_pipeline.defs.metadata import OWNERS
from locus_pipeline.defs.resources import QueryEncoder


class EncodingConfig(dg.Config):
    encoder: str = Field(
        default="all-MiniLM-L6-v2",
        description="Sentence encoder: all-MiniLM-L6-v2 (384-d, fast) or all-mpnet-base-v2 (768-d, the paper's).",
    )


@dg.asset(owners=OWNERS, kinds={"pytorch"}, group_name="encoding")
def query_encodings(
    context: dg.AssetExecutionContext,
    config: EncodingConfig,
    evaluation_table: pd.DataFrame,
    query_encoder: QueryEncoder,
) -> pd.DataFrame:
    """One row per query: query_id, encoder, runtime (the encoder runtime), encoding (list of floats, unit norm)."""
    queries = evaluation_table.drop_duplicates("query_id").sort_values("query_id")
    vectors, report = query_encoder.encode(queries["query"].tolist(), config.encoder)
    context.add_output_metadata(
        {
            "encoder": report.encoder,
            "runtime": report.runtime,
            "dim": int(vectors.shape[1]),
            "queries": len(queries),
            "newly_encoded": report.encoded,
            "from_cache": report.unique - report.encoded,
            "sentences_per_s": round(report.encoded / report.seconds, 1) if report.encoded else 0.0,
        }
    )
    return pd.DataFrame(
        {
            "query_id": queries["query_id"].to_numpy(),
            "encoder": report.encoder,
            "runtime": report.runtime,
            "encoding": list(vectors),
        }
    )

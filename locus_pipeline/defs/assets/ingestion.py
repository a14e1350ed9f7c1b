"""Raw benchmark ingestion and the validated evaluation table."""


from pathlib import Path

import dagster as dg
import pandas as pd
from pydantic import Field

from locus_pipeline.storage import LocusHome, sha256_file

SOURCES = ("demo", "long", "embedllm")


class SourceConfig(dg.Config):
    """Where the evaluations come from."""

    source: str = Field(default="demo", description="demo (embedded synthetic pool) | long (a long-format file or folder) | embedllm (an EmbedLLM folder).")
    path: str = Field(default="", description="For long/embedllm: the file or folder. Empty with embedllm = LOCUS_HOME/sources/embedllm.")
    models_file: str = Field(default="", description="Optional models file (model, params_b, family); the demo pool brings its own.")
    demo_size: str = Field(default="full", description="Demo pool size: full (>=100 models, >=5,000 queries) or small.")
    demo_seed: int = Field(default=0, description="Seed of the synthetic demo pool.")
    download: bool = Field(default=False, description="embedllm only: download the files from Hugging Face at the pinned revision when absent.")


def resolve_source(config: SourceConfig, home: LocusHome) -> tuple[Path, Path | None]:
    """(evaluations file or folder, models file or None) for a source config; generates/downloads as needed."""
    if config.source not in SOURCES:
        raise ValueError(f"source {config.source!r} is not one of {SOURCES}")
    models = Path(config.models_file) if config.models_file else None
    if config.source == "demo":
        from locus_model.demo import generate_demo_pool

        parent = home.dir("sources", f"{config.demo_size}-seed{config.demo_seed}")
        pool = generate_demo_pool(parent, size=config.demo_size, seed=config.demo_seed, formats=("long",))  # deterministic
        return pool.evaluations_parquet, models or pool.models_csv
    if config.source == "embedllm":
        from locus_model.embedllm import download_embedllm, is_embedllm_folder

        folder = Path(config.path) if config.path else home.dir("sources", "embedllm")
        if not is_embedllm_folder(folder):
            if not config.download:
                raise FileNotFoundError(
                    f"{folder} is not an EmbedLLM folder (train.csv, val.csv, test.csv, model_order.csv, "
                    "question_order.csv); set download: true or put the files there"
                )
            download_embedllm(folder)
        return folder, models
    if not config.path:
        raise ValueError("source 'long' needs path: a long-format file (.csv, .csv.gz, .parquet) or a folder of them")
    return Path(config.path), models


@dg.asset(kinds={"pandas"}, group_name="ingestion")
def raw_evaluations(context: dg.AssetExecutionContext, config: SourceConfig, home: LocusHome) -> pd.DataFrame:
    """The source files as ingested: one row per file with its size and sha256 (the files stay untouched)."""
    from locus_model.evaluations import is_evaluation_file

    path, models = resolve_source(config, home)
    files = sorted(p for p in path.rglob("*") if p.is_file() and (is_evaluation_file(p) or p.suffix == ".csv")) if path.is_dir() else [path]
    if models is not None and models.exists():
        files.append(models)
    manifest = pd.DataFrame(
        {
            "source": config.source,
            "root": str(path),
            "models_file": str(models) if models is not None and models.exists() else "",
            "file": [str(f) for f in files],
            "bytes": [f.stat().st_size for f in files],
            "sha256": [sha256_file(f) for f in files],
        }
    )
    context.add_output_metadata(
        {
            "files": dg.MetadataValue.md(manifest[["file", "bytes", "sha256"]].to_markdown(index=False)),
            "synthetic": config.source == "demo",
        }
    )
    return manifest


@dg.asset(kinds={"pandas"}, group_name="ingestion")
def evaluation_table(context: dg.AssetExecutionContext, raw_evaluations: pd.DataFrame) -> pd.DataFrame:
    """Validated long-format evaluations: model, query_id, query, benchmark, score (+ split if the source has one)."""
    from locus_model.evaluations import read_evaluations_with_report

    table, report = read_evaluations_with_report(raw_evaluations["root"].iloc[0])
    context.add_output_metadata(
        {
            "rows_read": report.rows_read,
            "repeats_dropped": report.repeats_dropped,
            "models": report.models,
            "queries": report.queries,
            "benchmarks": dg.MetadataValue.md(
                table.groupby("benchmark").agg(queries=("query_id", "nunique"), mean_score=("score", "mean")).to_markdown()
            ),
            "preview": dg.MetadataValue.md(table.head(10).to_markdown(index=False)),
        }
    )
    return table


@dg.asset(kinds={"pandas"}, group_name="ingestion")
def model_catalog(context: dg.AssetExecutionContext, raw_evaluations: pd.DataFrame, evaluation_table: pd.DataFrame) -> pd.DataFrame:
    """One row per model: model, model_key, params_b, family (from the models file, else parsed from the name)."""
    from locus_model.catalog import build_catalog

    models_file = raw_evaluations["models_file"].iloc[0]
    catalog = build_catalog(evaluation_table, Path(models_file) if models_file else None)
    context.add_output_metadata({"preview": dg.MetadataValue.md(catalog.head(20).to_markdown(index=False))})
    return catalog

"""Raw benchmark ingestion and the validated evaluation table."""

from pathlib import Path

import dagster as dg
import pandas as pd
from pydantic import Field

from locus_model.data.catalog import build_catalog
from locus_model.data.embedllm_download import download_embedllm
from locus_model.data.embedllm_files import is_embedllm_folder
from locus_model.data.file_chunks import is_evaluation_file
from locus_model.data.long_format import read_evaluations
from locus_model.data.mmlu_pro import is_mmlu_pro_folder, read_mmlu_pro_outputs
from locus_model.data.synthetic import generate_synthetic_pool
from locus_model.evaluation.splits import subset_queries
from locus_model.markdown import escape_frame
from locus_pipeline.defs.metadata import OWNERS
from locus_pipeline.home_location import REPO_ROOT
from locus_pipeline.storage import LocusHome, sha256_file

SOURCES = ("mmlu_pro", "synthetic", "long", "embedllm")
MMLU_PRO = REPO_ROOT / "data" / "mmlu-pro"  # vendored: 29 real models x 12,032 questions (data/mmlu-pro/README.md)


class SourceConfig(dg.Config):
    """Where the evaluations come from."""

    source: str = Field(
        default="mmlu_pro",
        description="mmlu_pro (real: the vendored MMLU-Pro matrix, or a folder of MMLU-Pro's own per-model JSON "
        "outputs) | synthetic (a generated pool with a known latent structure) | long (a long-format file "
        "or folder, or what an evaluation harness wrote: an lm-eval, Inspect, lighteval or HELM output "
        "folder, an archive of one, an Inspect log) | embedllm (an EmbedLLM folder).",
    )
    path: str = Field(
        default="",
        description="mmlu_pro: empty = the vendored data/mmlu-pro/evaluations.parquet, else a folder of MMLU-Pro JSON "
        "outputs; long/embedllm: the file or folder (empty with embedllm = LOCUS_HOME/sources/embedllm).",
    )
    models_file: str = Field(
        default="",
        description="Optional models file (model, params_b, family); mmlu_pro and synthetic bring their own.",
    )
    synthetic_size: str = Field(
        default="full", description="synthetic only: full (>=100 models, >=5,000 queries) or small."
    )
    synthetic_seed: int = Field(default=0, description="synthetic only: seed of the generated pool.")
    download: bool = Field(
        default=False,
        description="embedllm only: download the files from Hugging Face at the pinned revision when absent.",
    )


def resolve_source(config: SourceConfig, home: LocusHome) -> tuple[Path, Path | None]:
    """(evaluations file or folder, models file or None) for a source config; generates/downloads as needed."""
    if config.source not in SOURCES:
        raise ValueError(f"source {config.source!r} is not one of {SOURCES}")
    models = Path(config.models_file) if config.models_file else None
    if config.source == "mmlu_pro":
        return (
            Path(config.path) if config.path else MMLU_PRO / "evaluations.parquet"
        ), models or MMLU_PRO / "models.csv"
    if config.source == "synthetic":
        parent = home.dir("sources", f"{config.synthetic_size}-seed{config.synthetic_seed}")
        pool = generate_synthetic_pool(
            parent, size=config.synthetic_size, seed=config.synthetic_seed, formats=("long",)
        )  # deterministic
        assert pool.evaluations_parquet is not None  # the long format (formats=("long",)) is its Parquet file
        return pool.evaluations_parquet, models or pool.models_csv
    if config.source == "embedllm":
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


@dg.asset(owners=OWNERS, kinds={"pandas"}, group_name="ingestion")
def raw_evaluations(context: dg.AssetExecutionContext, config: SourceConfig, home: LocusHome) -> pd.DataFrame:
    """The source files as ingested: one row per file with its size and sha256 (the files stay untouched)."""
    path, models = resolve_source(config, home)
    files = (
        sorted(
            p
            for p in path.rglob("*")
            if p.is_file() and (is_evaluation_file(p) or p.suffix in (".csv", ".json", ".jsonl", ".eval"))
        )
        if path.is_dir()
        else [path]
    )
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
            "files": dg.MetadataValue.md(escape_frame(manifest[["file", "bytes", "sha256"]]).to_markdown(index=False)),
            "synthetic": config.source == "synthetic",
        }
    )
    return manifest


class TableConfig(dg.Config):
    max_queries: int = Field(
        default=0,
        description="Use a random subset of this many queries, stratified by benchmark (seeded); 0 = all. For a quick "
        "look at a large source: the demo uses 1,500 of MMLU-Pro's 12,032.",
    )
    subset_seed: int = Field(default=0, description="Seed of that subset.")


@dg.asset(owners=OWNERS, kinds={"pandas"}, group_name="ingestion")
def evaluation_table(
    context: dg.AssetExecutionContext, config: TableConfig, raw_evaluations: pd.DataFrame
) -> pd.DataFrame:
    """Validated long-format evaluations: model, query_id, query, benchmark, score (+ split if the source has one)."""
    root = Path(raw_evaluations["root"].iloc[0])
    if is_mmlu_pro_folder(root):  # MMLU-Pro's own per-model JSON, scored as its scorer does
        table, mmlu = read_mmlu_pro_outputs(root)
        rows_read, repeats = len(table), 0
    else:
        table, report = read_evaluations(root)
        rows_read, repeats = report.rows_read, report.repeats_dropped
    queries_in_source = table["query_id"].nunique()
    if config.max_queries:
        table = subset_queries(table, config.max_queries, seed=config.subset_seed)
    context.add_output_metadata(
        {
            "rows_read": rows_read,
            "repeats_dropped": repeats,
            "models": int(table["model"].nunique()),
            "queries": int(table["query_id"].nunique()),
            "queries_in_source": int(queries_in_source),
            "benchmarks": dg.MetadataValue.md(
                table.groupby("benchmark", observed=True)
                .agg(queries=("query_id", "nunique"), mean_score=("score", "mean"))
                .pipe(escape_frame)
                .to_markdown()
            ),
            "preview": dg.MetadataValue.md(escape_frame(table.head(10)).to_markdown(index=False)),
        }
    )
    return table


@dg.asset(owners=OWNERS, kinds={"pandas"}, group_name="ingestion")
def model_catalog(
    context: dg.AssetExecutionContext, raw_evaluations: pd.DataFrame, evaluation_table: pd.DataFrame
) -> pd.DataFrame:
    """One row per model: model, model_key, params_b, family (from the models file, else parsed from the name)."""
    models_file = raw_evaluations["models_file"].iloc[0]
    catalog = build_catalog(evaluation_table, Path(models_file) if models_file else None)
    context.add_output_metadata(
        {"preview": dg.MetadataValue.md(escape_frame(catalog.head(20)).to_markdown(index=False))}
    )
    return catalog

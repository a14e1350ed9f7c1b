"""Metadata shared by the assets: table schemas (the UI's Columns view) and who owns what."""

import base64
import io
from pathlib import Path

import dagster as dg
import pandas as pd
from PIL import Image

from locus_model.markdown import escape_markdown
from locus_model.pool_schema import POOL_SCHEMA, column_doc

OWNERS = ["team:locus"]


# What the columns of the tables without a schema of their own mean: (type, description), by asset
COLUMN_DOCS: dict[str, dict[str, tuple[str, str]]] = {
    "locus_checkpoint": {
        "checkpoint_id": ("string", "sha256 prefix of the checkpoint file's bytes"),
        "path": ("string", "the checkpoint file, relative to LOCUS_HOME (checkpoints/locus-<id>.pt)"),
        "encoder": ("string", "sentence encoder of the query encodings it was trained on"),
        "evaluations_digest": ("string", "sha256 of the evaluations it was trained on"),
        "mlflow_run_id": ("string", "the MLflow run that trained it"),
        "model_version": ("string", "its version of the registered model `locus`"),
        "best_epoch": ("int", "the selected epoch: the lowest validation BCE (ties: higher routing accuracy)"),
        "best_metrics": ("json", "validation figures at the selected epoch, before the predictor fine-tuning"),
        "kept_metrics": (
            "json",
            "the saved checkpoint's figures (after the fine-tuning): the metadata floats and MLflow selected/...",
        ),
        "device": ("string", "torch device it was trained on"),
    },
    "onboarded_model_embedding": {
        "rank": ("int", "1 = the nearest"),
        "model": ("string", "a pool model near the onboarded one"),
        "distance": ("float", "Euclidean distance between the two model embeddings (the atlas's scale)"),
        "of_model": ("string", "the onboarded model"),
        "source": ("string", "where that model's pool row comes from: training, held_out or onboarded"),
        "checkpoint_id": ("string", "the checkpoint that embedded both"),
    },
    "embedding_geometry": {
        "model_a": ("string", "the first model of the pair"),
        "model_b": ("string", "the second model of the pair"),
        "euclidean": ("float", "Euclidean distance between the two model embeddings (the atlas's scale)"),
        "cosine": ("float", "cosine distance between the two model embeddings: 1 - cos"),
        "disagreement": ("float", "share of the shared test queries one answers correctly and the other not"),
        "n_shared": ("int", "test queries both models are labelled on (what the disagreement rests on)"),
    },
}


def _column_type(series: pd.Series) -> str:
    """A readable type: the dtype, or for object columns the kind of their values (string, list, json)."""
    if series.dtype != object:
        return {"int64": "int", "float64": "float", "float32": "float", "bool": "bool"}.get(
            str(series.dtype), str(series.dtype)
        )
    value = next((v for v in series if v is not None), None)
    return (
        "string"
        if isinstance(value, str)
        else "list"
        if hasattr(value, "__len__") and not isinstance(value, dict)
        else "json"
        if isinstance(value, dict)
        else "object"
    )


def table_schema(frame: pd.DataFrame, docs: dict[str, tuple[str, str]] | None = None) -> dg.TableSchema:
    """A frame's columns as a Dagster table schema: type and meaning from ``docs`` where given, else the values'
    type."""
    docs = docs or {}
    return dg.TableSchema(
        columns=[
            dg.TableColumn(
                name=str(c),
                type=docs.get(str(c), (_column_type(frame[c]), ""))[0],
                description=docs.get(str(c), ("", None))[1] or None,
            )
            for c in frame.columns
        ]
    )


def home_path(home, path) -> dg.PathMetadataValue:
    """A file under LOCUS_HOME as metadata: ``$LOCUS_HOME/<relative path>``, so the metadata of a copied or moved
    home names its own files, not the original's (the tables store the same relative paths)."""
    return dg.MetadataValue.path(f"$LOCUS_HOME/{home.relative(path)}")


PREVIEW_ROWS = 10  # markdown tables in the UI's report are cut to this many rows; the asset's Parquet has them all


def shorten_tables(markdown: str, name: str, max_rows: int = PREVIEW_ROWS) -> str:
    """Every markdown table longer than ``max_rows`` rows cut to its first ``max_rows``, with a line saying how
    many more there are and where (the asset's Parquet output, warehouse/<name>.parquet)."""
    out: list[str] = []
    block: list[str] = []  # the lines of the markdown table being read

    def flush() -> None:
        rows = block[2:]  # header and separator first
        out.extend(block[: 2 + max_rows])
        if len(rows) > max_rows:
            out.append(
                f"\n*... {len(rows) - max_rows} more rows: the full table is the asset's output "
                f"(`warehouse/{name}.parquet`) and `reports/{name}.md`.*"
            )
        block.clear()

    for line in markdown.splitlines():
        if line.startswith("|"):
            block.append(line)
            continue
        if block:
            flush()
        out.append(line)
    if block:
        flush()
    return "\n".join(out)


def pool_schema() -> dg.TableSchema:
    """The pool table's schema (locus_model.pool_schema.POOL_SCHEMA: Arrow types as written), known before any
    materialization."""
    return dg.TableSchema(
        columns=[dg.TableColumn(name=f.name, type=str(f.type), description=column_doc(f.name)) for f in POOL_SCHEMA]
    )


TEXT_SHOWN = 60  # characters of a text metadata value the UI's metadata table shows uncut; longer ones go as markdown


def shown_whole(value):
    """A metadata value the UI shows whole: a text longer than TEXT_SHOWN as a markdown entry (its characters
    escaped, so a name stays text), anything else as it is. A text entry is cut to one line in the asset's
    metadata table; a markdown entry wraps there and opens in full."""
    if isinstance(value, str) and len(value) > TEXT_SHOWN:
        return dg.MetadataValue.md(escape_markdown(value))
    return value


ATLAS_ARTIFACT = "reports/atlas.html"  # in the MLflow run of the pool's checkpoint; model_atlas logs it there


def atlas_link(home, mlflow, checkpoint_id: str) -> dict:
    """{"atlas": url} to the atlas in the MLflow UI (an artifact of the run that trained ``checkpoint_id``), or a
    line saying why there is none yet."""
    checkpoint = home.read_table("locus_checkpoint")
    rows = checkpoint[checkpoint["checkpoint_id"].astype(str) == checkpoint_id]
    if rows.empty:
        return {"atlas": shown_whole(f"no atlas link: checkpoint {checkpoint_id} is not the current locus_checkpoint")}
    run_id = str(rows["mlflow_run_id"].iloc[0])
    url = mlflow.artifact_page_url(run_id, ATLAS_ARTIFACT)
    if url is None:
        return {"atlas": shown_whole(f"no atlas link: MLflow run {run_id} is not in the tracking store ({mlflow.uri})")}
    return {"atlas": dg.MetadataValue.url(url)}


UI_FIGURE_PX = 960  # the metadata viewer's modal is 1,024 px wide (~1,000 px of content) in a 1,280 px window


def ui_png_markdown(png: Path, max_px: int = UI_FIGURE_PX) -> str:
    """A PNG as an inline markdown image for the UI's metadata viewer, scaled down to ``max_px`` wide so that the
    modal shows all of it (a wider image is clipped there, not scaled). The report file keeps the full PNG."""
    with Image.open(png) as image:
        scaled = (
            image.resize((max_px, round(image.height * max_px / image.width)), Image.Resampling.LANCZOS)
            if image.width > max_px
            else image
        )
        buffer = io.BytesIO()
        scaled.save(buffer, format="PNG", optimize=True)
    return f"![{Path(png).stem}](data:image/png;base64,{base64.b64encode(buffer.getvalue()).decode()})"


def training_curve_png(history: list[dict], path: Path) -> str:
    """Plot train/val loss and validation routing accuracy per epoch to ``path``; returns a markdown image."""
    # why: pyplot loads, and Agg is chosen, when a figure is drawn, not when the code location loads
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # why: pyplot after the backend is chosen

    frame = pd.DataFrame(history)
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(9, 3.2))
    for column in ("train_loss", "val_loss"):
        if column in frame:
            ax_loss.plot(frame["epoch"], frame[column], label=column)
    ax_loss.set_xlabel("epoch"), ax_loss.set_ylabel("BCE"), ax_loss.legend()
    for column in ("val_routing_acc", "val_correctness_acc"):
        if column in frame:
            ax_acc.plot(frame["epoch"], frame[column], label=column)
    ax_acc.set_xlabel("epoch"), ax_acc.set_ylabel("accuracy"), ax_acc.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return png_markdown(path)


def png_markdown(path: Path) -> str:
    """A PNG embedded as a markdown image (data URI), so a markdown viewer shows it inline."""
    data = base64.b64encode(Path(path).read_bytes()).decode()
    return f"![{Path(path).stem}](data:image/png;base64,{data})"

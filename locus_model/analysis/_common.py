"""Shared helpers for the downstream analyses: input checks, distances, markdown tables (figures:
locus_model.figures)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.spatial.distance import cdist

from locus_model.markdown import escape_markdown

METRICS = ("euclidean", "cosine")


def check_embeddings(embeddings: np.ndarray, *, where: str, min_models: int = 1) -> np.ndarray:
    """Return `embeddings` as a float64 (M, d) array, or raise saying what is wrong with it."""
    z = np.asarray(embeddings, dtype=np.float64)
    if z.ndim != 2:
        raise ValueError(
            f"{where}: model embeddings must be a 2-D array (M, d), got shape {z.shape}. "
            "How to fix: stack one embedding per model into an (M, d) array."
        )
    if z.shape[0] < min_models:
        raise ValueError(
            f"{where}: needs at least {min_models} models, got {z.shape[0]}. "
            "How to fix: pass a larger pool of model embeddings."
        )
    if not np.isfinite(z).all():
        bad = np.unique(np.nonzero(~np.isfinite(z))[0])[:5].tolist()
        raise ValueError(
            f"{where}: model embeddings contain NaN/inf (rows {bad}...). How to fix: drop or re-embed those models."
        )
    return z


def check_names(names, n_models: int, *, where: str) -> list[str]:
    """Model names as a list of str, one per embedding row (default 'model_<i>')."""
    if names is None:
        return [f"model_{i}" for i in range(n_models)]
    names = [str(n) for n in names]
    if len(names) != n_models:
        raise ValueError(
            f"{where}: got {len(names)} model names for {n_models} model embeddings. "
            "How to fix: pass one name per embedding row, in the same order."
        )
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})[:5]
        raise ValueError(
            f"{where}: model names must be unique, repeated: {dup}. "
            "How to fix: de-duplicate the model list before embedding."
        )
    return names


def check_probs_labels(probs, labels, n_models: int, *, where: str) -> tuple[np.ndarray, np.ndarray]:
    """probs and labels as float64 (M, Q) arrays of the same shape, one row per model embedding, or raise."""
    p = np.asarray(probs, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    if p.ndim != 2 or p.shape != y.shape or p.shape[0] != n_models:
        raise ValueError(
            f"{where}: probs {p.shape} and labels {y.shape} must both be (M, Q) with M = "
            f"{n_models} model embeddings. How to fix: predict and label the same queries for "
            "every model, rows in the embedding order."
        )
    return p, y


def check_metric(metric: str, *, where: str) -> str:
    if metric not in METRICS:
        raise ValueError(f"{where}: unknown metric {metric!r}. How to fix: use one of {METRICS}.")
    return metric


def pairwise_distances(a: np.ndarray, b: np.ndarray | None = None, *, metric: str = "euclidean") -> np.ndarray:
    """(M, N) distances; cosine distance is 1 - cos(a, b) (0 = same direction, 2 = opposite)."""
    b = a if b is None else b
    d = cdist(a, b, metric=metric)
    if metric == "cosine":
        d = np.nan_to_num(d, nan=1.0)  # a zero vector has no direction: treat it as orthogonal to all
    return np.maximum(d, 0.0)  # cdist can return -1e-16 for identical rows


def markdown_table(df: pd.DataFrame, *, digits: int = 4, max_rows: int | None = 30) -> str:
    """A GitHub-markdown table (no `tabulate` dependency); floats rounded to `digits` significant places."""
    shown = df if max_rows is None or len(df) <= max_rows else df.head(max_rows)

    def cell(v) -> str:
        if isinstance(v, (float, np.floating)):
            return "nan" if np.isnan(v) else f"{v:.{digits}g}"
        return escape_markdown(v)

    lines = ["| " + " | ".join(escape_markdown(c) for c in shown.columns) + " |", "|" + "---|" * len(shown.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in shown.itertuples(index=False)]
    if len(shown) < len(df):
        lines.append(f"\n({len(df) - len(shown)} more rows not shown)")
    return "\n".join(lines)


LEFT_OUT_LISTED = 20  # models named in a report's "left out" line; the count is always complete


def left_out_note(names) -> str:
    """A report's closing paragraph naming the models an analysis left out because they have no held-out
    labels (e.g. onboarded ones); "" when none were."""
    names = [str(n) for n in names]
    if not names:
        return ""
    return (
        f"\n\nLeft out (no held-out labels, e.g. onboarded): {len(names)} model(s): "
        + ", ".join(map(escape_markdown, names[:LEFT_OUT_LISTED]))
        + (" ..." if len(names) > LEFT_OUT_LISTED else "")
        + "."
    )

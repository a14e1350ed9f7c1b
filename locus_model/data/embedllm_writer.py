"""Write a long evaluation table as an EmbedLLM folder (the five files read_embedllm reads), e.g. the synthetic pool."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from locus_model.data.contract import SPLITS
from locus_model.data.embedllm_files import MODEL_ORDER_FILE, QUESTION_ORDER_FILE, SPLIT_FILES, WRITTEN_SPLIT_COLUMNS
from locus_model.data.errors import EvaluationDataError

_INTEGER = re.compile(r"^(0|[1-9][0-9]*)$")


def write_embedllm(
    table: pd.DataFrame,
    folder: Path | str,
    *,
    split: str | Mapping[str, str] | pd.Series | np.ndarray | None = None,
) -> None:
    """Write a long evaluation table as an EmbedLLM folder (the five files read_embedllm reads).

    split: None -> the table's `split` column; a str -> every query in that split; a Series or array
    of len(table) -> one split per row (a Series aligned on the table's index); a mapping query_id -> split. Scores must
    be 0 or 1 (EmbedLLM labels are binary). Models get model_id 0..M-1 in the order of the column's categories
    (Categorical) or of first appearance. query_ids that are all distinct non-negative integers ("0", "17", ...) become
    their prompt_id, so a round trip keeps them; otherwise queries are numbered 0..Q-1 in order of first appearance.
    category = the table's `category` column if present, else its benchmark. Rows are written in table order; a repeated
    (model, query_id) is written as repeated rows, as EmbedLLM has them (read_embedllm keeps the last). All three split
    files are written, header-only when empty.
    """
    folder = Path(folder)
    source = "the table passed to write_embedllm"
    for column in ("model", "query_id", "query", "benchmark", "score"):
        if column not in table.columns:
            raise EvaluationDataError(
                "required column is missing",
                file=source,
                column=column,
                fix="pass a long evaluation table (model, query_id, query, benchmark, score)",
            )
    query_id = table["query_id"].astype(str).to_numpy()
    if split is None:
        if "split" not in table.columns:
            raise EvaluationDataError(
                "no split given and the table has no `split` column",
                file=source,
                column="split",
                fix="pass split='train' or a mapping query_id -> split",
            )
        splits = table["split"].astype(str).to_numpy()
    elif isinstance(split, str):
        splits = np.full(len(table), split, dtype=object)
    elif isinstance(split, (pd.Series, np.ndarray, list)):
        if len(split) != len(table):
            raise EvaluationDataError(
                f"split has {len(split)} values for {len(table)} rows",
                file=source,
                column="split",
                fix="pass one split per row, or a mapping query_id -> split",
            )
        if isinstance(split, pd.Series) and split.index.equals(table.index):
            split = split.reindex(table.index)
        splits = np.asarray(split, dtype=object).astype(str)
    else:
        splits = np.array([split.get(q, "") for q in query_id], dtype=object)
    bad = np.flatnonzero(~np.isin(splits, SPLITS))
    if len(bad):
        i = int(bad[0])
        raise EvaluationDataError(
            f"split {splits[i]!r} is not one of {', '.join(SPLITS)}",
            file=source,
            row=i + 1,
            column="split",
            fix="give every query train, val or test",
        )
    score = table["score"].to_numpy(dtype=np.float64)
    bad = np.flatnonzero(~np.isin(score, (0.0, 1.0)))
    if len(bad):
        i = int(bad[0])
        raise EvaluationDataError(
            f"score {score[i]!r} is not 0 or 1",
            file=source,
            row=i + 1,
            column="score",
            fix="EmbedLLM's format holds binary correctness; threshold the scores first",
        )
    per_query = pd.DataFrame({"q": query_id, "s": splits}).drop_duplicates()
    dup = per_query["q"].duplicated()
    if dup.any():
        q = per_query.loc[dup, "q"].iloc[0]
        raise EvaluationDataError(
            f"query_id {q!r} is in more than one split",
            file=source,
            column="split",
            fix="EmbedLLM splits by query: give each query one split",
        )
    pairs = pd.DataFrame({"m": table["model"].astype(str).to_numpy(), "q": query_id})

    if isinstance(table["model"].dtype, pd.CategoricalDtype):
        used = set(pairs["m"])
        models = [str(m) for m in table["model"].cat.categories if str(m) in used]
    else:
        models = [str(m) for m in pd.unique(pairs["m"])]
    model_id = {m: i for i, m in enumerate(models)}
    unique_q = [str(q) for q in pd.unique(query_id)]
    if all(_INTEGER.match(q) for q in unique_q):
        prompt_id = {q: int(q) for q in unique_q}
    else:
        prompt_id = {q: i for i, q in enumerate(unique_q)}
    categories = table["category"] if "category" in table.columns else table["benchmark"]
    categories = categories.astype(str).to_numpy()
    category_id = {c: i for i, c in enumerate(sorted(set(categories.tolist())))}

    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"model_id": range(len(models)), "model_name": models}).to_csv(folder / MODEL_ORDER_FILE, index=False)
    queries = (
        pd.DataFrame({"prompt_id": [prompt_id[q] for q in query_id], "prompt": table["query"].astype(str).to_numpy()})
        .drop_duplicates("prompt_id", keep="last")
        .sort_values("prompt_id", kind="stable")
    )
    queries.to_csv(folder / QUESTION_ORDER_FILE, index=False)
    rows = pd.DataFrame(
        {
            "prompt_id": [prompt_id[q] for q in query_id],
            "model_id": [model_id[m] for m in pairs["m"].tolist()],
            "model_name": pairs["m"].to_numpy(),
            "label": score.astype(np.int64),
            "prompt": table["query"].astype(str).to_numpy(),
            "category_id": [category_id[c] for c in categories.tolist()],
            "category": categories,
        },
        columns=list(WRITTEN_SPLIT_COLUMNS),
    )
    for name in SPLITS:
        rows.loc[splits == name].to_csv(folder / SPLIT_FILES[name], index=False)

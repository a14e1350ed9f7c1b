"""EmbedLLM's correctness matrix: read, write and download its files (Hugging Face dataset RZ412/EmbedLLM).

EmbedLLM (Zhuang et al., ICLR 2025, arXiv 2410.02223) released 0/1 correctness of 112 models on 35,673
queries from 10 benchmarks; LOCUS (arXiv 2601.21082) trains and reports on it. A folder holds five files:

    train.csv / val.csv / test.csv   one row per (model, query) evaluation; columns read by name:
                                     model_id, prompt_id, prompt, category, label (also model_name and
                                     category_id, which the reader ignores)
    model_order.csv                  model_id, model_name   (model_id = 0..111)
    question_order.csv               prompt_id, prompt

The splits are by query (29,673 / 3,000 / 3,000). The same (prompt_id, model_id) pair can occur more than once
(a prompt listed under several category variants); like the public LOCUS reference
(patel-shivam/locus_code_release, data/make_concise_split.py) the LAST occurrence in file order wins.
mmlu* and gpqa* categories are merged into the benchmarks "mmlu" and "gpqa". Format details and sources:
data/EMBEDLLM.md.
"""

from __future__ import annotations

import csv
import os
import re
import socket
import threading
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlparse

import numpy as np
import pandas as pd

from locus_model.data.contract import SPLITS, benchmark_group
from locus_model.data.errors import EvaluationDataError

EMBEDLLM_REPO_ID = "RZ412/EmbedLLM"
EMBEDLLM_REVISION = "70dee14af6101604ce1130cfcf2849daba4b6077"  # pinned; the reference's numbers use it
SPLIT_FILES = {split: f"{split}.csv" for split in SPLITS}
MODEL_ORDER_FILE = "model_order.csv"
QUESTION_ORDER_FILE = "question_order.csv"
EMBEDLLM_FILES = (*SPLIT_FILES.values(), MODEL_ORDER_FILE, QUESTION_ORDER_FILE)

SPLIT_COLUMNS = ("model_id", "prompt_id", "prompt", "category", "label")  # what the reader needs
WRITTEN_SPLIT_COLUMNS = ("prompt_id", "model_id", "model_name", "label", "prompt", "category_id", "category")
MODEL_ORDER_COLUMNS = ("model_id", "model_name")
QUESTION_ORDER_COLUMNS = ("prompt_id", "prompt")

DEFAULT_CHUNK_ROWS = 200_000  # ~150 MB of prompt text per chunk of train.csv (2.7 GB, 3.8 M rows)


def embedllm_url(revision: str = EMBEDLLM_REVISION) -> str:
    """The dataset's file listing on the Hub at a revision (where to fetch the files by hand)."""
    return f"https://huggingface.co/datasets/{EMBEDLLM_REPO_ID}/tree/{revision}"


def merge_benchmark(category: str) -> str:
    """Benchmark of an EmbedLLM category: mmlu_* -> "mmlu", gpqa_* -> "gpqa", others lower-cased as they are."""
    return benchmark_group(str(category).strip().lower())


@dataclass(frozen=True)
class EmbedLLMReport:
    """What read_embedllm found: counts a reader wants to see next to the table."""

    folder: str
    n_models: int  # models listed in model_order.csv
    n_models_with_rows: int  # of those, models with at least one evaluation
    n_queries: int  # distinct prompt_ids with at least one evaluation
    n_rows: int  # rows of the returned table, one per (model, query)
    rows_read: int  # data rows in the three split files
    duplicates_dropped: int  # rows dropped by the last-occurrence rule (rows_read - n_rows)
    rows_read_per_split: dict[str, int]
    duplicates_dropped_per_split: dict[str, int]
    queries_per_split: dict[str, int]
    n_queries_with_several_categories: int  # prompt_ids listed under more than one category (last one kept)
    n_queries_with_several_texts: int  # prompt_ids whose prompt text differs between rows (last one kept)
    n_queries_not_in_question_order: int  # evaluated prompt_ids missing from question_order.csv
    n_question_order_without_rows: int  # prompt_ids in question_order.csv that nobody evaluated

    def as_dict(self) -> dict:
        return asdict(self)

    def to_markdown(self) -> str:
        lines = ["| split | rows read | duplicates dropped | queries |", "|---|---:|---:|---:|"]
        for split in SPLITS:
            lines.append(
                f"| {split} | {self.rows_read_per_split.get(split, 0):,} "
                f"| {self.duplicates_dropped_per_split.get(split, 0):,} "
                f"| {self.queries_per_split.get(split, 0):,} |"
            )
        lines += [
            "",
            f"{self.n_models_with_rows} of {self.n_models} models, {self.n_queries:,} queries, "
            f"{self.n_rows:,} evaluations; {self.n_queries_with_several_categories:,} queries listed under "
            f"several categories; {self.n_queries_not_in_question_order:,} queries missing from "
            f"{QUESTION_ORDER_FILE}.",
        ]
        return "\n".join(lines)


# ----------------------------------------------------------------------------------------------------------
# reading


def _fix_missing_file(folder: Path) -> str:
    return (
        f"put EmbedLLM's {', '.join(EMBEDLLM_FILES)} into {folder}: run "
        f"locus_model.data.embedllm.download_embedllm({str(folder)!r}) or download them by hand from "
        f"{embedllm_url()}"
    )


def _read_header(path: Path) -> list[str]:
    with open(path, newline="", encoding="utf-8") as f:
        return next(csv.reader(f), [])


def _require_columns(path: Path, required: tuple[str, ...]) -> list[str]:
    if not path.is_file():
        raise EvaluationDataError(
            "the file is missing", file=str(path), fix=_fix_missing_file(path.parent)
        )
    header = _read_header(path)
    if not header:
        raise EvaluationDataError(
            "the file is empty (no header line)", file=str(path),
            fix=f"re-download it; its header must name {', '.join(required)}",
        )
    for column in required:
        if column not in header:
            raise EvaluationDataError(
                f"required column is missing (header: {', '.join(header)})", file=str(path), column=column,
                fix=f"use EmbedLLM's header, which names {', '.join(required)}",
            )
    return header


def _integers(values: pd.Series, *, path: Path, column: str, first_row: int) -> np.ndarray:
    """Column as int64; an empty or non-integer cell raises with its 1-based data row."""
    numbers = pd.to_numeric(values, errors="coerce")
    bad = numbers.isna().to_numpy() | (numbers.to_numpy(dtype=float, na_value=np.nan) % 1 != 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise EvaluationDataError(
            f"{values.iloc[i]!r} is not an integer id", file=str(path), row=first_row + i, column=column,
            fix="EmbedLLM ids are non-negative integers; repair or re-download the file",
        )
    return numbers.to_numpy(dtype=np.int64)


def _read_model_order(path: Path) -> list[str]:
    _require_columns(path, MODEL_ORDER_COLUMNS)
    df = pd.read_csv(path, usecols=list(MODEL_ORDER_COLUMNS), dtype=str, keep_default_na=False)
    ids = _integers(df["model_id"], path=path, column="model_id", first_row=1)
    names = df["model_name"].str.strip()
    empty = np.flatnonzero((names == "").to_numpy())
    if len(empty):
        raise EvaluationDataError(
            "model_name is empty", file=str(path), row=int(empty[0]) + 1, column="model_name",
            fix="give every model_id its model name",
        )
    for column, values in (("model_id", pd.Series(ids)), ("model_name", names)):
        dup = np.flatnonzero(values.duplicated().to_numpy())
        if len(dup):
            raise EvaluationDataError(
                f"{values.iloc[dup[0]]!r} is listed twice", file=str(path), row=int(dup[0]) + 1, column=column,
                fix=f"keep one line per model; {column} must be unique",
            )
    if ids.min() < 0 or ids.max() >= len(ids) or len(set(ids.tolist())) != len(ids):
        raise EvaluationDataError(
            f"model_id must run over 0..{len(ids) - 1} (found {ids.min()}..{ids.max()})", file=str(path),
            column="model_id", fix="number the models 0..M-1 as EmbedLLM does",
        )
    order = np.argsort(ids)
    return names.to_numpy()[order].tolist()  # index = model_id


def _read_question_order(path: Path) -> dict[int, int]:
    """prompt_id -> position in question_order.csv (the order queries come out in)."""
    _require_columns(path, QUESTION_ORDER_COLUMNS)
    df = pd.read_csv(path, usecols=["prompt_id"], dtype=str, keep_default_na=False)
    ids = _integers(df["prompt_id"], path=path, column="prompt_id", first_row=1)
    dup = np.flatnonzero(pd.Series(ids).duplicated().to_numpy())
    if len(dup):
        raise EvaluationDataError(
            f"prompt_id {ids[dup[0]]} is listed twice", file=str(path), row=int(dup[0]) + 1, column="prompt_id",
            fix="keep one line per prompt_id",
        )
    return {int(pid): i for i, pid in enumerate(ids)}


def _chunks(path: Path, chunk_rows: int) -> Iterator[pd.DataFrame]:
    try:
        reader = pd.read_csv(
            path, usecols=list(SPLIT_COLUMNS), dtype=str, keep_default_na=False, chunksize=chunk_rows
        )
        with reader:
            yield from reader
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as err:
        raise EvaluationDataError(
            f"the CSV cannot be parsed ({err})", file=str(path),
            fix="the file is truncated or corrupt; re-download it",
        ) from err


@dataclass
class _SplitRows:
    prompt_id: np.ndarray  # (n,) int64
    model: np.ndarray  # (n,) int16, index into model_order
    label: np.ndarray  # (n,) int8


def read_embedllm(
    folder: Path | str, *, progress: bool = False, chunk_rows: int = DEFAULT_CHUNK_ROWS
) -> tuple[pd.DataFrame, EmbedLLMReport]:
    """Read an EmbedLLM folder into the long evaluation table.

    Returns (table, report). The table has one row per (model, query) with columns
        model (model_name from model_order.csv), query_id (str(prompt_id)), query (prompt text),
        benchmark (merged category: mmlu_* -> "mmlu", gpqa_* -> "gpqa"), score (float64, 0.0/1.0),
        split ("train" | "val" | "test", the file the row came from), category (EmbedLLM's raw category);
    the string columns are pandas Categoricals (3.4 M rows share 36 k prompt texts). Rows come ordered by
    question_order.csv, then by model_id. Duplicate (prompt_id, model_id) rows: the last in file order wins,
    and its query text and category are those of the query's last row; report.duplicates_dropped counts them.

    train.csv (2.7 GB) is streamed in chunks of chunk_rows rows; only one chunk of text is held at a time.
    Raises EvaluationDataError (file, 1-based data row, column, fix) on missing files or columns, labels
    other than 0/1, ids that are not integers, a model_id absent from model_order.csv, and a prompt_id that
    appears in two split files.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise EvaluationDataError(
            "the EmbedLLM folder does not exist", file=str(folder), fix=_fix_missing_file(folder)
        )
    for split in SPLITS:  # fail on a missing file before streaming gigabytes
        _require_columns(folder / SPLIT_FILES[split], SPLIT_COLUMNS)
    model_names = _read_model_order(folder / MODEL_ORDER_FILE)
    question_position = _read_question_order(folder / QUESTION_ORDER_FILE)
    n_models = len(model_names)

    text: dict[int, str] = {}  # prompt_id -> prompt text of its last row
    category: dict[int, str] = {}  # prompt_id -> category of its last row
    split_of: dict[int, int] = {}  # prompt_id -> index into SPLITS
    several_categories: set[int] = set()
    several_texts: set[int] = set()
    rows: dict[str, _SplitRows] = {}
    rows_read: dict[str, int] = {}

    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(desc="EmbedLLM rows", unit="row", unit_scale=True)
    for s, split in enumerate(SPLITS):
        path = folder / SPLIT_FILES[split]
        earlier = np.fromiter(split_of.keys(), dtype=np.int64, count=len(split_of))  # ids of earlier splits
        pids, models, labels = [], [], []
        seen = 0
        for chunk in _chunks(path, chunk_rows):
            first_row = seen + 1
            pid = _integers(chunk["prompt_id"], path=path, column="prompt_id", first_row=first_row)
            mid = _integers(chunk["model_id"], path=path, column="model_id", first_row=first_row)
            unknown = np.flatnonzero((mid < 0) | (mid >= n_models))
            if len(unknown):
                i = int(unknown[0])
                raise EvaluationDataError(
                    f"model_id {mid[i]} is not in {MODEL_ORDER_FILE} (which lists 0..{n_models - 1})",
                    file=str(path), row=first_row + i, column="model_id",
                    fix=f"add the model to {MODEL_ORDER_FILE} or drop its rows",
                )
            label = chunk["label"].str.strip()
            bad = np.flatnonzero(~label.isin(("0", "1", "0.0", "1.0")).to_numpy())
            if len(bad):
                i = int(bad[0])
                raise EvaluationDataError(
                    f"label {chunk['label'].iloc[i]!r} is not 0 or 1", file=str(path), row=first_row + i,
                    column="label", fix="EmbedLLM labels are correctness, 1 (correct) or 0 (wrong)",
                )
            # a prompt_id belongs to one split: check against the splits read before this one
            other = np.isin(pid, earlier)
            if other.any():
                i = int(np.flatnonzero(other)[0])
                raise EvaluationDataError(
                    f"prompt_id {pid[i]} is also in {SPLIT_FILES[SPLITS[split_of[int(pid[i])]]]}; "
                    "the splits must be disjoint by query",
                    file=str(path), row=first_row + i, column="prompt_id",
                    fix="keep each prompt_id in exactly one of train.csv, val.csv, test.csv",
                )
            # per-query text and category: keep the last row's, note variants (small: ~36 k queries)
            meta = pd.DataFrame({"pid": pid, "prompt": chunk["prompt"].to_numpy(), "cat": chunk["category"].to_numpy()})
            for column, store, several in (("cat", category, several_categories), ("prompt", text, several_texts)):
                pairs = meta.drop_duplicates(["pid", column], keep="last")
                several.update(pairs.loc[pairs["pid"].duplicated(keep=False), "pid"].tolist())
                for p, value in zip(pairs["pid"].tolist(), pairs[column].tolist()):
                    old = store.get(p)
                    if old is not None and old != value:
                        several.add(p)
                    store[p] = value
            del meta, chunk  # drop this chunk's text before reading the next
            for p in np.unique(pid).tolist():
                split_of[p] = s
            pids.append(pid)
            models.append(mid.astype(np.int16))
            labels.append((label.to_numpy() != "0") & (label.to_numpy() != "0.0"))
            seen += len(pid)
            if bar is not None:
                bar.update(len(pid))
        rows_read[split] = seen
        rows[split] = _SplitRows(
            prompt_id=np.concatenate(pids) if pids else np.zeros(0, np.int64),
            model=np.concatenate(models) if models else np.zeros(0, np.int16),
            label=np.concatenate(labels).astype(np.int8) if labels else np.zeros(0, np.int8),
        )
    if bar is not None:
        bar.close()

    # last occurrence wins per (prompt_id, model_id); splits are disjoint by query so dedup per split
    duplicate_rows: dict[str, int] = {}
    kept = []
    for s, split in enumerate(SPLITS):
        r = rows.pop(split)
        key = pd.DataFrame({"p": r.prompt_id, "m": r.model})
        keep = ~key.duplicated(keep="last").to_numpy()
        duplicate_rows[split] = int((~keep).sum())
        kept.append((r.prompt_id[keep], r.model[keep], r.label[keep], np.full(int(keep.sum()), s, np.int8)))
    pid = np.concatenate([k[0] for k in kept])  # (N,)
    mid = np.concatenate([k[1] for k in kept])  # (N,)
    label = np.concatenate([k[2] for k in kept])  # (N,)
    split_code = np.concatenate([k[3] for k in kept])  # (N,)
    del kept

    # queries in question_order.csv order, then any it lacks by prompt_id
    by_id = np.unique(pid)  # (Q,) sorted prompt_ids
    missing = np.array([q not in question_position for q in by_id.tolist()], dtype=bool)
    position = np.array(
        [question_position.get(q, len(question_position) + i) for i, q in enumerate(by_id.tolist())],
        dtype=np.int64,
    )
    out_order = np.argsort(position, kind="stable")
    queries = by_id[out_order]  # (Q,) prompt_ids in output order
    to_output = np.empty(len(by_id), np.int64)
    to_output[out_order] = np.arange(len(by_id))
    q_code = to_output[np.searchsorted(by_id, pid)]  # (N,) output index of each row's query
    order = np.lexsort((mid, q_code))  # by query, then model_id
    pid, mid, label, split_code, q_code = pid[order], mid[order], label[order], split_code[order], q_code[order]

    q_text = np.array([text[q] for q in queries.tolist()], dtype=object)  # (Q,)
    q_category = np.array([category[q] for q in queries.tolist()], dtype=object)  # (Q,)
    q_benchmark = np.array([merge_benchmark(c) for c in q_category], dtype=object)  # (Q,)

    def per_query(values: np.ndarray) -> pd.Categorical:
        uniques, inverse = np.unique(values, return_inverse=True)
        return pd.Categorical.from_codes(inverse[q_code], categories=uniques)

    table = pd.DataFrame(
        {
            "model": pd.Categorical.from_codes(mid.astype(np.int64), categories=model_names),
            "query_id": pd.Categorical.from_codes(q_code, categories=[str(q) for q in queries.tolist()]),
            "query": per_query(q_text),
            "benchmark": per_query(q_benchmark),
            "score": label.astype(np.float64),
            "split": pd.Categorical.from_codes(split_code.astype(np.int64), categories=list(SPLITS)),
            "category": per_query(q_category),
        }
    )
    report = EmbedLLMReport(
        folder=str(folder),
        n_models=n_models,
        n_models_with_rows=int(len(np.unique(mid))),
        n_queries=int(len(queries)),
        n_rows=int(len(table)),
        rows_read=sum(rows_read.values()),
        duplicates_dropped=sum(duplicate_rows.values()),
        rows_read_per_split=rows_read,
        duplicates_dropped_per_split=duplicate_rows,
        queries_per_split={split: int(sum(1 for v in split_of.values() if v == s)) for s, split in enumerate(SPLITS)},
        n_queries_with_several_categories=len(several_categories),
        n_queries_with_several_texts=len(several_texts),
        n_queries_not_in_question_order=int(missing.sum()),
        n_question_order_without_rows=len(set(question_position) - set(queries.tolist())),
    )
    return table, report


def is_embedllm_folder(path: Path | str) -> bool:
    """True when path is a folder holding EmbedLLM's five files with the expected headers (reads 5 lines)."""
    path = Path(path)
    if not path.is_dir():
        return False
    required = {**{name: SPLIT_COLUMNS for name in SPLIT_FILES.values()},
                MODEL_ORDER_FILE: MODEL_ORDER_COLUMNS, QUESTION_ORDER_FILE: QUESTION_ORDER_COLUMNS}
    for name, columns in required.items():
        file = path / name
        try:
            if not file.is_file() or not set(columns) <= set(_read_header(file)):
                return False
        except (OSError, UnicodeDecodeError, csv.Error):
            return False
    return True


# ----------------------------------------------------------------------------------------------------------
# writing

_INTEGER = re.compile(r"^(0|[1-9][0-9]*)$")


def write_embedllm(
    table: pd.DataFrame,
    folder: Path | str,
    *,
    split: str | Mapping[str, str] | pd.Series | np.ndarray | None = None,
) -> None:
    """Write a long evaluation table as an EmbedLLM folder (the five files read_embedllm reads).

    split: None -> the table's `split` column; a str -> every query in that split; a Series or array
    of len(table) -> one split per row (a Series aligned on the table's index); a mapping query_id -> split. Scores must be 0 or 1 (EmbedLLM labels are binary). Models get model_id 0..M-1 in
    the order of the column's categories (Categorical) or of first appearance. query_ids that are all
    distinct non-negative integers ("0", "17", ...) become their prompt_id, so a round trip keeps them;
    otherwise queries are numbered 0..Q-1 in order of first appearance. category = the table's `category`
    column if present, else its benchmark. Rows are written in table order; a repeated (model, query_id)
    is written as repeated rows, as EmbedLLM has them (read_embedllm keeps the last). All three split files
    are written, header-only when empty.
    """
    folder = Path(folder)
    source = "the table passed to write_embedllm"
    for column in ("model", "query_id", "query", "benchmark", "score"):
        if column not in table.columns:
            raise EvaluationDataError("required column is missing", file=source, column=column,
                                      fix="pass a long evaluation table (model, query_id, query, benchmark, score)")
    query_id = table["query_id"].astype(str).to_numpy()
    if split is None:
        if "split" not in table.columns:
            raise EvaluationDataError("no split given and the table has no `split` column", file=source,
                                      column="split", fix="pass split='train' or a mapping query_id -> split")
        splits = table["split"].astype(str).to_numpy()
    elif isinstance(split, str):
        splits = np.full(len(table), split, dtype=object)
    elif isinstance(split, (pd.Series, np.ndarray, list)):
        if len(split) != len(table):
            raise EvaluationDataError(f"split has {len(split)} values for {len(table)} rows", file=source,
                                      column="split", fix="pass one split per row, or a mapping query_id -> split")
        if isinstance(split, pd.Series) and split.index.equals(table.index):
            split = split.reindex(table.index)
        splits = np.asarray(split, dtype=object).astype(str)
    else:
        splits = np.array([split.get(q, "") for q in query_id], dtype=object)
    bad = np.flatnonzero(~np.isin(splits, SPLITS))
    if len(bad):
        i = int(bad[0])
        raise EvaluationDataError(f"split {splits[i]!r} is not one of {', '.join(SPLITS)}", file=source,
                                  row=i + 1, column="split", fix="give every query train, val or test")
    score = table["score"].to_numpy(dtype=np.float64)
    bad = np.flatnonzero(~np.isin(score, (0.0, 1.0)))
    if len(bad):
        i = int(bad[0])
        raise EvaluationDataError(f"score {score[i]!r} is not 0 or 1", file=source, row=i + 1, column="score",
                                  fix="EmbedLLM's format holds binary correctness; threshold the scores first")
    per_query = pd.DataFrame({"q": query_id, "s": splits}).drop_duplicates()
    dup = per_query["q"].duplicated()
    if dup.any():
        q = per_query.loc[dup, "q"].iloc[0]
        raise EvaluationDataError(f"query_id {q!r} is in more than one split", file=source, column="split",
                                  fix="EmbedLLM splits by query: give each query one split")
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
    pd.DataFrame({"model_id": range(len(models)), "model_name": models}).to_csv(
        folder / MODEL_ORDER_FILE, index=False)
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


# ----------------------------------------------------------------------------------------------------------
# downloading


class EmbedLLMDownloadError(ConnectionError):
    """The Hub could not be reached (offline mode, no network, DNS failure); says how to get the files by hand."""


def _manual_fix(dest: Path, revision: str) -> str:
    return (
        f"download {', '.join(EMBEDLLM_FILES)} from {embedllm_url(revision)} (on each file's page, the "
        f"'download' link) and put them in {dest}, then read it with read_embedllm({str(dest)!r}); or rerun "
        "download_embedllm where huggingface.co is reachable (unset HF_HUB_OFFLINE)"
    )


def _offline() -> bool:
    flags = (os.environ.get("HF_HUB_OFFLINE"), os.environ.get("TRANSFORMERS_OFFLINE"))
    return any(str(v).strip().upper() in {"1", "ON", "YES", "TRUE"} for v in flags if v)


def _reachable(url: str, timeout_s: float) -> str | None:
    """None when a TCP connection to url's host (or the https proxy) opens within timeout_s, else why not.

    Runs in a daemon thread so that a slow DNS resolver cannot stall the caller past the timeout.
    """
    proxy = os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy")
    target = urlparse(proxy if proxy and url.startswith("https") else url)
    host = target.hostname or ""
    port = target.port or (443 if target.scheme == "https" else 80)
    result: list[str | None] = []

    def probe() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout_s).close()
            result.append(None)
        except OSError as err:
            result.append(f"{type(err).__name__}: {err}")

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout_s)
    if not result:
        return f"no answer from {host}:{port} within {timeout_s:g} s"
    return None if result[0] is None else f"cannot connect to {host}:{port} ({result[0]})"


def download_embedllm(
    dest: Path | str, *, revision: str = EMBEDLLM_REVISION, timeout_s: float = 30
) -> Path:
    """Download EmbedLLM's five CSV files (~3.3 GB) at a pinned revision into dest; return dest.

    Uses huggingface_hub.hf_hub_download(repo_type="dataset", revision=revision, local_dir=dest) for each
    file, so interrupted downloads resume. A dest that already holds the five files is returned without
    touching the network. Offline (HF_HUB_OFFLINE=1), with no route to the endpoint (HF_ENDPOINT or
    huggingface.co) or on DNS failure it raises EmbedLLMDownloadError within about timeout_s (the
    reachability probe waits at most min(timeout_s, 10) s), saying where to get the files by hand and where
    to put them. The large .pth tensors of the dataset are not fetched; LOCUS encodes queries itself.
    """
    from huggingface_hub import constants, hf_hub_download

    dest = Path(dest)
    if is_embedllm_folder(dest):
        return dest
    fix = _manual_fix(dest, revision)
    if _offline():
        raise EmbedLLMDownloadError(f"cannot download EmbedLLM: HF_HUB_OFFLINE is set. How to fix: {fix}")
    endpoint = (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")  # env read now, not at import
    why = _reachable(endpoint, min(timeout_s, 10.0))
    if why is not None:
        raise EmbedLLMDownloadError(f"cannot download EmbedLLM from {endpoint}: {why}. How to fix: {fix}")

    import httpx
    from huggingface_hub.errors import HfHubHTTPError

    dest.mkdir(parents=True, exist_ok=True)
    for name in EMBEDLLM_FILES:
        try:
            hf_hub_download(
                EMBEDLLM_REPO_ID, name, repo_type="dataset", revision=revision, local_dir=dest,
                endpoint=endpoint, etag_timeout=timeout_s,
            )
        except (OSError, HfHubHTTPError, httpx.HTTPError) as err:
            raise EmbedLLMDownloadError(
                f"downloading {name} of {EMBEDLLM_REPO_ID}@{revision} from {endpoint} failed "
                f"({type(err).__name__}: {err}). How to fix: {fix}"
            ) from err
    return dest

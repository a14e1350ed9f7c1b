"""EmbedLLM's correctness matrix: its folder format and reader (Hugging Face dataset RZ412/EmbedLLM).

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
data/EMBEDLLM.md. The files and their checks: embedllm_files; writing: embedllm_writer; downloading:
embedllm_download.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from locus_model.data.contract import SPLITS, benchmark_group
from locus_model.data.embedllm_files import (
    DEFAULT_CHUNK_ROWS,
    MODEL_ORDER_FILE,
    QUESTION_ORDER_FILE,
    SPLIT_COLUMNS,
    SPLIT_FILES,
    QueryMeta,
    SplitRows,
    fix_missing_file,
    read_model_order,
    read_question_order,
    read_split,
    require_columns,
)
from locus_model.data.errors import EvaluationDataError


def merge_benchmark(category: str) -> str:
    """Benchmark of an EmbedLLM category: mmlu_* -> "mmlu", gpqa_* -> "gpqa", others lower-cased as they are."""
    return benchmark_group(str(category).strip().lower())


@dataclass(frozen=True)
class EmbedLLMSummary:
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


def _last_rows_win(rows: dict[str, SplitRows]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, int]]:
    """(prompt_id, model, label, split code) per kept row (N,), and the duplicates dropped per split: the last
    occurrence wins per (prompt_id, model_id); the splits are disjoint by query, so per split."""
    duplicate_rows: dict[str, int] = {}
    kept = []
    for s, split in enumerate(SPLITS):
        r = rows.pop(split)
        key = pd.DataFrame({"p": r.prompt_id, "m": r.model})
        keep = ~key.duplicated(keep="last").to_numpy()
        duplicate_rows[split] = int((~keep).sum())
        kept.append((r.prompt_id[keep], r.model[keep], r.label[keep], np.full(int(keep.sum()), s, np.int8)))
    prompt_id, model, label, split_code = (np.concatenate([k[c] for k in kept]) for c in range(4))
    return prompt_id, model, label, split_code, duplicate_rows


def _query_order(pid: np.ndarray, question_position: dict[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the queries' prompt_ids in output order (Q,), each row's output query index (N,), which queries
    question_order.csv lacks (Q,) by prompt_id): question_order.csv's order, then the rest by prompt_id."""
    by_id = np.unique(pid)  # (Q,) sorted prompt_ids
    missing = np.array([q not in question_position for q in by_id.tolist()], dtype=bool)
    position = np.array(
        [question_position.get(q, len(question_position) + i) for i, q in enumerate(by_id.tolist())],
        dtype=np.int64,
    )
    out_order = np.argsort(position, kind="stable")
    to_output = np.empty(len(by_id), np.int64)
    to_output[out_order] = np.arange(len(by_id))
    return by_id[out_order], to_output[np.searchsorted(by_id, pid)], missing


def read_embedllm(
    folder: Path | str, *, progress: bool = False, chunk_rows: int = DEFAULT_CHUNK_ROWS
) -> tuple[pd.DataFrame, EmbedLLMSummary]:
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
        raise EvaluationDataError("the EmbedLLM folder does not exist", file=str(folder), fix=fix_missing_file(folder))
    for split in SPLITS:  # fail on a missing file before streaming gigabytes
        require_columns(folder / SPLIT_FILES[split], SPLIT_COLUMNS)
    model_names = read_model_order(folder / MODEL_ORDER_FILE)
    question_position = read_question_order(folder / QUESTION_ORDER_FILE)
    n_models = len(model_names)

    meta = QueryMeta()
    split_of: dict[int, int] = {}  # prompt_id -> index into SPLITS
    rows: dict[str, SplitRows] = {}
    rows_read: dict[str, int] = {}
    bar = None
    if progress:
        bar = tqdm(desc="EmbedLLM rows", unit="row", unit_scale=True)
    for s, split in enumerate(SPLITS):
        rows[split], rows_read[split] = read_split(
            folder / SPLIT_FILES[split],
            s,
            chunk_rows=chunk_rows,
            n_models=n_models,
            split_of=split_of,
            meta=meta,
            bar=bar,
        )
    if bar is not None:
        bar.close()

    pid, mid, label, split_code, duplicate_rows = _last_rows_win(rows)  # (N,) each
    queries, q_code, missing = _query_order(pid, question_position)
    order = np.lexsort((mid, q_code))  # by query, then model_id
    pid, mid, label, split_code, q_code = pid[order], mid[order], label[order], split_code[order], q_code[order]

    q_text = np.array([meta.text[q] for q in queries.tolist()], dtype=object)  # (Q,)
    q_category = np.array([meta.category[q] for q in queries.tolist()], dtype=object)  # (Q,)
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
    report = EmbedLLMSummary(
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
        n_queries_with_several_categories=len(meta.several_categories),
        n_queries_with_several_texts=len(meta.several_texts),
        n_queries_not_in_question_order=int(missing.sum()),
        n_question_order_without_rows=len(set(question_position) - set(queries.tolist())),
    )
    return table, report

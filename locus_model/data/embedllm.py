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
data/EMBEDLLM.md. Writing: embedllm_writer; downloading: embedllm_download.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

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
        f"locus_model.data.embedllm_download.download_embedllm({str(folder)!r}) or download them by hand from "
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


class _QueryMeta:
    """Per query: the text and category of its last row, and the queries with several (small: ~36 k queries)."""

    def __init__(self) -> None:
        self.text: dict[int, str] = {}  # prompt_id -> prompt text of its last row
        self.category: dict[int, str] = {}  # prompt_id -> category of its last row
        self.several_texts: set[int] = set()
        self.several_categories: set[int] = set()

    def update(self, pid: np.ndarray, prompts: np.ndarray, categories: np.ndarray) -> None:
        meta = pd.DataFrame({"pid": pid, "prompt": prompts, "cat": categories})
        for column, store, several in (("cat", self.category, self.several_categories),
                                       ("prompt", self.text, self.several_texts)):
            pairs = meta.drop_duplicates(["pid", column], keep="last")
            several.update(pairs.loc[pairs["pid"].duplicated(keep=False), "pid"].tolist())
            for p, value in zip(pairs["pid"].tolist(), pairs[column].tolist()):
                old = store.get(p)
                if old is not None and old != value:
                    several.add(p)
                store[p] = value


def _check_chunk(path: Path, first_row: int, pid: np.ndarray, mid: np.ndarray, label: pd.Series, raw_label: pd.Series,
                 n_models: int, earlier: np.ndarray, split_of: dict[int, int]) -> None:
    """A chunk's model ids exist, its labels are 0/1 and its prompt ids are in no split read before."""
    unknown = np.flatnonzero((mid < 0) | (mid >= n_models))
    if len(unknown):
        i = int(unknown[0])
        raise EvaluationDataError(
            f"model_id {mid[i]} is not in {MODEL_ORDER_FILE} (which lists 0..{n_models - 1})",
            file=str(path), row=first_row + i, column="model_id",
            fix=f"add the model to {MODEL_ORDER_FILE} or drop its rows",
        )
    bad = np.flatnonzero(~label.isin(("0", "1", "0.0", "1.0")).to_numpy())
    if len(bad):
        i = int(bad[0])
        raise EvaluationDataError(
            f"label {raw_label.iloc[i]!r} is not 0 or 1", file=str(path), row=first_row + i,
            column="label", fix="EmbedLLM labels are correctness, 1 (correct) or 0 (wrong)",
        )
    other = np.isin(pid, earlier)  # a prompt_id belongs to one split
    if other.any():
        i = int(np.flatnonzero(other)[0])
        raise EvaluationDataError(
            f"prompt_id {pid[i]} is also in {SPLIT_FILES[SPLITS[split_of[int(pid[i])]]]}; "
            "the splits must be disjoint by query",
            file=str(path), row=first_row + i, column="prompt_id",
            fix="keep each prompt_id in exactly one of train.csv, val.csv, test.csv",
        )


def _read_split(path: Path, s: int, *, chunk_rows: int, n_models: int, split_of: dict[int, int], meta: _QueryMeta,
                bar) -> tuple[_SplitRows, int]:  # noqa: ANN001 (bar: a tqdm bar or None)
    """One split file, streamed: its rows as arrays and the number of rows read; split_of and meta are updated."""
    earlier = np.fromiter(split_of.keys(), dtype=np.int64, count=len(split_of))  # ids of earlier splits
    pids, models, labels = [], [], []
    seen = 0
    for chunk in _chunks(path, chunk_rows):
        first_row = seen + 1
        pid = _integers(chunk["prompt_id"], path=path, column="prompt_id", first_row=first_row)
        mid = _integers(chunk["model_id"], path=path, column="model_id", first_row=first_row)
        label = chunk["label"].str.strip()
        _check_chunk(path, first_row, pid, mid, label, chunk["label"], n_models, earlier, split_of)
        meta.update(pid, chunk["prompt"].to_numpy(), chunk["category"].to_numpy())
        del chunk  # drop this chunk's text before reading the next
        for p in np.unique(pid).tolist():
            split_of[p] = s
        pids.append(pid)
        models.append(mid.astype(np.int16))
        labels.append((label.to_numpy() != "0") & (label.to_numpy() != "0.0"))
        seen += len(pid)
        if bar is not None:
            bar.update(len(pid))
    rows = _SplitRows(
        prompt_id=np.concatenate(pids) if pids else np.zeros(0, np.int64),
        model=np.concatenate(models) if models else np.zeros(0, np.int16),
        label=np.concatenate(labels).astype(np.int8) if labels else np.zeros(0, np.int8),
    )
    return rows, seen


def _last_rows_win(rows: dict[str, _SplitRows]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, int]]:
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
    return (*(np.concatenate([k[c] for k in kept]) for c in range(4)), duplicate_rows)


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

    meta = _QueryMeta()
    split_of: dict[int, int] = {}  # prompt_id -> index into SPLITS
    rows: dict[str, _SplitRows] = {}
    rows_read: dict[str, int] = {}
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(desc="EmbedLLM rows", unit="row", unit_scale=True)
    for s, split in enumerate(SPLITS):
        rows[split], rows_read[split] = _read_split(folder / SPLIT_FILES[split], s, chunk_rows=chunk_rows,
                                                    n_models=n_models, split_of=split_of, meta=meta, bar=bar)
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
        n_queries_with_several_categories=len(meta.several_categories),
        n_queries_with_several_texts=len(meta.several_texts),
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

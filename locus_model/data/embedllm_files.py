"""EmbedLLM's five files (Hugging Face dataset RZ412/EmbedLLM at a pinned revision): their names and columns, and
the reading of each one with its checks -- model_order.csv, question_order.csv, and the split files streamed in
chunks (model ids that exist, 0/1 labels, splits disjoint by query). locus_model.data.embedllm joins them into
the long table; the format is described there and in data/EMBEDLLM.md."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from locus_model.data.contract import SPLITS
from locus_model.data.errors import EvaluationDataError

EMBEDLLM_REPO_ID = "RZ412/EmbedLLM"
EMBEDLLM_REVISION = "70dee14af6101604ce1130cfcf2849daba4b6077"  # pinned; the authors' code release's numbers use it
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


def fix_missing_file(folder: Path) -> str:
    return (
        f"put EmbedLLM's {', '.join(EMBEDLLM_FILES)} into {folder}: run "
        f"locus_model.data.embedllm_download.download_embedllm({str(folder)!r}) or download them by hand from "
        f"{embedllm_url()}"
    )


def _read_header(path: Path) -> list[str]:
    with open(path, newline="", encoding="utf-8") as f:
        return next(csv.reader(f), [])


def require_columns(path: Path, required: tuple[str, ...]) -> list[str]:
    if not path.is_file():
        raise EvaluationDataError("the file is missing", file=str(path), fix=fix_missing_file(path.parent))
    header = _read_header(path)
    if not header:
        raise EvaluationDataError(
            "the file is empty (no header line)",
            file=str(path),
            fix=f"re-download it; its header must name {', '.join(required)}",
        )
    for column in required:
        if column not in header:
            raise EvaluationDataError(
                f"required column is missing (header: {', '.join(header)})",
                file=str(path),
                column=column,
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
            f"{values.iloc[i]!r} is not an integer id",
            file=str(path),
            row=first_row + i,
            column=column,
            fix="EmbedLLM ids are non-negative integers; repair or re-download the file",
        )
    return numbers.to_numpy(dtype=np.int64)


def read_model_order(path: Path) -> list[str]:
    require_columns(path, MODEL_ORDER_COLUMNS)
    df = pd.read_csv(path, usecols=list(MODEL_ORDER_COLUMNS), dtype=str, keep_default_na=False)
    ids = _integers(df["model_id"], path=path, column="model_id", first_row=1)
    names = df["model_name"].str.strip()
    empty = np.flatnonzero((names == "").to_numpy())
    if len(empty):
        raise EvaluationDataError(
            "model_name is empty",
            file=str(path),
            row=int(empty[0]) + 1,
            column="model_name",
            fix="give every model_id its model name",
        )
    for column, values in (("model_id", pd.Series(ids)), ("model_name", names)):
        dup = np.flatnonzero(values.duplicated().to_numpy())
        if len(dup):
            raise EvaluationDataError(
                f"{values.iloc[dup[0]]!r} is listed twice",
                file=str(path),
                row=int(dup[0]) + 1,
                column=column,
                fix=f"keep one line per model; {column} must be unique",
            )
    if ids.min() < 0 or ids.max() >= len(ids) or len(set(ids.tolist())) != len(ids):
        raise EvaluationDataError(
            f"model_id must run over 0..{len(ids) - 1} (found {ids.min()}..{ids.max()})",
            file=str(path),
            column="model_id",
            fix="number the models 0..M-1 as EmbedLLM does",
        )
    order = np.argsort(ids)
    return names.to_numpy()[order].tolist()  # index = model_id


def read_question_order(path: Path) -> dict[int, int]:
    """prompt_id -> position in question_order.csv (the order queries come out in)."""
    require_columns(path, QUESTION_ORDER_COLUMNS)
    df = pd.read_csv(path, usecols=["prompt_id"], dtype=str, keep_default_na=False)
    ids = _integers(df["prompt_id"], path=path, column="prompt_id", first_row=1)
    dup = np.flatnonzero(pd.Series(ids).duplicated().to_numpy())
    if len(dup):
        raise EvaluationDataError(
            f"prompt_id {ids[dup[0]]} is listed twice",
            file=str(path),
            row=int(dup[0]) + 1,
            column="prompt_id",
            fix="keep one line per prompt_id",
        )
    return {int(pid): i for i, pid in enumerate(ids)}


def _chunks(path: Path, chunk_rows: int) -> Iterator[pd.DataFrame]:
    try:
        reader = pd.read_csv(path, usecols=list(SPLIT_COLUMNS), dtype=str, keep_default_na=False, chunksize=chunk_rows)
        with reader:
            yield from reader
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as err:
        raise EvaluationDataError(
            f"the CSV cannot be parsed ({err})",
            file=str(path),
            fix="the file is truncated or corrupt; re-download it",
        ) from err


@dataclass
class SplitRows:
    prompt_id: np.ndarray  # (n,) int64
    model: np.ndarray  # (n,) int16, index into model_order
    label: np.ndarray  # (n,) int8


class QueryMeta:
    """Per query: the text and category of its last row, and the queries with several (small: ~36 k queries)."""

    def __init__(self) -> None:
        self.text: dict[int, str] = {}  # prompt_id -> prompt text of its last row
        self.category: dict[int, str] = {}  # prompt_id -> category of its last row
        self.several_texts: set[int] = set()
        self.several_categories: set[int] = set()

    def update(self, pid: np.ndarray, prompts: np.ndarray, categories: np.ndarray) -> None:
        meta = pd.DataFrame({"pid": pid, "prompt": prompts, "cat": categories})
        for column, store, several in (
            ("cat", self.category, self.several_categories),
            ("prompt", self.text, self.several_texts),
        ):
            pairs = meta.drop_duplicates(["pid", column], keep="last")
            several.update(pairs.loc[pairs["pid"].duplicated(keep=False), "pid"].tolist())
            for p, value in zip(pairs["pid"].tolist(), pairs[column].tolist()):
                old = store.get(p)
                if old is not None and old != value:
                    several.add(p)
                store[p] = value


def _check_chunk(
    path: Path,
    first_row: int,
    pid: np.ndarray,
    mid: np.ndarray,
    label: pd.Series,
    raw_label: pd.Series,
    n_models: int,
    earlier: np.ndarray,
    split_of: dict[int, int],
) -> None:
    """A chunk's model ids exist, its labels are 0/1 and its prompt ids are in no split read before."""
    unknown = np.flatnonzero((mid < 0) | (mid >= n_models))
    if len(unknown):
        i = int(unknown[0])
        raise EvaluationDataError(
            f"model_id {mid[i]} is not in {MODEL_ORDER_FILE} (which lists 0..{n_models - 1})",
            file=str(path),
            row=first_row + i,
            column="model_id",
            fix=f"add the model to {MODEL_ORDER_FILE} or drop its rows",
        )
    bad = np.flatnonzero(~label.isin(("0", "1", "0.0", "1.0")).to_numpy())
    if len(bad):
        i = int(bad[0])
        raise EvaluationDataError(
            f"label {raw_label.iloc[i]!r} is not 0 or 1",
            file=str(path),
            row=first_row + i,
            column="label",
            fix="EmbedLLM labels are correctness, 1 (correct) or 0 (wrong)",
        )
    other = np.isin(pid, earlier)  # a prompt_id belongs to one split
    if other.any():
        i = int(np.flatnonzero(other)[0])
        raise EvaluationDataError(
            f"prompt_id {pid[i]} is also in {SPLIT_FILES[SPLITS[split_of[int(pid[i])]]]}; "
            "the splits must be disjoint by query",
            file=str(path),
            row=first_row + i,
            column="prompt_id",
            fix="keep each prompt_id in exactly one of train.csv, val.csv, test.csv",
        )


def read_split(
    path: Path, s: int, *, chunk_rows: int, n_models: int, split_of: dict[int, int], meta: QueryMeta, bar
) -> tuple[SplitRows, int]:  # noqa: ANN001 (bar: a tqdm bar or None)
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
    rows = SplitRows(
        prompt_id=np.concatenate(pids) if pids else np.zeros(0, np.int64),
        model=np.concatenate(models) if models else np.zeros(0, np.int16),
        label=np.concatenate(labels).astype(np.int8) if labels else np.zeros(0, np.int8),
    )
    return rows, seen


def is_embedllm_folder(path: Path | str) -> bool:
    """True when path is a folder holding EmbedLLM's five files with the expected headers (reads 5 lines)."""
    path = Path(path)
    if not path.is_dir():
        return False
    required = {
        **{name: SPLIT_COLUMNS for name in SPLIT_FILES.values()},
        MODEL_ORDER_FILE: MODEL_ORDER_COLUMNS,
        QUESTION_ORDER_FILE: QUESTION_ORDER_COLUMNS,
    }
    for name, columns in required.items():
        file = path / name
        try:
            if not file.is_file() or not set(columns) <= set(_read_header(file)):
                return False
        except (OSError, UnicodeDecodeError, csv.Error):
            return False
    return True

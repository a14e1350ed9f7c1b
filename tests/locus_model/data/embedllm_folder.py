"""A small EmbedLLM folder for the tests of data/embedllm*.py: 3 models x 12 queries, train/val/test by query,
some cells missing, prompt texts with quotes and newlines."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from locus_model.data.embedllm import merge_benchmark
from locus_model.data.embedllm_writer import write_embedllm

MODELS = ["org/alpha-7b", "org/beta-13b", "gamma"]
CATEGORIES = ["mmlu_anatomy", "mmlu_virology", "gpqa_main", "gsm8k", "truthfulqa_mc1"]


def small_table(n_queries: int = 12, seed: int = 0) -> pd.DataFrame:
    """3 models x n_queries, prompt_ids 0..n-1, train/val/test by query, some cells missing."""
    rng = np.random.default_rng(seed)
    rows = []
    for q in range(n_queries):
        category = CATEGORIES[q % len(CATEGORIES)]
        split = "train" if q < n_queries - 4 else ("val" if q < n_queries - 2 else "test")
        for m, model in enumerate(MODELS):
            if (q + m) % 7 == 6:
                continue  # models need not share queries
            rows.append(
                {
                    "model": model,
                    "query_id": str(q),
                    "query": f'Question {q}, with "quotes",\nand a newline?',
                    "benchmark": merge_benchmark(category),
                    "score": float(rng.integers(0, 2)),
                    "split": split,
                    "category": category,
                }
            )
    return pd.DataFrame(rows)


def canonical(table: pd.DataFrame) -> pd.DataFrame:
    columns = ["model", "query_id", "query", "benchmark", "score", "split", "category"]
    out = table[columns].astype({c: str for c in columns if c != "score"})
    return out.sort_values(["query_id", "model"]).reset_index(drop=True)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    write_embedllm(small_table(), tmp_path / "embedllm")
    return tmp_path / "embedllm"

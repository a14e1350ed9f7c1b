"""Sentence-encoder throughput on this machine: sentences/s for each encoder, cold (no cache) and cached.

    .venv/bin/python bench/bench_encoding.py [--n 1024] [--threads 2]

Texts are demo-pool queries (synthetic, ~20-60 words). Model loading is timed apart from encoding.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from locus_model.data.demo import make_demo_tables
from locus_model.data.encoding import encode_queries_with_report, load_sentence_encoder


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1024, help="sentences per encoder")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    table, _, _ = make_demo_tables("full", 0)
    texts = table.drop_duplicates("query_id")["query"].tolist()[: args.n]
    words = sum(len(t.split()) for t in texts) / len(texts)
    print(f"{len(texts)} demo queries (mean {words:.0f} words), batch {args.batch_size}, {args.threads} threads")
    print(f"{'encoder':<20} {'load s':>7} {'cold sent/s':>12} {'cached sent/s':>14}")
    for encoder in ("all-MiniLM-L6-v2", "all-mpnet-base-v2"):
        t0 = time.perf_counter()
        load_sentence_encoder(encoder, "cpu")
        load_s = time.perf_counter() - t0
        with tempfile.TemporaryDirectory() as cache:
            _, cold = encode_queries_with_report(texts, encoder=encoder, cache_dir=Path(cache), batch_size=args.batch_size, progress=False)
            t0 = time.perf_counter()
            encode_queries_with_report(texts, encoder=encoder, cache_dir=Path(cache), progress=False)
            cached_s = time.perf_counter() - t0
        print(f"{encoder:<20} {load_s:7.1f} {cold.encoded / cold.seconds:12.1f} {len(texts) / cached_s:14.0f}")


if __name__ == "__main__":
    main()

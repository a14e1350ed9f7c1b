"""A case file run as a new user runs it: `locus evaluate --models-file` on the case's models, questions and prices.

    python -m bench.bench_case ../shared/data/mmlu-pro/case-8x500.json [--fit-cache DIR] [more locus evaluate options]

A case file (JSON) names ``models``, ``query_ids`` and ``prices`` (rows of a models file: model,
price_input_per_mtok, price_output_per_mtok); its evaluations are read from ``evaluations.parquet`` beside it.
The subset and the models file are written to bench/.cache/<case>/ and `locus evaluate` runs on them with its
defaults (seed 0); its result JSON and run time land there too. With ``--fit-cache`` each fold's fits are kept
(bench.common.cached_fit_and_predict): a second run re-scores the kept LOCUS of each fold with the router as the
code now fits it (seconds, nothing trained), which is how blend variants are compared on the same trained models.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import pandas as pd

from bench.common import CACHE


def case_files(case: Path, out: Path) -> tuple[Path, Path]:
    """Write the case's evaluations (long format, only its models and questions) and its models file to ``out``;
    (evaluations path, models-file path)."""
    spec = json.loads(case.read_text())
    source = case.parent / "evaluations.parquet"
    table = pd.read_parquet(source)
    subset = table[table["model"].isin(spec["models"]) & table["query_id"].isin(spec["query_ids"])]
    missing = sorted(set(spec["models"]) - set(subset["model"]))
    if missing:
        raise SystemExit(f"{case}: models {missing} have no evaluation in {source}")
    out.mkdir(parents=True, exist_ok=True)
    evaluations, models = out / "evaluations.parquet", out / "models.csv"
    subset.to_parquet(evaluations, index=False)
    pd.DataFrame(spec["prices"]).to_csv(models, index=False)
    return evaluations, models


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("case", type=Path)
    p.add_argument("--fit-cache", type=Path, default=None, help="keep and reuse each fold's fits here")
    p.add_argument("--tag", default="", help="fit-cache tag (a baseline's fits are found under their own tag)")
    args, extra = p.parse_known_args(argv)  # the rest: more `locus evaluate` options
    from locus_model.cli import main as locus

    if args.fit_cache is not None:
        from bench.common import cached_fit_and_predict
        from locus_model.evaluation import protocol

        protocol.fit_and_predict = cached_fit_and_predict(args.fit_cache, args.tag)
        if "--jobs" not in extra:  # the cache is this process's: worker processes would fit afresh
            extra = [*extra, "--jobs", "1"]

    out = CACHE / args.case.stem
    evaluations, models = case_files(args.case, out)
    start = time.perf_counter()
    code = locus(
        [
            "evaluate",
            "--evaluations",
            str(evaluations),
            "--models-file",
            str(models),
            "--out",
            str(out / f"results{args.tag}.json"),
            *extra,
        ]
    )
    print(f"locus evaluate on {args.case.name}: {time.perf_counter() - start:.0f} s (exit {code})")
    return code


if __name__ == "__main__":
    sys.exit(main())

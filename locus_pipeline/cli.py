"""The ``locus`` command: the library's commands (locus_model.cli: evaluate, demo-data) and those that read a
LOCUS_HOME through the pipeline's storage (search).

    locus search --target 'synth-gsm8k=0.9,synth-mmlu=0.5' [--k 5] [--home PATH] [--json]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable, Mapping, Sequence

from locus_model.cli import COMMANDS as LIBRARY_COMMANDS
from locus_model.cli import EXIT_OK, _fail, build_parser as _build_parser


def capability_search_in_home(home, target: Mapping[str, float], *, k: int = 5, n_per_benchmark: int = 64, seed: int = 0):
    """Capability-profile search on a LOCUS_HOME's pool, with the checkpoint the pool was embedded with."""
    from locus_model.reports import capability_search_from_tables

    pool = home.read_pool()
    return capability_search_from_tables(
        target, pool=pool, table=home.read_table("evaluation_table"), encodings=home.read_table("query_encodings"),
        split=home.read_table("training_split"), model=home.pool_checkpoint(pool).model,
        onboarded=home.onboarded_evaluations(), k=k, n_per_benchmark=n_per_benchmark, seed=seed)


# ---------------------------------------------------------------------------------------------- search


def add_search(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "search",
        help="capability-profile search: the real models nearest to a target per-benchmark accuracy",
        description=(
            "Synthesize an evaluation set with the target accuracy per benchmark (non-test queries of the pool), "
            "embed it with the pool's checkpoint, and print the nearest models in LOCUS_HOME's pool with their "
            "actual per-benchmark accuracy. Needs a materialized pipeline (make demo)."
        ),
    )
    p.add_argument("--target", required=True,
                   help="comma-separated BENCHMARK=ACCURACY, e.g. 'synth-gsm8k=0.9,synth-mmlu=0.5'")
    p.add_argument("--k", type=int, default=5, help="nearest models to return (default 5)")
    p.add_argument("--n-per-benchmark", type=int, default=64, help="synthetic evaluations per benchmark (default 64)")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic evaluation set")
    p.add_argument("--home", type=Path, default=None, help="LOCUS_HOME to read (default: $LOCUS_HOME or <repo>/data)")
    p.add_argument("--json", action="store_true", help="print JSON (target, realised, neighbours) instead of a table")
    p.set_defaults(run=run_search)


def run_search(args: argparse.Namespace) -> int:
    import json

    from locus_model.reports import parse_target
    from locus_pipeline.storage import LocusHome, StorageError

    try:
        home = LocusHome(root=str(args.home) if args.home else "")
        result = capability_search_in_home(home, parse_target(args.target), k=args.k,
                                           n_per_benchmark=args.n_per_benchmark, seed=args.seed)
    except (ValueError, StorageError) as err:
        return _fail("search", err)
    if args.json:
        print(json.dumps({"target": result.target, "realised": result.realised,
                          "neighbours": json.loads(result.neighbours.to_json(orient="records"))}, indent=2))
    else:
        cols = ["rank", "model", "distance", "profile_mae"] + [b for b in result.target if b in result.neighbours]
        print(result.neighbours[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return EXIT_OK


COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [*LIBRARY_COMMANDS, add_search]


def build_parser() -> argparse.ArgumentParser:
    return _build_parser(COMMANDS)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())

"""The ``locus`` command line: one subcommand per task.

    locus evaluate --evaluations PATH --out results.json [--budget 256] [--folds 5] [--holdout-models 0.2 | NAME,NAME]
                   [--seed 0] [--encoder all-MiniLM-L6-v2] [--epochs N] [--models-file models.csv [--plot f.png]]
    locus evaluate --evaluations PATH --out results.json --stream SCENARIO [--stream-seeds 5] [--plot curve.png]
    locus synthetic-data --out DIR [--size full|small] [--seed 0]

These are the commands that need only the library. The installed ``locus`` command is
locus_pipeline.cli, which adds the ones that read the pipeline's storage (``locus search``).
Adding a subcommand: write ``add_<name>(subparsers)`` that builds its parser and sets ``run=<function>``
(taking the parsed args, returning an exit code), and add it to ``COMMANDS`` under its name. The seams the pipeline's
CLI uses: ``COMMANDS`` (by name), ``build_parser``, ``fail`` (a command's error line and exit status) and
``add_evaluate``'s ``encoding_cache`` (where its cache defaults to).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterable, Sequence

from locus_model.threads import default_jobs, machine

EXIT_OK, EXIT_USAGE = 0, 2


def fail(command: str, err: Exception) -> int:
    """A command's error: ``locus <command>: error: <err>`` on stderr, and the exit status of a usage error."""
    print(f"locus {command}: error: {err}", file=sys.stderr)
    return EXIT_USAGE


# ---------------------------------------------------------------------------------------------- evaluate


def add_evaluate(
    subparsers: argparse._SubParsersAction, *, encoding_cache: Callable[[], Path | None] | None = None
) -> None:
    """``locus evaluate``; ``encoding_cache``: where --encoding-cache defaults to when not given (looked up when the
    command runs; None: the user cache)."""
    p = subparsers.add_parser(
        "evaluate",
        help="accuracy of LOCUS vs baselines (EmbedLLM-MF, IRT, kNN, best single, oracle) on an evaluation table",
        description=(
            "Split the queries into folds, give every model the same random budget of anchor evaluations, train "
            "LOCUS and the baselines on the in-training models, onboard the held-out models from their budget "
            "evaluations only, and score every (test query, model) pair. With a table that has its own split "
            "(an EmbedLLM folder) and no --folds, its train/val/test split is used (the protocol of the authors' "
            "code release)."
        ),
    )
    p.add_argument(
        "--evaluations",
        type=Path,
        default=None,
        help="long-format file (.csv, .csv.gz, .parquet), a folder of them, or an EmbedLLM folder (required but "
        "with --stream-log)",
    )
    p.add_argument("--out", required=True, type=Path, help="where to write the result JSON")
    p.add_argument("--budget", type=int, default=256, help="evaluations (anchor queries) per model (default 256)")
    p.add_argument(
        "--folds",
        type=int,
        default=None,
        help="K-fold over queries (default: the table's own split if it has one, else 5)",
    )
    p.add_argument(
        "--holdout-models",
        default=None,
        help="models never trained on, onboarded from their budget evaluations: a fraction drawn with "
        "--seed (default 0.2 with k-fold, 0 with the table's own split as in the authors' code release), or "
        "model names, comma-separated, held out in every fold (how would the router have treated "
        "model X had it arrived last?)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--encoder",
        default="all-MiniLM-L6-v2",
        help="query encoder: all-MiniLM-L6-v2 (384-d), all-mpnet-base-v2 (768-d, the paper's), hashing-256",
    )
    from locus_model.data.encoders import DEFAULT_RUNTIME, RUNTIMES  # why: the CLI starts without loading torch

    p.add_argument(
        "--encoder-runtime",
        default=None,
        choices=RUNTIMES,
        help=f"how the query encoder runs: onnx-int8, onnx-fp32, or torch (sentence-transformers fp32, the "
        f"exact encoder the others are checked against); default {DEFAULT_RUNTIME} for all-MiniLM-L6-v2, torch for "
        "all-mpnet-base-v2",
    )
    p.add_argument(
        "--encoding-cache",
        type=Path,
        default=None,
        help="folder of query-encoding caches, one subfolder per encoder (default: the user cache; the "
        "pipeline's `locus` uses its home's encodings/ when there is one, so queries it encoded are "
        "not encoded again)",
    )
    p.add_argument("--epochs", type=int, default=None, help="LOCUS max epochs (default: TrainConfig's)")
    p.add_argument("--patience", type=int, default=None, help="LOCUS early-stopping patience in epochs")
    p.add_argument(
        "--methods",
        default="locus,embedllm_mf,irt,knn,per_benchmark,best_single,oracle",
        help="comma-separated subset of locus,embedllm_mf,irt,knn,per_benchmark,best_single,oracle "
        "(per_benchmark: each benchmark's best model on its anchors; it reads the benchmark label)",
    )
    p.add_argument(
        "--guard-margin",
        type=margin_option,
        default=None,
        metavar="P|measured",
        help="LOCUS routes under this guard margin (another model than the one most accurate on its own "
        "anchors wins a query only when its P(correct) is higher by more than P; 0 = the highest P(correct) "
        "wins; measured = where it is better with 95%% probability given P's error measured per query group "
        "on the validation answers; default: the routing policy's, routing.policy.DEFAULT_GUARD)",
    )
    p.add_argument("--device", default="auto", help="LOCUS training device: auto, cpu, cuda (default auto)")
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads of each fit (default 1; recorded in the result: another count changes "
        "float sums, hence the trained models slightly)",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="(fold, method) fits run at once in worker processes (default: as many as the cores not "
        "busy with other work hold, from the load average; 1 = everything in this process)",
    )
    p.add_argument(
        "--models-file",
        type=Path,
        default=None,
        help="CSV (or Parquet) with a model column and any of params_b, price_input_per_mtok / "
        "price_output_per_mtok (USD per million tokens), cost_per_query (USD): the columns of the "
        "pipeline's models file and of locus serve's models config. Adds every method's quality-cost "
        "frontier on the test queries (AIQ, cost at 100%% / 95%% of the best single model's accuracy, "
        "paired 95%% intervals) to the table and the JSON; prices win over params_b (routing.cost_table), "
        "and a model without a cost is left out and counted",
    )
    p.add_argument("--plot", type=Path, default=None, help="with --models-file: draw the frontiers to this PNG")
    p.add_argument(
        "--onboard-sizes",
        type=int,
        nargs="*",
        default=None,
        metavar="N",
        help="also measure capability estimates: held-out models onboarded from N of their "
        "evaluations (no N: 16 32 64 128); adds capability.<method>.<N>.mae/.coverage and "
        "identity.<N>.hit_at_1 to the JSON; trains LOCUS once more per fold (evaluation.capability)",
    )
    p.add_argument(
        "--reference-scores",
        type=Path,
        default=None,
        help="with --onboard-sizes: CSV of model + one column per reference score (e.g. metabench's "
        "leaderboard.csv); adds reference.<method>.<N>.mae",
    )
    p.add_argument(
        "--stream",
        default=None,
        metavar="SCENARIO",
        help="instead of the folds: the replay -- would a router that learns from its graded "
        "traffic pay on this data? SCENARIO: stationary, unlike, newcomer, drift, poisoned, or several "
        "comma-separated; LOCUS is trained once per seed, then the stream's queries arrive one by one "
        "and only the chosen model's outcome is revealed (evaluation.stream); adds stream.<scenario> "
        "to the JSON; --plot draws routing accuracy per 1,000 events per method",
    )
    p.add_argument("--stream-seeds", type=int, default=5, metavar="N", help="with --stream: seeds (default 5)")
    p.add_argument(
        "--stream-events",
        type=int,
        default=None,
        metavar="N",
        help="with --stream: events in the stream (default 4000; the stream pool repeats when shorter)",
    )
    p.add_argument(
        "--stream-feedback",
        type=float,
        default=None,
        metavar="SHARE",
        help="with --stream: share of the events whose outcome is revealed (default 1.0)",
    )
    p.add_argument(
        "--stream-explore",
        type=float,
        default=None,
        metavar="SHARE",
        help="with --stream: the learning router's exploration budget (default LearningConfig's)",
    )
    p.add_argument(
        "--stream-log",
        type=Path,
        default=None,
        metavar="FILE",
        help="instead of --evaluations: replay a log of graded answers in its order (.csv, .csv.gz, .parquet; "
        "the evaluation columns model, query_id, query, benchmark, score and a time; the answers to one "
        "request share its time): LOCUS trained on the answers before --stream-log-start, the methods and "
        "figures of --stream (evaluation.stream_log)",
    )
    p.add_argument(
        "--stream-log-start",
        type=float,
        default=None,
        metavar="TIME",
        help="with --stream-log: where the replay starts, in the log's time (seconds; a date-time column is read "
        "as seconds since the epoch); default: the time of the answer half-way through the log",
    )
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(run=run_evaluate, default_encoding_cache=encoding_cache)


def margin_option(value: str) -> float | str:
    """--guard-margin as given: "measured" or a number (validated by routing.policy.check_margin)."""
    if value.strip().lower() == "measured":
        return "measured"
    try:
        return float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r}: give a number in [0, 1) or 'measured'") from None


def check_evaluate_args(args: argparse.Namespace) -> str | None:
    """What is wrong with the arguments, found before anything heavy is imported (torch takes seconds); None if
    nothing."""
    stream_log = getattr(args, "stream_log", None)
    if stream_log is not None:
        if args.evaluations is not None or getattr(args, "stream", None) is not None:
            return "--stream-log replays a log of its own: drop --evaluations and --stream, or run them apart"
        if not Path(stream_log).is_file():
            return (
                f"--stream-log {stream_log}: no such file. How to fix: a .csv, .csv.gz or .parquet with the "
                "columns model, query_id, query, benchmark, score, time (one row per graded answer)"
            )
    elif args.evaluations is None:
        return "--evaluations is required (or --stream-log FILE, to replay a log of graded answers)"
    elif not Path(args.evaluations).exists():
        return (
            f"--evaluations {args.evaluations}: no such file or folder. How to fix: give a long-format file "
            "(.csv, .csv.gz, .parquet), a folder of them, or an EmbedLLM folder"
        )
    out_dir = Path(args.out).resolve().parent
    if not out_dir.is_dir():
        return f"--out {args.out}: the folder {out_dir} does not exist. How to fix: create it, or write elsewhere"
    if args.budget < 1:
        return f"--budget {args.budget}: must be at least 1 (evaluations per model)"
    if args.folds is not None and args.folds < 2:
        return f"--folds {args.folds}: must be at least 2 (or omitted: the table's own split, else 5)"
    holdout = holdout_option(args.holdout_models)
    if isinstance(holdout, float) and not 0.0 <= holdout < 1.0:
        return (
            f"--holdout-models {args.holdout_models}: a fraction must be in [0, 1); or give model names, "
            "comma-separated"
        )
    if isinstance(holdout, tuple) and not holdout:
        return f"--holdout-models {args.holdout_models!r}: give a fraction in [0, 1) or model names, comma-separated"
    if args.jobs is not None and args.jobs < 1:
        return f"--jobs {args.jobs}: must be at least 1"
    try:
        routing_policy(args)
    except ValueError as err:
        return f"--guard-margin: {err}"
    if args.threads is not None and args.threads < 1:
        return f"--threads {args.threads}: must be at least 1 (torch threads of each fit)"
    if args.models_file is not None and not Path(args.models_file).is_file():
        return (
            f"--models-file {args.models_file}: no such file. How to fix: a CSV with a model column and params_b, "
            "price_input_per_mtok / price_output_per_mtok or cost_per_query"
        )
    if getattr(args, "reference_scores", None) is not None and not Path(args.reference_scores).is_file():
        return (
            f"--reference-scores {args.reference_scores}: no such file. How to fix: a CSV with a model column and "
            "scores"
        )
    stream = getattr(args, "stream", None)
    if stream is not None:
        from locus_model.evaluation.stream_routing import SCENARIOS  # why: numpy only, no torch

        names = [s.strip() for s in stream.split(",") if s.strip()]
        bad = [s for s in names if s not in SCENARIOS]
        if bad or not names:
            return f"--stream {stream}: unknown scenario(s) {bad}; choose from {', '.join(SCENARIOS)} (comma-separated)"
    if replaying(args):
        if args.stream_seeds < 1:
            return f"--stream-seeds {args.stream_seeds}: must be at least 1"
        if args.stream_events is not None and args.stream_events < 1:
            return f"--stream-events {args.stream_events}: must be at least 1"
        for flag, v in (("--stream-feedback", args.stream_feedback), ("--stream-explore", args.stream_explore)):
            if v is not None and not 0.0 <= v <= 1.0:
                return f"{flag} {v}: a share in [0, 1]"
        if args.models_file is not None or args.onboard_sizes is not None:
            return (
                "--stream / --stream-log replay a stream instead of the folds: drop --models-file / "
                "--onboard-sizes, or run them apart"
            )
    if args.plot is not None and args.models_file is None and not replaying(args):
        return (
            "--plot: draws the quality-cost frontiers (needs --models-file, the models' costs) or, with --stream, "
            "the replay's curves"
        )
    if args.plot is not None and not Path(args.plot).resolve().parent.is_dir():
        return (
            f"--plot {args.plot}: the folder {Path(args.plot).resolve().parent} does not exist. How to fix: create it"
        )
    return None


def replaying(args: argparse.Namespace) -> bool:
    """Whether the command is the replay (--stream or --stream-log) rather than the folds."""
    return getattr(args, "stream", None) is not None or getattr(args, "stream_log", None) is not None


def routing_policy(args: argparse.Namespace):
    """The routing policy `locus evaluate`'s LOCUS routes under (--guard-margin, else the default): validated by
    RoutingPolicy itself, the one place its rules live."""
    from locus_model.routing.policy import RoutingPolicy  # why: `locus --help` starts without numpy

    return RoutingPolicy(guard_margin=getattr(args, "guard_margin", None))


def holdout_option(value: str | None) -> float | tuple[str, ...] | None:
    """--holdout-models as given: None (the default), a fraction, or model names (comma-separated)."""
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return tuple(name.strip() for name in value.split(",") if name.strip())


def held_out_names(names: tuple[str, ...], models: Sequence[str]) -> list[str]:
    """The named held-out models, checked against the table's models (an unknown name is an error naming it)."""
    unknown = [n for n in names if n not in models]
    if unknown:
        close = [m for m in models if any(u.lower() in m.lower() or m.lower() in u.lower() for u in unknown)]
        hint = f" (did you mean {', '.join(close[:3])}?)" if close else ""
        raise ValueError(
            f"--holdout-models: {', '.join(unknown)} not among the table's {len(models)} models{hint}. "
            f"How to fix: use names as the table's model column spells them, e.g. {', '.join(models[:3])}"
        )
    if len(names) >= len(models):
        raise ValueError(f"--holdout-models: all {len(models)} models held out leaves none to train on; name fewer")
    return list(dict.fromkeys(names))


def fit_count(folds: int | None, methods: Sequence[str]) -> int:
    """The (fold, method) fits an evaluation runs: the oracle fits nothing, best single always runs."""
    return (folds or 1) * len(set(methods) - {"oracle"} | {"best_single"})


def run_evaluate(args: argparse.Namespace) -> int:
    problem = check_evaluate_args(args)
    if problem:
        return fail("evaluate", ValueError(problem))

    # why: the CLI answers --help and argument errors without loading torch and the library
    import torch

    from locus_model.data.encoders import resolve_encoder
    from locus_model.data.errors import EvaluationDataError
    from locus_model.data.long_format import read_evaluations
    from locus_model.data.matrix import EvaluationMatrix
    from locus_model.evaluation.methods import METHODS
    from locus_model.evaluation.protocol import evaluate
    from locus_model.evaluation.results import format_frontier, print_results, save_results
    from locus_model.evaluation.stream import run_replay
    from locus_model.evaluation.verdict import format_verdict
    from locus_model.model import LocusConfig

    methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        return fail("evaluate", ValueError(f"--methods: unknown {unknown}; choose from {','.join(METHODS)}"))
    threads = args.threads or 1
    torch.set_num_threads(threads)
    progress = not args.quiet
    try:
        spec = resolve_encoder(args.encoder)
        if getattr(args, "stream_log", None) is not None:
            from locus_model.evaluation.stream_log import run_log_replay  # why: only with --stream-log

            run_log_replay(args, lambda texts: _encode(args, spec, texts, progress), _train_config(args), progress)
            return EXIT_OK
        start = time.perf_counter()
        table, _ = read_evaluations(args.evaluations)
        matrix = EvaluationMatrix.from_table(table)
        del table
        costs = None
        if args.models_file is not None:
            # why: only with --models-file
            from locus_model.data.long_format import read_models_file
            from locus_model.routing import cost_info, cost_table

            costs = cost_table(matrix.models, cost_info(read_models_file(args.models_file)))
            if progress:
                print(f"costs from {args.models_file}: {costs.note}", file=sys.stderr)
        folds = args.folds if args.folds is not None else (None if matrix.split is not None else 5)
        holdout = holdout_option(args.holdout_models)
        held_out = held_out_names(holdout, matrix.models) if isinstance(holdout, tuple) else None
        if not isinstance(holdout, float):  # named models: the fraction they make, for the record
            holdout = len(held_out) / len(matrix.models) if held_out else (0.2 if folds is not None else 0.0)
        if progress:
            print(
                f"{len(matrix.models)} models x {len(matrix.query_ids)} queries from {args.evaluations} "
                f"({time.perf_counter() - start:.1f} s); encoding queries with {spec.name}",
                file=sys.stderr,
            )
        cores, load = machine()
        jobs = args.jobs or default_jobs(cores, load, tasks=fit_count(folds, methods), threads=threads)
        if progress and not replaying(args):  # the replay counts its own trainings (evaluation.stream)
            print(
                f"{fit_count(folds, methods)} fits, {jobs} at a time ({'--jobs' if args.jobs else 'the free cores'}: "
                f"{cores} cores, load {load:.1f}), {threads} torch thread(s) each",
                file=sys.stderr,
            )
        encodings, report = _encode(args, spec, matrix.queries, progress, summary=True)
        train_config = _train_config(args)
        if getattr(args, "stream", None) is not None:
            run_replay(args, matrix, encodings, train_config, progress)
            return EXIT_OK
        result = evaluate(
            matrix,
            encodings,
            budget=args.budget,
            folds=folds,
            holdout_models=holdout,
            seed=args.seed,
            held_out=held_out,
            methods=methods,
            train_config=train_config,
            model_config=LocusConfig(query_dim=encodings.shape[1]),
            progress=progress,
            jobs=jobs,
            threads=threads,
            costs=costs,
            policy=routing_policy(args),
        )
        if args.onboard_sizes is not None:  # capability estimates on the same folds and held-out models
            from locus_model.evaluation.capability import capability_from_result  # why: only with --onboard-sizes

            result.update(
                capability_from_result(
                    matrix,
                    encodings,
                    result,
                    args.onboard_sizes,
                    args.reference_scores,
                    train_config,
                    progress=progress,
                )
            )
    except (EvaluationDataError, ValueError, FileNotFoundError) as err:
        return fail("evaluate", err)
    result["settings"].update(
        {
            "encoder": spec.name,
            "encoder_runtime": report.runtime,
            "evaluations": str(args.evaluations),
            "encoding_s": round(report.seconds, 2),
            "queries_encoded": report.encoded,
            "queries_from_cache": report.unique - report.encoded,
        }
    )
    if costs is not None:
        result["settings"]["costs"]["models_file"] = str(args.models_file)
    path = save_results(result, args.out)
    print(format_verdict(result["verdict"]))  # first: the one line a user can act on
    print_results(result)
    if costs is not None:
        print("\n" + format_frontier(result))
    if args.plot is not None:
        from locus_model.routing.frontier_plot import plot_frontiers  # why: matplotlib only with --plot

        assert costs is not None  # outside a replay (returned above), --plot is refused without --models-file

        print(
            "wrote "
            + str(
                plot_frontiers(
                    result["frontier_folds"], args.plot, cost_label=f"mean cost per query ({costs.basis_means})"
                )
            )
        )
    print(f"\nwrote {path}")
    return EXIT_OK


def _encode(args: argparse.Namespace, spec, texts: Sequence[str], progress: bool, *, summary: bool = False):
    """The query texts' encodings (Q, D) by the chosen encoder, through its cache (with ``summary``: and the
    encoding's report)."""
    from locus_model.data.encoding import encode_queries_with_summary  # why: the CLI starts without the encoder

    folder = args.encoding_cache
    if folder is None and getattr(args, "default_encoding_cache", None) is not None:
        folder = args.default_encoding_cache()
    cache = Path(folder) / spec.name if folder else None
    encodings, report = encode_queries_with_summary(
        list(texts), encoder=spec.name, runtime=args.encoder_runtime, cache_dir=cache, progress=progress
    )
    return (encodings, report) if summary else encodings


def _train_config(args: argparse.Namespace):
    """LOCUS's TrainConfig from --device, --epochs, --patience."""
    from locus_model.training import TrainConfig  # why: the CLI answers --help and argument errors without torch

    train_config = TrainConfig(device=args.device)
    if args.epochs is not None:
        train_config = replace(train_config, epochs=args.epochs)
    if args.patience is not None:
        train_config = replace(train_config, patience=args.patience)
    return train_config


# ---------------------------------------------------------------------------------------------- synthetic-data


def _synthetic_data_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, type=Path, help="parent folder; files go to OUT/synthetic/")
    p.add_argument(
        "--size",
        choices=("full", "small"),
        default="full",
        help="full: 113 models x 6,000 queries; small: 24 models x 600 queries",
    )
    p.add_argument("--seed", type=int, default=0, help="same seed -> byte-identical files")


def add_synthetic_data(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "synthetic-data",
        help="write the SYNTHETIC pool (known ground truth) as long-format and EmbedLLM-format files",
    )
    _synthetic_data_options(p)
    p.set_defaults(run=run_synthetic_data)


def run_synthetic_data(args: argparse.Namespace) -> int:
    from locus_model.data.synthetic import generate_synthetic_pool  # why: the CLI starts without the data stack

    try:
        pool = generate_synthetic_pool(args.out, size=args.size, seed=args.seed)
    except (ValueError, OSError) as err:
        return fail("synthetic-data", err)
    print(f"wrote the synthetic pool ({args.size}, seed {args.seed}, {pool.n_rows} rows) to {pool.root}")
    for path in pool.files:
        print(f"  {path}")
    return EXIT_OK


# ---------------------------------------------------------------------------------------------- entry point

COMMANDS: dict[str, Callable[[argparse._SubParsersAction], None]] = {
    "evaluate": add_evaluate,
    "synthetic-data": add_synthetic_data,
}


def build_parser(
    commands: Iterable[Callable[[argparse._SubParsersAction], None]] = COMMANDS.values(),
) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="locus", description="LOCUS: model embeddings from evaluations (arXiv 2601.21082)"
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add in commands:
        add(subparsers)
    return parser


def quiet_warnings() -> None:
    """A command prints what its user needs: deprecation notices of the libraries underneath (pandas' and numpy's
    FutureWarnings and DeprecationWarnings, meant for this code's maintainers; the test suite still shows them)
    are not shown."""
    for category in (FutureWarning, DeprecationWarning):
        warnings.filterwarnings("ignore", category=category)


def main(argv: Sequence[str] | None = None) -> int:
    quiet_warnings()
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())

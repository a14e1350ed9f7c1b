"""LOCUS training sweep: TrainConfig trials over every fold of the accuracy benchmark's protocol, in parallel.

The accuracy benchmark (bench_accuracy.py) runs one configuration with every baseline; this script runs
many LOCUS configurations (the TRIALS below) on the same folds, anchors and held-out models, one process per
(trial, suite, budget, fold), and appends one JSON line per finished task. The baselines are not rerun:
`--summarize` sets the trials beside the baselines' 5-fold means from bench/results/accuracy_*.json (the
same folds and anchors, so the means are comparable; per-fold pairing is not).

    # 1. export the matrices and their MiniLM encodings (needs the encoder cache and ../shared)
    .venv/bin/python -m bench.diag.sweep_locus export .sweep
    # 2. run trials (CUDA when present; --deadline-s stops launching tasks and ends the run in time)
    python3 -m bench.diag.sweep_locus run .sweep --trials default noise1 --tasks synthetic:256 ae1:128 --workers 12 \
        --out results.jsonl
    # 3. tables (mean ± std over the folds that finished, next to the baselines' 5-fold means)
    .venv/bin/python -m bench.diag.sweep_locus summarize results.jsonl

The export holds AlpacaEval (CC BY-NC 4.0): keep it outside the repository's tracked files (.sweep/ is for
a scratch copy that is deleted after the run) and never commit it.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import defaultdict
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

import numpy as np

# the bench's fixed part: 60 epochs, kept to the end (best validation epoch), as in bench/README.md "Accuracy",
# and the TrainConfig defaults as they were when the sweep started, so that a trial means the same whatever the
# defaults are now (noise2_d4_ema_e120_sel10_ftgrid is the current default)
BASE = dict(
    epochs=60,
    patience=60,
    noise_start=0.3,
    noise_end=0.1,
    draws=1,
    ema_decay=0.0,
    select_from_epoch=0,
    finetune_steps=0,
)
NOISE1 = dict(noise_start=1.0, noise_end=0.5)
TRIALS: dict[str, dict] = {
    "default": {},
    "noise1": NOISE1,
    "noise1_d4": {**NOISE1, "draws": 4},
    "noise1_ema": {**NOISE1, "ema_decay": 0.99},
    "noise1_d4_ema": {**NOISE1, "draws": 4, "ema_decay": 0.99},
    "noise1_d4_ema_lr3": {**NOISE1, "draws": 4, "ema_decay": 0.99, "lr_encoder": 6e-4, "lr_predictor": 2.4e-3},
    "noise2_d4_ema": {"noise_start": 2.0, "noise_end": 1.0, "draws": 4, "ema_decay": 0.99},
    "noise2_d4_ema_e120": {
        "noise_start": 2.0,
        "noise_end": 1.0,
        "draws": 4,
        "ema_decay": 0.995,
        "epochs": 120,
        "patience": 120,
    },
    "noise2_d4_ema_e120_sel30": {
        "noise_start": 2.0,
        "noise_end": 1.0,
        "draws": 4,
        "ema_decay": 0.995,
        "epochs": 120,
        "patience": 120,
        "select_from_epoch": 30,
    },
    "noise2_d4_ema_e120_sel10": {
        "noise_start": 2.0,
        "noise_end": 1.0,
        "draws": 4,
        "ema_decay": 0.995,
        "epochs": 120,
        "patience": 120,
        "select_from_epoch": 10,
    },
    # noise2_d4_ema_e120_sel10 with the reference's noise level (0.10 -> 0.05 per dimension of 768-d mpnet)
    "noise28_d4_ema_e120_sel10": {
        "noise_start": 2.8,
        "noise_end": 1.4,
        "draws": 4,
        "ema_decay": 0.995,
        "epochs": 120,
        "patience": 120,
        "select_from_epoch": 10,
    },
    # noise2_d4_ema_e120_sel10 + 300 steps of predictor fine-tuning on the full-anchor embeddings (noise ratio 2;
    # the defaults of the second CPU session)
    "noise2_d4_ema_e120_sel10_ft300": {
        "noise_start": 2.0,
        "noise_end": 1.0,
        "draws": 4,
        "ema_decay": 0.995,
        "epochs": 120,
        "patience": 120,
        "select_from_epoch": 10,
        "finetune_steps": 300,
        "finetune_noise": 2.0,
    },
    # ... fine-tuning at noise ratios 2 and 3, up to 2,000 steps with patience 300, lower val BCE kept (= the
    # TrainConfig defaults since the third CPU session)
    "noise2_d4_ema_e120_sel10_ftgrid": {
        "noise_start": 2.0,
        "noise_end": 1.0,
        "draws": 4,
        "ema_decay": 0.995,
        "epochs": 120,
        "patience": 120,
        "select_from_epoch": 10,
        "finetune_steps": 2000,
        "finetune_patience": 300,
        "finetune_noise": (2.0, 3.0),
    },
    "noise1_d4_ema_e200": {**NOISE1, "draws": 4, "ema_decay": 0.995, "epochs": 200, "patience": 200},
    # closer to the paper (arXiv 2601.21082 reference): all models per step, encoder subsets up to the budget,
    # the reference's noise (~2.8 -> 1.4 in relative units) annealed over most of the run
    "paperish_e600": {
        "batch_models": 128,
        "enc_max": 1024,
        "noise_start": 2.8,
        "noise_end": 1.4,
        "noise_anneal_epochs": 200,
        "epochs": 600,
        "patience": 600,
        "val_set_max": None,
    },
}
SUITES = ("synthetic", "ae1")


# ---------------------------------------------------------------------------------------------- export


def export(out: Path) -> None:
    from bench.common import load_suite
    from locus_model.data.encoding import encode_queries

    out.mkdir(parents=True, exist_ok=True)
    for suite in SUITES:
        matrix, source = load_suite(suite)
        enc = encode_queries(matrix.queries, encoder="all-MiniLM-L6-v2")  # the user cache
        np.savez(
            out / f"{suite}.npz",
            models=np.array(matrix.models),
            query_ids=np.array(matrix.query_ids),
            benchmarks=matrix.benchmarks.astype(str),
            scores=matrix.scores,
            encodings=enc.astype(np.float32),
            source=np.array(source),
        )
        print(f"{suite}: {matrix.scores.shape} -> {out / (suite + '.npz')}")


_DATA: dict = {}


def _load(data_dir: Path, suite: str):
    from locus_model.data.matrix import EvaluationMatrix

    if suite not in _DATA:
        z = np.load(data_dir / f"{suite}.npz")
        matrix = EvaluationMatrix(
            models=z["models"].tolist(),
            query_ids=z["query_ids"].tolist(),
            queries=z["query_ids"].tolist(),
            benchmarks=z["benchmarks"],
            scores=z["scores"].astype(np.float32),
        )
        _DATA[suite] = (matrix, z["encodings"])
    return _DATA[suite]


# ---------------------------------------------------------------------------------------------- run


def run_task(
    data_dir: str, trial: str, suite: str, budget: int, fold: int, device: str, max_epochs: int | None = None
) -> dict:
    import torch

    torch.set_num_threads(1)
    from locus_model.evaluation.protocol import evaluate
    from locus_model.model import LocusConfig
    from locus_model.training import TrainConfig

    matrix, enc = _load(Path(data_dir), suite)
    opts = {**BASE, **TRIALS[trial]}
    if max_epochs is not None:  # smoke runs
        opts.update(epochs=min(opts["epochs"], max_epochs), patience=min(opts["patience"], max_epochs))
    cfg = TrainConfig(**opts, device=device)
    t0 = time.perf_counter()
    res = evaluate(
        matrix,
        enc,
        budget=budget,
        folds=5,
        methods=["locus"],
        train_config=cfg,
        model_config=LocusConfig(query_dim=enc.shape[1]),
        only_folds=[fold],
        progress=False,
        n_boot=50,
    )
    row: dict[str, Any] = {
        "trial": trial,
        "suite": suite,
        "budget": budget,
        "fold": fold,
        "device": device,
        "options": opts,
        "seconds": round(time.perf_counter() - t0, 1),
        "metrics": {},
    }
    for method in ("locus", "best_single"):
        row["metrics"][method] = {
            g: {k: res["methods"][method][g][k]["mean"] for k in ("routing_acc", "correctness_acc", "auc", "brier")}
            for g in res["methods"][method]
        }
    return row


def run(args: argparse.Namespace) -> int:
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    unknown = [t for t in args.trials if t not in TRIALS]
    if unknown:
        raise SystemExit(f"unknown trials {unknown}; see --list")
    done = set()
    if args.out.exists():
        for line in args.out.read_text().splitlines():
            r = json.loads(line)
            done.add((r["trial"], r["suite"], r["budget"], r["fold"]))
    tasks = []
    for trial in args.trials:  # trial-major: whole 5-fold sets finish first
        for spec in args.tasks:
            suite, budget = spec.split(":")
            for fold in args.folds:
                key = (trial, suite, int(budget), fold)
                if key not in done:
                    tasks.append(key)
    print(f"{len(tasks)} tasks on {device} with {args.workers} workers; deadline {args.deadline_s} s", flush=True)
    start = time.perf_counter()
    import multiprocessing as mp

    with ProcessPoolExecutor(args.workers, mp_context=mp.get_context("spawn")) as pool, args.out.open("a") as out:
        pending: dict[Future[dict], tuple] = {}  # a running task -> its arguments
        queue = list(tasks)
        while queue or pending:
            while (
                queue
                and len(pending) < args.workers
                and time.perf_counter() - start < args.deadline_s * args.launch_until
            ):
                t = queue.pop(0)
                pending[pool.submit(run_task, str(args.data), *t, device, args.max_epochs)] = t
            if not pending:
                break
            left = args.deadline_s - (time.perf_counter() - start)
            finished, _ = wait(pending, timeout=max(1.0, left), return_when=FIRST_COMPLETED)
            for f in finished:
                t = pending.pop(f)
                try:
                    row = f.result()
                except Exception as exc:  # report and go on: one broken trial must not lose the others
                    print(f"FAILED {t}: {exc!r}", flush=True)
                    continue
                out.write(json.dumps(row) + "\n")
                out.flush()
                m = row["metrics"]["locus"]["all"]
                print(
                    f"{time.perf_counter() - start:6.0f}s {t} {row['seconds']:.0f}s routing {m['routing_acc']:.4f} "
                    f"correct {m['correctness_acc']:.4f} auc {m['auc']:.4f} brier {m['brier']:.4f}",
                    flush=True,
                )
            if time.perf_counter() - start > args.deadline_s:
                print(f"deadline: {len(pending)} running and {len(queue)} queued tasks dropped", flush=True)
                for p in pool._processes.values():  # noqa: SLF001 - end the running tasks now
                    p.terminate()
                break
    return 0


# ---------------------------------------------------------------------------------------------- summarize


def _baselines(suite: str, budget: int) -> dict:
    from bench.common import RESULTS

    path = RESULTS / f"accuracy_{suite}_b{budget}.json"
    if not path.is_file():
        return {}
    res = json.loads(path.read_text())
    return {
        m: {g: {k: v[k]["mean"] for k in ("routing_acc", "correctness_acc", "auc", "brier")} for g, v in groups.items()}
        for m, groups in res["methods"].items()
        if m != "locus"
    }


def summarize(paths: list[Path], group: str = "all") -> str:
    rows = [json.loads(line) for p in paths for line in p.read_text().splitlines() if line.strip()]
    by = defaultdict(list)
    for r in rows:
        by[(r["suite"], r["budget"], r["trial"])].append(r)
    lines = []
    for suite, budget in sorted({(s, b) for s, b, _ in by}):
        lines += [
            f"\n{suite} @{budget} ({group}; percent, Brier x100; mean ± std over folds)",
            "| method | folds | routing | correctness | AUC | Brier | s/fold |",
            "|---|---|---|---|---|---|---|",
        ]
        for (s, b, trial), rs in sorted(by.items()):
            if (s, b) != (suite, budget):
                continue
            cells = []
            for k in ("routing_acc", "correctness_acc", "auc", "brier"):
                v = np.array([r["metrics"]["locus"][group][k] for r in rs if group in r["metrics"]["locus"]]) * 100
                cells.append(f"{v.mean():.1f} ± {v.std():.1f}" if len(v) else "-")
            secs = np.mean([r["seconds"] for r in rs])
            lines.append(f"| {trial} | {len(rs)} | " + " | ".join(cells) + f" | {secs:.0f} |")
        for method, groups in _baselines(suite, budget).items():
            if group in groups:
                g = groups[group]
                lines.append(
                    f"| ({method}, 5 folds) | 5 | "
                    + " | ".join(f"{g[k] * 100:.1f}" for k in ("routing_acc", "correctness_acc", "auc", "brier"))
                    + " | |"
                )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export")
    e.add_argument("out", type=Path)
    r = sub.add_parser("run")
    r.add_argument("data", type=Path)
    r.add_argument("--trials", nargs="+", default=list(TRIALS))
    r.add_argument(
        "--tasks",
        nargs="+",
        default=["synthetic:256", "synthetic:1024", "ae1:128"],
        help="suite:budget (demo: deprecated name of synthetic)",
    )
    r.add_argument("--folds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    r.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    r.add_argument("--device", default=None, help="cuda when available, else cpu")
    r.add_argument("--deadline-s", type=float, default=3600.0)
    r.add_argument("--launch-until", type=float, default=0.8, help="no new task after this share of the deadline")
    r.add_argument("--out", type=Path, default=Path("sweep.jsonl"))
    r.add_argument("--max-epochs", type=int, default=None, help="cap epochs and patience (smoke runs)")
    s = sub.add_parser("summarize")
    s.add_argument("paths", type=Path, nargs="+")
    s.add_argument("--group", default="all", choices=["all", "in_training", "held_out"])
    sub.add_parser("list")
    args = p.parse_args(argv)
    if args.cmd == "export":
        export(args.out)
    elif args.cmd == "run":
        return run(args)
    elif args.cmd == "summarize":
        print(summarize(args.paths, args.group))
    else:
        for name, opts in TRIALS.items():
            print(f"{name}: {opts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

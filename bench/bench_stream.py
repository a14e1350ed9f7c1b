"""The replay bench (issue 66 item 5): `locus evaluate --stream` on sub-matrices of MMLU-Pro and metabench, with a
lighter training than the default (the one training per seed is the replay's cost; this machine's 2 cores are shared).

    python -m bench.bench_stream --suite mmlu --scenarios stationary,unlike,newcomer,drift,poisoned --seeds 5

The sub-matrices (9 models spread over the accuracy range, complete cells; MMLU-Pro: 6,000 random questions of
12,032, metabench: the 1,075 items and 9 of the top half of its 2,001 models) are written by ``--write-matrices``.
"""

from __future__ import annotations

import argparse
import json
import pickle
import time
from pathlib import Path

import numpy as np
import pandas as pd

from bench.common import CACHE, METABENCH, MMLU_PRO

MATRICES = {
    "mmlu": CACHE / "stream" / "mmlu_9x6000.parquet",
    "metabench": CACHE / "stream" / "metabench_9x1075.parquet",
}


def write_matrices() -> None:
    rng = np.random.default_rng(0)
    for name, path, n_queries, top in (("mmlu", MMLU_PRO, 6000, 1.0), ("metabench", METABENCH, None, 0.5)):
        table = pd.read_parquet(path)
        wide = table.pivot_table(index="model", columns="query_id", values="score", aggfunc="first")
        wide = wide[wide.notna().all(axis=1)] if name == "mmlu" else wide
        wide = wide.loc[:, wide.notna().all(axis=0)]
        acc = wide.mean(axis=1).sort_values(ascending=False)
        acc = acc.iloc[: int(len(acc) * top)]
        models = list(acc.index[np.linspace(0, len(acc) - 1, 9).round().astype(int)])
        queries = list(wide.columns)
        if n_queries:
            queries = sorted(rng.choice(queries, n_queries, replace=False))
        MATRICES[name].parent.mkdir(parents=True, exist_ok=True)
        table[table.model.isin(models) & table.query_id.isin(queries)].to_parquet(MATRICES[name], index=False)
        print(f"wrote {MATRICES[name]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", choices=tuple(MATRICES), required=True)
    ap.add_argument("--scenarios", default="stationary,unlike,newcomer,drift,poisoned")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--events", type=int, default=4000)
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--latent-steps", type=int, default=300)
    ap.add_argument("--finetune-steps", type=int, default=300)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--write-matrices", action="store_true")
    args = ap.parse_args()
    if args.write_matrices or not MATRICES[args.suite].is_file():
        write_matrices()
    import torch

    from locus_model.data.encoding import encode_queries
    from locus_model.data.long_format import read_evaluations
    from locus_model.data.matrix import EvaluationMatrix
    from locus_model.evaluation.results import save_results
    from locus_model.evaluation.stream import StreamConfig, format_stream, plot_stream, replay
    from locus_model.model import LocusConfig
    from locus_model.training import TrainConfig

    torch.set_num_threads(1)
    matrix = EvaluationMatrix.from_table(read_evaluations(MATRICES[args.suite])[0])
    enc = encode_queries(matrix.queries, encoder="all-MiniLM-L6-v2")
    train = TrainConfig(
        epochs=args.epochs, latent_steps=args.latent_steps, finetune_steps=args.finetune_steps, device="cpu"
    )
    kept = CACHE / "stream" / f"streams_{args.suite}"
    kept.mkdir(parents=True, exist_ok=True)

    def keep(scenario, seed, stream, info):  # routing them again with another LearningConfig needs no training
        with open(kept / f"{scenario}_{seed}.pkl", "wb") as f:
            pickle.dump((stream, info), f)

    (kept / "models.json").write_text(json.dumps(list(matrix.models)))
    t0 = time.perf_counter()
    result = replay(
        matrix.scores,
        enc,
        np.asarray(matrix.benchmarks),
        list(matrix.models),
        args.scenarios.split(","),
        seeds=args.seeds,
        first_seed=args.first_seed,
        config=StreamConfig(events=args.events),
        train_config=train,
        model_config=LocusConfig(query_dim=enc.shape[1]),
        on_stream=keep,
    )
    result["settings"].update(
        {
            "evaluations": str(MATRICES[args.suite]),
            "train_config": {
                "epochs": args.epochs,
                "latent_steps": args.latent_steps,
                "finetune_steps": args.finetune_steps,
            },
            "command": "python -m bench.bench_stream "
            + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v not in (None, False, True)),
        }
    )
    last = args.first_seed + args.seeds - 1
    out = args.out or CACHE / "stream" / f"stream_{args.suite}_seeds{args.first_seed}-{last}.json"
    save_results(result, out)
    print(format_stream(result))
    print(f"wrote {plot_stream(result, out.with_suffix('.png'))}; {out}; {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()

"""Query-encoder runtimes side by side in one run: throughput, agreement with torch fp32, routing agreement.

    .venv/bin/python -m bench.bench_encoding [--n 256] [--routing-queries 1200] [--threads 2] [--out FILE]

1. Throughput: --n MMLU-Pro questions, short (the first line, <= 200 characters, as a chat prompt) and whole (the
   question with its ten options, mean ~650 characters, truncated at 256 tokens as sentence-transformers does),
   encoded by each runtime (torch = sentence-transformers fp32, the reference; onnx-fp32; onnx-int8) with no
   cache, runtimes interleaved per text kind so that machine load hits them alike. Model loading is timed apart.
   Also per CPU-second of the process (q/cpu-s: what a runtime costs, less disturbed by other jobs on the cores
   than wall time). Agreement: cosine similarity of each runtime's encodings to torch's on the same texts.
2. Routing agreement with one trained checkpoint: --routing-queries whole questions (29 models); the queries are
   split 50 / 10 / 40 % into train (every train query is an anchor), val and test; LOCUS (a short training run,
   the demo job's size) is trained on torch encodings. For each runtime the pool is embedded from the train
   cells and the test queries are routed with that runtime's encodings (as the pipeline does when it runs on
   one runtime); also "mixed": the torch pool with the runtime's query encodings (a checkpoint trained on torch
   served with --encoder-runtime). Reported: the share of test queries routed to the same model as with torch,
   routing accuracy (mean score of the chosen model) with a 95 % bootstrap interval, and the paired difference;
   at quality weight 1 (the paper's router) and, since a checkpoint that routes nearly every MMLU-Pro query to
   one model makes that share easy, also cost-aware at quality weights 0.9 / 0.7 (parameter-count costs from
   data/mmlu-pro/models.csv, as `locus serve` charges them), where the choice moves from query to query;
   and the P(correct) agreement (mean and max |P_runtime - P_torch| over every test pair).
The encodings of part 2 are cached in the user cache (LOCUS_CACHE_DIR), so a re-run encodes nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd

from bench.common import REPO
from locus_model.data.encoders import RUNTIMES
from locus_model.data.encoding import encode_queries, load_encoder

ENCODER = "all-MiniLM-L6-v2"


def mmlu_questions(n: int, seed: int = 0) -> list[str]:
    table = pd.read_parquet(REPO / "data" / "mmlu-pro" / "evaluations.parquet", columns=["query_id", "query"])
    texts = table.drop_duplicates("query_id")["query"].astype(str).tolist()
    rng = np.random.default_rng(seed)
    return [texts[i] for i in rng.permutation(len(texts))[:n]]


def throughput(n: int, threads: int, batch_size: int) -> dict:
    whole = mmlu_questions(n)
    short = [t.split("\n")[0][:200] for t in whole]
    load_s = {}
    for runtime in RUNTIMES:
        t0 = time.perf_counter()
        load_encoder(ENCODER, runtime, threads=threads).encode(["warm up", short[0]], batch_size)
        load_s[runtime] = round(time.perf_counter() - t0, 2)
    rows = {}
    for kind, texts in (("short", short), ("whole", whole)):
        encodings, seconds, cpu = {}, {}, {}
        for runtime in RUNTIMES:
            t0, c0 = time.perf_counter(), time.process_time()
            encodings[runtime] = load_encoder(ENCODER, runtime, threads=threads).encode(texts, batch_size)
            seconds[runtime], cpu[runtime] = time.perf_counter() - t0, time.process_time() - c0
        for runtime in RUNTIMES:
            cosine = (encodings[runtime] * encodings["torch"]).sum(1)
            rows[f"{runtime}/{kind}"] = {
                "runtime": runtime,
                "texts": kind,
                "n": len(texts),
                "mean_chars": round(float(np.mean([len(t) for t in texts]))),
                "queries_per_s": round(len(texts) / seconds[runtime], 1),
                "speedup_vs_torch": round(seconds["torch"] / seconds[runtime], 2),
                "queries_per_cpu_s": round(len(texts) / cpu[runtime], 1),
                "cpu_speedup_vs_torch": round(cpu["torch"] / cpu[runtime], 2),
                "cosine_mean": round(float(cosine.mean()), 5),
                "cosine_min": round(float(cosine.min()), 5),
            }
    return {"load_s": load_s, "rows": rows}


def bootstrap(values: np.ndarray, seed: int = 0, draws: int = 2000) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), (draws, len(values)))].mean(1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def routing(n_queries: int, threads: int, epochs: int, checkpoint: Path | None) -> dict:
    import torch

    from locus_model.data.matrix import EvaluationMatrix
    from locus_model.infer import embed_evaluation_sets, predict_proba
    from locus_model.model import LocusConfig, load_checkpoint, save_checkpoint
    from locus_model.routing import RoutingPolicy, cost_table, route_many
    from locus_model.training import TrainConfig, train_locus

    table = pd.read_parquet(REPO / "data" / "mmlu-pro" / "evaluations.parquet")
    keep = set(table.drop_duplicates("query_id")["query_id"].sample(n=n_queries, random_state=0))
    matrix = EvaluationMatrix.from_table(table[table["query_id"].isin(keep)])
    torch.set_num_threads(threads)
    enc = {}
    for runtime in ("torch", "onnx-int8"):
        t0 = time.perf_counter()
        enc[runtime] = encode_queries(matrix.queries, encoder=ENCODER, runtime=runtime, threads=threads, progress=False)
        print(f"  encoded {len(matrix.queries)} queries with {runtime} in {time.perf_counter() - t0:.0f} s", flush=True)
    Q = len(matrix.query_ids)
    part = np.random.default_rng(1).permutation(Q)
    train, val, test = part[: Q // 2], part[Q // 2 : Q * 6 // 10], part[Q * 6 // 10 :]
    scores = matrix.scores
    train_scores = np.full_like(scores, np.nan)
    train_scores[:, train] = scores[:, train]
    val_scores = np.full_like(scores, np.nan)
    val_scores[:, val] = scores[:, val]
    tag = {"queries": n_queries, "epochs": epochs}
    if checkpoint is not None and checkpoint.exists() and load_checkpoint(checkpoint)[1].get("bench") == tag:
        model, best_epoch = load_checkpoint(checkpoint)[0], load_checkpoint(checkpoint)[1]["best_epoch"]
        print(f"  the LOCUS checkpoint of an earlier run with these settings: {checkpoint}", flush=True)
    else:
        t0 = time.perf_counter()
        result = train_locus(
            enc["torch"],
            train_scores,
            val_scores,
            model_config=LocusConfig(query_dim=enc["torch"].shape[1]),
            train_config=TrainConfig(epochs=epochs, finetune_steps=300, device="cpu"),
            progress=False,
        )
        print(f"  trained LOCUS on torch encodings in {time.perf_counter() - t0:.0f} s (epochs {epochs})", flush=True)
        model, best_epoch = result.model, result.best_epoch
        if checkpoint is not None:
            save_checkpoint(
                checkpoint, model, encoder=ENCODER, encoder_runtime="torch", best_epoch=best_epoch, bench=tag
            )
    sets = [
        (train[~np.isnan(scores[m, train])], scores[m, train][~np.isnan(scores[m, train])]) for m in range(len(scores))
    ]

    def probs(pool_enc: np.ndarray, query_enc: np.ndarray) -> np.ndarray:  # (M, test) P(correct)
        return predict_proba(model, embed_evaluation_sets(model, pool_enc, sets), query_enc[test])

    info = pd.read_csv(REPO / "data" / "mmlu-pro" / "models.csv").set_index("model")["params_b"].to_dict()
    costs = cost_table(matrix.models, {m: {"params_b": info[m]} for m in matrix.models if m in info}).costs()
    test_scores = np.nan_to_num(scores[:, test])
    p = {
        "torch": probs(enc["torch"], enc["torch"]),
        "onnx-int8": probs(enc["onnx-int8"], enc["onnx-int8"]),
        "mixed (torch pool, onnx-int8 queries)": probs(enc["torch"], enc["onnx-int8"]),
    }
    out = {
        "queries": Q,
        "test_queries": len(test),
        "models": len(scores),
        "checkpoint_best_epoch": best_epoch,
        "cost_basis": "params_b",
    }
    best_single = int(np.nan_to_num(scores[:, train]).mean(1).argmax())
    out["best_single_accuracy"] = round(float(test_scores[best_single].mean()), 4)
    for k in p:
        out[k] = {
            "p_abs_diff_mean": round(float(np.abs(p[k] - p["torch"]).mean()), 5),
            "p_abs_diff_max": round(float(np.abs(p[k] - p["torch"]).max()), 5),
        }
        for w in (1.0, 0.9, 0.7):
            chosen = {r: route_many(p[r], costs, RoutingPolicy(quality_weight=w)) for r in ("torch", k)}
            correct = {r: test_scores[c, np.arange(len(test))] for r, c in chosen.items()}
            lo, hi = bootstrap(correct[k])
            dlo, dhi = bootstrap(correct[k] - correct["torch"])
            out[k][f"w={w}"] = {
                "same_model_as_torch": round(float((chosen[k] == chosen["torch"]).mean()), 4),
                "models_chosen": int(len(np.unique(chosen[k]))),
                "routing_accuracy": round(float(correct[k].mean()), 4),
                "interval_95": [round(lo, 4), round(hi, 4)],
                "difference_vs_torch": round(float((correct[k] - correct["torch"]).mean()), 4),
                "difference_interval_95": [round(dlo, 4), round(dhi, 4)],
            }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=256, help="questions per text kind for the throughput part")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads of every runtime")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--routing-queries", type=int, default=1200, help="0 = skip the routing part")
    parser.add_argument("--epochs", type=int, default=40, help="LOCUS epochs of the routing part (the demo job's)")
    parser.add_argument(
        "--checkpoint",
        type=Path,
        default=None,
        help="keep the routing part's LOCUS checkpoint here (reused by a run with the same settings)",
    )
    parser.add_argument("--skip-throughput", action="store_true", help="the routing part only")
    parser.add_argument("--out", type=Path, default=None, help="also write the result JSON here")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}, {os.cpu_count()} CPUs", flush=True)
    result = {"threads": args.threads, "batch_size": args.batch_size, "load_before": os.getloadavg()}
    result["throughput"] = {"rows": {}} if args.skip_throughput else throughput(args.n, args.threads, args.batch_size)
    print(
        f"{'runtime':<10} {'texts':<6} {'q/s':>7} {'x torch':>8} "
        f"{'q/cpu-s':>8} {'x torch':>8} {'cos mean':>9} {'cos min':>8}"
    )
    for row in result["throughput"]["rows"].values():
        print(
            f"{row['runtime']:<10} {row['texts']:<6} {row['queries_per_s']:7.1f} {row['speedup_vs_torch']:8.2f} "
            f"{row['queries_per_cpu_s']:8.1f} {row['cpu_speedup_vs_torch']:8.2f} "
            f"{row['cosine_mean']:9.5f} {row['cosine_min']:8.5f}",
            flush=True,
        )
    if args.routing_queries:
        result["routing"] = routing(args.routing_queries, args.threads, args.epochs, args.checkpoint)
    result["load_after"] = os.getloadavg()
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

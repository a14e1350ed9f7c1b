"""CUDA check of the LOCUS library: training, embedding and scoring on a GPU, against the CPU path.

Run on a machine with a GPU (the CI machines have none; tests cover the CPU path):

    python3 -m bench.diag.gpu_check --data .sweep --out gpu_check.json

`--data` is a folder written by `bench/diag/sweep_locus.py export` (synthetic.npz: the synthetic pool and its
MiniLM encodings). Checks, each printed and stored in the JSON:
  1. train_locus on CUDA (device=dev) finishes with finite weights and beats a constant predictor;
  2. embeddings on CUDA are bit-identical across two calls (determinism) and permutation invariant to 1e-5;
  3. CUDA and CPU embeddings and probabilities of the same checkpoint agree (max abs difference);
  4. a checkpoint saved from the CUDA run loads with weights_only=True on CPU and gives the same outputs;
  5. seconds per training epoch on the synthetic pool with the default TrainConfig, CUDA and (1 thread) CPU,
     and embedding 112 models x 4,096 evaluations / scoring 4,096 queries x 112 models on CUDA.
Exits 1 if a check fails.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from locus_model.infer import embed_evaluation_sets, predict_proba
from locus_model.model import LocusConfig, load_checkpoint, save_checkpoint
from locus_model.training import TrainConfig, train_locus


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _best_of(repeats: int, fn) -> float:
    """Seconds of the fastest of `repeats` calls of fn, after one warm-up call, the device synchronised."""
    fn()
    times = []
    for _ in range(repeats):
        _sync()
        t0 = time.perf_counter()
        fn()
        _sync()
        times.append(time.perf_counter() - t0)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--out", type=Path, default=Path("gpu_check.json"))
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--device", default="cuda", help="cpu only for a dry run of this script")
    args = p.parse_args(argv)
    dev = args.device
    if dev.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("gpu_check: torch sees no CUDA device; run this on a machine with a GPU")
    torch.set_num_threads(1)
    z = np.load(args.data / "synthetic.npz")
    scores, enc = z["scores"].astype(np.float32), z["encodings"].astype(np.float32)
    M, Q = scores.shape
    rng = np.random.default_rng(0)
    is_val = rng.random(Q) < 0.1
    train = np.where(is_val[None], np.nan, scores)
    val = np.where(is_val[None], scores, np.nan)
    report: dict = {
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0) if dev != "cpu" else "none",
        "pool": [M, Q],
        "checks": {},
    }
    ok = True

    def check(name: str, passed: bool, **values) -> None:
        nonlocal ok
        ok &= bool(passed)
        report["checks"][name] = {"passed": bool(passed), **values}
        print(f"{'PASS' if passed else 'FAIL'} {name} {values}", flush=True)

    mcfg = LocusConfig(query_dim=enc.shape[1])
    timing = {}
    for device in (dev, "cpu"):
        cfg = TrainConfig(epochs=args.epochs if device == dev else 2, patience=100, device=device)
        _sync()
        t0 = time.perf_counter()
        res = train_locus(enc, train, val, model_config=mcfg, train_config=cfg, progress=False)
        _sync()
        timing[device] = {
            "epochs": len(res.history),
            "total_s": time.perf_counter() - t0,
            "median_epoch_s": float(np.median([h["seconds"] for h in res.history])),
        }
        if device == dev:
            cuda_res = res
    report["train_epoch_seconds"] = timing
    print("epoch seconds", timing, flush=True)
    model = cuda_res.model
    finite = all(torch.isfinite(t).all() for t in model.state_dict().values())
    base_rate = np.nanmean(train)
    const_bce = float(-(base_rate * np.log(base_rate) + (1 - base_rate) * np.log(1 - base_rate)))
    check(
        "cuda_training",
        finite and cuda_res.best_metrics["val_loss"] < const_bce,
        best_epoch=cuda_res.best_epoch,
        val_loss=cuda_res.best_metrics["val_loss"],
        constant_bce=const_bce,
        val_routing=cuda_res.best_metrics["val_routing_acc"],
    )

    sets = []
    for m in range(M):
        idx = np.flatnonzero(~np.isnan(train[m]))
        sets.append((idx, train[m, idx]))
    z1 = embed_evaluation_sets(model, enc, sets, device=dev)
    z2 = embed_evaluation_sets(model, enc, sets, device=dev)
    perm = [(i[p], s[p]) for (i, s), p in ((st, rng.permutation(len(st[0]))) for st in sets)]
    z3 = embed_evaluation_sets(model, enc, perm, device=dev)
    check("cuda_determinism", np.array_equal(z1, z2), max_abs=float(np.abs(z1 - z2).max()))
    check("cuda_permutation_invariance", np.abs(z1 - z3).max() <= 1e-5, max_abs=float(np.abs(z1 - z3).max()))
    zc = embed_evaluation_sets(model, enc, sets, device="cpu")
    pg = predict_proba(model, z1, enc[:1000], device=dev)
    pc = predict_proba(model, zc, enc[:1000], device="cpu")
    check(
        "cuda_vs_cpu",
        np.abs(z1 - zc).max() < 1e-3 and np.abs(pg - pc).max() < 1e-3,
        embedding_max_abs=float(np.abs(z1 - zc).max()),
        proba_max_abs=float(np.abs(pg - pc).max()),
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "locus.pt"
        save_checkpoint(path, model.to(dev), note="gpu_check")
        loaded, extra = load_checkpoint(path, map_location="cpu")
        zl = embed_evaluation_sets(loaded, enc, sets, device="cpu")
        check(
            "checkpoint_cuda_to_cpu",
            np.array_equal(zl, zc) and extra == {"note": "gpu_check"},
            max_abs=float(np.abs(zl - zc).max()),
        )

    # speed: 112 models x 4,096 evaluations (768-d, as bench_speed.py), scoring 4,096 x 112
    g = np.random.default_rng(1)
    big_enc = g.normal(size=(8192, 768)).astype(np.float32)
    big_enc /= np.linalg.norm(big_enc, axis=1, keepdims=True)
    big = LocusConfig(query_dim=768)
    torch.manual_seed(0)
    from locus_model.model import Locus

    net = Locus(big).eval()
    big_sets = [(g.choice(8192, 4096, replace=False), (g.random(4096) < 0.6).astype(np.float32)) for _ in range(112)]
    zz = embed_evaluation_sets(net, big_enc, big_sets, device=dev)
    embed_s = _best_of(5, lambda: embed_evaluation_sets(net, big_enc, big_sets, device=dev))
    score_s = _best_of(5, lambda: predict_proba(net, zz, big_enc[:4096], batch_size=4096, device=dev))
    report["speed_cuda_ms"] = {"embed_112x4096_best": 1000 * embed_s, "score_4096x112_best": 1000 * score_s}
    print("speed", report["speed_cuda_ms"], flush=True)
    report["ok"] = ok
    args.out.write_text(json.dumps(report, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

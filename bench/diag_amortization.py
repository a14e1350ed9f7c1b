"""Diagnostic: is LOCUS's gap to the baselines in the set encoder (amortization) or in the predictor?

On one fold of the accuracy protocol (bench_accuracy.py: same folds, anchors and held-out models), train LOCUS
with the TrainConfig defaults, then keep the trained predictor frozen and replace each model's embedding by one
fitted by gradient descent on that model's anchor evaluations (EmbedLLM-style, started from the encoder's
embedding). If the fitted embeddings predict the test queries much better than the encoder's, the encoder
loses information the predictor could use (an amortization gap); if not, the limit is the predictor's query
side. IRT on the same fold is printed for scale. This is a diagnostic, not a method: LOCUS onboards models with
one forward pass and never fits an embedding.

    .venv/bin/python bench/diag_amortization.py --suite demo --budget 256 --fold 0 \
        --out bench/results/diag_amortization.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.bench_accuracy import load_suite  # noqa: E402
from locus_model.encoding import encode_queries  # noqa: E402
from locus_model.evaluate import LocusMethod, choose_held_out, kfold_splits, make_method, score_predictions  # noqa: E402
from locus_model.metrics import bce  # noqa: E402
from locus_model.model import LocusConfig, predict_proba  # noqa: E402
from locus_model.train import TrainConfig  # noqa: E402

STEPS = (0, 10, 25, 50, 100, 200, 400)


def fit_embeddings(model, encodings: np.ndarray, scores: np.ndarray, z0: np.ndarray, *, steps: int,
                   lr: float = 0.01) -> np.ndarray:
    """Per-model embeddings minimising BCE on each model's known cells of ``scores`` (M, Q), predictor frozen."""
    model.eval()
    known = ~np.isnan(scores)
    cols = np.flatnonzero(known.any(axis=0))
    with torch.no_grad():
        u = model.query_projection(torch.from_numpy(encodings[cols]))  # (Q', d)
    y = torch.from_numpy(np.nan_to_num(scores[:, cols]).astype(np.float32))
    w = torch.from_numpy(known[:, cols].astype(np.float32))
    z = torch.nn.Parameter(torch.from_numpy(z0.copy()))
    opt = torch.optim.Adam([z], lr=lr)
    for p in model.parameters():
        p.requires_grad_(False)
    for _ in range(steps):
        opt.zero_grad()
        logits = model.predict_logits_projected(z, u)  # (M, Q')
        loss = (F.binary_cross_entropy_with_logits(logits, y, reduction="none") * w).sum() / w.sum()
        loss.backward()
        opt.step()
    return z.detach().numpy()


def finetune_predictor(model, encodings: np.ndarray, z: np.ndarray, scores: np.ndarray, val_scores: np.ndarray, *,
                       noise_ratio: float, steps: int = 1500, every: int = 10, lr: float = 8e-4,
                       seed: int = 0) -> tuple[object, dict]:
    """A copy of ``model`` whose predictor is trained further on fixed embeddings z (M, d) and the known cells
    of scores (M, Q) (full batch, query noise at ``noise_ratio``), keeping the state of minimum BCE on the
    known cells of val_scores. The encoder is untouched."""
    import copy

    ft = copy.deepcopy(model)
    for prm in ft.parameters():
        prm.requires_grad_(False)
    params = ft.predictor_parameters()
    for prm in params:
        prm.requires_grad_(True)
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.05)
    gen = torch.Generator().manual_seed(seed)
    cols = np.flatnonzero((~np.isnan(scores)).any(axis=0))
    vcols = np.flatnonzero((~np.isnan(val_scores)).any(axis=0))
    phi, vphi = torch.from_numpy(encodings[cols]), torch.from_numpy(encodings[vcols])
    y = torch.from_numpy(np.nan_to_num(scores[:, cols]).astype(np.float32))
    w = torch.from_numpy((~np.isnan(scores[:, cols])).astype(np.float32))
    vy = torch.from_numpy(np.nan_to_num(val_scores[:, vcols]).astype(np.float32))
    vw = torch.from_numpy((~np.isnan(val_scores[:, vcols])).astype(np.float32))
    zt = torch.from_numpy(z)
    std = noise_ratio * float(np.linalg.norm(encodings, axis=1).mean()) / np.sqrt(encodings.shape[1])

    def val_loss() -> float:
        ft.eval()
        with torch.no_grad():
            logits = ft.predict_logits(zt, vphi)
            return float((F.binary_cross_entropy_with_logits(logits, vy, reduction="none") * vw).sum() / vw.sum())

    best, best_state, best_step, trace = val_loss(), copy.deepcopy(ft.state_dict()), 0, []
    for step in range(1, steps + 1):
        ft.train()
        opt.zero_grad()
        noisy = phi + std * torch.randn(phi.shape, generator=gen)
        logits = ft.predict_logits(zt, noisy)
        loss = (F.binary_cross_entropy_with_logits(logits, y, reduction="none") * w).sum() / w.sum()
        loss.backward()
        opt.step()
        if step % every == 0:
            v = val_loss()
            trace.append((step, round(float(loss), 4), round(v, 4)))
            if v < best:
                best, best_state, best_step = v, copy.deepcopy(ft.state_dict()), step
    ft.load_state_dict(best_state)
    ft.eval()
    return ft, {"best_step": best_step, "best_val_bce": round(best, 4), "trace": trace[::10]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", default="demo", choices=("demo", "ae1"))
    p.add_argument("--budget", type=int, default=256)
    p.add_argument("--fold", type=int, default=0)
    p.add_argument("--epochs", type=int, default=None, help="LOCUS epochs (default: TrainConfig's)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--finetune-noise", type=float, nargs="*", default=(),
                   help="also fine-tune the predictor on the encoder's fixed embeddings at these noise ratios")
    p.add_argument("--out", type=Path, default=None, help="append one JSON line with every number printed")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    matrix, _ = load_suite(args.suite)
    enc = encode_queries(matrix.queries, encoder="all-MiniLM-L6-v2", progress=False)
    scores = matrix.scores.astype(np.float32)
    fold = kfold_splits(scores.shape[1], folds=5, budget=args.budget, seed=0, val_fraction=0.1)[args.fold]
    held = choose_held_out(len(matrix.models), 0.2, 0)
    trained = np.setdiff1d(np.arange(len(matrix.models)), held)
    budget_scores = np.full_like(scores, np.nan)
    budget_scores[:, fold.anchors] = scores[:, fold.anchors]
    val_scores = np.full_like(scores, np.nan)
    val_scores[:, fold.val] = scores[:, fold.val]
    labels = scores[:, fold.test]

    # LOCUS as trained before any predictor fine-tuning (finetune_steps=0); --finetune-noise adds it apart
    train_config = TrainConfig(device="cpu", seed=0, finetune_steps=0)
    if args.epochs is not None:
        train_config = TrainConfig(device="cpu", seed=0, finetune_steps=0, epochs=args.epochs, patience=args.epochs)
    locus = LocusMethod(model_config=LocusConfig(query_dim=enc.shape[1]), train_config=train_config)
    locus.fit(enc, budget_scores[trained], val_scores[trained])
    locus.onboard(budget_scores[held])
    z_enc = locus.embeddings  # rows: trained models, then held-out ones
    order = np.concatenate([trained, held])  # pool row of each embedding row
    irt = make_method("irt", seed=args.fold)
    irt.fit(enc, budget_scores[trained], val_scores[trained])
    irt_rows = irt.onboard(budget_scores[held])
    irt_probs = np.empty_like(labels)
    irt_probs[trained] = irt.predict_proba(np.arange(len(trained)), fold.test)
    irt_probs[held] = irt.predict_proba(irt_rows, fold.test)

    def report(probs_rows: np.ndarray) -> dict:
        probs = np.empty_like(labels)
        probs[order] = probs_rows
        out = {}
        for group, rows in (("all", np.arange(len(order))), ("held_out", held)):
            out[group] = {k: round(100 * v, 2) for k, v in score_predictions(probs[rows], labels[rows]).items()}
        return out

    rows = {"irt": {g: {k: round(100 * v, 2) for k, v in score_predictions(irt_probs[r], labels[r]).items()}
                    for g, r in (("all", np.arange(len(order))), ("held_out", held))}}
    val_bce = {}
    model = locus.model
    for steps in STEPS:
        z = z_enc if steps == 0 else fit_embeddings(model, enc, budget_scores[order], z_enc, steps=steps)
        rows[f"z_fit_{steps}"] = report(predict_proba(model, z, enc[fold.test]))
        val_bce[steps] = bce(predict_proba(model, z, enc[fold.val]), val_scores[order][:, fold.val])
    n_tr = len(trained)
    for ratio in args.finetune_noise:
        ft, info = finetune_predictor(model, enc, z_enc[:n_tr], budget_scores[trained], val_scores[trained],
                                      noise_ratio=ratio)
        rows[f"ft_noise{ratio:g}"] = report(predict_proba(ft, z_enc, enc[fold.test]))
        print(f"predictor fine-tuned at noise {ratio:g}: {info}", flush=True)
    print(f"{args.suite} budget {args.budget} fold {args.fold}: LOCUS kept epoch {locus.train_result.best_epoch}"
          f"; {time.perf_counter() - start:.0f} s")
    print(f"{'embeddings':<12} {'routing':>8} {'correct':>8} {'AUC':>8} {'Brier':>8} {'held rt':>8} {'held acc':>8} {'val BCE':>8}")
    for name, r in rows.items():
        steps = int(name.rsplit("_", 1)[1]) if name.startswith("z_fit") else None
        vb = f"{val_bce[steps]:.4f}" if steps is not None else ""
        print(f"{name:<12} {r['all']['routing_acc']:>8.2f} {r['all']['correctness_acc']:>8.2f} {r['all']['auc']:>8.2f} "
              f"{r['all']['brier']:>8.2f} {r['held_out']['routing_acc']:>8.2f} {r['held_out']['correctness_acc']:>8.2f} {vb:>8}")
    if args.out:
        with args.out.open("a") as f:
            f.write(json.dumps({"suite": args.suite, "budget": args.budget, "fold": args.fold, "rows": rows,
                                "val_bce": val_bce, "wall_s": round(time.perf_counter() - start, 1)}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

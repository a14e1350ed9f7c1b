"""Diagnostic: predictor fine-tuning variants on one fold, with the set encoder trained once and cached.

`train` trains LOCUS on one fold of the accuracy protocol (bench_accuracy.py: same folds, anchors, held-out
models; TrainConfig defaults, seed 0, but finetune_steps=0 and no calibration), saves the checkpoint, and
saves IRT's, EmbedLLM-MF's and kNN's test probabilities on that fold. `explore` loads them, embeds every model
from its anchors (one forward pass), then for each variant fine-tunes the predictor alone on the training
models' fixed embeddings (full batch, at most 2,048 train queries per step, query noise, the step of minimum
val BCE kept, optional patience; optionally plus a listwise term: per query, a softmax over models against the
correct ones; or kept by val routing), fits Platt on val and prints test metrics beside the baselines'. This
loop mirrors locus_model.train._finetune_predictor with extra options; the library's own is what LOCUS uses.

    .venv/bin/python bench/diag_finetune.py train --suite demo --budget 256 --fold 3
    .venv/bin/python bench/diag_finetune.py explore --suite demo --budget 256 --fold 3 \
        --variants '{"n2": {"steps": 1000}, "n3": {"steps": 2000, "noise": 3.0, "patience": 300}}' \
        --out bench/results/diag_finetune.jsonl

Variant keys: steps, noise (ratio, default 2), lr (8e-4), wd (0.05), listwise (weight, 0), tau (1),
select ("bce" | "routing"), patience (steps), max_cols (2048). Dropout draws are not seeded per variant, so
one variant run twice moves routing by up to ~0.7 points on the demo pool; correctness, AUC and Brier by <0.1.
`train --tag T --opts JSON` trains the encoder with other TrainConfig fields (no baselines; explore --tag T).
"""
from __future__ import annotations

import argparse
import copy
import json
import math
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
from locus_model.metrics import routing_accuracy  # noqa: E402
from locus_model.model import LocusConfig, embed_evaluation_sets, load_checkpoint, predict_proba, save_checkpoint  # noqa: E402
from locus_model.train import TrainConfig, fit_temperature  # noqa: E402

CACHE = REPO / "bench" / ".cache" / "diag_finetune"  # checkpoints and probabilities; git-ignored


def fold_data(suite, budget, fold_i):
    matrix, _ = load_suite(suite)
    enc = encode_queries(matrix.queries, encoder="all-MiniLM-L6-v2", progress=False)
    scores = matrix.scores.astype(np.float32)
    fold = kfold_splits(scores.shape[1], folds=5, budget=budget, seed=0, val_fraction=0.1)[fold_i]
    held = choose_held_out(len(matrix.models), 0.2, 0)
    trained = np.setdiff1d(np.arange(len(matrix.models)), held)
    b = np.full_like(scores, np.nan); b[:, fold.anchors] = scores[:, fold.anchors]
    v = np.full_like(scores, np.nan); v[:, fold.val] = scores[:, fold.val]
    return enc, scores, fold, held, trained, b, v


def train(args):
    enc, scores, fold, held, trained, b, v = fold_data(args.suite, args.budget, args.fold)
    tag = f"{args.suite}{args.budget}_f{args.fold}{args.tag}"
    t0 = time.perf_counter()
    tc = TrainConfig(device="cpu", seed=0, finetune_steps=0, calibration="none", **json.loads(args.opts))
    loc = LocusMethod(model_config=LocusConfig(query_dim=enc.shape[1]), train_config=tc)
    loc.fit(enc, b[trained], v[trained])
    CACHE.mkdir(parents=True, exist_ok=True)
    save_checkpoint(CACHE / f"{tag}.pt", loc.model)
    print("locus trained", time.perf_counter() - t0, "best epoch", loc.train_result.best_epoch, flush=True)
    out = {}
    for name in (("irt", "embedllm_mf", "knn") if not args.tag else ()):
        m = make_method(name, seed=args.fold)
        m.fit(enc, b[trained], v[trained])
        rows = m.onboard(b[held])
        p = np.empty((len(scores), len(fold.test)), np.float32)
        p[trained] = m.predict_proba(np.arange(len(trained)), fold.test)
        p[held] = m.predict_proba(rows, fold.test)
        out[name] = p
        print(name, "done", time.perf_counter() - t0, flush=True)
    if out:
        np.savez(CACHE / f"{tag}_baselines.npz", **out)


def finetune(model, z, enc_t, y_t, known_t, val, *, steps, noise_std, lr, wd, listwise, every=10, max_cols=2048,
             rng, gen, select="bce", tau=1.0, patience=10**9):
    """val: (z_val (M,d) same as z, enc_val (Qv,D), y_val (M,Qv), known_val)."""
    params = model.predictor_parameters()
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=wd)
    cols_all = np.flatnonzero(known_t.any(0).numpy())
    zv, ev, yv, kv = val
    yv_np = np.where(kv.numpy(), yv.numpy(), np.nan)

    @torch.no_grad()
    def validate():
        model.eval()
        lg = model.predict_logits(zv, ev)
        l = F.binary_cross_entropy_with_logits(lg[kv], yv[kv]).item()
        return l, routing_accuracy(torch.sigmoid(lg).numpy(), yv_np)

    l0, r0 = validate()
    best = (l0 if select == "bce" else -r0, l0)
    best_step, best_state = 0, copy.deepcopy(model.state_dict())
    for step in range(1, steps + 1):
        model.train()
        cols = cols_all if len(cols_all) <= max_cols else rng.choice(cols_all, max_cols, replace=False)
        ct = torch.from_numpy(cols)
        phi = enc_t[ct]
        if noise_std > 0:
            phi = phi + noise_std * torch.randn(phi.shape, generator=gen)
        lg = model.predict_logits(z, phi)
        mask = known_t[:, ct]
        y = y_t[:, ct]
        loss = F.binary_cross_entropy_with_logits(lg[mask], y[mask])
        if listwise > 0:
            # per query: softmax over the models with a known cell; target = correct models, uniform
            lgm = (lg / tau).masked_fill(~mask, -1e9)
            logp = torch.log_softmax(lgm, dim=0)
            pos = (y * mask).sum(0)
            has = pos > 0
            lw = -((y * mask * logp).sum(0)[has] / pos[has]).mean()
            loss = loss + listwise * lw
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if step % every == 0 or step == steps:
            l, r = validate()
            key = (l if select == "bce" else -r, l)
            if key < best:
                best, best_step, best_state = key, step, copy.deepcopy(model.state_dict())
            elif step - best_step >= patience:
                break
    model.load_state_dict(best_state)
    return {"step": best_step, "run": step, "val_bce_before": round(l0, 4), "val_bce_after": round(validate()[0], 4),
            "val_routing": round(validate()[1], 4)}


def explore(args):
    enc, scores, fold, held, trained, b, v = fold_data(args.suite, args.budget, args.fold)
    tag = f"{args.suite}{args.budget}_f{args.fold}{args.tag}"
    base = np.load(CACHE / f"{args.suite}{args.budget}_f{args.fold}_baselines.npz")
    labels = scores[:, fold.test]
    order = np.concatenate([trained, held])
    D = enc.shape[1]
    mean_norm = float(np.linalg.norm(enc, axis=1).mean())
    enc_t = torch.from_numpy(enc)

    def sets(s):
        return [(np.flatnonzero(~np.isnan(r)), r[~np.isnan(r)]) for r in s]

    def report(name, probs, info=""):
        res = {}
        for g, rows in (("all", np.arange(len(scores))), ("held", held)):
            res[g] = {k: round(100 * x, 2) for k, x in score_predictions(probs[rows], labels[rows]).items()}
        a, h = res["all"], res["held"]
        print(f"{name:<34} rt {a['routing_acc']:6.2f} h3 {a['hit@3']:6.2f} acc {a['correctness_acc']:6.2f} auc {a['auc']:6.2f} "
              f"brier {a['brier']:6.2f} | held rt {h['routing_acc']:6.2f} acc {h['correctness_acc']:6.2f} auc {h['auc']:6.2f} {info}", flush=True)
        return res

    for name in base.files:
        report(name, base[name])
    model0, _ = load_checkpoint(CACHE / f"{tag}.pt")
    z = torch.from_numpy(embed_evaluation_sets(model0, enc, sets(b[order])))  # rows in `order`
    n_tr = len(trained)
    y_t = torch.from_numpy(np.nan_to_num(b[trained]))
    known_t = torch.from_numpy(~np.isnan(b[trained]))
    vcols = fold.val
    yv = torch.from_numpy(np.nan_to_num(v[trained][:, vcols])); kv = torch.from_numpy(~np.isnan(v[trained][:, vcols]))
    val = (z[:n_tr], enc_t[vcols], yv, kv)

    def platt(model):
        with torch.no_grad():
            lg = model.predict_logits(z[:n_tr], enc_t[vcols])
        t, bb = fit_temperature(lg[kv], yv[kv], bias=True)
        model.temperature.fill_(t); model.logit_bias.fill_(bb)

    def probs_of(model):
        p = np.empty_like(labels)
        p[order] = predict_proba(model, z.numpy(), enc[fold.test])
        return p

    variants = json.loads(args.variants)
    results = {}
    for vname, opts in variants.items():
        m = copy.deepcopy(model0)
        info = {}
        if opts.get("steps", 0) > 0:
            rng = np.random.default_rng(args.fold); gen = torch.Generator().manual_seed(args.fold)
            info = finetune(m, z[:n_tr], enc_t, y_t, known_t, val, steps=opts["steps"],
                            noise_std=opts.get("noise", 2.0) * mean_norm / math.sqrt(D), lr=opts.get("lr", 8e-4),
                            wd=opts.get("wd", 0.05), listwise=opts.get("listwise", 0.0), rng=rng, gen=gen,
                            select=opts.get("select", "bce"), tau=opts.get("tau", 1.0), max_cols=opts.get("max_cols", 2048),
                            patience=opts.get("patience", 10**9))
        platt(m)
        results[vname] = {"opts": opts, "info": info, "res": report(vname, probs_of(m), json.dumps(info))}
    if args.out:
        with open(args.out, "a") as f:
            f.write(json.dumps({"tag": tag, "results": results}) + "\n")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("stage", choices=("train", "explore"))
    p.add_argument("--suite", default="demo"); p.add_argument("--budget", type=int, default=256)
    p.add_argument("--fold", type=int, default=0)
    p.add_argument("--variants", default='{"none": {}}')
    p.add_argument("--out", default=None)
    p.add_argument("--tag", default="")
    p.add_argument("--opts", default="{}")
    a = p.parse_args()
    torch.set_num_threads(1)
    (train if a.stage == "train" else explore)(a)

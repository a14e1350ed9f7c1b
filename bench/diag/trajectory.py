"""Diagnostic: a fold's LOCUS scored on its TEST queries along training (never used for selection).

One state's test routing swings by several points between checks 100 steps apart on metabench, so trials are read
from the whole trajectory. Trains LOCUS on fold 0 of `bench_accuracy.py --suite S --budgets B` with the given
TrainConfig / LocusConfig overrides (NAME=VALUE; M:NAME=VALUE for LocusConfig) and prints one JSON line every
EVERY epochs: val BCE, val routing, val within-query AUC (mean over val queries of the AUC of the models'
P(correct) against their labels), test routing and test AUC (all models; "_trained": among the in-training models
only); then the kept state's test figures. With the latent warm-up on, first one line of the warm-up's own test
routing among the in-training models: their free vectors through the warm-up's predictor (what matrix
factorisation routes with), against which the encoder's embeddings of the same models are read.

    .venv/bin/python -m bench.diag.trajectory --suite metabench --budget 256 --every 4 \
        epochs=48 finetune_steps=0 patience=1000
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import torch

import locus_model.training.epochs as epochs
import locus_model.training.train as train
from bench.common import apply_options, protocol_setup
from locus_model.evaluation.methods import fit_and_predict
from locus_model.infer import embed_evaluation_sets, predict_proba
from locus_model.stats.metrics import roc_auc, routing_accuracy
from locus_model.training.inputs import val_logits


def query_auc(probs: np.ndarray, labels: np.ndarray) -> float:
    """Mean over queries (columns) of the AUC of the models' probabilities; queries where all models agree skipped."""
    out = []
    for j in range(labels.shape[1]):
        y, known = labels[:, j], ~np.isnan(labels[:, j])
        if 0 < np.nansum(y[known] >= 0.5) < known.sum():
            out.append(roc_auc(probs[known, j][None], y[known][None]))
    return float(np.mean(out)) if out else float("nan")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", default="metabench")
    p.add_argument("--budget", type=int, default=256)
    p.add_argument("--fold", type=int, default=0)
    p.add_argument("--every", type=int, default=4, help="score the test queries every this many epochs")
    p.add_argument("options", nargs="*", metavar="NAME=VALUE")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    setup = protocol_setup(
        args.suite, budget=args.budget, train_options=[o for o in args.options if not o.startswith("M:")]
    )
    model_config = apply_options(setup.model_config, [o[2:] for o in args.options if o.startswith("M:")], "M:")
    fold = setup.splits[args.fold]
    labels, sets = setup.scores[:, fold.test], setup.anchor_sets(fold)
    original, calls = epochs.validate, [0]

    trained = setup.trained
    original_latents = train.fit_latents

    def traced_latents(net, data, train_np, val, cfg):
        out, latents = original_latents(net, data, train_np, val, cfg)
        with torch.no_grad():
            u = net.query_projection(data.enc[torch.from_numpy(fold.test).to(data.enc.device)])
            p_latent = torch.sigmoid(net.predict_logits_projected(latents.vectors, u)).cpu().numpy()
        print(
            json.dumps(
                {
                    "warmup": out["step"],
                    "noise": out["noise"],
                    "val_loss": round(out["val_loss"], 4),
                    "test_routing_trained": round(routing_accuracy(p_latent, labels[trained]), 4),
                    "test_auc_trained": round(roc_auc(p_latent, labels[trained]), 4),
                }
            ),
            flush=True,
        )
        return out, latents

    train.fit_latents = traced_latents

    def traced(model, enc, val, z=None):
        out = original(model, enc, val, z)
        calls[0] += 1
        if calls[0] % args.every == 0:  # every this many epochs (only the epochs call epochs.validate)
            with torch.no_grad():
                val_p = torch.sigmoid(val_logits(model, enc, val)).cpu().numpy()
            test_p = predict_proba(
                model, embed_evaluation_sets(model, setup.encodings, sets), setup.encodings[fold.test]
            )
            print(
                json.dumps(
                    {
                        "validation": calls[0],
                        "val_loss": round(out[0], 4),
                        "val_routing": round(out[1], 4),
                        "val_query_auc": round(query_auc(val_p, val.labels), 4),
                        "test_routing": round(routing_accuracy(test_p, labels), 4),
                        "test_auc": round(roc_auc(test_p, labels), 4),
                        "test_routing_trained": round(routing_accuracy(test_p[trained], labels[trained]), 4),
                    }
                ),
                flush=True,
            )
        return out

    epochs.validate = traced  # the epochs' validations only
    fitted = fit_and_predict(**{**setup.fit_args("locus", fold), "model_config": model_config, "progress": False})
    probs, seconds = fitted.probs, fitted.seconds
    print(
        json.dumps(
            {
                "kept_test_routing": round(routing_accuracy(probs, labels), 4),
                "kept_test_routing_trained": round(routing_accuracy(probs[trained], labels[trained]), 4),
                "kept_test_auc": round(roc_auc(probs, labels), 4),
                "seconds": round(seconds),
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

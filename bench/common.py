"""What the benchmarks share: the suites, the fit cache, the protocol's folds and configs for scripts that reuse them.

`bench_accuracy.py` runs the protocol on a suite; the other scripts (`bench_frontier.py`, `bench_geometry.py`, the
diagnostics in `diag/`) rebuild the same folds, anchors, held-out models and LOCUS configs with `protocol_setup` and
read the fits `bench_accuracy.py --fit-cache DIR` kept (`fit_path`, `fold_locus`). Scripts run from the repository
root as modules: `python -m bench.bench_accuracy ...`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from locus_model.data.contract import validate_evaluations
from locus_model.data.encoding import encode_queries
from locus_model.data.long_format import read_evaluations
from locus_model.data.matrix import EvaluationMatrix
from locus_model.evaluation.methods import Fitted, fit_and_predict
from locus_model.evaluation.splits import choose_held_out, kfold_splits
from locus_model.model import LocusConfig
from locus_model.training import TrainConfig

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"  # the result files (bench/results/README.md: which figure each backs)
CACHE = REPO / "bench" / ".cache"  # ignored by git: fit caches, reference checkouts, scratch output
AE1 = REPO.parent / "shared" / "data" / "alpacaeval-ae1" / "evaluations.parquet"
MMLU_PRO = REPO / "data" / "mmlu-pro" / "evaluations.parquet"
METABENCH = REPO.parent / "shared" / "data" / "metabench" / "evaluations.parquet"
BUDGETS = {
    "synthetic": (128, 256, 512, 1024),
    "ae1": (64, 128, 256),
    "mmlu": (32, 64, 128, 256, 512, 1024),
    "metabench": (32, 64, 128, 256, 512),
}


def load_suite(suite: str) -> tuple[EvaluationMatrix, str]:
    """The evaluation matrix of a suite (BUDGETS' keys) and where it was read from."""
    if suite == "synthetic":
        from locus_model.data.synthetic_skills import make_synthetic_tables

        evaluations, _, _ = make_synthetic_tables("full", seed=0)
        table = validate_evaluations(evaluations.drop(columns="split"), source="synthetic pool (full, seed 0)")
        return EvaluationMatrix.from_table(table), "synthetic pool, full, seed 0"
    if suite == "ae1":
        if not AE1.is_file():
            raise SystemExit(f"{AE1} not found: the AlpacaEval matrix lives in ../shared/data (see its README)")
        return EvaluationMatrix.from_table(read_evaluations(AE1)[0]), str(AE1)
    if suite == "mmlu":  # real: 29 models x 12,032 MMLU-Pro questions, vendored (data/mmlu-pro/README.md)
        return EvaluationMatrix.from_table(read_evaluations(MMLU_PRO)[0]), str(MMLU_PRO)
    if suite == "metabench":  # real: 2,001 open models x 1,075 leaderboard items, read in place (CC BY-NC-SA)
        if not METABENCH.is_file():
            raise SystemExit(f"{METABENCH} not found: the metabench matrix lives in ../shared/data (see its README)")
        return EvaluationMatrix.from_table(read_evaluations(METABENCH)[0]), str(METABENCH)
    raise SystemExit(f"unknown suite {suite!r}: use synthetic, ae1, mmlu or metabench")


LABELS = {
    "locus": "LOCUS",
    "embedllm_mf": "EmbedLLM-MF",
    "irt": "IRT",
    "knn": "kNN",
    "best_single": "best single",
    "oracle": "oracle",
}


# ---------------------------------------------------------------------------------------------- fit cache


def fit_key(args: dict, tag: str) -> str:
    """What makes one (fold, method) fit: the fold's queries, the model split, the configs, the seed, the data."""
    fold = args["fold"]
    parts = {
        "name": args["name"],
        "seed": args["seed"],
        "tag": tag,
        "fold": [
            hashlib.sha1(np.ascontiguousarray(a).tobytes()).hexdigest()
            for a in (fold.train, fold.anchors, fold.val, fold.test)
        ],
        "trained": args["trained"].tolist(),
        "held": args["held"].tolist(),
        "scores": hashlib.sha1(np.nan_to_num(args["scores"], nan=-1).tobytes()).hexdigest(),
        "encodings": hashlib.sha1(args["encodings"][:64].tobytes()).hexdigest() + str(args["encodings"].shape),
        "configs": [repr(args.get(k)) for k in ("model_config", "train_config", "baseline_config")]
        if args["name"] == "locus"
        else repr(args.get("baseline_config")),
    }
    return hashlib.sha1(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def fit_path(cache: Path, args: dict, tag: str) -> Path:
    """The fit cache's file of one (fold, method) fit: its test probabilities (.npz); LOCUS's checkpoint beside it
    has the suffix .pt."""
    return cache / f"{args['name']}_f{args['fold'].index}_{fit_key(args, tag)}.npz"


def cached_fit_and_predict(cache: Path, tag: str, reuse_tags: tuple[str, ...] = ()):
    """The library's fit_and_predict with its result kept on disk per (fold, method) fit, so that folds run in separate
    invocations add up to one k-fold result without refitting, and the trained LOCUS of each fold is kept
    (`<key>.pt`, locus_model.model.save_checkpoint) for the onboarding and geometry scripts. The tag is part of the
    key; a fit cached under one of ``reuse_tags`` (runs with another --tag, same data and configs) is read too.
    LOCUS's cache is its checkpoint: a fold whose trained router is kept is scored by it again (nothing trained or
    fitted; a checkpoint from before the trained router, without one, is trained again); its test probabilities are
    written (again) under this run's key."""
    from locus_model.router import Router

    def run(**args):
        path = fit_path(cache, args, tag)
        if args["name"] == "locus" and args.get("router") is None:
            for other in (tag, *reuse_tags):
                kept = fit_path(cache, args, other).with_suffix(".pt")
                if kept.is_file() and "router" in torch.load(kept, weights_only=True):  # probabilities kept too
                    fitted = fit_and_predict(**{**args, "router": Router.load(kept)[0]})
                    save_fitted(path, fitted)
                    return fitted
        for other in (tag, *reuse_tags):
            found = fit_path(cache, args, other)
            if found.is_file():  # a LOCUS fit cached before the guard, without its checkpoint: routed by P
                return load_fitted(found)
        if args.get("router") is not None:
            return fit_and_predict(**args)
        cache.mkdir(parents=True, exist_ok=True)

        def keep(method) -> None:  # the fold's trained LOCUS, for the onboarding and geometry scripts
            if args["name"] == "locus":
                fold = args["fold"]
                method.router.save(
                    path.with_suffix(".pt"),
                    fold=fold.index,
                    anchors=fold.anchors.tolist(),
                    trained=args["trained"].tolist(),
                    held=args["held"].tolist(),
                    seed=args["seed"],
                )

        fitted = fit_and_predict(**args, on_fitted=keep)
        save_fitted(path, fitted)
        return fitted

    return run


def save_fitted(path: Path, fitted: Fitted) -> None:
    """A fit's test probabilities, seconds and (LOCUS) guard in one .npz."""
    if fitted.standing is None:
        np.savez(path, probs=fitted.probs, seconds=fitted.seconds)
    else:
        np.savez(path, probs=fitted.probs, seconds=fitted.seconds, standing=fitted.standing, margin=fitted.guard_margin)


def load_fitted(path: Path) -> Fitted:
    """What save_fitted wrote (a file without a guard: routed by P(correct))."""
    with np.load(path) as z:
        if "standing" not in z.files:
            return Fitted(z["probs"], float(z["seconds"]))
        margin = z["margin"]  # one margin, or one per test query (the measured guard)
        return Fitted(z["probs"], float(z["seconds"]), z["standing"], float(margin) if margin.ndim == 0 else margin)


@dataclass
class ProtocolSetup:
    """What evaluate() builds for one suite and budget, for scripts that reuse its folds and trained LOCUS."""

    matrix: EvaluationMatrix
    encodings: np.ndarray  # (Q, D) float32, matrix order
    scores: np.ndarray  # (M, Q) float32, NaN = no cell
    splits: list
    trained: np.ndarray  # model rows trained on
    held: np.ndarray  # held-out model rows
    model_config: LocusConfig
    train_config: TrainConfig
    seed: int

    def fit_args(self, name: str, fold) -> dict:
        """The arguments evaluate() gives fit_and_predict for (fold, method): the same fit-cache key."""
        return dict(
            name=name,
            seed=self.seed + fold.index,
            scores=self.scores,
            encodings=self.encodings,
            fold=fold,
            trained=self.trained,
            held=self.held,
            model_config=self.model_config,
            train_config=self.train_config,
            baseline_config=None,
            progress=True,
        )

    def anchor_sets(self, fold) -> list[tuple[np.ndarray, np.ndarray]]:
        """Every model's evaluation set on the fold's anchors, (query indices, scores) with NaN cells left out: what
        embed_evaluation_sets embeds, as the protocol embeds held-out models."""
        sets = []
        for row in self.scores[:, fold.anchors]:
            keep = ~np.isnan(row)
            sets.append((fold.anchors[keep], row[keep]))
        return sets


def protocol_setup(
    suite: str,
    *,
    budget: int,
    folds: int = 5,
    seed: int = 0,
    holdout_models: float = 0.2,
    encoder: str = "all-MiniLM-L6-v2",
    runtime: str = "torch",
    train_options: Sequence[str] = (),
) -> ProtocolSetup:
    """The folds, anchors, held-out models and LOCUS configs of `bench_accuracy.py --suite S --budgets B` with the
    same options (TrainConfig(device="cpu", seed) plus --train-option overrides)."""
    matrix, _ = load_suite(suite)
    enc = np.asarray(encode_queries(matrix.queries, encoder=encoder, runtime=runtime, progress=True), dtype=np.float32)
    held = choose_held_out(len(matrix.models), holdout_models, seed)
    return ProtocolSetup(
        matrix=matrix,
        encodings=enc,
        scores=matrix.scores.astype(np.float32),
        splits=kfold_splits(len(matrix.query_ids), folds=folds, budget=budget, seed=seed),
        trained=np.setdiff1d(np.arange(len(matrix.models)), held),
        held=held,
        model_config=LocusConfig(query_dim=enc.shape[1]),
        train_config=apply_options(TrainConfig(device="cpu", seed=seed), list(train_options)),
        seed=seed,
    )


def fold_locus(setup: ProtocolSetup, fold, cache: Path, tag: str = "", reuse_tags: tuple[str, ...] = ()):
    """The trained router (locus_model.router.Router) that `bench_accuracy.py --fit-cache CACHE [--tag TAG]` trained on
    this fold (one cached under ``reuse_tags`` is taken too; trained and cached now if absent)."""
    from locus_model.router import Router

    args = setup.fit_args("locus", fold)
    found = [fit_path(cache, args, t).with_suffix(".pt") for t in (tag, *reuse_tags)]
    path = next((p for p in found if p.is_file()), found[0])
    if not path.is_file():
        cached_fit_and_predict(cache, tag)(**args)
    if not path.is_file():
        raise SystemExit(f"{path}: no checkpoint beside the cached fit; delete its .npz and run again")
    return Router.load(path)[0]


def apply_options(config, options: list[str], flag: str = "--train-option"):
    """A config dataclass (TrainConfig, LocusConfig) with NAME=VALUE overrides, each VALUE parsed as the field's
    current type; `flag` names the command-line option in the error."""
    changes: dict[str, object] = {}
    for option in options:
        name, sep, value = option.partition("=")
        if not sep or not hasattr(config, name):
            raise SystemExit(f"{flag} {option!r}: use NAME=VALUE with NAME a {type(config).__name__} field")
        current = getattr(config, name)
        if isinstance(current, bool):
            changes[name] = value.lower() in ("1", "true", "yes")
        elif isinstance(current, tuple):  # comma-separated, e.g. finetune_noise=2,3
            changes[name] = tuple(type(current[0])(v) for v in value.split(",")) if current else tuple(value.split(","))
        elif current is None or value.lower() == "none":  # an optional field (int | None): a number, or None
            changes[name] = None if value.lower() == "none" else (float(value) if "." in value else int(value))
        else:
            changes[name] = value if isinstance(current, str) else type(current)(value)
    return replace(config, **changes)

"""How well a model is known from n of its evaluations: per-benchmark accuracy estimates and their
90% intervals for held-out models, reference-score estimates, and copy recognition, for LOCUS and the baselines.

For each n of ``sizes``: every held-out model is onboarded from n random evaluations among the fold's training
queries; its target on benchmark b is its accuracy over all of b's queries in the data. Methods:
- ``product``: what onboarding shows, the estimator of locus_model.estimates (empirical Bayes per benchmark on the
  pool's low-rank prior, its robust posterior and finite-population intervals), fitted once per fold;
- ``locus``: the encoder's embedding refined by the predictor's likelihood (estimates.refine_embeddings), the
  router's P(correct) at each draw of its Laplace posterior plus binomial sampling;
- ``locus_encoder``: the set encoder's embedding alone, drawn from N(z0, encoder_spread^2), through the router;
- ``observed``: the benchmark's observed mean for its unobserved queries (the pool's mean where none was asked);
- ``low_rank``: a rank-16 completion of the in-training models' item matrix over every query (the pool's data), the
  new row a ridge projection (estimates.LowRank);
- ``irt``: the IRT baseline (evaluation.latent.IRT) fitted on the training models, the new models onboarded by MAP;
- ``router``: the trained router's P(correct) (the encoder's embedding of the n answers, their group profile);
- ``router_eb``: empirical Bayes per benchmark (estimates.beta_binomial_capability) on the router's prior, its width
  the prior's error at n measured on the in-training models (optimistic: they trained it).
locus_encoder, observed, low_rank, irt and router carry only the binomial part of the interval.
Keys: capability.<method>.<n>.mae (points) / .coverage, reference.<method>.<n>.mae (/ .coverage),
identity.<n>.hit_at_1 (a copy built from n of an in-training model's evaluations: its source ranks first by
estimates.answer_likeness). Off the pool's questions (with a router): the product's estimator fitted on the
in-training models' answers to the fold's training queries only, the held-out models asked n of the other queries:
capability_unseen.<method>.<n>.mae / .coverage / .bias (signed, points) for product, low_rank and observed, and
identity_unseen.<n>.hit_at_1 (a copy from n of an in-training model's answers on those queries, ranked by its
refined embedding's distance: no question is shared).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np
import pandas as pd

from locus_model.estimates import (
    Benchmarks,
    Capability,
    Estimator,
    EstimatorConfig,
    LowRank,
    Posterior,
    accuracy_from_proba,
    answer_likeness,
    beta_binomial_capability,
    draw_sets,
    encoder_spread,
    fit_reference_map,
    reference_estimates,
    refine_embeddings,
    simulate_prior_error,
)
from locus_model.estimates.reference import ReferenceMap
from locus_model.evaluation.latent import IRT, LatentConfig
from locus_model.evaluation.splits import query_folds
from locus_model.infer import embed_evaluation_sets
from locus_model.model_config import LocusConfig
from locus_model.training import train_locus

METHODS = ("product", "locus", "locus_encoder", "observed", "low_rank", "irt", "router", "router_eb")
NEEDS_LOCUS = ("locus", "locus_encoder", "router", "router_eb")  # without them, no LOCUS is trained
ANCHORS = ("product", "locus", "router_eb")  # the methods every other is compared with, paired
DEFAULT_SIZES = (16, 32, 64, 128)


def _draw_sets(scores: np.ndarray, rows: np.ndarray, queries: np.ndarray, n: int, rng: np.random.Generator) -> list:
    return draw_sets(scores[rows], n, rng, queries)


def true_accuracy(scores: np.ndarray, benchmarks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(names, (M, K) accuracy over every query of each benchmark, NaN cells skipped)."""
    coding = Benchmarks.of(benchmarks)
    return coding.names, coding.means(scores)


def _observed_proba(sets: list, benchmarks: np.ndarray, pool_mean: np.ndarray) -> np.ndarray:  # (M, 1, Q)
    coding = Benchmarks.of(benchmarks)
    _, right, count = coding.counts(sets)
    with np.errstate(invalid="ignore", divide="ignore"):
        per = np.where(count > 0, right / np.maximum(count, 1), pool_mean)  # the pool's mean where none was asked
    return per[:, coding.codes][:, None, :]


def _dense(sets: list, n_queries: int) -> np.ndarray:  # (M, Q) NaN = not asked
    dense = np.full((len(sets), n_queries), np.nan, np.float32)
    for m, (idx, s) in enumerate(sets):
        dense[m, idx] = s
    return dense


def _router_proba(router, encodings: np.ndarray, benchmarks: np.ndarray, sets: list) -> np.ndarray:  # (M, Q)
    """The router's P(correct): the set encoder's embedding of the n answers, their group profile."""
    profiles = router.profiles(encodings, _dense(sets, len(encodings)), np.asarray(benchmarks).astype(str))
    return router.proba(embed_evaluation_sets(router.model, encodings, sets), profiles, encodings)


def router_capability(
    router, encodings: np.ndarray, benchmarks: np.ndarray, post: Posterior, sets: list, *, samples: int, seed: int
) -> Capability:
    """The router's P(correct) at each of ``samples`` draws of the embedding's posterior (the sets' group profiles),
    scored by accuracy_from_proba."""
    z = post.samples(samples, seed=seed)  # (M, S, d)
    M, S, d = z.shape
    profiles = router.profiles(encodings, _dense(sets, len(encodings)), np.asarray(benchmarks).astype(str))
    proba = router.proba(z.reshape(M * S, d), np.repeat(profiles, S, axis=0), encodings)
    return accuracy_from_proba(proba.reshape(M, S, -1), sets, benchmarks, seed=seed)


def _score(cap, truth: np.ndarray) -> dict:
    signed = (cap.estimate - truth) * 100
    err = np.abs(signed)
    cover = (truth >= cap.lo) & (truth <= cap.hi)
    return {
        "mae": float(err.mean()),
        "coverage": float(cover.mean()),
        "bias": float(signed.mean()),
        "mae_per_model": err.mean(axis=1),
    }  # kept for paired intervals, dropped before JSON


@dataclass
class _Fold:
    """What capability_evaluation reads for every n: the fold's pool (its models' answers, embeddings and accuracy),
    the reference map, and the estimators fitted once."""

    names: np.ndarray  # (K,) benchmark names
    truth: np.ndarray  # (M, K) every model's accuracy over all of each benchmark's queries
    train_sets: list  # the in-training models' evaluations on the training queries
    pool_z: np.ndarray | None  # their embeddings (None without a model)
    pool_mean: np.ndarray  # (K,) the in-training models' mean accuracy
    estimator: Estimator | None  # the product's, fitted once for every n
    unseen_estimator: Estimator | None  # the same pool without its answers off the training queries
    unseen_queries: np.ndarray
    low_rank: LowRank
    coding: Benchmarks
    sim_rows: np.ndarray  # the in-training rows router_eb's prior error is measured on
    ref_map: ReferenceMap | None = None
    ref_rows: np.ndarray | None = None  # held-out rows with every reference score
    ref_truth: np.ndarray | None = None  # (H, R) their reference scores


def _prepare_fold(
    model,
    encodings: np.ndarray,
    scores: np.ndarray,
    benchmarks: np.ndarray,
    *,
    trained: np.ndarray,
    held: np.ndarray,
    train_queries: np.ndarray,
    methods: Sequence[str],
    reference: pd.DataFrame | None,
    router,
    config: EstimatorConfig,
    seed: int,
) -> _Fold:
    """The fold's pool, reference map and estimators, fitted once for every n."""
    names, truth = true_accuracy(scores, benchmarks)
    train_sets = []  # the in-training models' evaluations on the training queries: the pool's embeddings
    for r in trained:
        have = train_queries[~np.isnan(scores[r, train_queries])]
        train_sets.append((have, scores[r, have]))
    pool_z = None if model is None else embed_evaluation_sets(model, encodings, train_sets)
    ref_map = ref_rows = ref_truth = None
    if reference is not None:
        ok = trained[~reference.iloc[trained].isna().any(axis=1).to_numpy()]
        ref_map = fit_reference_map(truth[ok], reference.iloc[ok].reset_index(drop=True))
        ref_rows = ~reference.iloc[held].isna().any(axis=1).to_numpy()
        ref_truth = reference.iloc[held].to_numpy(dtype=float)
    train_matrix = scores[trained]  # the pool's data: its models' answers on every query (the issue's baseline)
    # the product's estimator fitted once for every n (its completion is low_rank's), else the completion alone
    estimator = (
        Estimator(config).fit(train_matrix, benchmarks, router=router, encodings=encodings, asked_from=train_queries)
        if "product" in methods
        else None
    )
    # off the pool's questions: the same pool without its answers on the fold's other queries, the held-out models
    # asked only those (capability_evaluation's unseen block)
    unseen_queries = np.setdiff1d(np.arange(scores.shape[1]), train_queries)
    unseen_estimator = None
    if "product" in methods and len(unseen_queries):
        seen_only = np.full_like(train_matrix, np.nan)
        seen_only[:, train_queries] = train_matrix[:, train_queries]
        unseen_estimator = Estimator(config).fit(seen_only, benchmarks, router=router, encodings=encodings)
    return _Fold(
        names=names,
        truth=truth,
        train_sets=train_sets,
        pool_z=pool_z,
        pool_mean=truth[trained].mean(axis=0),
        estimator=estimator,
        unseen_estimator=unseen_estimator,
        unseen_queries=unseen_queries,
        low_rank=estimator.prior_.full if estimator is not None else LowRank.fit(train_matrix, 16),
        coding=Benchmarks.of(benchmarks),
        sim_rows=trained[np.random.default_rng(seed).permutation(len(trained))[:200]],
        ref_map=ref_map,
        ref_rows=ref_rows,
        ref_truth=ref_truth,
    )


def _method_capability(
    method: str,
    fold: _Fold,
    sets: list,
    n: int,
    *,
    model,
    encodings: np.ndarray,
    scores: np.ndarray,
    benchmarks: np.ndarray,
    train_queries: np.ndarray,
    router,
    irt,
    embedded: tuple[np.ndarray, np.ndarray] | None,
    samples: int,
    seed: int,
    out: dict,
) -> Capability | None:
    """One method's capability estimates of the held-out models from ``sets`` (n answers each); None where the
    method has nothing to run on (no router, no IRT). ``embedded``: (the encoder's spread at n, the sets'
    embeddings) when there is a model. router_eb records its prior's sd in ``out``."""
    if method == "product":
        assert fold.estimator is not None  # fitted wherever "product" is among the methods
        return fold.estimator.estimate(sets)
    if method == "locus":
        assert embedded is not None  # LOCUS runs with its model, and the sets are embedded wherever there is one
        spread, z0 = embedded
        post = refine_embeddings(model, encodings, sets, spread, z0=z0)
        return router_capability(router, encodings, benchmarks, post, sets, samples=samples, seed=seed)
    if method == "locus_encoder":
        assert embedded is not None  # as for "locus"
        spread, z0 = embedded
        prior = Posterior(
            mean=z0,
            prior=z0,
            chol=np.broadcast_to(np.diag(spread), (len(z0), *np.diag(spread).shape)),
            log_lik=np.zeros(len(z0)),
            log_lik_prior=np.zeros(len(z0)),
        )
        return router_capability(router, encodings, benchmarks, prior, sets, samples=samples, seed=seed)
    if method == "observed":
        return accuracy_from_proba(_observed_proba(sets, benchmarks, fold.pool_mean), sets, benchmarks, seed=seed)
    if method == "low_rank":
        return accuracy_from_proba(fold.low_rank.proba(sets)[:, None, :], sets, benchmarks, seed=seed)
    if method == "router" and router is not None:
        proba = _router_proba(router, encodings, benchmarks, sets)[:, None, :]
        return accuracy_from_proba(proba, sets, benchmarks, seed=seed)
    if method == "router_eb" and router is not None:  # its error on the in-training models: optimistic

        def router_means(rows, sets) -> np.ndarray:  # (M, K) router_eb's prior means
            return fold.coding.means(_router_proba(router, encodings, benchmarks, sets))

        tau = simulate_prior_error(router_means, scores[fold.sim_rows], benchmarks, n, queries=train_queries, seed=seed)
        out[f"prior_sd.{method}.{n}"] = float(np.sqrt(tau).mean())
        return beta_binomial_capability(router_means(None, sets), tau, sets, benchmarks, samples=samples, seed=seed)
    if method == "irt" and irt is not None:
        rows = irt.onboard(_dense(sets, scores.shape[1]))
        proba = irt.predict_proba(rows, np.arange(scores.shape[1]))[:, None, :]
        return accuracy_from_proba(proba, sets, benchmarks, seed=seed)
    return None


def _record_scores(
    caps: dict, fold: _Fold, truth: np.ndarray, n: int, *, seed: int, out: dict, per_model: dict
) -> None:
    """Each method's capability (MAE, coverage) against ``truth`` (H, K), and its reference-score estimates' where
    the fold has a reference map: into ``out``, the per-model errors into ``per_model`` (paired comparisons)."""
    for method, cap in caps.items():
        s = _score(cap, truth)
        out[f"capability.{method}.{n}.mae"], out[f"capability.{method}.{n}.coverage"] = s["mae"], s["coverage"]
        per_model["capability", method, n] = s["mae_per_model"]
        if fold.ref_map is not None:
            est, lo, hi = reference_estimates(cap, fold.ref_map, seed=seed)
            err = np.abs(est - fold.ref_truth)[fold.ref_rows]
            out[f"reference.{method}.{n}.mae"] = float(err.mean())
            out[f"reference.{method}.{n}.coverage"] = float(
                ((fold.ref_truth >= lo) & (fold.ref_truth <= hi))[fold.ref_rows].mean()
            )
            for j, col in enumerate(fold.ref_map.scores):
                out[f"reference.{method}.{n}.{col}.mae"] = float(err[:, j].mean())
            per_model["reference", method, n] = err.mean(axis=1)


def _unseen_figures(
    fold: _Fold,
    scores: np.ndarray,
    benchmarks: np.ndarray,
    *,
    trained: np.ndarray,
    held: np.ndarray,
    n: int,
    rng: np.random.Generator,
    identity_models: int,
    router,
    samples: int,
    seed: int,
    out: dict,
    per_model: dict,
) -> None:
    """The held-out models asked n questions the pool never answered: the product's, the completion's and the
    observed estimates; with a router, copies of in-training models recognised by the refined embedding alone."""
    estimator = fold.unseen_estimator
    assert estimator is not None  # the caller runs these figures only where the fold has one
    sets = _draw_sets(scores, held, fold.unseen_queries, n, rng)
    caps = {
        "product": estimator.estimate(sets),
        "low_rank": accuracy_from_proba(estimator.prior_.full.proba(sets)[:, None, :], sets, benchmarks, seed=seed),
        "observed": accuracy_from_proba(_observed_proba(sets, benchmarks, fold.pool_mean), sets, benchmarks, seed=seed),
    }
    for method, cap in caps.items():
        s = _score(cap, fold.truth[held])
        for what in ("mae", "coverage", "bias"):
            out[f"capability_unseen.{method}.{n}.{what}"] = s[what]
        per_model["capability_unseen", method, n] = s["mae_per_model"]
    if router is not None:  # copies recognised by the refined embedding alone: no question is shared
        sources = rng.choice(len(trained), size=min(identity_models, len(trained)), replace=False)
        copies = _draw_sets(scores, trained[sources], fold.unseen_queries, n, rng)
        post = estimator.embedding(copies)
        assert fold.pool_z is not None  # a router comes with its model, which embedded the pool
        order, _ = answer_likeness(copies, estimator.prior_.scores, fold.pool_z, post, samples=samples, seed=seed)
        out[f"identity_unseen.{n}.hit_at_1"] = float((order[:, 0] == sources).mean())


def capability_evaluation(
    model,
    encodings: np.ndarray,
    scores: np.ndarray,
    benchmarks: np.ndarray,
    *,
    trained: np.ndarray,
    held: np.ndarray,
    train_queries: np.ndarray,
    sizes: Sequence[int] = DEFAULT_SIZES,
    methods: Sequence[str] = METHODS,
    reference: pd.DataFrame | None = None,
    identity_models: int = 100,
    samples: int = 64,
    irt=None,
    router=None,
    estimator_config: EstimatorConfig | None = None,
    seed: int = 0,
) -> dict:
    """The capability, reference and identity figures of one fold (see the module docstring).

    Args:
        model: the fold's trained Locus; encodings (Q, D); scores (M, Q) NaN = no cell; benchmarks (Q,).
        trained / held: model rows trained on / held out; train_queries: the fold's training queries (the n are drawn
            from them).
        reference: rows aligned with `scores`' models, one numeric column per reference score (NaN rows skipped).
        irt: a fitted evaluation.latent.IRT on the trained rows (None: "irt" is skipped).
        estimator_config: the product's (EstimatorConfig(); its seed is this call's).
    Returns {key: value} plus "_per_model" {(kind, method, n): (H,) errors} for paired comparisons.
    """
    rng = np.random.default_rng(seed)
    config = replace(estimator_config or EstimatorConfig(), seed=seed)
    fold = _prepare_fold(
        model,
        encodings,
        scores,
        benchmarks,
        trained=trained,
        held=held,
        train_queries=train_queries,
        methods=methods,
        reference=reference,
        router=router,
        config=config,
        seed=seed,
    )
    unseen_rng = np.random.default_rng([seed, 1])  # its own draws: the shared questions' stay as they were
    out: dict = {}
    per_model: dict = {}
    for n in sizes:
        sets = _draw_sets(scores, held, train_queries, n, rng)
        embedded = None
        if model is not None:
            spread = encoder_spread(model, encodings, fold.train_sets[: min(200, len(fold.train_sets))], n, seed=seed)
            embedded = (spread, embed_evaluation_sets(model, encodings, sets))
        caps = {}
        for method in methods:
            t0 = time.perf_counter()
            cap = _method_capability(
                method,
                fold,
                sets,
                n,
                model=model,
                encodings=encodings,
                scores=scores,
                benchmarks=benchmarks,
                train_queries=train_queries,
                router=router,
                irt=irt,
                embedded=embedded,
                samples=samples,
                seed=seed,
                out=out,
            )
            if cap is not None:
                caps[method] = cap
            out[f"seconds.{method}.{n}"] = time.perf_counter() - t0
        _record_scores(caps, fold, fold.truth[held], n, seed=seed, out=out, per_model=per_model)
        if fold.unseen_estimator is not None:  # answers on queries the pool never answered
            _unseen_figures(
                fold,
                scores,
                benchmarks,
                trained=trained,
                held=held,
                n=n,
                rng=unseen_rng,
                identity_models=identity_models,
                router=router,
                samples=samples,
                seed=seed,
                out=out,
                per_model=per_model,
            )
        # copy recognition: n of an in-training model's own evaluations under a new name
        sources = rng.choice(len(trained), size=min(identity_models, len(trained)), replace=False)
        copies = _draw_sets(scores, trained[sources], train_queries, n, rng)
        if model is None:
            continue
        assert embedded is not None and fold.pool_z is not None  # both computed wherever there is a model
        post = refine_embeddings(model, encodings, copies, embedded[0])
        order, prob = answer_likeness(copies, scores[trained], fold.pool_z, post, samples=samples, seed=seed)
        out[f"identity.{n}.hit_at_1"] = float((order[:, 0] == sources).mean())
        out[f"identity.{n}.embedding_hit_at_1"] = float((prob.argmax(axis=1) == sources).mean())
    out["_per_model"] = per_model
    out["benchmarks"] = list(fold.names)
    return out


def capability_folds(
    encodings: np.ndarray,
    scores: np.ndarray,
    benchmarks: np.ndarray,
    splits: Sequence,
    *,
    trained: np.ndarray,
    held: np.ndarray,
    model_config,
    train_config,
    sizes: Sequence[int] = DEFAULT_SIZES,
    methods: Sequence[str] = METHODS,
    reference: pd.DataFrame | None = None,
    irt_steps: int = 300,
    seed: int = 0,
    log=lambda message: None,
    trainer=None,
    estimator_config: EstimatorConfig | None = None,
) -> dict:
    """capability_evaluation on each fold of `splits` (evaluation.splits.Fold): LOCUS trained on the in-training
    models' training-query cells (validation: the fold's val cells), IRT likewise (irt_steps full-batch steps).
    Returns {"summary": {key: {"mean", "std"}}, "paired": {"<kind>.<a>_minus_<method>.<n>.mae": {"diff", "ci_low",
    "ci_high"}} (a: each of ANCHORS run; per-model differences pooled over folds, 95% bootstrap over
    held-out models), "folds": [...]}.
    trainer: (fold, train_locus's keyword arguments) -> the trained Router, in place of train_locus (a caller's
    cache)."""
    folds: list[dict] = []
    per_model: dict[tuple[str, str, int], list[np.ndarray]] = {}  # (kind, method, n) -> per fold (H,) errors
    for fold in splits:
        t0 = time.perf_counter()
        train = np.full((len(trained), scores.shape[1]), np.nan, np.float32)
        train[:, fold.train] = scores[np.ix_(trained, fold.train)]
        val = np.full_like(train, np.nan)
        val[:, fold.val] = scores[np.ix_(trained, fold.val)]
        kwargs = dict(
            encodings=encodings,
            train_scores=train,
            val_scores=val,
            model_config=model_config,
            train_config=replace(train_config, seed=train_config.seed + fold.index),
            benchmarks=benchmarks,
            progress=False,
        )
        router = None
        if set(methods) & set(NEEDS_LOCUS):
            router = train_locus(**kwargs).router if trainer is None else trainer(fold, kwargs)
            log(f"capability fold {fold.index}: LOCUS trained in {time.perf_counter() - t0:.0f} s")
        model = None if router is None else router.model
        irt = None
        if "irt" in methods:
            irt = IRT(LatentConfig(dim=16, noise=(0.1,), max_steps=irt_steps, seed=seed))
            irt.fit(encodings, train, val)
            log(f"capability fold {fold.index}: IRT fitted, {time.perf_counter() - t0:.0f} s")
        result = capability_evaluation(
            model,
            encodings,
            scores,
            benchmarks,
            trained=trained,
            held=held,
            train_queries=fold.train,
            sizes=sizes,
            methods=methods,
            reference=reference,
            irt=irt,
            router=router,
            estimator_config=estimator_config,
            seed=seed + fold.index,
        )
        for key, errors in result.pop("_per_model").items():
            per_model.setdefault(key, []).append(errors)
        result["seconds.fold"] = time.perf_counter() - t0
        folds.append(result)
        log(
            f"capability fold {fold.index}: "
            + ", ".join(
                f"{k} {v:.3f}" for k, v in result.items() if isinstance(v, float) and not k.startswith("seconds")
            )
        )
    keys = [k for k in folds[0] if isinstance(folds[0][k], float)]
    summary = {
        k: {"mean": float(np.mean([f[k] for f in folds])), "std": float(np.std([f[k] for f in folds]))} for k in keys
    }
    rng = np.random.default_rng(seed)
    paired = {}
    for anchor in ANCHORS:
        for (kind, method, n), errors in per_model.items():
            mine = per_model.get((kind, anchor, n))
            if method == anchor or mine is None:
                continue
            diff = np.concatenate(mine) - np.concatenate(errors)
            boot = np.array([diff[rng.integers(0, len(diff), len(diff))].mean() for _ in range(2000)])
            paired[f"{kind}.{anchor}_minus_{method}.{n}.mae"] = {
                "diff": float(diff.mean()),
                "ci_low": float(np.quantile(boot, 0.025)),
                "ci_high": float(np.quantile(boot, 0.975)),
            }
    return {"summary": summary, "paired": paired, "folds": folds}


def read_reference_scores(path, models: Sequence[str]) -> pd.DataFrame:
    """A reference-score table (CSV: a ``model`` column and one numeric column per score, like metabench's
    leaderboard.csv), its numeric columns in `models`' order (NaN where a model has none)."""
    table = pd.read_csv(path)
    if "model" not in table.columns:
        raise ValueError(
            f"{path}: no 'model' column. How to fix: one row per model, a 'model' column and one numeric "
            "column per reference score"
        )
    numeric = [
        c
        for c in table.columns
        if c != "model" and pd.api.types.is_numeric_dtype(table[c]) and not pd.api.types.is_bool_dtype(table[c])
    ]  # a flag (moe) is not a score
    if not numeric:
        raise ValueError(f"{path}: no numeric score column besides 'model'. How to fix: add one column per score")
    dup = table["model"][table["model"].duplicated()]
    if len(dup):
        raise ValueError(
            f"{path}: model {dup.iloc[0]!r} (row {dup.index[0] + 2}) appears twice; keep one row per model"
        )
    return table.set_index("model")[numeric].reindex(list(models))


def capability_from_result(
    matrix,
    encodings: np.ndarray,
    result: dict,
    sizes: Sequence[int],
    reference_path,
    train_config,
    *,
    progress: bool = True,
) -> dict:
    """`locus evaluate --onboard-sizes`: capability_folds on the folds and held-out models of an evaluate() result;
    returns its flat keys (capability.<method>.<n>.mae, ...: fold means) plus "capability_detail"."""
    settings = result["settings"]
    _, splits, _ = query_folds(
        matrix,
        fold=None,
        folds=settings["folds"],
        budget=settings["budget"],
        seed=settings["seed"],
        val_fraction=settings["val_fraction"] or 0.1,
    )
    if settings.get("only_folds") is not None:
        splits = [splits[f] for f in settings["only_folds"]]
    held_names = set(settings["held_out_model_names"])
    if not held_names:
        raise ValueError("--onboard-sizes: no model is held out; give --holdout-models above 0")
    held = np.array([i for i, m in enumerate(matrix.models) if m in held_names])
    trained = np.setdiff1d(np.arange(len(matrix.models)), held)
    reference = None if reference_path is None else read_reference_scores(reference_path, matrix.models)
    log = (lambda message: print(message, file=sys.stderr, flush=True)) if progress else (lambda message: None)
    run = capability_folds(
        encodings,
        matrix.scores.astype(np.float32),
        matrix.benchmarks,
        splits,
        trained=trained,
        held=held,
        model_config=LocusConfig(query_dim=encodings.shape[1]),
        train_config=train_config,
        sizes=tuple(sizes) or DEFAULT_SIZES,
        reference=reference,
        seed=settings["seed"],
        log=log,
    )
    keys = {k: v["mean"] for k, v in run["summary"].items() if not k.startswith("seconds")}
    return {**keys, "capability_detail": {"summary": run["summary"], "paired": run["paired"]}}


__all__ = [
    "METHODS",
    "router_capability",
    "DEFAULT_SIZES",
    "true_accuracy",
    "capability_evaluation",
    "capability_folds",
    "read_reference_scores",
    "capability_from_result",
]

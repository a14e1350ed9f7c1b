"""The replay: would a router that learns from its graded traffic pay on this evaluation matrix?

A matrix (M models x Q queries, complete) is split, per seed, into the queries LOCUS is trained on and a stream pool;
the stream is the pool shuffled (repeated when the stream is longer than the pool) and its queries arrive one by one.
Each method routes the query among the models available at that moment, and only the chosen model's outcome is
revealed to it (to a ``feedback`` share of the events; a ``delayed`` share arrives ``delay`` events later), the same
reveal and delay draws for every method (paired). Nothing is retrained per event: each method is the routing
strategy `locus serve` runs (locus_model.learning, built from the same LearningConfig), deciding one event at a time
and observing each outcome as it arrives. The full matrix is kept for the oracle and the full-label rule.

Methods: ``learning`` (the router's P shifted by the learner's cell posteriors, Thompson draws within the
exploration budget that only outcomes open, under the guard whose reference is the highest *learned* standing),
``frozen`` (today's LOCUS: the PoolScorer's P under the guard), ``thompson_group`` (Beta(1, 1) Bernoulli Thompson per
(query group, model): LiteLLM's adaptive router, on the router's own query groups), ``thompson`` (one Beta(1, 1) per
model), ``best_single`` (the model most accurate on the training queries), ``rule_full_labels`` (per benchmark the
model most accurate on the stream's own labels: the ceiling a lookup can reach), ``oracle`` (any model right).

Scenarios (:data:`SCENARIOS`): ``stationary`` (a random half of the queries trains, the other half streams),
``unlike`` (LOCUS trained on half the benchmarks, the stream from the others), ``newcomer`` (the model most clearly
best on one benchmark is held out of training and joins at ``join_at`` of the stream with the pool's prior, as
`locus serve` serves a configured model with no evaluations: the mean of the trained models' embeddings and group
profiles, as wide as their spread (locus_model.learning.prior_variance) -- it has no evaluation, so the pool's average
model is the only honest guess, and a guess its first answers must overrule),
``drift`` (at ``drift_at`` of the stream the model frozen LOCUS routes most to starts answering like the weakest
model: that model's column under its name), ``poisoned`` (on ``poison_share`` of the events a client reports 0 for
every answer of the most-routed model and 1 for every answer of the weakest; the honest judge grades the rest).
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np

from locus_model.evaluation.methods import LocusMethod
from locus_model.evaluation.results import json_clean, save_results
from locus_model.evaluation.stream_report import (
    _config_dict,
    format_stream,
    plot_stream,
    score_stream,
    summarise,
    verdict,
    warnings_of,
)
from locus_model.evaluation.stream_routing import (
    JUDGE,
    METHODS,
    POISONER,
    SCENARIOS,
    Reembedding,
    Stream,
    StreamConfig,
    guarded_argmax,
    route_stream,
)
from locus_model.learning import LearningConfig, pool_prior, prior_variance
from locus_model.model_config import LocusConfig
from locus_model.routing.policy import guard_margins

# ---------------------------------------------------------------------------------------------- one seed


@dataclass
class Trained:
    """One training: the LOCUS method (router + the trained models' pool rows) and the queries it saw."""

    method: LocusMethod
    train: np.ndarray  # query indices trained on (train + val)
    pool: np.ndarray  # query indices the stream is drawn from
    trained_models: np.ndarray  # model rows trained on
    fitted_scores: np.ndarray  # (M, Q) every model's scores on the training queries (NaN elsewhere): the row a
    # model onboarded later reads (its training column)


def split_queries(
    scenario: str, benchmarks: np.ndarray, seed: int, config: StreamConfig
) -> tuple[np.ndarray, np.ndarray]:
    """(training queries, stream pool): by benchmark for ``unlike`` (half of them, drawn by seed, train), else a
    random ``train_fraction`` of the queries."""
    rng = np.random.default_rng([seed, 66])
    n = len(benchmarks)
    if scenario == "unlike":
        names = np.unique(benchmarks)
        if len(names) < 2:
            raise ValueError(
                f"stream scenario 'unlike' needs queries of at least 2 benchmarks (the table has "
                f"{len(names)}): LOCUS trains on some, the stream comes from the others. How to fix: "
                "give a table whose benchmark column names 2 or more, or use --stream stationary"
            )
        train_names = rng.choice(names, size=int(math.ceil(len(names) / 2)), replace=False)
        is_train = np.isin(benchmarks, train_names)
        return np.flatnonzero(is_train), np.flatnonzero(~is_train)
    order = rng.permutation(n)
    cut = int(round(config.train_fraction * n))
    if cut < 2 or cut >= n:
        raise ValueError(
            f"StreamConfig.train_fraction {config.train_fraction} leaves {cut} training and {n - cut} "
            "stream queries: both must be non-empty"
        )
    return np.sort(order[:cut]), np.sort(order[cut:])


def train_once(
    scores: np.ndarray,
    encodings: np.ndarray,
    benchmarks: np.ndarray,
    train: np.ndarray,
    trained_models: np.ndarray,
    *,
    seed: int,
    config: StreamConfig,
    train_config: Any = None,
    model_config: Any = None,
    progress: bool = False,
) -> tuple[LocusMethod, np.ndarray]:
    """LOCUS trained on ``trained_models``' scores on the ``train`` queries (a ``val_fraction`` of them for early
    stopping), the other queries' labels blanked: the fitted method (its scorer holds the trained models' rows) and
    the scores it was fitted on, every model's (M, Q) with the other queries blanked (:attr:`Trained.fitted_scores`)."""
    from locus_model.training import TrainConfig  # why: torch loads only when a replay trains

    train_config = replace(train_config or TrainConfig(), seed=seed)
    rng = np.random.default_rng([seed, 67])
    train = rng.permutation(train)
    n_val = max(1, int(round(config.val_fraction * len(train))))
    tr, va = train[n_val:], train[:n_val]
    train_scores = np.full_like(scores, np.nan, dtype=np.float32)
    val_scores = np.full_like(scores, np.nan, dtype=np.float32)
    train_scores[:, tr], val_scores[:, va] = scores[:, tr], scores[:, va]
    labels = np.full(len(benchmarks), "", dtype=object)
    labels[tr] = np.asarray(benchmarks)[tr]
    method = LocusMethod(model_config=model_config, train_config=train_config, progress=progress, benchmarks=labels)
    method.fit(encodings, train_scores[trained_models], val_scores[trained_models])
    return method, train_scores


def build_stream(
    scenario: str,
    scores: np.ndarray,
    encodings: np.ndarray,
    benchmarks: np.ndarray,
    trained: Trained,
    *,
    seed: int,
    config: StreamConfig,
) -> tuple[Stream, dict]:
    """The stream of one seed and what the scenario's figures need (``info``: the models it names, the event where
    it changes, the informed router's choices)."""
    m_count = len(scores)
    rng = np.random.default_rng([seed, 68])
    n = config.events
    reps = int(math.ceil(n / len(trained.pool)))
    queries = np.concatenate([rng.permutation(trained.pool) for _ in range(reps)])[:n]  # (T,)
    method, rows = trained.method, trained.trained_models
    scorer, router, fitted_encodings = method.scorer, method.router, method.encodings
    assert scorer is not None and router is not None and fitted_encodings is not None, "train_once fitted the method"
    extra = np.setdiff1d(np.arange(m_count), rows)  # the newcomer: no pool row from evaluations
    order = np.empty(m_count, np.int64)
    order[rows] = np.arange(len(rows))
    if len(extra):  # the pool's prior, as locus serve's snapshot makes it for a model with no evaluations
        emb, prof = pool_prior(scorer.profiles, scorer.embeddings, np.ones(len(rows), bool))
        scorer = scorer.extended(np.repeat(emb[None], len(extra), 0), np.repeat(prof[None], len(extra), 0))
        order[extra] = np.arange(len(rows), len(rows) + len(extra))
    n_evaluations = np.zeros(m_count)
    n_evaluations[rows] = len(trained.train)  # each trained model's evaluations: the training queries
    prior_var = prior_variance(
        scorer.profiles[order].astype(np.float64),
        n_evaluations,
        router.groups.shares(),
        router_var=config.learning.prior_var,
    )
    enc = fitted_encodings[queries]
    p = scorer.proba(enc, order).astype(np.float64)  # (M, T) in the matrix's model order
    membership = router.groups.membership(enc)
    group = np.argmax(membership, axis=1)
    bench_names, bench = np.unique(np.asarray(benchmarks)[queries].astype(str), return_inverse=True)
    labels = scores[:, queries].astype(np.float64)
    margin = stream_margin(config, router, enc)
    profiles = scorer.profiles[order].astype(np.float64)
    standing = scorer.standing[order]
    train_acc = np.nanmean(scores[:, trained.train], axis=1)
    best_single = int(rows[np.argmax(train_acc[rows])])
    revealed = rng.random(n) < config.feedback
    late = rng.random(n) < config.delayed
    arrives = np.arange(n) + 1 + np.where(late, config.delay, 0)  # an outcome is seen after its own event
    stream = Stream(
        p=p,
        group=group,
        bench=bench,
        labels=labels,
        reported=labels.copy(),
        client=np.full(n, JUDGE, dtype=object),
        available=np.ones((m_count, n), bool),
        revealed=revealed,
        arrives=arrives,
        standing=standing,
        profiles=profiles,
        shares=router.groups.shares(),
        margin=margin,
        best_single=best_single,
        prior_var=prior_var,
    )
    info: dict = {"benchmarks": [str(b) for b in bench_names], "queries": queries}
    frozen = guarded_argmax(p, standing, margin, stream.available)
    most_routed = int(np.bincount(frozen, minlength=m_count).argmax())
    weakest = int(rows[np.argmin(train_acc[rows])])
    if scenario == "newcomer":
        (new,) = extra
        join = int(round(config.join_at * n))
        stream.available[new, :join] = False
        # full knowledge: LOCUS with the newcomer's row from its own training column (no retraining)
        full = scorer.extended(
            *router.pool_rows(fitted_encodings, trained.fitted_scores[new : new + 1], method.benchmarks)
        )
        order_full = order.copy()
        order_full[new] = len(full.names) - 1
        p_full = full.proba(enc, order_full).astype(np.float64)
        # the learning router embeds it again from its graded answers, as the pipeline's relearning does
        stream.reembed = Reembedding(row=int(new), router=router, encodings=enc)
        info.update(
            model=int(new),
            join=join,
            informed=guarded_argmax(p_full, full.standing[order_full], margin, stream.available),
        )
    elif scenario == "drift":
        at = int(round(config.drift_at * n))
        stream.labels[most_routed, at:] = stream.labels[weakest, at:]
        stream.reported = stream.labels.copy()
        # full knowledge of the new column: the drifted model is a copy of the weakest; it shares the weakest's traffic
        info.update(model=most_routed, like=weakest, at=at, informed_share=float(np.mean(frozen[at:] == weakest)))
    elif scenario == "poisoned":
        hostile = rng.random(n) < config.poison_share
        stream.client[hostile] = POISONER
        stream.reported[most_routed, hostile] = 0.0
        stream.reported[weakest, hostile] = 1.0
        info.update(down=most_routed, up=weakest, hostile_events=int(hostile.sum()))
    return stream, info


def stream_margin(config: StreamConfig, router, encodings: np.ndarray) -> float:
    """The guard margin of a stream's routers: the config's fixed margin, or (``"measured"``) the mean over the
    stream's queries (``encodings``) of the measured margin (routing.policy.guard_margins; the replay's routers
    take one margin)."""
    margin = config.guard_margin
    assert margin is not None, "StreamConfig.__post_init__ gives the default guard margin (check_margin)"
    return float(np.mean(guard_margins(margin, router.query_noise(encodings))))


def choose_newcomer(scores: np.ndarray, benchmarks: np.ndarray) -> int:
    """The model most clearly best on one benchmark: max over benchmarks of its accuracy there less the best other
    model's (the newcomer must be stronger than every trained model on part of the traffic)."""
    names = np.unique(benchmarks)
    acc = np.stack([np.nanmean(scores[:, benchmarks == b], axis=1) for b in names], axis=1)  # (M, B)
    lead = np.array([np.max(acc[m] - np.delete(acc, m, axis=0).max(axis=0)) for m in range(len(scores))])
    return int(np.argmax(lead))


# ---------------------------------------------------------------------------------------------- the replay


def replay(
    scores: np.ndarray,
    encodings: np.ndarray,
    benchmarks: np.ndarray,
    models: list[str],
    scenarios,
    *,
    seeds: int = 5,
    first_seed: int = 0,
    config: StreamConfig | None = None,
    train_config: Any = None,
    model_config: Any = None,
    progress: bool = True,
    on_stream: Callable[[str, int, Stream, dict], None] | None = None,
) -> dict:
    """The replay of ``scenarios`` over ``seeds`` seeds: one training per seed (shared by the scenarios that split
    the queries alike), then each stream; the JSON-ready ``{"settings", "stream": {scenario: ...}}``.

    Args:
        scores: (M, Q) complete scores in [0, 1] (no NaN: the oracle and the full-label rule read every cell).
        encodings: (Q, D) query encodings; benchmarks: (Q,) the queries' benchmark labels; models: (M,) names.
        on_stream: called with (scenario, seed, stream, info) once each stream is built (e.g. to keep it: routing
            it again with another LearningConfig needs no training).
    """
    config = config or StreamConfig()
    log = (lambda s: print(s, file=sys.stderr, flush=True)) if progress else (lambda s: None)
    scores = np.asarray(scores, np.float32)
    benchmarks = np.asarray(benchmarks).astype(str)
    scenarios = list(scenarios)
    bad = [s for s in scenarios if s not in SCENARIOS]
    if bad:
        raise ValueError(f"unknown stream scenario(s) {bad}; choose from {', '.join(SCENARIOS)}")
    if np.isnan(scores).any():
        raise ValueError(
            f"the replay needs every model's score on every query (the oracle and the full-label rule "
            f"read them); {int(np.isnan(scores).sum())} cells are missing. How to fix: keep the models "
            "and queries that are complete"
        )
    if len(scores) < 3:
        raise ValueError(
            f"the replay needs at least 3 models (the table has {len(scores)}): routing, a newcomer or "
            "a degraded model and a weakest one"
        )
    if seeds < 1:
        raise ValueError(f"seeds={seeds}: give 1 or more")
    start = time.perf_counter()
    trainings = trainings_of(scenarios, seeds)
    log(f"the replay trains LOCUS {trainings} time(s) ({seeds} seed(s) x the scenarios' splits), one at a time")
    runs: dict[str, list[dict]] = {s: [] for s in scenarios}
    done, total = 0, seeds * len(scenarios)
    newcomer = choose_newcomer(scores, benchmarks) if "newcomer" in scenarios else None
    for seed in range(first_seed, first_seed + seeds):
        cache: dict[tuple, Trained] = {}
        for scenario in scenarios:
            train, pool = split_queries(scenario, benchmarks, seed, config)
            if scenario != "newcomer":
                rows = np.arange(len(scores))
            else:
                assert newcomer is not None, "chosen above: the scenarios include the newcomer"
                rows = np.delete(np.arange(len(scores)), newcomer)
            key = (scenario == "unlike", scenario == "newcomer")
            if key not in cache:
                t0 = time.perf_counter()
                method, fitted_scores = train_once(
                    scores,
                    encodings,
                    benchmarks,
                    train,
                    rows,
                    seed=seed,
                    config=config,
                    train_config=train_config,
                    model_config=model_config,
                )
                cache[key] = Trained(method, train, pool, rows, fitted_scores)
                log(
                    f"seed {seed}: trained LOCUS for {scenario} ({len(rows)} models x {len(train)} queries) in "
                    f"{time.perf_counter() - t0:.0f} s"
                )
            stream, info = build_stream(scenario, scores, encodings, benchmarks, cache[key], seed=seed, config=config)
            if on_stream is not None:
                on_stream(scenario, seed, stream, info)
            runs[scenario].append(score_stream(scenario, stream, info, seed=seed, config=config))
            done += 1
            spent = time.perf_counter() - start
            log(
                f"seed {seed}: {scenario} streamed ({config.events} events); {done}/{total} done, "
                f"{spent:.0f} s, ETA {spent / done * (total - done):.0f} s"
            )
    result = {
        "settings": {
            "seeds": seeds,
            "first_seed": first_seed,
            "scenarios": scenarios,
            "models": list(models),
            "queries": int(scores.shape[1]),
            "config": _config_dict(config),
            "newcomer": None if newcomer is None else models[newcomer],
            "trainings": trainings,
        },
        "wall_s": round(time.perf_counter() - start, 1),
        "stream": {s: summarise(s, runs[s], models, config) for s in scenarios},
    }
    return json_clean(with_verdict(result))


def with_verdict(result: dict) -> dict:
    """The result with its line to act on (``verdict``) and its ``warnings`` first."""
    return {"verdict": verdict(result), "warnings": warnings_of(result), **result}


def trainings_of(scenarios: list[str], seeds: int) -> int:
    """How many times the replay trains LOCUS: once per seed for each way the scenarios split the queries
    (``unlike`` by benchmark, ``newcomer`` without the newcomer, the others alike)."""
    return seeds * len({(s == "unlike", s == "newcomer") for s in scenarios})


def run_replay(args, matrix, encodings: np.ndarray, train_config, progress: bool) -> dict:
    """What `locus evaluate --stream` does with its arguments: the replay on the table's complete queries, its
    result saved to ``args.out``, its table printed and, with ``args.plot``, its curves drawn; the result returned."""
    scores = np.asarray(matrix.scores, np.float32)
    complete = ~np.isnan(scores).any(axis=0)
    if progress and not complete.all():
        print(
            f"the replay reads every model's score on each query: {int((~complete).sum())} of {scores.shape[1]} "
            "queries with a missing cell are left out",
            file=sys.stderr,
        )
    config = stream_config(args)
    result = replay(
        scores[:, complete],
        encodings[complete],
        np.asarray(matrix.benchmarks)[complete],
        list(matrix.models),
        [s.strip() for s in args.stream.split(",") if s.strip()],
        seeds=args.stream_seeds,
        config=config,
        train_config=train_config,
        model_config=LocusConfig(query_dim=encodings.shape[1]),
        progress=progress,
    )
    result["settings"].update({"evaluations": str(args.evaluations), "encoder": args.encoder, "seed": args.seed})
    return report(result, args)


def stream_config(args) -> StreamConfig:
    """The StreamConfig of `locus evaluate --stream` / `--stream-log`'s arguments (validated by StreamConfig)."""
    learning = LearningConfig() if args.stream_explore is None else LearningConfig(explore=args.stream_explore)
    return StreamConfig(
        learning=learning,
        guard_margin=args.guard_margin,
        **({} if args.stream_events is None else {"events": args.stream_events}),
        **({} if args.stream_feedback is None else {"feedback": args.stream_feedback}),
    )


def report(result: dict, args) -> dict:
    """The replay's result saved to ``args.out``, its text printed (the line to act on first) and, with
    ``args.plot``, its curves drawn; the result returned."""
    path = save_results(result, args.out)
    print(format_stream(result))
    if args.plot is not None:
        print(f"wrote {plot_stream(result, args.plot)}")
    print(f"\nwrote {path}")
    return result


__all__ = [
    "METHODS",
    "SCENARIOS",
    "Stream",
    "StreamConfig",
    "format_stream",
    "plot_stream",
    "replay",
    "route_stream",
    "run_replay",
    "score_stream",
    "summarise",
]

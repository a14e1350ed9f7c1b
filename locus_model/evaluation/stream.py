"""The replay: would a router that learns from its graded traffic pay on this evaluation matrix?

A matrix (M models x Q queries, complete) is split, per seed, into the queries LOCUS is trained on and a stream pool;
the stream is the pool shuffled (repeated when the stream is longer than the pool) and its queries arrive one by one.
Each method routes the query among the models available at that moment, and only the chosen model's outcome is
revealed to it (to a ``feedback`` share of the events; a ``delayed`` share arrives ``delay`` events later), the same
reveal and delay draws for every method (paired). Nothing is retrained per event: ``learning`` updates its
:class:`~locus_model.learning.Learner` (two additions per outcome). The full matrix is kept for the oracle and the
full-label rule.

Methods: ``learning`` (the router's P shifted by the learner's cell posteriors, Thompson draws within an
:class:`~locus_model.learning.ExplorationBudget`, under the guard whose reference is the highest *learned* standing),
``frozen`` (today's LOCUS: the PoolScorer's P under the guard), ``thompson_group`` (Beta(1, 1) Bernoulli Thompson per
(query group, model): LiteLLM's adaptive router, on the router's own query groups), ``thompson`` (one Beta(1, 1) per
model), ``best_single`` (the model most accurate on the training queries), ``rule_full_labels`` (per benchmark the
model most accurate on the stream's own labels: the ceiling a lookup can reach), ``oracle`` (any model right).

Scenarios (:data:`SCENARIOS`): ``stationary`` (a random half of the queries trains, the other half streams),
``unlike`` (LOCUS trained on half the benchmarks, the stream from the others), ``newcomer`` (the model most clearly
best on one benchmark is held out of training and joins at ``join_at`` of the stream with the pool's prior: the mean
of the trained models' embeddings and group profiles, weighted as two answers (:func:`newcomer_prior_var`) -- it has
no evaluation, so the pool's average model is the only honest guess, and a guess its first answers must overrule),
``drift`` (at ``drift_at`` of the stream the model frozen LOCUS routes most to starts answering like the weakest
model: that model's column under its name), ``poisoned`` (on ``poison_share`` of the events a client reports 0 for
every answer of the most-routed model and 1 for every answer of the weakest; the honest judge grades the rest).
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable

import numpy as np

from locus_model.evaluation.methods import LocusMethod
from locus_model.evaluation.results import json_clean
from locus_model.routing.policy import GUARD_MARGIN, routing_scores
from locus_model.learning import ExplorationBudget, Learner, LearningConfig
from locus_model.stats.bootstrap import paired_bootstrap

SCENARIOS = ("stationary", "unlike", "newcomer", "drift", "poisoned")
METHODS = ("learning", "frozen", "thompson_group", "thompson", "best_single", "rule_full_labels", "oracle")
JUDGE, POISONER = "judge", "poisoner"


@dataclass(frozen=True)
class StreamConfig:
    """How a replay is run."""

    events: int = 4000  # queries in the stream (the pool shuffled, repeated when shorter)
    train_fraction: float = 0.5  # share of the queries LOCUS is trained on (stationary, newcomer, drift, poisoned)
    val_fraction: float = 0.1  # of the training queries, held for LOCUS early stopping
    feedback: float = 1.0  # share of the events whose outcome is revealed at all (sparse feedback below 1)
    delayed: float = 0.1  # share of the revealed outcomes that arrive late
    delay: int = 100  # events a late outcome waits
    join_at: float = 0.25  # newcomer: when it joins, as a share of the stream
    drift_at: float = 0.5  # drift: when the model degrades, as a share of the stream
    poison_share: float = 0.1  # poisoned: share of the events graded by the hostile client
    window: int = 1000  # events per point of the curve
    learning: LearningConfig = field(default_factory=LearningConfig)
    guard_margin: float | None = None  # None: the routing policy's default
    n_boot: int = 2000

    def __post_init__(self) -> None:
        for name in ("train_fraction", "val_fraction", "feedback", "delayed", "join_at", "drift_at", "poison_share"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"StreamConfig.{name} = {v!r}: give a share in [0, 1]")
        if self.events < 1 or self.window < 1 or self.delay < 0:
            raise ValueError(f"StreamConfig: events ({self.events}) and window ({self.window}) must be >= 1, delay "
                             f"({self.delay}) >= 0")


# ---------------------------------------------------------------------------------------------- one stream


@dataclass
class Stream:
    """One seed's stream, everything a method may read and what only the scoring reads (``labels``)."""

    p: np.ndarray  # (M, T) the router's P(correct) of each model on each event's query
    group: np.ndarray  # (T,) the event's query group (the router's, argmax membership)
    bench: np.ndarray  # (T,) int: the event's benchmark (the rule_full_labels lookup's key)
    labels: np.ndarray  # (M, T) the true outcome of each model on each event (after any drift)
    reported: np.ndarray  # (M, T) what the event's client reports for each model (labels, unless poisoned)
    client: np.ndarray  # (T,) object: who grades the event
    available: np.ndarray  # (M, T) bool: the models a request may go to
    revealed: np.ndarray  # (T,) bool: the outcome is reported at all
    arrives: np.ndarray  # (T,) int: the event after which the outcome arrives (t itself or later)
    standing: np.ndarray  # (M,) the router's standing (the guard's reference)
    profiles: np.ndarray  # (M, G) the pool's group profiles (the learner's prior)
    shares: np.ndarray  # (G,) the groups' shares (standing's weights)
    margin: float
    best_single: int
    prior_var: np.ndarray | None = None  # (M, G) the learner's prior variance (None: the config's)


def route_stream(stream: Stream, method: str, *, config: StreamConfig, seed: int) -> np.ndarray:
    """(T,) the model each event goes to under ``method``."""
    m_count, n = stream.labels.shape
    if method == "oracle":
        return np.argmax(np.where(stream.available, stream.labels, -1.0), axis=0)
    if method == "best_single":
        return np.full(n, stream.best_single)
    if method == "rule_full_labels":
        return _rule_full_labels(stream)
    if method == "frozen":
        return _guarded_argmax(stream.p, stream.standing, stream.margin, stream.available)
    rng = np.random.default_rng(seed)
    if method == "learning":
        return _learning(stream, config.learning, rng)
    if method not in ("thompson", "thompson_group"):
        raise ValueError(f"unknown stream method {method!r}; choose from {list(METHODS)}")
    choice = np.empty(n, np.int64)
    pending: dict[int, list[tuple[int, int]]] = {}
    cells = np.zeros(n, np.int64) if method == "thompson" else stream.group
    k = int(cells.max()) + 1
    right, count = np.zeros((m_count, k)), np.zeros((m_count, k))
    for t in range(n):
        for m, tt in pending.pop(t, ()):
            right[m, cells[tt]] += stream.reported[m, tt]
            count[m, cells[tt]] += 1.0
        c = cells[t]
        draw = rng.beta(1.0 + right[:, c], 1.0 + count[:, c] - right[:, c])
        choice[t] = m = int(np.argmax(np.where(stream.available[:, t], draw, -1.0)))
        if stream.revealed[t]:
            pending.setdefault(int(stream.arrives[t]), []).append((m, t))
    return choice


def _guarded_argmax(p: np.ndarray, standing: np.ndarray, margin: float, available: np.ndarray) -> np.ndarray:
    """(T,) per column the highest routing score (routing.policy.routing_scores) among the available models."""
    score = routing_scores(p, standing, margin, known=available)
    return np.argmax(np.where(available, score, -np.inf), axis=0)


def _rule_full_labels(stream: Stream) -> np.ndarray:
    """Per benchmark, the available model with the most right answers on the stream's own events of it."""
    choice = np.empty(stream.labels.shape[1], np.int64)
    for b in np.unique(stream.bench):
        ev = np.flatnonzero(stream.bench == b)
        acc = np.where(stream.available[:, ev], stream.labels[:, ev], np.nan)
        mean = np.nan_to_num(np.nanmean(np.where(np.isnan(acc).all(axis=1, keepdims=True), 0.0, acc), axis=1), nan=-1)
        # the lookup's choice among the models available at each event, best first
        order = np.argsort(-mean, kind="stable")
        avail = stream.available[order][:, ev]
        choice[ev] = order[np.argmax(avail, axis=0)]
    return choice


def _learning(stream: Stream, learning: LearningConfig, rng: np.random.Generator) -> np.ndarray:
    """The learning router: the learner's P (or one Thompson draw, within the budget) under the guard whose reference
    is the highest learned standing; outcomes update the learner as they arrive."""
    _, n = stream.labels.shape
    learner = Learner.start_from([str(i) for i in range(len(stream.profiles))], stream.profiles, learning,
                                 prior_var=stream.prior_var)
    budget = ExplorationBudget(learning.explore)
    choice = np.empty(n, np.int64)
    pending: dict[int, list[tuple[int, int]]] = {}
    profiles = stream.profiles
    shift = np.zeros_like(profiles)
    for t in range(n):
        arrived = pending.pop(t, ())
        for m, tt in arrived:
            learner.observe(m, int(stream.group[tt]), float(stream.reported[m, tt]), float(stream.p[m, tt]),
                            client=stream.client[tt])
        if arrived:
            shift = learner.shift()
        k, avail = int(stream.group[t]), stream.available[:, t]
        # the guard reads the learned estimates as it reads the trained ones: the standing moved by what the
        # outcomes moved each group profile, weighted by the groups' shares (exactly the trained standing before any)
        standing = stream.standing + (_sigmoid(_logit(profiles) + shift) - _sigmoid(_logit(profiles))) @ stream.shares
        best = _guarded_one(_sigmoid(_logit(stream.p[:, t]) + shift[:, k]), standing, stream.margin, avail)
        pick, explored = best, False
        if budget.share > 0:
            drawn = learner.draw(stream.p[:, t:t + 1], np.array([k]), rng)[:, 0]
            candidate = _guarded_one(drawn, standing, stream.margin, avail)
            if candidate != best and budget.allows():
                pick, explored = candidate, True
            budget.record(explored)
        choice[t] = pick
        if stream.revealed[t]:
            pending.setdefault(int(stream.arrives[t]), []).append((pick, t))
    return choice


def _guarded_one(p: np.ndarray, standing: np.ndarray, margin: float, avail: np.ndarray) -> int:
    """The available model of highest routing score (routing.policy.routing_scores) on one query."""
    rows = np.flatnonzero(avail)
    return int(rows[np.argmax(routing_scores(p[rows], standing[rows], margin))])


def _logit(p):
    p = np.clip(np.asarray(p, np.float64), 1e-4, 1 - 1e-4)
    return np.log(p) - np.log1p(-p)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


# ---------------------------------------------------------------------------------------------- one seed


@dataclass
class Trained:
    """One training: the LOCUS method (router + the trained models' pool rows) and the queries it saw."""

    method: LocusMethod
    train: np.ndarray  # query indices trained on (train + val)
    pool: np.ndarray  # query indices the stream is drawn from
    trained_models: np.ndarray  # model rows trained on


def split_queries(scenario: str, benchmarks: np.ndarray, seed: int,
                  config: StreamConfig) -> tuple[np.ndarray, np.ndarray]:
    """(training queries, stream pool): by benchmark for ``unlike`` (half of them, drawn by seed, train), else a
    random ``train_fraction`` of the queries."""
    rng = np.random.default_rng([seed, 66])
    n = len(benchmarks)
    if scenario == "unlike":
        names = np.unique(benchmarks)
        if len(names) < 2:
            raise ValueError(f"stream scenario 'unlike' needs queries of at least 2 benchmarks (the table has "
                             f"{len(names)}): LOCUS trains on some, the stream comes from the others. How to fix: "
                             "give a table whose benchmark column names 2 or more, or use --stream stationary")
        train_names = rng.choice(names, size=int(math.ceil(len(names) / 2)), replace=False)
        is_train = np.isin(benchmarks, train_names)
        return np.flatnonzero(is_train), np.flatnonzero(~is_train)
    order = rng.permutation(n)
    cut = int(round(config.train_fraction * n))
    if cut < 2 or cut >= n:
        raise ValueError(f"StreamConfig.train_fraction {config.train_fraction} leaves {cut} training and {n - cut} "
                         "stream queries: both must be non-empty")
    return np.sort(order[:cut]), np.sort(order[cut:])


def train_once(scores: np.ndarray, encodings: np.ndarray, benchmarks: np.ndarray, train: np.ndarray,
               trained_models: np.ndarray, *, seed: int, config: StreamConfig, train_config: Any = None,
               model_config: Any = None, progress: bool = False) -> LocusMethod:
    """LOCUS trained on ``trained_models``' scores on the ``train`` queries (a ``val_fraction`` of them for early
    stopping), the other queries' labels blanked; the fitted method (its scorer holds the trained models' rows)."""
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
    method.fitted_scores = train_scores  # the rows a model onboarded later reads (its training column)
    return method


def build_stream(scenario: str, scores: np.ndarray, encodings: np.ndarray, benchmarks: np.ndarray,
                 trained: Trained, *, seed: int, config: StreamConfig) -> tuple[Stream, dict]:
    """The stream of one seed and what the scenario's figures need (``info``: the models it names, the event where
    it changes, the informed router's choices)."""
    m_count = len(scores)
    rng = np.random.default_rng([seed, 68])
    n = config.events
    reps = int(math.ceil(n / len(trained.pool)))
    queries = np.concatenate([rng.permutation(trained.pool) for _ in range(reps)])[:n]  # (T,)
    method, rows = trained.method, trained.trained_models
    scorer = method.scorer
    router = method.router
    extra = np.setdiff1d(np.arange(m_count), rows)  # the newcomer: no pool row from evaluations
    order = np.empty(m_count, np.int64)
    order[rows] = np.arange(len(rows))
    prior_var = None
    if len(extra):
        mean_row = (scorer.embeddings.mean(axis=0, keepdims=True), scorer.profiles.mean(axis=0, keepdims=True))
        scorer = scorer.extended(np.repeat(mean_row[0], len(extra), 0), np.repeat(mean_row[1], len(extra), 0))
        order[extra] = np.arange(len(rows), len(rows) + len(extra))
        prior_var = newcomer_prior_var(scorer.profiles[order].astype(np.float64), extra, config.learning.prior_var)
    enc = method.encodings[queries]
    p = scorer.proba(enc, order).astype(np.float64)  # (M, T) in the matrix's model order
    membership = router.groups.membership(enc)
    group = np.argmax(membership, axis=1)
    bench_names, bench = np.unique(np.asarray(benchmarks)[queries].astype(str), return_inverse=True)
    labels = scores[:, queries].astype(np.float64)
    margin = GUARD_MARGIN if config.guard_margin is None else config.guard_margin
    profiles = scorer.profiles[order].astype(np.float64)
    standing = scorer.standing[order]
    train_acc = np.nanmean(scores[:, trained.train], axis=1)
    best_single = int(rows[np.argmax(train_acc[rows])])
    revealed = rng.random(n) < config.feedback
    late = rng.random(n) < config.delayed
    arrives = np.arange(n) + 1 + np.where(late, config.delay, 0)  # an outcome is seen after its own event
    stream = Stream(p=p, group=group, bench=bench, labels=labels, reported=labels.copy(),
                    client=np.full(n, JUDGE, dtype=object), available=np.ones((m_count, n), bool), revealed=revealed,
                    arrives=arrives, standing=standing, profiles=profiles, shares=router.groups.shares(),
                    margin=margin, best_single=best_single, prior_var=prior_var)
    info: dict = {"benchmarks": [str(b) for b in bench_names], "queries": queries}
    frozen = _guarded_argmax(p, standing, margin, stream.available)
    most_routed = int(np.bincount(frozen, minlength=m_count).argmax())
    weakest = int(rows[np.argmin(train_acc[rows])])
    if scenario == "newcomer":
        (new,) = extra
        join = int(round(config.join_at * n))
        stream.available[new, :join] = False
        # full knowledge: LOCUS with the newcomer's row from its own training column (no retraining)
        full = scorer.extended(*router.pool_rows(method.encodings, method.fitted_scores[new:new + 1],
                                                 method.benchmarks))
        order_full = order.copy()
        order_full[new] = len(full.names) - 1
        p_full = full.proba(enc, order_full).astype(np.float64)
        info.update(model=int(new), join=join, informed=_guarded_argmax(p_full, full.standing[order_full], margin,
                                                                       stream.available))
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


NEWCOMER_PRIOR_ANSWERS = 2.0


def newcomer_prior_var(profiles: np.ndarray, newcomers: np.ndarray, prior_var: float) -> np.ndarray:
    """(M, G) the learner's prior variance: ``prior_var`` for the models LOCUS knows; for a newcomer (its profile the
    pool's mean, a guess) mu (1 - mu) / (1 + NEWCOMER_PRIOR_ANSWERS): its prior counts as two answers, so its first
    graded answers decide (checked on the replay: with the pool's spread as its variance, ~10 answers' worth, it
    rarely earned its traffic: bench/README.md)."""
    var = np.full(profiles.shape, float(prior_var))
    mu = np.clip(profiles[np.asarray(newcomers)], 0.005, 0.995)
    var[np.asarray(newcomers)] = mu * (1 - mu) / (1.0 + NEWCOMER_PRIOR_ANSWERS)
    return var


def choose_newcomer(scores: np.ndarray, benchmarks: np.ndarray) -> int:
    """The model most clearly best on one benchmark: max over benchmarks of its accuracy there less the best other
    model's (the newcomer must be stronger than every trained model on part of the traffic)."""
    names = np.unique(benchmarks)
    acc = np.stack([np.nanmean(scores[:, benchmarks == b], axis=1) for b in names], axis=1)  # (M, B)
    lead = np.array([np.max(acc[m] - np.delete(acc, m, axis=0).max(axis=0)) for m in range(len(scores))])
    return int(np.argmax(lead))


# ---------------------------------------------------------------------------------------------- the replay


def replay(scores: np.ndarray, encodings: np.ndarray, benchmarks: np.ndarray, models: list[str], scenarios,
           *, seeds: int = 5, first_seed: int = 0, config: StreamConfig | None = None, train_config: Any = None,
           model_config: Any = None,
           progress: bool = True, on_stream: Callable[[str, int, Stream, dict], None] | None = None) -> dict:
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
        raise ValueError(f"the replay needs every model's score on every query (the oracle and the full-label rule "
                         f"read them); {int(np.isnan(scores).sum())} cells are missing. How to fix: keep the models "
                         "and queries that are complete")
    if len(scores) < 3:
        raise ValueError(f"the replay needs at least 3 models (the table has {len(scores)}): routing, a newcomer or "
                         "a degraded model and a weakest one")
    if seeds < 1:
        raise ValueError(f"seeds={seeds}: give 1 or more")
    start = time.perf_counter()
    runs: dict[str, list[dict]] = {s: [] for s in scenarios}
    done, total = 0, seeds * len(scenarios)
    newcomer = choose_newcomer(scores, benchmarks) if "newcomer" in scenarios else None
    for seed in range(first_seed, first_seed + seeds):
        cache: dict[tuple, Trained] = {}
        for scenario in scenarios:
            train, pool = split_queries(scenario, benchmarks, seed, config)
            rows = np.arange(len(scores)) if scenario != "newcomer" else np.delete(np.arange(len(scores)), newcomer)
            key = (scenario == "unlike", scenario == "newcomer")
            if key not in cache:
                t0 = time.perf_counter()
                method = train_once(scores, encodings, benchmarks, train, rows, seed=seed, config=config,
                                    train_config=train_config, model_config=model_config)
                cache[key] = Trained(method, train, pool, rows)
                log(f"seed {seed}: trained LOCUS for {scenario} ({len(rows)} models x {len(train)} queries) in "
                    f"{time.perf_counter() - t0:.0f} s")
            stream, info = build_stream(scenario, scores, encodings, benchmarks, cache[key], seed=seed, config=config)
            if on_stream is not None:
                on_stream(scenario, seed, stream, info)
            runs[scenario].append(score_stream(scenario, stream, info, seed=seed, config=config))
            done += 1
            spent = time.perf_counter() - start
            log(f"seed {seed}: {scenario} streamed ({config.events} events); {done}/{total} done, "
                f"{spent:.0f} s, ETA {spent / done * (total - done):.0f} s")
    return json_clean({
        "settings": {"seeds": seeds, "first_seed": first_seed, "scenarios": scenarios, "models": list(models),
                     "queries": int(scores.shape[1]), "config": _config_dict(config),
                     "newcomer": None if newcomer is None else models[newcomer]},
        "wall_s": round(time.perf_counter() - start, 1),
        "stream": {s: summarise(s, runs[s], models, config) for s in scenarios},
    })


def score_stream(scenario: str, stream: Stream, info: dict, *, seed: int, config: StreamConfig) -> dict:
    """Every method's choices on one stream and the outcomes they got (true labels), plus the scenario's extras."""
    choices = {m: route_stream(stream, m, config=config, seed=seed * 1000 + i) for i, m in enumerate(METHODS)}
    t = np.arange(stream.labels.shape[1])
    out = {"correct": {m: stream.labels[c, t] for m, c in choices.items()}, "info": info, "choices": choices}
    if scenario == "poisoned":
        clean = replace(stream, reported=stream.labels, client=np.full(len(t), JUDGE, dtype=object))
        c = route_stream(clean, "learning", config=config, seed=seed * 1000)
        out["unpoisoned"] = stream.labels[c, t]
    if scenario == "newcomer":
        out["informed_correct"] = stream.labels[info["informed"], t]
    return out


def _curve(x: np.ndarray, window: int) -> list[float]:
    return [float(np.mean(x[i:i + window])) for i in range(0, len(x), window)]


def _paired(a: list[float], b: list[float], n_boot: int) -> dict:
    d = paired_bootstrap(np.asarray(a), np.asarray(b), n_boot=n_boot, seed=0)
    return {"mean": d["diff"], "ci_low": d["ci_low"], "ci_high": d["ci_high"]}


def summarise(scenario: str, runs: list[dict], models: list[str], config: StreamConfig) -> dict:
    """The scenario's JSON: per method routing accuracy, its curve and regret (means over seeds), and learning minus
    every other method paired over seeds (over the stream, and over its first 2,000 events)."""
    acc = {m: [float(r["correct"][m].mean()) for r in runs] for m in METHODS}
    head = {m: [float(r["correct"][m][:2000].mean()) for r in runs] for m in METHODS}
    out: dict = {"methods": {}, "paired": {}, "paired_first_2000": {}}
    for m in METHODS:
        curves = np.mean([_curve(r["correct"][m], config.window) for r in runs], axis=0)
        out["methods"][m] = {"routing_acc": float(np.mean(acc[m])), "per_seed": acc[m], "curve": curves.tolist(),
                             "regret": float(np.mean(acc["oracle"]) - np.mean(acc[m]))}
    for m in METHODS:
        if m != "learning":
            out["paired"][f"learning_minus_{m}"] = _paired(acc["learning"], acc[m], config.n_boot)
            out["paired_first_2000"][f"learning_minus_{m}"] = _paired(head["learning"], head[m], config.n_boot)
    info = runs[0]["info"]
    if scenario == "newcomer":
        out.update(_newcomer(runs, models, config))
    elif scenario == "drift":
        out.update(_drift(runs, models))
    elif scenario == "poisoned":
        clean = [float(r["unpoisoned"].mean()) for r in runs]
        out["unpoisoned_learning"] = {"routing_acc": float(np.mean(clean))}
        out["poison_effect"] = _paired(acc["learning"], clean, config.n_boot)
        out["down"], out["up"] = models[info["down"]], models[info["up"]]
    elif scenario == "unlike":
        out["stream_benchmarks"] = [r["info"]["benchmarks"] for r in runs]
    return out


def _newcomer(runs: list[dict], models: list[str], config: StreamConfig) -> dict:
    """traffic_share_at_500: the newcomer's share of the events 250-500 after it joined, over the share LOCUS gives it
    on the same events when it knows the newcomer's column (its row from its training evaluations); the cost of
    learning it: that informed LOCUS's accuracy minus the learning router's over the 1,000 events after it joined."""
    shares, informed_shares, learned, informed = [], [], [], []
    for r in runs:
        info, new, join = r["info"], r["info"]["model"], r["info"]["join"]
        win = slice(join + 250, join + 500)
        mine = float(np.mean(r["choices"]["learning"][win] == new))
        full = float(np.mean(info["informed"][win] == new))
        shares.append(mine / full if full > 0 else None)
        informed_shares.append(full)
        labels_win = slice(join, join + 1000)
        learned.append(float(r["correct"]["learning"][labels_win].mean()))
        informed.append(float(r["informed_correct"][labels_win].mean()))
    valid = [s for s in shares if s is not None]
    return {"newcomer": models[runs[0]["info"]["model"]],
            "traffic_share_at_500": float(np.mean(valid)) if valid else None,
            "traffic_share_at_500_per_seed": shares, "informed_share_at_500": informed_shares,
            "exploration_cost_first_1000": _paired(informed, learned, config.n_boot)}


def _drift(runs: list[dict], models: list[str]) -> dict:
    """events_to_shift: after the drift, the first event by which the degraded model's share of the last 100 events
    is within 5 points of what full knowledge of its new column gives it (the weakest model's share under frozen
    LOCUS: the degraded model answers as the weakest does); the mean over seeds that got there."""
    steps = []
    for r in runs:
        info = r["info"]
        on = (r["choices"]["learning"][info["at"]:] == info["model"]).astype(float)
        rolling = np.convolve(on, np.ones(100) / 100, mode="valid")  # rolling[i]: events i .. i + 99 after the drift
        hit = np.flatnonzero(rolling <= info["informed_share"] + 0.05)
        steps.append(int(hit[0] + 100) if len(hit) else None)
    got = [s for s in steps if s is not None]
    return {"events_to_shift": float(np.mean(got)) if got else None, "events_to_shift_per_seed": steps,
            "degraded": models[runs[0]["info"]["model"]], "like": models[runs[0]["info"]["like"]]}


def format_stream(result: dict) -> str:
    """The replay as a table: per scenario, each method's routing accuracy and regret, learning's paired differences."""
    lines = []
    for scenario, r in result["stream"].items():
        lines.append(f"\nstream: {scenario} ({result['settings']['seeds']} seed(s), "
                     f"{result['settings']['config']['events']} events)")
        lines.append(f"  {'method':<18}{'routing acc':>12}{'regret':>9}   learning minus it [95% interval]")
        for m, v in r["methods"].items():
            d = r["paired"].get(f"learning_minus_{m}")
            diff = "" if d is None else \
                f"   {100 * d['mean']:+.2f} [{100 * d['ci_low']:+.2f}, {100 * d['ci_high']:+.2f}]"
            lines.append(f"  {m:<18}{100 * v['routing_acc']:>11.2f}%{100 * v['regret']:>8.2f}{diff}")
        for key in ("traffic_share_at_500", "events_to_shift"):
            if key in r:
                lines.append(f"  {key}: {r[key] if r[key] is None else round(r[key], 3)}")
        if "poison_effect" in r:
            e = r["poison_effect"]
            lines.append(f"  poisoned minus unpoisoned learning: {100 * e['mean']:+.2f} [{100 * e['ci_low']:+.2f}, "
                         f"{100 * e['ci_high']:+.2f}]")
    return "\n".join(lines)


def plot_stream(result: dict, path) -> str:
    """Routing accuracy per ``window`` events, one line per method, one panel per scenario; the PNG's path."""
    import matplotlib  # why: only with --plot

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # why: only with --plot

    scenarios = list(result["stream"])
    window = result["settings"]["config"]["window"]
    fig, axes = plt.subplots(1, len(scenarios), figsize=(4.5 * len(scenarios), 3.6), squeeze=False)
    for ax, scenario in zip(axes[0], scenarios):
        for m, v in result["stream"][scenario]["methods"].items():
            x = window * (np.arange(len(v["curve"])) + 1)
            ax.plot(x, v["curve"], marker="o", ms=3, label=m, lw=2.2 if m == "learning" else 1.2,
                    ls="--" if m in ("oracle", "rule_full_labels") else "-")
        ax.set_title(scenario)
        ax.set_xlabel(f"events (per {window})")
        ax.set_ylabel("routing accuracy")
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return str(path)


def _config_dict(config: StreamConfig) -> dict:
    d = asdict(config)
    d["learning"] = {k: (None if isinstance(v, float) and math.isinf(v) else v) for k, v in d["learning"].items()}
    return d


__all__ = ["METHODS", "SCENARIOS", "Stream", "StreamConfig", "format_stream", "plot_stream", "replay", "route_stream"]

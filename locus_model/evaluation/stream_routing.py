"""The replay's routers, one stream at a time: what each method chooses for each event and what it learns from the
outcomes revealed to it (locus_model.evaluation.stream builds the streams; the methods are described there)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from locus_model.learning import (
    EMBED_EVERY,
    Decision,
    Learning,
    LearningConfig,
    Query,
    Request,
    Strategy,
    build_strategy,
    embed_graded,
    prior_variance,
)
from locus_model.routing.policy import RoutingPolicy, check_margin, routing_scores

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
    guard_margin: float | str | None = None  # the guard (routing.policy.check_margin; None: its default)
    n_boot: int = 2000

    def __post_init__(self) -> None:
        object.__setattr__(self, "guard_margin", check_margin(self.guard_margin))
        for name in ("train_fraction", "val_fraction", "feedback", "delayed", "join_at", "drift_at", "poison_share"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"StreamConfig.{name} = {v!r}: give a share in [0, 1]")
        if self.events < 1 or self.window < 1 or self.delay < 0:
            raise ValueError(
                f"StreamConfig: events ({self.events}) and window ({self.window}) must be >= 1, delay "
                f"({self.delay}) >= 0"
            )


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
    reembed: "Reembedding | None" = None  # a model the learning router embeds again from its graded answers


@dataclass
class Reembedding:
    """What the replay needs to embed ``row`` again from its graded answers every ``every`` outcomes, as the pipeline
    does (traffic_sensor's condition, then traffic_model_embedding: locus_model.learning.embed_graded, one forward
    pass): the trained router and the events' query encodings. Its P on later events and its standing follow the new
    row, and the learner's evidence of it starts again from it (as a gateway's pool reload does)."""

    row: int
    router: Any
    encodings: np.ndarray  # (T, D)
    evaluations: int = 0  # the model's evaluations before the stream (none: a newcomer)
    every: int = EMBED_EVERY


def replay_strategy(stream: Stream, method: str, *, config: StreamConfig, seed: int) -> Strategy:
    """The routing strategy of ``method`` on ``stream``, built as the gateway builds its own
    (locus_model.learning.build_strategy, one LearningConfig)."""
    return build_strategy(
        method,
        names=[str(i) for i in range(len(stream.profiles))],
        profiles=stream.profiles,
        shares=stream.shares,
        config=config.learning,
        prior_var=stream.prior_var,
        seed=seed,
    )


def route_stream(stream: Stream, method: str, *, config: StreamConfig, seed: int) -> np.ndarray:
    """(T,) the model each event goes to under ``method``: the oracle, the best single model and the full-label
    lookup read the stream's labels; every other method is a routing strategy (locus_model.learning) deciding one
    event at a time over the models available then, taking each outcome as it arrives."""
    if method == "oracle":
        return np.argmax(np.where(stream.available, stream.labels, -1.0), axis=0)
    if method == "best_single":
        return np.full(stream.labels.shape[1], stream.best_single)
    if method == "rule_full_labels":
        return _rule_full_labels(stream)
    if method not in METHODS:
        raise ValueError(f"unknown stream method {method!r}; choose from {list(METHODS)}")
    decisions = replay_decisions(stream, replay_strategy(stream, method, config=config, seed=seed))
    return np.array([d.chosen for d in decisions], np.int64)


def replay_decisions(stream: Stream, strategy: Strategy) -> list[Decision]:
    """Each event's decision by ``strategy``: the outcomes that arrived by then observed first (from the event's
    client; the judge grades for the operator), then the event decided over the models available, under the guard
    margin of the stream."""
    n = stream.labels.shape[1]
    request = Request(RoutingPolicy(guard_margin=stream.margin))
    costs = np.zeros(len(stream.profiles))
    pending: dict[int, list[tuple[int, int]]] = {}
    out = []
    again = getattr(stream, "reembed", None) if isinstance(strategy, Learning) else None
    p, standing, graded, embedded_at = stream.p, stream.standing, [], 0  # copied before a re-embedding changes them
    for t in range(n):
        for m, tt in pending.pop(t, ()):
            client = stream.client[tt]
            strategy.observe(
                m,
                int(stream.group[tt]),
                float(stream.reported[m, tt]),
                float(p[m, tt]),
                client=str(client),
                grader=client == JUDGE,
            )
            if again is not None and m == again.row:
                graded.append(tt)
        # as traffic_sensor's condition (again is set only for a Learning strategy: the isinstance narrows it)
        if again is not None and isinstance(strategy, Learning) and len(graded) - embedded_at >= again.every:
            p, standing = _reembed(stream, strategy, again, graded, t, p, standing)
            embedded_at = len(graded)
        rows = np.flatnonzero(stream.available[:, t])
        query = Query(
            rows=rows,
            p=p[rows, t],
            group=int(stream.group[t]),
            standing=standing[rows],
            costs=costs[rows],
            client=str(stream.client[t]),
        )
        decision = strategy.decide(query, request)
        out.append(decision)
        if stream.revealed[t]:
            pending.setdefault(int(stream.arrives[t]), []).append((decision.chosen, t))
    return out


def _reembed(stream: Stream, strategy: Learning, again: Reembedding, graded: list, t: int, p, standing):
    """``again.row`` embedded again from its graded answers so far (embed_graded): its P from event t on, its
    standing, and the learner over the new row (its evidence starts again, its prior from its graded answers)."""
    events = np.asarray(graded)
    scores = stream.reported[again.row, events].astype(np.float64)
    emb, prof = embed_graded(again.router, again.encodings[events], scores)
    p, standing = p.copy(), standing.copy()
    p[again.row, t:] = again.router.proba(emb[None], prof[None], again.encodings[t:])[0]
    standing[again.row] = again.router.standing(prof[None])[0]
    learner = strategy.learner
    profiles = learner.start.copy()
    profiles[again.row] = prof
    n = np.full(len(profiles), 1 << 20, np.float64)
    n[again.row] = again.evaluations + len(events)
    prior_var = learner.prior_var.copy()
    prior_var[again.row] = prior_variance(profiles, n, strategy.shares, router_var=learner.config.prior_var)[again.row]
    keep = [name for i, name in enumerate(learner.names) if i != again.row]
    strategy.learner = learner.remapped(learner.names, profiles, keep=keep, prior_var=prior_var)
    return p, standing


def guarded_argmax(p: np.ndarray, standing: np.ndarray, margin: float, available: np.ndarray) -> np.ndarray:
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


__all__ = [
    "JUDGE",
    "METHODS",
    "POISONER",
    "SCENARIOS",
    "Stream",
    "StreamConfig",
    "guarded_argmax",
    "replay_decisions",
    "replay_strategy",
    "route_stream",
]

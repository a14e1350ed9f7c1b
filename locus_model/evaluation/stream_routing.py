"""The replay's routers, one stream at a time: what each method chooses for each event and what it learns from the
outcomes revealed to it (locus_model.evaluation.stream builds the streams; the methods are described there)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from locus_model.learning import ExplorationBudget, Learner, LearningConfig
from locus_model.routing.policy import check_margin, routing_scores

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
        return guarded_argmax(stream.p, stream.standing, stream.margin, stream.available)
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


def _learning(stream: Stream, learning: LearningConfig, rng: np.random.Generator) -> np.ndarray:
    """The learning router: the learner's P (or one Thompson draw, within the budget) under the guard whose reference
    is the highest learned standing; outcomes update the learner as they arrive."""
    _, n = stream.labels.shape
    learner = Learner.start_from(
        [str(i) for i in range(len(stream.profiles))], stream.profiles, learning, prior_var=stream.prior_var
    )
    budget = ExplorationBudget(learning.explore)
    choice = np.empty(n, np.int64)
    pending: dict[int, list[tuple[int, int]]] = {}
    profiles = stream.profiles
    shift = np.zeros_like(profiles)
    for t in range(n):
        arrived = pending.pop(t, ())
        for m, tt in arrived:
            learner.observe(
                m,
                int(stream.group[tt]),
                float(stream.reported[m, tt]),
                float(stream.p[m, tt]),
                client=stream.client[tt],
            )
        if arrived:
            shift = learner.shift()
        k, avail = int(stream.group[t]), stream.available[:, t]
        # the guard reads the learned estimates as it reads the trained ones: the standing moved by what the
        # outcomes moved each group profile, weighted by the groups' shares (exactly the trained standing before any)
        standing = stream.standing + (_sigmoid(_logit(profiles) + shift) - _sigmoid(_logit(profiles))) @ stream.shares
        best = _guarded_one(_sigmoid(_logit(stream.p[:, t]) + shift[:, k]), standing, stream.margin, avail)
        pick, explored = best, False
        if budget.share > 0:
            drawn = learner.draw(stream.p[:, t : t + 1], np.array([k]), rng)[:, 0]
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


__all__ = ["JUDGE", "METHODS", "POISONER", "SCENARIOS", "Stream", "StreamConfig", "guarded_argmax", "route_stream"]

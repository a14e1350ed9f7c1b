"""Routing strategies: one object per method behind one call, :meth:`Strategy.decide`, that `locus serve`'s gateway
and the replay (locus_model.evaluation.stream_routing) both make -- a replay that composed its own copy of a decision
would measure the copy (LiteLLM's router_strategy/ has the same shape).

``decide(query, request)`` takes what the router knows of one query over the request's candidate rows
(:class:`Query`: the router's P(correct), the query group, the candidates' trained standing, costs, sizes, model
embeddings, the client asking) and the request's constraints (:class:`Request`: the routing policy with its guard
margin, quality weight and caps; the fallbacks wanted; the server's single model; a pinned model) and returns a
frozen :class:`Decision`: the chosen row, its fallback chain, whether it was exploration and why, the probability
that this strategy in this state makes this choice (its propensity), and the exploration draw's seed, so that any
exploration replays exactly. ``observe`` takes one graded outcome. The methods:

- :class:`Frozen`: LOCUS as trained (``locus_model.routing.route`` on the router's P under the guard);
- :class:`Learning`: the learner's P and learned standing under the same guard, and one rule over it: the incumbent
  (the server's single model, else frozen LOCUS's choice) keeps the query until the posterior says another candidate
  is better on it with probability ``LearningConfig.overturn``; a Thompson draw may explore within
  :class:`Exploration`'s budget (only where outcomes arrive). ``mode="observe"`` serves frozen LOCUS and computes
  the learned choice beside it;
- :class:`Thompson`: the replay's baselines, Thompson sampling from Beta(1, 1) per query group (``per_group``) or
  over all queries at once (non-contextual).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np
from scipy.special import ndtr

from locus_model.learning.exploration import Exploration
from locus_model.learning.learner import Learner, LearningConfig
from locus_model.routing.policy import RoutingPolicy, routing_scores
from locus_model.routing.route import RouteDecision, fallback_chain, route, route_scores

MODES = ("apply", "observe", "off")  # what learning does to the served choice: applies it, logs it beside, nothing
PROPENSITY_DRAWS = 32  # draws beside the one made that estimate an explored request's propensity
_SEED_BOUND = 2**62


@dataclass(frozen=True, eq=False)
class Query:
    """What the router knows of one query, over the request's candidates (R rows of the pool)."""

    rows: np.ndarray  # (R,) the candidates' pool rows (the learner's model index)
    p: np.ndarray  # (R,) the router's P(correct) of each candidate on the query
    group: int  # the query's group (the router's)
    standing: np.ndarray  # (R,) the candidates' trained standing (the guard's reference)
    costs: np.ndarray  # (R,) expected cost of the query per candidate (NaN: unknown)
    params: np.ndarray | None = None  # (R,) parameter counts in billions (NaN: unknown)
    embeddings: np.ndarray | None = None  # (R, d) model embeddings (the fallback chain)
    client: str | None = None  # who asks: its own outcomes steer its routing (None: the shared view)


@dataclass(frozen=True)
class Request:
    """The request's constraints and the server's rule (positions index :attr:`Query.rows`)."""

    policy: RoutingPolicy = RoutingPolicy()
    n_fallbacks: int | None = None
    single: int | None = None  # the server's single model (the guard's incumbent every query stays on), if it may
    pinned: int | None = None  # the model the request named: it answers, never moved, never explored


@dataclass(frozen=True, eq=False)
class Decision:
    """One query's routing by a strategy."""

    chosen: int  # the chosen pool row
    position: int  # its position among the query's candidates
    fallbacks: tuple[int, ...]  # pool rows to try after it, in order
    explored: bool  # a Thompson draw chose it over the best estimate
    why: str  # why this choice (and why it was or was not explored), in words
    probability: float  # the chance that this strategy, in this state, makes this choice (1: deterministic)
    seed: int | None  # the exploration draw's seed (None: no draw): np.random.default_rng(seed) replays it
    by: str  # "pinned", "single", "learned" (the incumbent overturned by the outcomes), "router"
    route: RouteDecision  # the ranking the choice came from (positions)
    p: np.ndarray  # (R,) P(correct) the strategy ranked on
    standing: np.ndarray  # (R,) the guard's standing it ranked under
    learned: int | None = None  # observe mode: the pool row learning would have chosen (None: not computed)


class Strategy:
    """One routing method: :meth:`decide` a query, :meth:`observe` a graded outcome."""

    name = "strategy"

    def decide(self, query: Query, request: Request) -> Decision:
        raise NotImplementedError

    def observe(
        self, row: int, group: int, score: float, p_router: float, *, client: str | None = None, grader: bool = True
    ) -> None:
        """One graded answer of pool row ``row`` on a query of ``group`` that the router gave ``p_router``."""


def _route(query: Query, request: Request, p: np.ndarray, standing: np.ndarray | None) -> RouteDecision:
    return route(
        p,
        query.costs,
        request.policy,
        standing=standing,
        params=query.params,
        embeddings=query.embeddings,
        n_fallbacks=request.n_fallbacks,
    )


def _decision(
    query: Query,
    request: Request,
    d: RouteDecision,
    p: np.ndarray,
    standing: np.ndarray,
    position: int,
    *,
    by: str,
    why: str,
    explored: bool = False,
    probability: float = 1.0,
    seed: int | None = None,
    learned: int | None = None,
) -> Decision:
    """The decision for ``position``: route's fallbacks when it is route's choice, else its embedding neighbours
    among the ranked candidates."""
    if position == d.chosen:
        chain = d.fallbacks
    elif query.embeddings is not None:
        chain = fallback_chain(query.embeddings, position, d.ranking, k=request.n_fallbacks)
    else:
        chain = np.zeros(0, np.int64)
    rows = np.asarray(query.rows)
    return Decision(
        chosen=int(rows[position]),
        position=int(position),
        fallbacks=tuple(int(r) for r in rows[np.asarray(chain, np.int64)]),
        explored=explored,
        why=why,
        probability=float(probability),
        seed=seed,
        by=by,
        route=d,
        p=p,
        standing=standing,
        learned=learned,
    )


def _pinned(
    query: Query, request: Request, d: RouteDecision, p: np.ndarray, standing: np.ndarray, pinned: int
) -> Decision:
    return _decision(
        query, request, d, p, standing, pinned, by="pinned", why="the request named it: never moved or explored"
    )


class Frozen(Strategy):
    """LOCUS as trained: route on the router's P under the guard of the trained standing; the single model where
    the server serves one."""

    name = "frozen"

    def decide(self, query: Query, request: Request) -> Decision:
        return self.decided(query, request, self.route(query, request))

    @staticmethod
    def route(query: Query, request: Request, *, chain: bool = True) -> RouteDecision:
        """Frozen LOCUS's ranking of the query (the router's P under the trained standing's guard); ``chain=False``:
        without its fallback chain (the learning router reads only its choice, the guard's incumbent)."""
        if not chain:
            query = replace(query, embeddings=None)
        return _route(query, request, np.asarray(query.p, np.float64), np.asarray(query.standing, np.float64))

    @staticmethod
    def decided(query: Query, request: Request, d: RouteDecision) -> Decision:
        """The decision of :meth:`route`'s ranking ``d``: the pinned model, the single model, else its choice."""
        p, standing = np.asarray(query.p, np.float64), np.asarray(query.standing, np.float64)
        if request.pinned is not None:
            return _pinned(query, request, d, p, standing, request.pinned)
        if request.single is not None and request.single in d.ranking:
            return _decision(query, request, d, p, standing, request.single, by="single", why="the single model")
        return _decision(query, request, d, p, standing, d.chosen, by="router", why="the router's best estimate")


class Learning(Strategy):
    """The learning router (see the module's docstring): ``learner`` (its P and standing), ``exploration`` (the
    budget), ``shares`` (G,) the query groups' shares (the standing's weights), ``seed`` the draws' seeds' source."""

    name = "learning"

    def __init__(
        self,
        learner: Learner,
        *,
        shares: np.ndarray,
        exploration: Exploration | None = None,
        mode: str = "apply",
        seed: int | None = None,
    ) -> None:
        if mode not in MODES[:2]:
            raise ValueError(f"Learning: mode {mode!r}: choose apply or observe (off: the Frozen strategy)")
        self.learner, self.mode = learner, mode
        self.shares = np.asarray(shares, np.float64)
        groups = learner.start.shape[1]
        if self.shares.shape != (groups,):
            raise ValueError(f"Learning: shares {self.shares.shape} must be one per query group ({groups})")
        self.exploration = exploration or Exploration(learner.config.explore, groups)
        self.seeds = np.random.default_rng(seed)
        self._standing: dict = {}  # client -> (view, version, (M,) the standing's shift)

    @property
    def config(self) -> LearningConfig:
        return self.learner.config

    def standing_shift(self, client: str | None = None) -> np.ndarray:
        """(M,) what the outcomes moved each model's standing by (its learned profiles less its start, weighted by
        the groups' shares): 0 exactly where nothing moved. Computed once per change of the client's evidence."""
        view = self.learner.view(client)
        cached = self._standing.get(client)
        if cached is None or cached[0] is not view or cached[1] != view.version:
            moved = (self.learner.profiles(client) - self.learner.start) @ self.shares
            cached = self._standing[client] = (view, view.version, moved)
        return cached[2]

    def learned(self, query: Query) -> tuple[np.ndarray, np.ndarray, bool]:
        """((R,) learned P, (R,) learned standing, whether the outcomes moved either) of the query's candidates."""
        rows = np.asarray(query.rows)
        p = np.asarray(query.p, np.float64)
        standing = np.asarray(query.standing, np.float64)
        shift, moved = self.learner.shift(query.client)[rows, query.group], self.standing_shift(query.client)[rows]
        if not shift.any() and not moved.any():  # no outcome on these cells: frozen LOCUS's view, exactly
            return p, standing, False
        return self.learner.proba(p[:, None], [query.group], rows, client=query.client)[:, 0], standing + moved, True

    def decide(self, query: Query, request: Request) -> Decision:
        p, standing, moved = self.learned(query)
        d = _route(query, request, p, standing)
        if request.pinned is not None:
            return _pinned(query, request, d, p, standing, request.pinned)
        # the guard's incumbent where no single model is served (its chain only where observe mode serves it)
        frozen = Frozen.route(query, request, chain=self.mode == "observe") if moved else d
        position, by, why = self._guarded(query, request, d, p, frozen)
        if self.mode == "observe":
            served = Frozen.decided(query, request, frozen)
            return replace(
                served,
                learned=int(query.rows[position]),
                why=f"learning observes (--learn observe): served as frozen LOCUS; learning would choose "
                f"row {int(query.rows[position])} ({why})",
            )
        explored, probability, seed, note = False, 1.0, None, ""
        if len(query.rows) < 2:
            note = "one candidate: never explored"
        else:
            allowed, note = self.exploration.allows(query.group, 1.0)  # the most it can be: no posterior read
            if allowed:
                narrowing = self.learner.narrowing(query.rows, query.group, client=query.client)
                allowed, note = self.exploration.allows(query.group, narrowing)
            if allowed:
                seed = int(self.seeds.integers(_SEED_BOUND))
                drawn = self.learner.draw(
                    np.asarray(query.p, np.float64)[:, None],
                    [query.group],
                    np.random.default_rng(seed),
                    query.rows,
                    client=query.client,
                )
                choice = _route(query, request, drawn[:, 0], standing).chosen
                explored = choice != position
                probability = self._propensity(query, request, d, standing, seed, choice)
                self.exploration.record(query.group, explored)
                if explored:
                    position, by = choice, "router"
                    why = f"a Thompson draw from the learner (seed {seed}) chose it over the best estimate"
                note = f"{'explored' if explored else 'the draw agreed with the best estimate'}: {note}"
        return _decision(
            query,
            request,
            d,
            p,
            standing,
            position,
            by=by,
            why=f"{why}; exploration: {note}",
            explored=explored,
            probability=probability,
            seed=seed,
        )

    def _guarded(
        self, query: Query, request: Request, d: RouteDecision, p: np.ndarray, frozen: RouteDecision
    ) -> tuple[int, str, str]:
        """(position, by, why): the incumbent -- the server's single model, else frozen LOCUS's choice -- keeps the
        query unless the posterior says, with probability >= overturn, that its P on this query is below a ranked
        candidate's learned P (then the best ranked of those). The incumbent's uncertainty decides, not the
        candidate's: a candidate's overestimate corrects itself once it answers, an incumbent's underestimate never
        does once it has lost its queries (routed on learned means alone, a few unlucky early answers lock the best
        model out of a group for good). Its variance is its cell's posterior variance carried to the
        query's P through the logit. Only outcomes overturn: with no outcome of the incumbent's cell, only candidates
        with outcomes are compared."""
        single = request.single is not None and request.single in d.ranking
        x = request.single if single else frozen.chosen
        name = "the single model" if single else "frozen LOCUS's choice"
        if x is None or x not in d.ranking:  # the incumbent is outside the request's caps
            return d.chosen, "router", "the best learned estimate under the guard"
        if not single and x == d.chosen:
            return x, "router", "the best learned estimate under the guard (frozen LOCUS's choice too)"
        rows = np.asarray(query.rows)
        mean, var, answered = self.learner.moments(rows[[x]], query.group, client=query.client)
        v_x = var[0] * (p[x] * (1.0 - p[x]) / (mean[0] * (1.0 - mean[0]))) ** 2  # its cell's variance at its P
        prob = ndtr((p - p[x]) / np.sqrt(max(v_x, 1e-12)))  # P(P_x < P_j), normal approx
        prob[x] = 0.0
        if not answered[0]:
            prob[~self.learner.answered(rows, query.group, client=query.client)] = 0.0
        ranked = np.asarray(d.ranking)
        better = ranked[prob[ranked] >= self.config.overturn]
        if len(better):
            j = int(better[0])
            return (
                j,
                "learned",
                (
                    f"the graded outcomes overturned {name}: row {int(query.rows[j])} is better on this query with "
                    f"posterior probability {prob[j]:.3f} (>= {self.config.overturn:g})"
                ),
            )
        best = int(np.argmax(prob))
        return (
            x,
            "single" if single else "router",
            (
                f"{name} keeps the query: no candidate is better on it with posterior probability >= "
                f"{self.config.overturn:g}" + (f" (the closest: {prob[best]:.3f})" if len(prob) > 1 else "")
            ),
        )

    def _propensity(
        self, query: Query, request: Request, d: RouteDecision, standing: np.ndarray, seed: int, choice: int
    ) -> float:
        """The chance a draw routes to ``choice``: the share of PROPENSITY_DRAWS more draws (their own stream of
        ``seed``) and the one made that choose it, each ranked as route ranks (its kept candidates, score)."""
        rng = np.random.default_rng([seed, 1])
        size = PROPENSITY_DRAWS
        p = np.asarray(query.p, np.float64)[:, None]
        drawn = self.learner.draw(p, [query.group], rng, query.rows, client=query.client, size=size)[:, :, 0]  # (S, R)
        kept = np.sort(np.asarray(d.ranking))
        margin = request.policy.margins(None)  # as _route's route applies it (no per-query noise there)
        quality = routing_scores(drawn[:, kept].T, standing[kept], margin)  # (r, S)
        costs = np.nan_to_num(np.broadcast_to(np.asarray(query.costs, np.float64)[kept][:, None], quality.shape))
        scores = route_scores(quality, costs, request.policy.quality_weight)
        picks = kept[np.argmax(scores, axis=0)]
        return float((np.sum(picks == choice) + 1) / (size + 1))

    def observe(
        self, row: int, group: int, score: float, p_router: float, *, client: str | None = None, grader: bool = True
    ) -> None:
        self.learner.observe(row, group, score, p_router, client=client, grader=grader)
        self.exploration.outcome(group)


class Thompson(Strategy):
    """Thompson sampling from Beta(1, 1) (no prior from the router): per query group (``per_group``) or over every
    query at once; the draw ranked as route ranks it (the request's caps and costs), no guard."""

    def __init__(self, models: int, groups: int, *, per_group: bool, seed: int | None = None) -> None:
        self.per_group = per_group
        self.name = "thompson_group" if per_group else "thompson"
        cells = groups if per_group else 1
        self.right, self.count = np.zeros((models, cells)), np.zeros((models, cells))
        self.seeds = np.random.default_rng(seed)

    def decide(self, query: Query, request: Request) -> Decision:
        c = query.group if self.per_group else 0
        rows = np.asarray(query.rows)
        a, b = 1.0 + self.right[rows, c], 1.0 + self.count[rows, c] - self.right[rows, c]
        seed = int(self.seeds.integers(_SEED_BOUND))
        rng = np.random.default_rng(seed)
        drawn = rng.beta(a, b)
        d = _route(query, request, drawn, None)
        if request.pinned is not None:
            return _pinned(query, request, d, drawn, np.asarray(query.standing, np.float64), request.pinned)
        more = rng.beta(a, b, size=(PROPENSITY_DRAWS, len(rows)))
        probability = (np.sum(np.argmax(more, axis=1) == d.chosen) + 1) / (PROPENSITY_DRAWS + 1)
        return _decision(
            query,
            request,
            d,
            drawn,
            np.asarray(query.standing, np.float64),
            d.chosen,
            by="router",
            why=f"a Thompson draw from Beta(1 + right, 1 + wrong) {'of the query group' if self.per_group else ''}",
            explored=d.chosen != int(np.argmax(a / (a + b))),
            probability=probability,
            seed=seed,
        )

    def observe(
        self, row: int, group: int, score: float, p_router: float, *, client: str | None = None, grader: bool = True
    ) -> None:
        c = group if self.per_group else 0
        self.right[row, c] += score
        self.count[row, c] += 1.0


def build_strategy(
    method: str,
    *,
    names: Iterable[str],
    profiles: np.ndarray,
    shares: np.ndarray,
    config: LearningConfig,
    mode: str = "apply",
    prior_var: np.ndarray | None = None,
    seed: int | None = None,
) -> Strategy:
    """The strategy of ``method`` ("frozen", "learning", "thompson_group", "thompson") from one configuration: the
    gateway (``locus serve``, its LearningConfig from ``learning_config``) and the replay build theirs here."""
    profiles = np.asarray(profiles, np.float64)
    if method == "frozen" or (method == "learning" and mode == "off"):
        return Frozen()
    if method == "learning":
        learner = Learner.start_from(names, profiles, config, prior_var=prior_var)
        return Learning(learner, shares=shares, mode=mode, seed=seed)
    if method in ("thompson_group", "thompson"):
        return Thompson(len(profiles), profiles.shape[1], per_group=method == "thompson_group", seed=seed)
    raise ValueError(f"unknown routing strategy {method!r}: choose frozen, learning, thompson_group or thompson")


__all__ = [
    "MODES",
    "Decision",
    "Frozen",
    "Learning",
    "Query",
    "Request",
    "Strategy",
    "Thompson",
    "build_strategy",
]

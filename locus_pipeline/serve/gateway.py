"""The served state and its decisions: :class:`Gateway` holds the current snapshot (reloaded when the pool file
changes), the scorer and the metrics, and decides a query (:meth:`Gateway.decide`) by locus_model.routing.route."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import time
from dataclasses import replace
from typing import Callable, Sequence, TypeGuard

import httpx
import numpy as np
from starlette.concurrency import run_in_threadpool

from locus_model.data.encoding import EncodingInputError
from locus_model.learning import Decision, Frozen, Query, Request, Strategy
from locus_model.routing import (
    CostUnknown,
    NoCandidateWithinCap,
    RouteDecision,
    RoutingError,
    RoutingPolicy,
    estimate_tokens,
    incumbent,
)
from locus_model.threads import choose_threads
from locus_pipeline.serve.batcher import QueryBatcher, Scored
from locus_pipeline.serve.config import ServeConfig, check_models_against_pool, read_models_config
from locus_pipeline.serve.cooldown import Cooldowns
from locus_pipeline.serve.http import ApiError
from locus_pipeline.serve.identity import Identity
from locus_pipeline.serve.learning import (
    EXPLORED_HEADER,
    REQUEST_ID_HEADER,
    Learning,
    Routed,
    learning_config,
)
from locus_pipeline.serve.metrics import Metrics
from locus_pipeline.serve.serving import cost_text, guard_text, pool_verdict, single_model
from locus_pipeline.serve.snapshot import Snapshot, WatchedKey, load_snapshot, watched_key
from locus_pipeline.storage import LocusHome
from locus_pipeline.storage.traffic import Retention

log = logging.getLogger("locus.serve")
ERROR_CODES = {NoCandidateWithinCap: "no_candidate_within_cost", CostUnknown: "cost_unknown"}  # the error body's code

MAX_REPORTED_TOKENS = 10**9  # an upstream's usage beyond this is not counted
FROZEN = Frozen()  # the strategy without learning (stateless)


def _outside_caps(row: int, d: RouteDecision, max_cost: float | None, max_params: float | None) -> str:
    """Which of a request's caps leaves candidate ``row`` of decision ``d`` out, in words."""
    if row in d.over_cost:
        return f"it costs more than max_cost={max_cost:g}"
    if row in d.unknown_cost:
        return "its cost is unknown, and the request's ranking uses cost"
    if row in d.over_params:
        return f"it has more than max_params={max_params:g} billion parameters"
    return f"its size is unknown, and the request caps it (max_params={max_params:g})"


def _json_number(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


class Gateway:
    """The served state: the current snapshot (swapped whole), the scorer, the metrics."""

    identity: Identity  # the credentials, set by create_app (serve/app.py) before any request is served

    def __init__(
        self,
        config: ServeConfig,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.home = LocusHome(root=config.home)
        self.models = read_models_config(config.models_config)
        self.snapshot = self._load()
        snap = self.snapshot
        unevaluated = [n for n, s in zip(snap.names, snap.sources) if s == "unevaluated"]
        for warning in check_models_against_pool(
            self.models,
            [n for n, s in zip(snap.names, snap.sources) if s != "unevaluated"],
            path=config.models_config,
            dry_run=config.dry_run,
            unevaluated=unevaluated,
        ):
            log.warning(warning)
        self.failed_key: WatchedKey | None = None
        self.last_reload_error: str | None = None
        self.metrics = Metrics()
        self.threads = choose_threads(config.threads)  # 0: the cores free now (the one threads rule)
        self.batcher = QueryBatcher(
            max_batch=config.max_batch,
            cache_size=config.cache_size,
            batch_wait_ms=config.batch_wait_ms,
            threads=self.threads.threads,
            on_batch=self.metrics.batch_size.observe,
        )
        self.metrics.pool_models.set(len(self.snapshot.names))
        settings = self.models.gateway
        self.cooldowns = Cooldowns(
            allowed_fails=settings.allowed_fails,
            window_s=settings.cooldown_window_s,
            cooldown_s=settings.cooldown_s,
            clock=clock,
            on_cooldown=lambda model: self.metrics.cooldowns.labels(model).inc(),
        )
        self.metrics.cooled_down.set_function(self.cooldowns.cooled_down)
        self.single_model, self.serve_reason = single_model(config.serve, self.snapshot, self.home)
        self.verdict = pool_verdict(self.home, self.snapshot)  # the routing evaluation of the served checkpoint
        self.transport = transport
        self.client: httpx.AsyncClient | None = None
        self.log_lock: asyncio.Lock | None = None  # made on the serving event loop (the app's lifespan)
        self.learning = (
            Learning(
                self.home,
                self.snapshot,
                config=learning_config(config),
                retention=Retention(days=config.traffic_days, max_mb=config.traffic_max_mb),
                mode=config.learn,
                seed=config.explore_seed,
                metrics=self.metrics,
            )
            if config.learn != "off"
            else None
        )

    def record_usage(self, snap: Snapshot, name: str, usage: object) -> None:
        """Count an upstream's reported ``usage`` ({prompt_tokens, completion_tokens}) and its cost in USD at the
        snapshot's prices; a usage that is not two counts in [0, 1e9] is ignored (an upstream's word, untrusted)."""
        if not isinstance(usage, dict):
            return
        n_in, n_out = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if not (_is_token_count(n_in) and _is_token_count(n_out)):
            return
        self.metrics.tokens.labels(name, "input").inc(n_in)
        self.metrics.tokens.labels(name, "output").inc(n_out)
        costs = snap.costs
        i = snap.index.get(name)
        if costs.basis == "usd" and i is not None and name not in costs.unknown:
            usd = float(costs.costs(n_in, n_out)[i])
            if math.isfinite(usd) and usd >= 0:
                self.metrics.cost.labels(name).inc(usd)

    def summary(self) -> str:
        """What `locus serve` prints at start-up: the pool, what model "locus" answers with, the upstreams and the
        policy for failures."""
        snap, settings = self.snapshot, self.models.gateway
        serves = (
            f'the single model {self.single_model} (model "locus" answers with it)'
            if self.single_model
            else f'the router (model "locus": the best of {len(snap.routable)} routable '
            f"models at quality weight {self.config.policy.quality_weight:g}, "
            f"{guard_text(snap, self.config.policy.margin)})"
        ) + f": {self.serve_reason}"
        ups = [f"{n} -> {u.base_url} ({u.model})" for n, u in snap.upstreams.items()]
        lines = [
            f"pool: {len(snap.names)} models ({len(snap.routable)} routable"
            + (f", portfolio {snap.portfolio}" if snap.portfolio else "")
            + f"), checkpoint {snap.checkpoint_id}, "
            f"encoder {snap.encoder} ({snap.runtime}, {self.threads.describe().replace('torch ', '')}), "
            f"cost basis {snap.costs.basis}",
            f"serves: {serves}" + (" -- DRY RUN: chat calls answer with the decision only" if snap.dry_run else ""),
            f"upstreams: {len(ups)}"
            + (
                ": " + "; ".join(ups[:5]) + (f"; ... ({len(ups) - 5} more)" if len(ups) > 5 else "")
                if ups
                else " (POST /route answers; chat calls need --models-config)"
            ),
            f"by cost: {cost_text(self.verdict)}",
            f"policy: {self.config.n_fallbacks} fallbacks (embedding neighbours; pinned models: "
            f"{'on' if settings.pinned_fallbacks else 'off unless the request asks'}); an upstream failing "
            f"{settings.allowed_fails} times in {settings.cooldown_window_s:g} s is skipped for "
            f"{settings.cooldown_s:g} s" + ("; bearer token required" if self.config.token else "; no token"),
        ]
        lines.append(f"learning: {self.learning_text()}")
        return "\n".join("  " + line for line in lines)

    def learning_status(self) -> dict:
        """Learning in /healthz: the mode, the exploration budget, outcomes loaded, models whose standing moved."""
        if self.learning is None:
            return {"learn": "off"}
        return self.learning.status()

    def learning_text(self) -> str:
        """Learning in the start-up summary, one line."""
        if self.learning is None:
            return "off (--learn off): routing is frozen LOCUS; POST /v1/outcomes answers 503"
        st = self.learning.status()
        moved = st["standing_moved"]
        what = {
            "apply": "graded outcomes move routing"
            + (f", and may overturn the single model {self.single_model}" if self.single_model else ""),
            "observe": "graded outcomes are learned and the learned choice logged beside the frozen one served",
        }[st["learn"]]
        return (
            f"{st['learn']} ({what}); exploration {st['explore']:g} explored requests per graded outcome of a "
            f"query group (none before outcomes arrive); {st['outcomes_loaded']:g} outcomes loaded; "
            + (
                "standing moved: "
                + ", ".join(f"{n} {v:+.3f}" for n, v in list(moved.items())[:5])
                + (f" (+{len(moved) - 5} more)" if len(moved) > 5 else "")
                if moved
                else "no model's standing moved yet"
            )
        )

    # -- reload

    async def reload_if_changed(self) -> bool:
        key = watched_key(self.home, self.config.portfolio)
        if key is None or key == (self.snapshot.key, self.snapshot.portfolio_key) or key == self.failed_key:
            return False
        try:
            snap = await run_in_threadpool(self._load_warm)
        except Exception as err:  # keep serving the old pool; the log and /healthz say why
            self.failed_key = key
            self.metrics.reloads.labels("failed").inc()
            self.metrics.reload_failing.set(1)
            log.error("pool reload failed, still serving checkpoint %s: %s", self.snapshot.checkpoint_id, err)
            self.last_reload_error = f"{type(err).__name__}: {err}"
            return False
        self.snapshot, self.failed_key, self.last_reload_error = snap, None, None  # one assignment: the swap
        if self.learning is not None:
            self.learning.on_pool(snap)
        self.metrics.reloads.labels("ok").inc()
        self.metrics.reload_failing.set(0)
        self.metrics.pool_models.set(len(snap.names))
        log.info("pool reloaded: %d models, checkpoint %s", len(snap.names), snap.checkpoint_id)
        return True

    def _load(self) -> Snapshot:
        return load_snapshot(
            self.home,
            self.models,
            self.config.encoder_runtime,
            portfolio=self.config.portfolio,
            dry_run=self.config.dry_run,
            learning=self.config.learn != "off",
        )

    def _load_warm(self) -> Snapshot:
        snap = self._load()
        single_model(self.config.serve, snap)  # --serve single:MODEL: MODEL must still be in the new pool
        self.batcher.encoder(snap).encode(["warm up"])  # a new encoder loads here, not in a request
        return snap

    async def watch(self) -> None:
        while True:
            await asyncio.sleep(self.config.poll_seconds)
            await self.reload_if_changed()
            await self.learn_from_log()

    async def learn_from_log(self) -> None:
        """Read what every replica logged since the last tick (decisions, outcomes, resets) into the learner; save
        its state now and then. A storage error is logged and tried again at the next tick."""
        if self.learning is None:
            return
        if self.log_lock is None:
            self.log_lock = asyncio.Lock()
        async with self.log_lock:  # the watcher's tick and an outcome for an id not read yet: one reader at a time
            await self._learn_from_log(self.learning)

    async def _learn_from_log(self, learning: Learning) -> None:
        try:
            decisions, outcomes = await run_in_threadpool(learning.read_logs)
            learning.catch_up(decisions, outcomes)
            snap, waiting = self.snapshot, learning.unscored
            while waiting:  # a dropped file's (model, query, score) rows: the router places each query, a batch at once
                chunk = waiting[: self.config.max_batch]
                results = await asyncio.gather(
                    *(self.batcher.score_full(snap, str(r["query"])) for r in chunk), return_exceptions=True
                )
                for record, scored in zip(chunk, results):
                    if isinstance(scored, EncodingInputError):
                        log.warning("a graded outcome's query (a dropped file) cannot be encoded: %s", scored)
                    elif isinstance(scored, BaseException):
                        raise scored  # the chunk stays for the next tick (each row counts once: by its id)
                    else:
                        learning.take_scored(snap, record, scored)
                del waiting[: len(chunk)]
            await run_in_threadpool(learning.housekeeping, learning.due())
        except Exception as err:  # keep serving; the next tick reads again from the same offsets
            log.error("reading the traffic log failed (tried again in %g s): %s", self.config.poll_seconds, err)

    # -- decisions

    def single_blocked(self, at: int | None, quality_weight: float | None) -> str | None:
        """Why the server's single model may not answer a request (None: it may, within the request's caps): it is
        not among the request's candidates (``at`` None), or the request weighs cost (a quality weight below 1: the
        single model is the most accurate, not the cheapest choice)."""
        if at is None:
            return "is not among the request's candidates"
        if quality_weight is not None and quality_weight < 1:
            return f"answers for accuracy, and the request weighs cost (quality weight {quality_weight:g} < 1)"
        return None

    def candidate_indices(self, snap: Snapshot, candidates: Sequence[str] | None, *, need_upstream: bool) -> np.ndarray:
        """The pool rows a request routes among: its ``candidates`` (pool models of the served set, with an
        upstream when it will be forwarded), else every routable served model."""
        index = snap.index
        if candidates is None:
            return snap.routable_rows
        if not isinstance(candidates, list) or not all(isinstance(c, str) for c in candidates):
            raise ApiError(400, "candidates must be a list of pool model names")
        if len(candidates) == 0:
            raise ApiError(400, "candidates is empty: give at least one pool model, or leave it out for all of them")
        unknown = [c for c in candidates if c not in index]
        if unknown:
            raise ApiError(
                400,
                f"unknown candidate model(s) {unknown[:5]}: not in the pool "
                f"({len(snap.names)} models; GET /v1/models lists them)",
                code="unknown_candidate",
            )
        if snap.portfolio:
            served = set(snap.served)
            outside = [c for c in candidates if c not in served]
            if outside:
                raise ApiError(
                    400,
                    f"candidate model(s) {outside[:5]} are not in the served portfolio {snap.portfolio} "
                    f"({len(snap.served)} models; GET /v1/models marks them routable)",
                    code="not_in_portfolio",
                )
        if need_upstream and snap.upstreams and not snap.dry_run:
            missing = [c for c in candidates if c not in snap.upstreams]
            if missing:
                raise ApiError(400, f"candidate model(s) {missing[:5]} have no upstream in the models config")
        return np.array([index[c] for c in dict.fromkeys(candidates)], dtype=np.int64)

    def request_policy(
        self,
        max_cost: float | None,
        quality_weight: float | None,
        max_params: float | None,
        input_tokens: int | None,
        output_tokens: int | None,
    ) -> RoutingPolicy:
        """The operator's policy with the request's quality weight and caps, validated (ApiError 400 otherwise)."""
        try:
            policy = replace(
                self.config.policy,
                max_cost=max_cost,
                max_params=max_params,
                **({} if quality_weight is None else {"quality_weight": quality_weight}),
            )
        except RoutingError as err:
            raise ApiError(400, str(err))
        except OverflowError:  # an integer too large for a float (hundreds of digits)
            raise ApiError(400, "max_cost and max_params must be numbers >= 0 a float can hold")
        for name, value in (("input_tokens", input_tokens), ("output_tokens", output_tokens)):
            if value is not None and not 0 <= value <= MAX_REPORTED_TOKENS:
                raise ApiError(
                    400,
                    f"{name} must be an integer in [0, {MAX_REPORTED_TOKENS:,}]"
                    + (f" (got {value})" if len(str(value)) <= 20 else f" (got {len(str(value))} digits)"),
                )
        return policy

    async def score(self, snap: Snapshot, query: str) -> Scored:
        """The router's P(correct) of every pool model on ``query`` and its group (ApiError 400: not encodable)."""
        try:
            return await self.batcher.score_full(snap, query)
        except EncodingInputError as err:
            raise ApiError(
                400,
                f"the query cannot be encoded: {err}".replace("text 0 ", "the query text "),
                code="invalid_query_text",
            )

    @property
    def strategy(self) -> Strategy:
        """The routing strategy deciding requests: frozen LOCUS without learning, else the learner's."""
        return FROZEN if self.learning is None else self.learning.strategy

    async def decide(
        self,
        snap: Snapshot,
        query: str,
        *,
        candidates: Sequence[str] | None,
        max_cost: float | None,
        quality_weight: float | None,
        input_tokens: int | None,
        output_tokens: int | None,
        max_params: float | None = None,
        need_upstream: bool = False,
        pinned: str | None = None,
        client: str | None = None,
    ) -> Routed:
        """The decision for ``query``: POST /route's and a chat request's, one function for both. The request's
        candidates and caps bound every decision; the routing strategy (:attr:`strategy`, the replay's too) decides
        on the scorer's P(correct) and the candidates' standing: a ``pinned`` model (a chat request naming a pool
        model) answers, else the server's single model where the request allows it (:meth:`single_blocked`) as the
        guard's incumbent that learning may overturn, else the router's choice. ``client`` (serve/identity.py): whose
        outcomes the learned P reads."""
        start = time.perf_counter()
        if not isinstance(query, str) or not query.strip():
            raise ApiError(400, "query is empty: give the text to route")
        policy = self.request_policy(max_cost, quality_weight, max_params, input_tokens, output_tokens)
        allowed, idx, target = self.requested_rows(snap, candidates, pinned, need_upstream=need_upstream)
        n_in = estimate_tokens(query) if input_tokens is None else input_tokens
        n_out = snap.output_tokens if output_tokens is None else output_tokens
        # every pool row in order (no candidates, every model routable): views, not copies of the pool's arrays
        rows = slice(None) if len(idx) == len(snap.names) and (idx == np.arange(len(idx))).all() else idx
        params_b = snap.costs.params_b
        assert params_b is not None, "cost_table gives every model's parameter count (NaN: unknown)"
        scored = await self.score(snap, query)
        one = None if self.single_model is None else snap.index.get(self.single_model)
        blocked = None if self.single_model is None else self.single_blocked(position(idx, one), quality_weight)
        aligned = self.learning is None or self.learning.aligned(snap)  # a request begun before a reload: frozen
        q = Query(
            rows=idx,
            p=scored.probs[rows],
            group=scored.group,
            standing=snap.pool_scorer.standing[rows],
            costs=snap.costs.costs(n_in, n_out)[rows],
            params=params_b[rows],
            embeddings=snap.embeddings[rows],
            client=None if self.learning is None else client,
        )
        request = Request(
            policy,
            n_fallbacks=self.config.n_fallbacks,
            single=position(idx, one) if pinned is None and blocked is None else None,
            pinned=position(idx, target),
        )
        try:
            d = (self.strategy if aligned else FROZEN).decide(q, request)
        except RoutingError as err:
            raise ApiError(400, str(err), code=ERROR_CODES.get(type(err)))
        if pinned is not None and d.position not in d.route.ranking:
            raise ApiError(
                400,
                f"the pinned model {pinned} is outside the request's caps ("
                + _outside_caps(d.position, d.route, max_cost, max_params)
                + "). How to fix: raise the cap, "
                'or ask for model "locus" to route among the models within it',
                code=ERROR_CODES[NoCandidateWithinCap],
            )
        if blocked is None and request.single is not None and request.single not in d.route.ranking:
            blocked = "is outside the request's caps (" + _outside_caps(request.single, d.route, max_cost, max_params)
            blocked += ")"
        self.count(snap, d)
        names = snap.names
        body = self.body(snap, q, d, policy, pinned=pinned, blocked=blocked, aligned=aligned)
        body.update(
            max_cost=max_cost,
            max_params=max_params,
            candidates=len(allowed),
            input_tokens=n_in,
            output_tokens=n_out,
            elapsed_ms=round(1000 * (time.perf_counter() - start), 3),
        )
        return Routed(
            body=body,
            decision=d,
            scored=scored,
            snap=snap,
            candidates=tuple(names[i] for i in idx[:64]),
            query_sha256=hashlib.sha256(query.encode("utf-8", "surrogatepass")).hexdigest(),
        )

    def requested_rows(
        self, snap: Snapshot, candidates: Sequence[str] | None, pinned: str | None, *, need_upstream: bool
    ) -> tuple[np.ndarray, np.ndarray, int | None]:
        """(the rows the request allows, the rows decided among, the pinned model's row): the pinned model answers
        even outside the candidates; its fallbacks stay inside."""
        allowed = self.candidate_indices(snap, candidates, need_upstream=need_upstream)
        if pinned is None:
            return allowed, allowed, None
        target = int(self.candidate_indices(snap, [pinned], need_upstream=need_upstream)[0])
        return allowed, (allowed if target in allowed else np.append(allowed, target)), target

    def count(self, snap: Snapshot, d: Decision) -> None:
        """A decision in /metrics: the model chosen, and whether exploration or the outcomes chose it."""
        name = snap.names[d.chosen]
        self.metrics.decisions.labels(name).inc()
        if d.explored:
            self.metrics.explored.labels(name).inc()
        if d.by == "learned":
            self.metrics.overturned.labels(name).inc()

    def serves(self, snap: Snapshot, d: Decision, *, pinned: str | None, blocked: str | None) -> dict:
        """Which rule chose, and why, in words (the decision's ``serves``)."""
        if d.by == "pinned":
            return {"by": "pinned", "why": f"the request named {pinned}"}
        if d.by == "single":
            return {"by": "single", "why": f"the single model this server serves ({self.serve_reason}); {d.why}"}
        if d.by == "learned":
            overturned = (
                f"the single model {self.single_model} ({self.serve_reason})"
                if self.single_model is not None
                else "frozen LOCUS's choice"
            )
            return {
                "by": "learned",
                "why": f"{overturned} overturned: " + d.why.replace(f"row {d.chosen}", snap.names[d.chosen]),
            }
        if self.single_model is not None and blocked is not None:
            return {
                "by": "router",
                "why": f"the router among the models the request allows: the single model {self.single_model} "
                f"{blocked}",
            }
        return {"by": "router", "why": self.serve_reason}

    def exploration_text(self, snap: Snapshot, d: Decision, *, aligned: bool) -> dict:
        """Whether the request was explored, why (or why not) in words, the draw's seed and the choice's probability."""
        if self.learning is None:
            why = "no learning (--learn off)"
        elif d.by == "pinned":
            why = "one candidate (a pinned model): never explored"
        elif not aligned:
            why = "the pool was reloaded during this request: decided as frozen LOCUS"
        else:
            why = d.why.replace(f"row {d.chosen}", snap.names[d.chosen])
            if d.learned is not None:
                why = why.replace(f"row {d.learned}", snap.names[d.learned])
        out = {"explored": d.explored, "why": why, "seed": d.seed, "probability": round(d.probability, 6)}
        if d.learned is not None:
            out["learned_choice"] = snap.names[d.learned]
        return out

    def body(self, snap: Snapshot, q: Query, d: Decision, policy: RoutingPolicy, **how) -> dict:
        """The decision as POST /route's JSON body (the ranking: the best ``ranking_size`` of it)."""
        names, idx, r, params = snap.names, q.rows, d.route, q.params
        assert params is not None, "decide() gives the query the snapshot's parameter counts"
        shown = r.ranking[: self.config.ranking_size or None]  # the best; a 100,000-model list is ~1 s of JSON
        return {
            "chosen": names[d.chosen],
            "fallbacks": [names[i] for i in d.fallbacks],
            "serves": self.serves(snap, d, pinned=how["pinned"], blocked=how["blocked"]),
            "ranking": [
                {
                    "model": names[idx[i]],
                    "p_correct": round(float(d.p[i]), 6),
                    "expected_cost": _json_number(float(q.costs[i])),
                    "params_b": _json_number(float(params[i])),
                    "score": round(float(r.scores[i]), 6),
                }
                for i in shown
            ],
            "ranked": len(r.ranking),
            "over_cost": [names[i] for i in idx[r.over_cost]],
            "unknown_cost": [names[i] for i in idx[r.unknown_cost]],  # left out of a cost-aware ranking: no cost known
            "over_params": [names[i] for i in idx[r.over_params]],
            "unknown_params": [names[i] for i in idx[r.unknown_params]],  # left out under max_params: no size known
            "guard": {"incumbent": names[idx[incumbent(d.standing, r.ranking)]], "margin": policy.guard_margin},
            "quality_weight": policy.quality_weight,
            "lambda": _json_number(r.lam),
            "cost_basis": snap.costs.basis,
            "cost_basis_means": snap.costs.basis_means,
            "cost_note": snap.costs.note,
            "portfolio": snap.portfolio,
            "checkpoint_id": snap.checkpoint_id,
            "encoder": snap.encoder,
            "encoder_runtime": snap.runtime,
            "pool_models": len(snap.names),
            "exploration": self.exploration_text(snap, d, aligned=how["aligned"]),
        }

    def issue(self, routed: Routed, answered_by: str, client: str) -> dict[str, str]:
        """The answer's request id (in the body and the decision log) and the headers saying it and whether the
        choice was exploration; nothing without learning."""
        if self.learning is None:
            return {}
        rid = self.learning.issue(routed, answered_by=answered_by, client=client)
        routed.body["request_id"] = rid
        return {REQUEST_ID_HEADER: rid, EXPLORED_HEADER: "true" if routed.decision.explored else "false"}


def position(idx: np.ndarray, row: int | None) -> int | None:
    """Where pool row ``row`` is among the decided rows ``idx`` (None: not there)."""
    if row is None:
        return None
    at = np.flatnonzero(idx == row)
    return int(at[0]) if len(at) else None


def _is_token_count(n: object) -> TypeGuard[int]:
    """Whether an upstream's reported token count is a count the gateway takes: an int (not a bool) in
    [0, MAX_REPORTED_TOKENS]."""
    return isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= MAX_REPORTED_TOKENS

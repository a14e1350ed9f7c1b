"""The gateway's Prometheus metrics (``GET /metrics``): requests and latency per endpoint (:class:`MetricsMiddleware`),
decisions, answers, tokens and spend, fallbacks, cooldowns, reloads, pool size and scorer batch sizes."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "locus_requests", "HTTP requests by endpoint and status", ["endpoint", "status"], registry=r
        )
        self.latency = Histogram(
            "locus_request_latency_seconds",
            "HTTP request latency by endpoint",
            ["endpoint"],
            buckets=(0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        self.decisions = Counter("locus_decisions", "routing decisions by chosen model", ["model"], registry=r)
        self.answers = Counter(
            "locus_answers", "chat completions answered, by the model that answered", ["model"], registry=r
        )
        self.fallbacks = Counter(
            "locus_fallbacks",
            "upstream failures that moved to the next model of the fallback chain, by the model that failed",
            ["model", "reason"],
            registry=r,
        )
        self.tokens = Counter(
            "locus_tokens",
            "tokens the upstreams reported (their usage), by model and direction (input, output)",
            ["model", "direction"],
            registry=r,
        )
        self.cost = Counter(
            "locus_cost_usd",
            "spend by model in USD: the reported tokens at the configured prices "
            "(or its cost_per_query); models without a price in USD are not counted",
            ["model"],
            registry=r,
        )
        self.cooldowns = Counter(
            "locus_upstream_cooldowns",
            "times an upstream was cooled down after repeated failures, by model",
            ["model"],
            registry=r,
        )
        self.cooled_down = Gauge(
            "locus_upstreams_cooled_down",
            "upstreams cooled down now (skipped by the fallback chain until their cooldown ends)",
            registry=r,
        )
        self.reloads = Counter("locus_pool_reloads", "pool reloads by outcome", ["outcome"], registry=r)
        self.reload_failing = Gauge(
            "locus_pool_reload_failing",
            "1 while the pool file on disk is refused (the last good pool is served; /healthz says why), else 0",
            registry=r,
        )
        self.pool_models = Gauge("locus_pool_models", "models in the pool being served", registry=r)
        self.explored = Counter(
            "locus_explored",
            "requests routed by exploration (a Thompson draw from the learner "
            "chose another model than the best estimate), by the model chosen",
            ["model"],
            registry=r,
        )
        self.outcomes = Counter(
            "locus_outcomes",
            "graded outcomes learned from, by the model that answered and the source (user, judge, verifier, file)",
            ["model", "source"],
            registry=r,
        )
        self.learned_shift = Gauge(
            "locus_learned_standing_shift",
            "what the graded outcomes moved a model's standing by (learned less trained accuracy on the training "
            "mix; the view of clients without outcomes of their own), by model",
            ["model"],
            registry=r,
        )
        self.learned_outcomes = Gauge(
            "locus_learned_outcomes",
            "graded outcomes the learner holds of a model (discounted by the half-life), by model",
            ["model"],
            registry=r,
        )
        self.overturned = Counter(
            "locus_overturned",
            "requests the guard's incumbent (the single model, else frozen LOCUS's choice) would have answered that "
            "the graded outcomes moved to another, by the model chosen",
            ["model"],
            registry=r,
        )
        self.batch_size = Histogram(
            "locus_scorer_batch_size",
            "queries encoded and scored together",
            registry=r,
            buckets=(1, 2, 4, 8, 16, 32, 64, 128),
        )


ENDPOINTS = {"/route", "/v1/chat/completions", "/v1/outcomes", "/v1/models", "/metrics", "/healthz"}


class MetricsMiddleware:
    """Counts every HTTP request and times it (a plain ASGI middleware: no per-request task or body copy)."""

    def __init__(self, app, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, status = time.perf_counter(), [500]

        async def send_status(message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            endpoint = scope["path"] if scope["path"] in ENDPOINTS else "other"
            self.metrics.requests.labels(endpoint, str(status[0])).inc()
            self.metrics.latency.labels(endpoint).observe(time.perf_counter() - start)

"""The routing decision's own cost, no HTTP and no encoder: frozen LOCUS against the learning router, per request.

    .venv/bin/python -m bench.bench_decide [--models 30] [--groups 8] [--outcomes 2000] [--requests 2000]

A learner over --models models and --groups query groups takes --outcomes graded answers (each model's cell right at
a random rate), then both strategies decide the same --requests queries (random P(correct), costs, sizes and
embeddings; the default policy, 3 fallbacks), and the learner's update of one outcome is timed too. Prints the
microseconds of each, measured in the same run (the ratio is the figure; the absolute ones move with the load).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from locus_model.learning import Frozen, Learner, LearningConfig, Query, Request
from locus_model.learning import Learning as LearningStrategy
from locus_model.routing import RoutingPolicy


def measure(models: int, groups: int, outcomes: int, requests: int, seed: int = 0) -> dict:
    """Microseconds a decision (frozen, learning) and an outcome's update take, on one synthetic pool."""
    rng = np.random.default_rng(seed)
    profiles = rng.uniform(0.3, 0.9, (models, groups))
    learner = Learner.start_from([f"m{i}" for i in range(models)], profiles, LearningConfig())
    learning = LearningStrategy(learner, shares=np.full(groups, 1.0 / groups), seed=seed)
    for _ in range(outcomes):
        m, k = int(rng.integers(models)), int(rng.integers(groups))
        learning.observe(m, k, float(rng.random() < profiles[m, k]), float(profiles[m, k]))
    embeddings = rng.normal(size=(models, 128))
    queries = [
        Query(
            rows=np.arange(models),
            p=rng.uniform(0.2, 0.9, models),
            group=int(rng.integers(groups)),
            standing=profiles.mean(axis=1),
            costs=rng.uniform(1.0, 5.0, models),
            params=rng.uniform(1.0, 70.0, models),
            embeddings=embeddings,
        )
        for _ in range(requests)
    ]
    request = Request(RoutingPolicy(), n_fallbacks=3)
    out: dict = {"models": models, "groups": groups, "outcomes": outcomes, "requests": requests}
    for name, strategy in (("frozen", Frozen()), ("learning", learning)):
        start = time.perf_counter()
        for q in queries:
            strategy.decide(q, request)
        out[f"{name}_us"] = round((time.perf_counter() - start) / requests * 1e6, 1)
    start = time.perf_counter()
    for _ in range(requests):
        learning.observe(int(rng.integers(models)), int(rng.integers(groups)), 1.0, 0.5)
    out["outcome_us"] = round((time.perf_counter() - start) / requests * 1e6, 1)
    out["learning_over_frozen"] = round(out["learning_us"] / out["frozen_us"], 2)
    out["load"] = [round(x, 2) for x in os.getloadavg()]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", type=int, default=30)
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--outcomes", type=int, default=2000, help="graded answers the learner holds first")
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    print(json.dumps(measure(args.models, args.groups, args.outcomes, args.requests), indent=2))


if __name__ == "__main__":
    main()

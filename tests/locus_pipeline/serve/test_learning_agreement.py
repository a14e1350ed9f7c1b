"""One decision path: a sequence of queries and graded outcomes driven through the gateway (in process, no upstream)
and through the replay's strategy loop (locus_model.evaluation.stream_routing) makes the same choices, explored ones
included (the same strategy objects, built from the same configuration, the same exploration seeds)."""

from __future__ import annotations

import numpy as np

from locus_model.evaluation.stream_routing import JUDGE, Stream, StreamConfig, route_stream
from locus_pipeline.serve.learning import learning_config
from tests.locus_pipeline.serve.helpers import UNGUARDED, client_for, gateway_of

QUERIES = [
    f"question {i}: what is {i} times {i + 3}, and why does {i % 7} matter to a {i % 5}-sided die?" for i in range(60)
]
SEED = 11


def _score(m: int, t: int) -> float:
    """The grade model m's answer to query t gets: every model right on some queries, model 0 on few."""
    return float((3 * m + t) % (4 if m else 9) == 0)


def test_the_gateway_and_the_replay_make_the_same_choices_on_one_sequence(built, tmp_path) -> None:
    with client_for(built, tmp_path, explore=0.5, explore_seed=SEED) as client:
        gateway = gateway_of(client)
        snap = gateway.snapshot
        assert len(snap.routable_rows) == len(snap.names)  # every pool model a candidate, as in the stream
        served, explored = [], []
        for t, query in enumerate(QUERIES):
            r = client.post("/route", json={"query": query})
            assert r.status_code == 200, r.text
            m = snap.index[r.json()["chosen"]]
            served.append(m)
            explored.append(r.headers["x-locus-explored"] == "true")
            ok = client.post(
                "/v1/outcomes", json={"request_id": r.headers["x-locus-request-id"], "score": _score(m, t)}
            )
            assert ok.status_code == 202
        scored = [gateway.batcher._score_group(snap, [q])[0] for q in QUERIES]  # each alone, as /route scored it
        config = learning_config(gateway.config)
        prior_var = gateway.learning.learner.prior_var.copy()  # what the estimator knows: the replay's stream holds it
    n, m_count = len(QUERIES), len(snap.names)
    stream = Stream(
        p=np.stack([s.probs for s in scored], axis=1).astype(np.float64),
        group=np.array([s.group for s in scored]),
        bench=np.zeros(n, int),
        labels=np.array([[_score(m, t) for t in range(n)] for m in range(m_count)]),
        reported=np.array([[_score(m, t) for t in range(n)] for m in range(m_count)]),
        client=np.full(
            n, JUDGE, dtype=object
        ),  # the operator's grader, as every outcome of a server without credentials
        available=np.ones((m_count, n), bool),
        revealed=np.ones(n, bool),
        arrives=np.arange(n) + 1,
        standing=snap.pool_scorer.standing,
        profiles=snap.pool_scorer.profiles.astype(np.float64),
        shares=snap.pool_scorer.router.groups.shares(),
        margin=UNGUARDED.fixed_margin,
        best_single=0,
        prior_var=prior_var,
    )
    replayed = route_stream(stream, "learning", config=StreamConfig(learning=config), seed=SEED)
    assert any(explored)  # the sequence exercises exploration, not only the learned P
    assert replayed.tolist() == served

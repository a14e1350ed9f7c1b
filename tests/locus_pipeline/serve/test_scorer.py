"""Micro-batching: a query the encoder refuses fails alone; concurrent clients get sequential decisions."""

from __future__ import annotations

import asyncio
import json

import httpx
import numpy as np
import pytest

from locus_pipeline.serve import ServeConfig, create_app
from tests.locus_pipeline.serve.helpers import NAMES, QUERY, UNGUARDED, client_for, expected_probs
from tests.locus_pipeline.serve_home import ServerThread, build_home


async def _post_all(url: str, bodies: list[bytes]) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        return await asyncio.gather(
            *(client.post("/route", content=b, headers={"content-type": "application/json"}) for b in bodies)
        )


@pytest.mark.e2e
def test_a_query_the_encoder_refuses_fails_alone_among_concurrent_ones(built, tmp_path):
    """20 legitimate queries and one with a lone surrogate (valid JSON, not valid Unicode) sent at once: the 20
    are answered as when sent alone, the poisoned one is a 400 that says what is wrong."""
    texts = [f"{QUERY} variant {i}" for i in range(20)]
    bodies = [json.dumps({"query": t}).encode() for t in texts]
    bodies.insert(7, b'{"query": "x \\ud800 y"}')
    app = create_app(ServeConfig(home=str(built["home"].path), batch_wait_ms=50, policy=UNGUARDED, explore=0.0))
    with ServerThread(app) as server:
        responses = asyncio.run(_post_all(server.url, bodies))
        metrics = httpx.get(f"{server.url}/metrics").text
    poisoned = responses.pop(7)
    assert poisoned.status_code == 400, poisoned.text
    error = poisoned.json()["error"]
    assert "lone surrogate '\\ud800'" in error["message"] and error["code"] == "invalid_query_text", error
    assert [r.status_code for r in responses] == [200] * 20
    for text, r in zip(texts, responses):
        probs = expected_probs(built, text)
        assert r.json()["chosen"] == max(probs, key=probs.get)
    batches = {
        line.split()[0]: float(line.split()[1])
        for line in metrics.splitlines()
        if line.startswith("locus_scorer_batch_size_")
    }
    assert batches["locus_scorer_batch_size_count"] < 21  # some queries were encoded together


@pytest.mark.e2e
def test_concurrent_clients_get_the_decisions_of_sequential_ones(tmp_path):
    """The real encoder (all-MiniLM-L6-v2, onnx-int8): 24 queries sent one after another, then at once to a
    fresh server (no cached encodings); the same choices and probabilities."""
    built = build_home(tmp_path / "home", NAMES, encoder="all-MiniLM-L6-v2", runtime="onnx-int8", n_queries=16)
    texts = [
        f"question {i}: "
        + ["Which organ makes insulin?", "Solve 3x + 5 = 20.", "Who wrote Hamlet?"][i % 3]
        + " " * (i % 5)
        + "Explain briefly." * (i % 4)
        for i in range(24)
    ]
    bodies = [json.dumps({"query": t}).encode() for t in texts]
    config = ServeConfig(home=str(built["home"].path), batch_wait_ms=50, policy=UNGUARDED, explore=0.0)
    with client_for(built, tmp_path) as client:  # sequential: a batch of one each
        sequential = [
            client.post("/route", content=b, headers={"content-type": "application/json"}).json() for b in bodies
        ]
    with ServerThread(create_app(config)) as server:
        concurrent = [r.json() for r in asyncio.run(_post_all(server.url, bodies))]
    assert sequential[0]["encoder_runtime"] == "onnx-int8"
    for s, c in zip(sequential, concurrent):
        assert c["chosen"] == s["chosen"]
        assert [x["model"] for x in c["ranking"]] == [x["model"] for x in s["ranking"]]
        np.testing.assert_allclose(
            [x["p_correct"] for x in c["ranking"]], [x["p_correct"] for x in s["ranking"]], atol=1e-5
        )

"""Hot reload: an onboarded model routable without restart, a broken pool keeps the old one, no mixed pools."""

from __future__ import annotations

import asyncio
import re

import httpx
import numpy as np
import pandas as pd
import pytest

from locus_pipeline.serve import ServeConfig, create_app
from locus_pipeline.storage import StorageError, write_parquet_atomic
from tests.locus_pipeline.serve.helpers import NAMES, QUERY, chat, client_for, wait_for
from tests.locus_pipeline.serve_home import ServerThread, embed, onboard, save_random_checkpoint


def test_an_onboarded_model_is_routable_without_restart(built, tmp_path):
    with client_for(built, tmp_path, poll_seconds=0.05, dry_run=True) as client:
        before = client.post("/route", json={"query": QUERY}).json()
        assert before["pool_models"] == len(NAMES)
        onboard(built, "zeta-new 2b")
        wait_for(
            lambda: "zeta-new 2b" in [m["id"] for m in client.get("/v1/models").json()["data"]],
            "the onboarded model in /v1/models",
        )
        after = client.post("/route", json={"query": QUERY}).json()
        pinned = client.post("/route", json={"query": QUERY, "candidates": ["zeta-new 2b"]}).json()
        dry = client.post("/v1/chat/completions", json=chat(model="zeta-new 2b"))
        metrics = client.get("/metrics").text
    assert after["pool_models"] == len(NAMES) + 1 and len(after["ranking"]) == len(NAMES) + 1
    assert after["checkpoint_id"] == before["checkpoint_id"]
    assert pinned["chosen"] == "zeta-new 2b" and dry.headers["x-locus-model"] == "zeta-new 2b"
    assert 'locus_pool_reloads_total{outcome="ok"} 1.0' in metrics and "locus_pool_models 6.0" in metrics


def test_a_broken_pool_keeps_the_old_one_served(built, tmp_path):
    with client_for(built, tmp_path, poll_seconds=0.05) as client:
        pool = built["home"].read_pool()
        write_parquet_atomic(pool.assign(checkpoint_id="0" * 16), built["home"].pool_path)  # no such checkpoint
        wait_for(lambda: client.get("/healthz").json()["last_reload_error"], "the reload failure in /healthz")
        r = client.post("/route", json={"query": QUERY})
    assert r.status_code == 200 and r.json()["checkpoint_id"] == built["checkpoint_id"]


def test_concurrent_requests_during_reloads_all_succeed_on_one_consistent_pool(built, tmp_path):
    """Requests race a rebuild with a new checkpoint (4 models) and back (5 models): every answer is one snapshot."""
    home = built["home"]
    model_b, cid_b = save_random_checkpoint(home, encoder="hashing-256", seed=7)
    pool_a = home.read_pool()
    pool_b = embed(model_b, cid_b, NAMES[:4], encoder="hashing-256", source="training", seed=7)
    sizes = {built["checkpoint_id"]: len(NAMES), cid_b: 4}
    app = create_app(ServeConfig(home=str(home.path), poll_seconds=0.02))

    async def hammer(url: str) -> list:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:

            async def one(i: int):
                return await client.post("/route", json={"query": f"{QUERY} #{i}"})

            async def flip():
                for k in range(6):
                    write_parquet_atomic(pool_b if k % 2 == 0 else pool_a, home.pool_path)
                    await asyncio.sleep(0.1)  # why: the pool changes during the traffic (the thing under test)

            results = await asyncio.gather(*(one(i) for i in range(120)), flip())
            return results[:-1]

    with ServerThread(app) as server:
        responses = asyncio.run(hammer(server.url))
        reloads = httpx.get(f"{server.url}/metrics").text
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses if r.status_code != 200][:2]
    bodies = [r.json() for r in responses]
    for b in bodies:
        assert len(b["ranking"]) == b["pool_models"] == sizes[b["checkpoint_id"]]
    assert 'locus_pool_reloads_total{outcome="ok"}' in reloads


def test_a_removed_model_leaves_the_served_pool_at_the_next_reload(built, tmp_path):
    onboard(built, "zeta-new 2b")
    with client_for(built, tmp_path, poll_seconds=0.05) as client:
        assert "zeta-new 2b" in [m["id"] for m in client.get("/v1/models").json()["data"]]
        built["home"].remove_onboarded("zeta-new 2b")  # what pool_removal_job does (no store: nothing to set aside)
        wait_for(
            lambda: "zeta-new 2b" not in [m["id"] for m in client.get("/v1/models").json()["data"]],
            "the removed model gone from /v1/models",
        )
        ranking = client.post("/route", json={"query": QUERY}).json()
    assert {x["model"] for x in ranking["ranking"]} == set(NAMES)


def _duplicate(pool):
    return pd.concat([pool, pool.iloc[:1]], ignore_index=True)


def _nan_embedding(pool):
    pool = pool.copy()
    pool.at[1, "embedding"] = np.full_like(pool.at[1, "embedding"], np.nan)
    return pool


def _narrow(pool):
    return pool.assign(embedding=[e[:3] for e in pool["embedding"]])


@pytest.mark.parametrize(
    "break_pool, message",
    [
        (_duplicate, "model 'alpha-7b' appears twice in the pool"),
        (_nan_embedding, "embedding is not finite (NaN or inf; 1 of 5 rows)"),
        (_narrow, "embedding has shape (3,), not"),
    ],
)
def test_a_pool_the_pipeline_would_refuse_is_refused_at_start_and_on_reload(built, tmp_path, break_pool, message):
    home = built["home"]
    good = home.read_pool()
    with client_for(built, tmp_path, poll_seconds=0.05) as client:
        write_parquet_atomic(break_pool(good), home.pool_path)
        error = wait_for(lambda: client.get("/healthz").json()["last_reload_error"], "the reload failure in /healthz")
        r = client.post("/route", json={"query": QUERY})
        listed = [m["id"] for m in client.get("/v1/models").json()["data"]]
        metrics = client.get("/metrics").text
    assert message in error and str(home.pool_path) in error
    assert r.status_code == 200 and all(x["p_correct"] is not None for x in r.json()["ranking"])
    assert listed == ["locus", *sorted(NAMES)]  # the last good pool, no duplicate
    assert 'locus_pool_reloads_total{outcome="failed"} 1.0' in metrics and "locus_pool_reload_failing 1.0" in metrics
    with pytest.raises(StorageError, match=re.escape(message)):
        create_app(ServeConfig(home=str(home.path)))

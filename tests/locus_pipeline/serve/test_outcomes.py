"""The gateway learns from its traffic: request ids, POST /v1/outcomes and its refusals, routing that moves with the
outcomes, a restart that keeps them, two replicas on one home, budgeted exploration, the per-model reset."""

from __future__ import annotations

import errno
import logging
import threading

import httpx
import pytest

from locus_pipeline.cli import main as cli_main
from locus_pipeline.storage.traffic import Retention
from tests.locus_pipeline.serve.helpers import NAMES, QUERY, FakeUpstreams, chat, client_for, upstream_config, wait_for


def learning(client):
    return client.app.state.gateway.learning


def route(client, query: str = QUERY, **headers):
    r = client.post("/route", json={"query": query}, headers=headers)
    assert r.status_code == 200, r.text
    return r


def test_every_routed_answer_carries_a_request_id_that_an_outcome_grades_once(built, tmp_path):
    with client_for(built, tmp_path, explore=0.0) as client:
        r = route(client)
        rid, chosen = r.headers["x-locus-request-id"], r.json()["chosen"]
        assert r.json()["request_id"] == rid and r.headers["x-locus-explored"] == "false"
        ok = client.post("/v1/outcomes", json={"request_id": rid, "score": 0.0, "source": "judge"})
        assert ok.status_code == 202 and ok.json()["accepted"] == 1
        again = client.post("/v1/outcomes", json={"request_id": rid, "score": 1.0})
        assert again.status_code == 409 and "already has an outcome" in again.json()["error"]["message"]
        never = client.post("/v1/outcomes", json={"request_id": "req-nope", "score": 1.0})
        assert never.status_code == 404 and "never issued" in never.json()["error"]["message"]
        rid2 = route(client).headers["x-locus-request-id"]
        for bad in (1.5, -0.1, "1", True, None):
            r = client.post("/v1/outcomes", json={"request_id": rid2, "score": bad})
            assert r.status_code == 422 and "must be a number in [0, 1]" in r.json()["error"]["message"], bad
        r = client.post("/v1/outcomes", json={"request_id": rid2, "score": 1, "source": "me"})
        assert r.status_code == 422 and "source" in r.json()["error"]["message"]
        # many at once: each gets its own status; the valid ones are taken
        rid3 = route(client).headers["x-locus-request-id"]
        many = client.post(
            "/v1/outcomes",
            json=[
                {"request_id": rid2, "score": 1},
                {"request_id": rid, "score": 1},
                {"request_id": rid3, "score": 0.5},
            ],
        )
        assert many.status_code == 409 and many.json()["accepted"] == 2
        assert [x["status"] for x in many.json()["results"]] == [202, 409, 202]
        metrics = client.get("/metrics").text
    assert f'locus_outcomes_total{{model="{chosen}",source="judge"}} 1.0' in metrics
    assert (
        sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines() if line.startswith("locus_outcomes_total"))
        == 3
    )


def route_chosen(built, tmp_path) -> str:
    with client_for(built, tmp_path, learn=False) as client:
        return client.post("/route", json={"query": QUERY}).json()["chosen"]


CLIENTS = {
    "team-a": {"token_env": "LOCUS_TEST_TEAM_A"},
    "mallory": {"token_env": "LOCUS_TEST_MALLORY"},
    "judge": {"token_env": "LOCUS_TEST_JUDGE", "grader": True},
}
TEAM_A, MALLORY, JUDGE = ({"authorization": f"Bearer {t}"} for t in ("tok-a", "tok-m", "tok-j"))


@pytest.fixture()
def credentials(monkeypatch):
    for var, value in (("LOCUS_TEST_TEAM_A", "tok-a"), ("LOCUS_TEST_MALLORY", "tok-m"), ("LOCUS_TEST_JUDGE", "tok-j")):
        monkeypatch.setenv(var, value)


def test_outcomes_are_taken_by_credential_and_a_label_never_adds_influence(built, tmp_path, credentials):
    with client_for(built, tmp_path, models={"clients": CLIENTS}, token="op", explore=0.0) as client:
        victim = route(client, **TEAM_A, **{"x-locus-client": "victim@example.com"}).headers["x-locus-request-id"]
        assert client.post("/v1/outcomes", json={"request_id": victim, "score": 0}).status_code == 401
        assert (
            client.post("/route", json={"query": QUERY}, headers={"authorization": "Bearer guess"}).status_code == 401
        )
        stolen = client.post(  # the victim's label under another credential: still another client
            "/v1/outcomes",
            json={"request_id": victim, "score": 0},
            headers={**MALLORY, "x-locus-client": "victim@example.com"},
        )
        assert stolen.status_code == 403 and "another client" in stolen.json()["error"]["message"]
        relabelled = client.post(  # within the credential a label is only a label: the same client
            "/v1/outcomes", json={"request_id": victim, "score": 1}, headers={**TEAM_A, "x-locus-client": "someone"}
        )
        assert relabelled.status_code == 202
        theirs = route(client, **MALLORY).headers["x-locus-request-id"]
        judged = client.post("/v1/outcomes", json={"request_id": theirs, "score": 1}, headers=JUDGE)
        assert judged.status_code == 202  # a grader grades every client's answers
        operator = route(client, authorization="Bearer op").headers["x-locus-request-id"]
        assert (
            client.post("/v1/outcomes", json={"request_id": operator, "score": 1}, headers=MALLORY).status_code == 403
        )
        health = client.get("/healthz", headers=TEAM_A).json()
    assert "4 client(s) by credential" in health["trust"] and "judge, operator" in health["trust"]
    home = built["home"]
    decisions = [r for _, _, r in home.traffic_tail("decisions").read()]
    outcomes = [r for _, _, r in home.traffic_tail("outcomes").read()]
    assert [d["client"] for d in decisions] == ["team-a", "mallory", "operator"]
    assert [(o["client"], o["grader"]) for o in outcomes] == [("team-a", False), ("judge", True)]
    assert len(outcomes[0]["label"]) == 24
    kept = b"".join(p.read_bytes() for p in (home.path / "traffic").rglob("*.json*"))
    assert b"victim@example.com" not in kept and b"someone" not in kept and QUERY.encode() not in kept


def test_a_server_without_credentials_says_anyone_can_steer_it(built, tmp_path):
    with client_for(built, tmp_path, explore=0.0) as client:
        health = client.get("/healthz").json()
        rid = route(client, **{"x-locus-client": "a"}).headers["x-locus-request-id"]
        other = client.post("/v1/outcomes", json={"request_id": rid, "score": 1}, headers={"x-locus-client": "b"})
    assert "anyone who can reach this port" in health["trust"]
    assert other.status_code == 202  # one trust domain: every request is the operator's


def test_a_client_past_its_outcome_rate_is_answered_429_before_its_body_is_parsed(built, tmp_path, credentials):
    clients = {**CLIENTS, "team-a": {"token_env": "LOCUS_TEST_TEAM_A", "outcomes_per_s": 0.01, "outcomes_burst": 2}}
    now = [0.0]
    with client_for(built, tmp_path, models={"clients": clients}, explore=0.0, clock=lambda: now[0]) as client:
        ids = [route(client, **TEAM_A).headers["x-locus-request-id"] for _ in range(3)]
        assert client.post("/v1/outcomes", json={"request_id": ids[0], "score": 1}, headers=TEAM_A).status_code == 202
        assert client.post("/v1/outcomes", json={"request_id": ids[1], "score": 1}, headers=TEAM_A).status_code == 202
        limited = client.post("/v1/outcomes", content=b"not json at all", headers=TEAM_A)
        assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
        assert "faster than its rate" in limited.json()["error"]["message"]
        other = route(client, **MALLORY).headers["x-locus-request-id"]  # another client has its own bucket
        assert client.post("/v1/outcomes", json={"request_id": other, "score": 1}, headers=MALLORY).status_code == 202
        now[0] += 100.0  # one outcome more after 100 s at 0.01/s
        assert client.post("/v1/outcomes", json={"request_id": ids[2], "score": 1}, headers=TEAM_A).status_code == 202


def test_hostile_bodies_get_their_documented_status_never_a_500(built, tmp_path):
    deep = b"[" * 100_000 + b"]" * 100_000
    with client_for(built, tmp_path, explore=0.0) as client:
        rid = route(client).headers["x-locus-request-id"]
        assert client.post("/v1/outcomes", content=deep).status_code == 400
        assert client.post("/v1/chat/completions", content=deep).status_code == 400
        not_json = client.post("/v1/outcomes", content=b"{score: 1")
        assert not_json.status_code == 400 and "not JSON" in not_json.json()["error"]["message"]
        for item in ({"request_id": [rid], "score": 1}, {"request_id": {"a": 1}, "score": 1}, [[]], "x", 5):
            assert client.post("/v1/outcomes", json=item).status_code == 422, item
        assert client.post("/v1/outcomes", json=[]).status_code == 422


def demote(client, model: str, *, n: int) -> str:
    """Route the query n times, grading 0 every answer of ``model`` (1 the others'); the last choice."""
    chosen = None
    for _ in range(n):
        r = route(client)
        chosen = r.json()["chosen"]
        score = 0.0 if chosen == model else 1.0
        assert (
            client.post(
                "/v1/outcomes", json={"request_id": r.headers["x-locus-request-id"], "score": score}
            ).status_code
            == 202
        )
    assert chosen is not None, "n >= 1: at least one request was routed"
    return chosen


def test_a_model_graded_0_loses_the_traffic_it_had_and_a_restart_keeps_it(built, tmp_path):
    first = route_chosen(built, tmp_path)
    with client_for(built, tmp_path, explore=0.0) as client:
        reference = route(client).json()["guard"]["incumbent"]
        last = demote(client, first, n=40)
        counts = learning(client).counts()
        moved = route(client).json()["guard"]["incumbent"]  # the guard's floor reads the learned standing too
    assert last != first and counts[first] >= 1
    assert reference == first and moved != first
    with client_for(built, tmp_path, explore=0.0) as restarted:  # the state saved at shutdown, then the log
        assert route(restarted).json()["chosen"] == last
        assert learning(restarted).counts() == counts
        r = route(restarted)
        assert (
            restarted.post("/v1/outcomes", json={"request_id": r.headers["x-locus-request-id"], "score": 1}).status_code
            == 202
        )
    state = built["home"].read_learner_state()
    assert state["checkpoint_id"] == built["checkpoint_id"] and state["offsets"]
    with client_for(built, tmp_path, learn=False) as frozen:  # learning off: the router's own choice, no ids
        r = frozen.post("/route", json={"query": QUERY})
        assert r.json()["chosen"] == first and "x-locus-request-id" not in r.headers
        assert frozen.post("/v1/outcomes", json={"request_id": "x", "score": 1}).status_code == 503


def test_a_restart_without_a_saved_state_learns_again_from_the_log(built, tmp_path):
    first = route_chosen(built, tmp_path)
    with client_for(built, tmp_path, explore=0.0) as client:
        demote(client, first, n=40)
        counts = learning(client).counts()
    built["home"].learner_state_path.unlink()
    with client_for(built, tmp_path, explore=0.0) as restarted:
        assert learning(restarted).counts() == pytest.approx(counts, abs=1e-3)


def test_an_outcome_posted_to_one_replica_is_learned_by_the_other(built, tmp_path):
    with (
        client_for(built, tmp_path, explore=0.0, poll_seconds=0.05) as a,
        client_for(built, tmp_path, explore=0.0, poll_seconds=0.05) as b,
    ):
        r = route(a)
        rid, model = r.headers["x-locus-request-id"], r.json()["chosen"]
        ok = b.post("/v1/outcomes", json={"request_id": rid, "score": 0.0})  # b reads a's decision from the log
        assert ok.status_code == 202, ok.text
        wait_for(lambda: learning(a).counts().get(model), "replica a learning b's outcome")
        assert learning(a).counts() == learning(b).counts() == {model: 1.0}
        dup = a.post("/v1/outcomes", json={"request_id": rid, "score": 1.0})
        assert dup.status_code == 409


def test_nothing_is_explored_before_outcomes_then_within_the_outcomes_budget_and_says_so(built, tmp_path):
    with client_for(built, tmp_path, explore=0.5, explore_seed=7) as client:
        silent = [route(client) for _ in range(200)]  # nobody grades: nothing explored, and explain says why
        assert all(r.headers["x-locus-explored"] == "false" for r in silent)
        assert "nothing is explored where nobody grades" in silent[-1].json()["exploration"]["why"]
        graded = [(r.headers["x-locus-request-id"], r.json()["chosen"]) for r in silent[:20]]
        for rid, _ in graded:
            assert client.post("/v1/outcomes", json={"request_id": rid, "score": 0.0}).status_code == 202
        answers = [route(client) for _ in range(60)]
        pinned = client.post("/v1/chat/completions", json=chat(model=NAMES[0]))  # no upstream: 503, never explored
        metrics = client.get("/metrics").text
        records = [r for r in built["home"].traffic_tail("decisions").read()]
    explored = [r for r in answers if r.headers["x-locus-explored"] == "true"]
    assert 0 < len(explored) <= 0.5 * 20  # within explore x the group's outcomes (x the posterior's width)
    why = explored[0].json()["exploration"]
    assert why["explored"] and "Thompson draw" in why["why"] and "best estimate" in why["why"]
    assert isinstance(why["seed"], int) and 0 < why["probability"] <= 1
    logged = {rec["request_id"]: rec for _, _, rec in records}
    assert logged[explored[0].headers["x-locus-request-id"]]["explore_seed"] == why["seed"]  # replays exactly
    assert sum(
        float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines() if line.startswith("locus_explored_total")
    ) == len(explored)
    assert pinned.status_code == 503
    with client_for(built, tmp_path, explore=1.0, dry_run=True) as client:
        for _ in range(5):
            r = client.post("/v1/chat/completions", json=chat(model=NAMES[0], locus={"explain": True}))
            assert (
                r.headers["x-locus-explored"] == "false" and "one candidate" in r.json()["locus"]["exploration"]["why"]
            )
            assert r.json()["locus"]["request_id"] == r.headers["x-locus-request-id"]


def test_the_answer_that_came_from_a_fallback_is_graded_for_the_model_that_gave_it(built, tmp_path):
    chosen = route_chosen(built, tmp_path)
    from tests.locus_pipeline.serve.helpers import host

    fake = FakeUpstreams(failing={host(chosen)})
    with client_for(
        built, tmp_path, models=upstream_config(), transport=httpx.MockTransport(fake), explore=0.0
    ) as client:
        r = client.post("/v1/chat/completions", json=chat(locus={"explain": True}))
        answered = r.headers["x-locus-model"]
        assert answered != chosen and r.json()["locus"]["request_id"] == r.headers["x-locus-request-id"]
        assert (
            client.post("/v1/outcomes", json={"request_id": r.headers["x-locus-request-id"], "score": 1}).status_code
            == 202
        )
        assert learning(client).counts() == {answered: 1.0}


def test_a_reset_in_the_log_forgets_a_models_outcomes_on_every_replica(built, tmp_path):
    first = route_chosen(built, tmp_path)
    with client_for(built, tmp_path, explore=0.0, poll_seconds=0.05) as client:
        demote(client, first, n=40)
        graded = learning(client).counts()
        assert graded.get(first) and len(graded) > 1
        assert cli_main(["learn", "reset", first, "--home", str(built["home"].path)]) == 0
        wait_for(lambda: first not in learning(client).counts(), "the reset read from the log")
        learned = {x["model"]: x["p_correct"] for x in route(client).json()["ranking"]}
    with client_for(built, tmp_path, learn=False) as frozen:
        router = {x["model"]: x["p_correct"] for x in frozen.post("/route", json={"query": QUERY}).json()["ranking"]}
    assert learned[first] == router[first]  # back to the router's own P
    assert all(learned[n] > router[n] for n in graded if n != first)  # the others keep what they learned (all 1s)


def test_a_reset_names_a_pool_model(built, capsys):
    assert cli_main(["learn", "reset", "nobody", "--home", str(built["home"].path)]) != 0
    assert "'nobody' is not in the pool" in capsys.readouterr().err
    assert not built["home"].traffic_folder("outcomes").exists()


def test_the_traffic_log_keeps_what_the_decision_log_promises(built, tmp_path):
    with client_for(built, tmp_path, explore=0.0) as client:
        rid = route(client).headers["x-locus-request-id"]
    (record,) = [r for _, _, r in built["home"].traffic_tail("decisions").read()]
    assert record["request_id"] == rid and len(record["query_key"]) == 64 and record["encoding_dtype"] == "float16"
    assert "query_sha256" not in record  # a keyed hash: a guessed query cannot be checked without the home's secret
    assert set(record["candidates"]) == set(NAMES) and record["explored"] is False and record["chosen"] in NAMES
    assert Retention().days == 30


def test_a_dropped_file_of_graded_outcomes_is_learned_by_the_running_gateway(built, tmp_path):
    from locus_pipeline.intake import DropFolder, intake_file

    folder = DropFolder(built["home"]).ensure()
    with client_for(built, tmp_path, explore=0.0, poll_seconds=0.05) as client:
        r = route(client)
        rid, chosen = r.headers["x-locus-request-id"], r.json()["chosen"]
        other = next(n for n in NAMES if n != chosen)
        path = folder.incoming / "graded.outcomes.csv"
        path.write_text(f"model,query,score\n{other},{QUERY},1\n{other},another question,1\n")
        assert intake_file(path, folder).status == "accepted"
        path = folder.incoming / "by-id.outcomes.jsonl"
        path.write_text(f'{{"request_id": "{rid}", "score": 0}}\n')
        assert intake_file(path, folder).status == "accepted"
        # (a cell's older evidence is discounted by the learner's half-life: 2 answers count 1.999)
        wait_for(
            lambda: learning(client).counts() == pytest.approx({chosen: 1.0, other: 2.0}, abs=0.01),
            "the dropped outcomes learned",
        )
        assert client.post("/v1/outcomes", json={"request_id": rid, "score": 1}).status_code == 409
        metrics = client.get("/metrics").text
    assert f'locus_outcomes_total{{model="{other}",source="file"}} 2.0' in metrics


def test_the_traffic_evaluations_are_the_graded_answers_with_their_encodings(built, tmp_path):
    home = built["home"]
    with client_for(built, tmp_path, explore=0.0) as client:
        graded = []
        for query, score in ((QUERY, 0.0), ("another question", 1.0), (QUERY, 1.0)):
            r = route(client, query)
            graded.append((r.json()["chosen"], score))
            assert (
                client.post(
                    "/v1/outcomes", json={"request_id": r.headers["x-locus-request-id"], "score": score}
                ).status_code
                == 202
            )
        route(client, "never graded")
    home.append_outcome_records(
        [
            {
                "request_id": "file-x-1",
                "model": NAMES[0],
                "query": "from a file",
                "score": 1.0,
                "source": "file",
                "time": 1e12,
            }
        ]
    )
    table = home.traffic_evaluations(built["checkpoint_id"])
    assert len(table) == 3 + 1 - (graded[0][0] == graded[2][0])  # the same model on the same query: newest wins
    from_log = table[table["encoding"].notna()]
    assert all(len(v) == 256 for v in from_log["encoding"]) and set(from_log["model"]) <= set(NAMES)
    assert table.loc[table["query"] == "from a file", "model"].tolist() == [NAMES[0]]
    home.append_outcome_records([{"reset": NAMES[0], "time": 2e12}])
    assert NAMES[0] not in set(home.traffic_evaluations()["model"])
    assert home.traffic_evaluations("another-checkpoint")["encoding"].isna().all()


@pytest.mark.e2e
def test_two_replicas_on_a_home_in_object_storage_share_what_they_learn(built, tmp_path):
    """The same as on a local home, with LOCUS_HOME in a bucket (moto): segments uploaded whole, tailed by listing."""
    from fastapi.testclient import TestClient

    from locus_pipeline.serve import ServeConfig, create_app
    from tests.locus_pipeline.object_store import BUCKET, s3_endpoint

    with s3_endpoint():
        from upath import UPath

        url = f"s3://{BUCKET}/{tmp_path.name}"  # moto keeps a bucket for the whole process: a prefix of its own
        local = built["home"].path
        for path in local.rglob("*"):
            if path.is_file() and ".locks" not in path.parts:
                target = UPath(url) / path.relative_to(local).as_posix()
                target.fs.put_file(str(path), target.path)

        def replica() -> TestClient:
            return TestClient(create_app(ServeConfig(home=url, explore=0.0, poll_seconds=0.05)))

        with replica() as a, replica() as b:
            r = route(a)
            rid, model = r.headers["x-locus-request-id"], r.json()["chosen"]
            ok = b.post("/v1/outcomes", json={"request_id": rid, "score": 0.0})
            assert ok.status_code == 202, ok.text
            wait_for(lambda: learning(a).counts().get(model), "replica a learning b's outcome")
            assert a.post("/v1/outcomes", json={"request_id": rid, "score": 1.0}).status_code == 409
        with replica() as c:  # a restart on the bucket: the state and the log are there
            assert learning(c).counts() == {model: 1.0}


class Store:
    """Stands in for a traffic segment writer: fails with ``error`` while set (disk full, read-only), or blocks every
    write until ``release`` is set (a hung bucket upload)."""

    def __init__(self, inner) -> None:
        self.inner, self.folder, self.error = inner, inner.folder, None
        self.release = threading.Event()
        self.release.set()

    def append(self, records, *, sync):
        self.release.wait(30)
        if self.error is not None:
            raise self.error
        self.inner.append(records, sync=sync)

    def flush(self):
        self.inner.flush()

    def close(self):
        self.inner.close()


def stores(client) -> tuple[Store, Store]:
    logs = learning(client).decision_log, learning(client).outcome_log
    for log in logs:
        log.writer = Store(log.writer)
    return logs[0].writer, logs[1].writer


@pytest.mark.parametrize(
    "error", [OSError(errno.ENOSPC, "No space left on device"), OSError(errno.EROFS, "Read-only file system")]
)
def test_a_full_or_read_only_traffic_folder_pauses_learning_and_routing_goes_on(built, tmp_path, error):
    with client_for(built, tmp_path, explore=0.0, dry_run=True) as client:
        decisions, outcomes = stores(client)
        decisions.error = outcomes.error = error
        for _ in range(3):
            assert route(client).status_code == 200
            assert client.post("/v1/chat/completions", json=chat()).status_code == 200
        rid = route(client).headers["x-locus-request-id"]
        learning(client).decision_log.drain()
        paused = client.post("/v1/outcomes", json={"request_id": rid, "score": 1})
        assert paused.status_code == 503 and paused.json()["error"]["code"] == "learning_paused"
        health = client.get("/healthz").json()["traffic_log"]
        assert health["learning_paused"] and error.strerror in health["why"]
        assert "locus_learning_paused 1.0" in client.get("/metrics").text
        decisions.error = outcomes.error = None  # room again: learning resumes, the same id may be graded now
        assert client.post("/v1/outcomes", json={"request_id": rid, "score": 1}).status_code == 202
        route(client)
        learning(client).decision_log.drain()
        assert client.get("/healthz").json()["traffic_log"]["learning_paused"] is False
        metrics = client.get("/metrics").text
    assert "locus_learning_paused 0.0" in metrics
    assert 'locus_traffic_records_dropped{log="decisions"} 7.0' in metrics  # 3 routes, 3 chats, the graded one


def test_a_blocked_log_store_does_not_hold_up_route(built, tmp_path):
    with client_for(built, tmp_path, explore=0.0) as client:
        decisions, _ = stores(client)
        decisions.release.clear()  # every decision-log write hangs from now on
        answers = [route(client, f"question {i}") for i in range(5)]  # each answers while the store is blocked
        assert all(r.status_code == 200 for r in answers)
        assert learning(client).decision_log.queued >= 4
        decisions.release.set()
        assert learning(client).decision_log.drain()
    ids = {r["request_id"] for _, _, r in built["home"].traffic_tail("decisions").read()}
    assert {r.headers["x-locus-request-id"] for r in answers} <= ids


def test_two_replicas_take_one_outcome_per_request_id_the_first_durable_one(built, tmp_path):
    with (
        client_for(built, tmp_path, explore=0.0, poll_seconds=3600) as a,
        client_for(built, tmp_path, explore=0.0, poll_seconds=3600) as b,
    ):
        rids = [route(a, f"question {i}").headers["x-locus-request-id"] for i in range(5)]
        assert b.post("/v1/outcomes", json={"request_id": "req-none", "score": 1}).status_code == 404  # b reads a's
        assert set(rids) <= set(learning(b).issued)  # decisions now, and never again (its watcher: hourly)
        ok = a.post("/v1/outcomes", json=[{"request_id": rid, "score": 0} for rid in rids])
        assert ok.status_code == 202
        late = b.post("/v1/outcomes", json=[{"request_id": rid, "score": 1} for rid in rids])  # a race, as b sees it
        assert late.status_code == 409 and late.json()["accepted"] == 0
        assert all("another replica" in x["reason"] for x in late.json()["results"])
    scores = [r["score"] for _, _, r in built["home"].traffic_tail("outcomes").read()]
    assert scores == [0.0] * 5


def test_a_damaged_learner_state_at_start_up_is_rebuilt_from_the_log(built, tmp_path, caplog):
    first = route_chosen(built, tmp_path)
    with client_for(built, tmp_path, explore=0.0) as client:
        demote(client, first, n=20)
        counts = learning(client).counts()
    path = built["home"].learner_state_path
    for damage in (b"{not json", path.read_bytes()[:100], b'{"checkpoint_id": 1, "learner": {"names": [1]}}'):
        path.write_bytes(damage)
        with caplog.at_level(logging.WARNING), client_for(built, tmp_path, explore=0.0) as restarted:
            assert learning(restarted).counts() == pytest.approx(counts, abs=1e-3)
            assert route(restarted).status_code == 200
        assert "is dropped" in caplog.text and "rebuilds from the outcome log" in caplog.text
        caplog.clear()


def test_dropped_files_are_one_client_the_folders_owner_whatever_their_names(built, tmp_path):
    from locus_pipeline.intake import DropFolder, intake_file

    folder = DropFolder(built["home"]).ensure()
    with client_for(built, tmp_path, explore=0.0, poll_seconds=0.05) as client:
        for i in range(3):
            path = folder.incoming / f"client-{i}.outcomes.csv"
            path.write_text(f"model,query,score\n{NAMES[0]},question {i},0\n")
            assert intake_file(path, folder).status == "accepted"
        wait_for(lambda: learning(client).counts().get(NAMES[0], 0) > 2.9, "the dropped outcomes learned")
        clients = set(learning(client).learner.clients)
    assert clients == {"operator"}  # not one client per file: 20 files are not 20 voices


def test_a_new_label_per_request_is_still_one_client_and_the_state_stays_bounded(built, tmp_path):
    with client_for(built, tmp_path, explore=0.0) as client:
        for i in range(60):
            label = {"x-locus-client": f"user-{i}@example.com"}
            rid = route(client, f"question {i}", **label).headers["x-locus-request-id"]
            assert client.post("/v1/outcomes", json={"request_id": rid, "score": 0}, headers=label).status_code == 202
        assert set(learning(client).learner.clients) == {"operator"}
    assert b"example.com" not in built["home"].learner_state_path.read_bytes()


def test_a_flood_of_never_issued_ids_shares_reads_of_the_log(built, tmp_path):
    import asyncio

    from locus_pipeline.serve import ServeConfig, create_app

    app = create_app(ServeConfig(home=str(built["home"].path), explore=0.0))
    gateway = app.state.gateway
    reads = []
    original = gateway.learn_from_log

    async def counted():
        reads.append(1)
        await asyncio.sleep(0.05)  # a log read takes a while: the requests arriving meanwhile wait for it
        await original()

    gateway.learn_from_log = counted

    async def flood():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            posts = [client.post("/v1/outcomes", json={"request_id": f"req-{i}", "score": 1}) for i in range(20)]
            return await asyncio.gather(*posts)

    answers = asyncio.run(flood())
    assert [r.status_code for r in answers] == [404] * 20
    assert len(reads) <= 3  # not one read of the log per request


def test_an_outcome_is_durable_only_after_the_decision_it_grades(built, tmp_path):
    with client_for(built, tmp_path, explore=0.0) as client:
        decisions, _ = stores(client)
        decisions.release.clear()  # the decision log's store hangs: the decision is still queued
        rid = route(client).headers["x-locus-request-id"]
        answer = {}
        post = threading.Thread(
            target=lambda: answer.update(r=client.post("/v1/outcomes", json={"request_id": rid, "score": 1}))
        )
        post.start()
        post.join(0.5)
        assert post.is_alive() and not list(built["home"].traffic_tail("outcomes").read())  # no 202 yet
        decisions.release.set()
        post.join(30)
        assert answer["r"].status_code == 202
    logged = {r["request_id"] for _, _, r in built["home"].traffic_tail("decisions").read()}
    assert rid in logged  # a kill -9 after the 202 leaves the decision with its outcome: applied after a restart


@pytest.mark.e2e
def test_kill_9_during_an_outcome_flood_applies_every_202d_outcome_once_after_the_restart(built, tmp_path):
    import os
    import signal
    import socket
    import subprocess
    import sys
    from concurrent.futures import ThreadPoolExecutor

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    home = str(built["home"].path)
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    server = subprocess.Popen(
        [sys.executable, "-m", "locus_pipeline.cli", "serve", "--home", home, "--port", str(port), "--explore", "0"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _up(base), "locus serve listening", seconds=120)
        accepted, stop = [], threading.Event()

        def grade(i: int) -> None:
            with httpx.Client(base_url=base, timeout=10) as c:
                while not stop.is_set():
                    try:
                        r = c.post("/route", json={"query": f"flood {i} {len(accepted)}"})
                        rid = r.headers["x-locus-request-id"]
                        if c.post("/v1/outcomes", json={"request_id": rid, "score": 0}).status_code == 202:
                            accepted.append((rid, r.json()["chosen"]))
                    except httpx.HTTPError:
                        return  # the server is gone

        with ThreadPoolExecutor(4) as pool:
            for i in range(4):
                pool.submit(grade, i)
            wait_for(lambda: len(accepted) >= 40, "40 outcomes accepted", seconds=120)
            server.send_signal(signal.SIGKILL)
            server.wait(30)
            stop.set()
    finally:
        if server.poll() is None:
            server.kill()
    with client_for(built, tmp_path, explore=0.0) as restarted:
        counts = learning(restarted).counts()
        graded = learning(restarted).graded
    assert {rid for rid, _ in accepted} <= set(graded)  # every 202'd outcome is applied after the restart
    expected: dict[str, int] = {}
    for _, model in accepted:
        expected[model] = expected.get(model, 0) + 1
    durable: dict[str, int] = {}  # what the log holds: the 202'd ones and any made durable as the kill came
    for _, _, r in built["home"].traffic_tail("outcomes").read():
        durable[r["model"]] = durable.get(r["model"], 0) + 1
    for model, n in expected.items():  # each once (the learner discounts by its half-life: n answers count < n)
        assert n * 0.5 ** (durable[model] / 200) - 0.01 <= counts[model] <= durable[model] + 0.01


def _up(base: str) -> bool:
    try:
        return httpx.get(f"{base}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False

"""The learner under a hostile client, through the gateway: with clients named by credentials in the models config
(serve/identity.py: each a bearer token, none a grader), an attacker grading the best model 0 and the
weakest 1 on 400 pairs, after the honest client graded 100 pairs the other way, moves the honest client's share of
the best model on 100 fixed questions by less than 10 points: with one label, and with a new label per request."""

from __future__ import annotations

import pytest

from tests.locus_pipeline.serve.helpers import NAMES, chat, client_for, gateway_of

QUESTIONS = [f"fixed question {i}: how many legs have {i} spiders?" for i in range(100)]


CLIENTS = {name: {"token_env": f"LOCUS_TEST_{name.upper()}_TOKEN"} for name in ("honest", "attacker", "bystander")}


def _grade(client, model: str, score: float, headers: dict) -> None:
    r = client.post("/v1/chat/completions", json=chat(model=model), headers=headers)  # pinned: answered by `model`
    assert r.status_code == 200, r.text
    ok = client.post(
        "/v1/outcomes", json={"request_id": r.headers["x-locus-request-id"], "score": score}, headers=headers
    )
    assert ok.status_code == 202, ok.text


def _share(client, model: str, headers: dict) -> float:
    chosen = [client.post("/route", json={"query": q}, headers=headers).json()["chosen"] for q in QUESTIONS]
    return sum(c == model for c in chosen) / len(chosen)


@pytest.mark.e2e  # 1,000 graded chat requests and 300 routes (~45 s on 2 busy cores); the learner's own test:
# tests/locus_model/learning/test_learner.py, in milliseconds
@pytest.mark.parametrize("new_label_per_request", [False, True])
def test_an_attacker_with_four_times_the_volume_moves_the_honest_clients_routing_by_less_than_10_points(
    built, tmp_path, monkeypatch, new_label_per_request
) -> None:
    for name, settings in CLIENTS.items():
        monkeypatch.setenv(settings["token_env"], f"{name}-token")
    with client_for(built, tmp_path, models={"clients": CLIENTS}, dry_run=True, explore=0.0) as client:
        standing = dict(zip(gateway_of(client).snapshot.names, gateway_of(client).snapshot.pool_scorer.standing))
        best, weakest = max(NAMES, key=lambda n: standing[n]), min(NAMES, key=lambda n: standing[n])
        honest = {"authorization": "Bearer honest-token"}
        for _ in range(100):
            _grade(client, best, 1.0, honest)
            _grade(client, weakest, 0.0, honest)
        before = _share(client, best, honest)
        for i in range(400):
            attacker = {"authorization": "Bearer attacker-token"}
            if new_label_per_request:
                attacker["x-locus-client"] = f"user-{i}"
            _grade(client, best, 0.0, attacker)
            _grade(client, weakest, 1.0, attacker)
        after = _share(client, best, honest)
        bystander = _share(client, best, {"authorization": "Bearer bystander-token"})
        learner = gateway_of(client).learning.learner
    assert abs(after - before) < 0.10, (before, after)
    assert set(learner.clients) == {"honest", "attacker"}  # two credentials graded, whatever the labels
    assert bystander == _share_without_attack(built, tmp_path, best)  # the attack moved nobody else


def _share_without_attack(built, tmp_path, best: str) -> float:
    with client_for(built, tmp_path, dry_run=True, explore=0.0, learn="off") as client:
        return _share(client, best, {})

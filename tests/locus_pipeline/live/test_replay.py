"""locus replay: each MMLU-Pro question answered with the recorded model's letter; anything else a clear 400."""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from locus_model.data.mmlu_pro_bank import extract_answer, question_prompt
from locus_pipeline.live.replay import MMLU_PRO, NO_ANSWER, replay_app


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(replay_app("Yi-6B"))


def ask(client: TestClient, prompt: str):
    return client.post("/v1/chat/completions", json={"model": "x", "messages": [{"role": "user", "content": prompt}]})


def test_a_question_gets_the_recorded_letter(client: TestClient) -> None:
    from locus_model.data.mmlu_pro_bank import read_answer_bank

    bank = read_answer_bank(MMLU_PRO)
    rows = bank.questions.set_index("query_id")
    recorded = bank.recorded[bank.recorded["model"] == "Yi-6B"].set_index("query_id")["pred"]
    for query_id in ["mmlupro-70", *recorded[recorded.isna()].index[:1]]:
        reply = ask(client, question_prompt(rows.loc[query_id, "query"], rows.loc[query_id, "benchmark"]))
        assert reply.status_code == 200
        text = reply.json()["choices"][0]["message"]["content"]
        letter = recorded[query_id]
        assert text == (f"The answer is ({letter})." if isinstance(letter, str) else NO_ANSWER)
        assert extract_answer(text)[0] == (letter if isinstance(letter, str) else None)
        assert reply.json()["usage"]["prompt_tokens"] > 0


def test_an_unknown_prompt_is_a_400_that_says_why(client: TestClient) -> None:
    reply = ask(client, "What is the capital of France?")
    assert reply.status_code == 400 and reply.json()["error"]["code"] == "unknown_prompt"
    assert client.post("/v1/chat/completions", json={"messages": []}).status_code == 400


def test_an_unknown_model_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match="Yi-6B"):
        replay_app("gpt-17")


def test_the_startup_summary_says_what_it_answers_as_and_where(client: TestClient) -> None:
    from locus_pipeline.live.replay import startup_summary

    app = client.app
    assert isinstance(app, FastAPI)  # replay_app's
    text = startup_summary(app, "Yi-6B", "127.0.0.1", 8001)
    assert text.startswith("locus replay: http://127.0.0.1:8001/v1 answers as Yi-6B (its ")
    assert f"recorded answers to {app.state.questions:,} MMLU-Pro questions" in text
    assert 0 < app.state.recorded <= app.state.questions

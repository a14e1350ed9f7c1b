"""Live onboarding reads every endpoint answer as untrusted input (locus_pipeline.live.asking.read_answer, ask_one,
call_cost): a bad answer fails its call with the reason, nothing raises, and no count makes a call cheaper."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from locus_model.routing.costs import cost_table, estimate_tokens
from locus_pipeline.live.asking import ask_one, call_cost, read_answer
from locus_pipeline.serve.config import Upstream


def body(content, usage=None) -> bytes:
    return json.dumps(
        {"choices": [{"message": {"content": content}}], **({"usage": usage} if usage is not None else {})}
    ).encode()


BAD = {
    "a 400 whose body is not JSON": (400, b"<html>Bad Request</html>", "HTTP 400"),
    "a 200 whose body is not JSON": (200, b"{oops", "not JSON"),
    "an integer content": (200, body(7), "is a int, not text"),
    "usage of lots": (200, body("The answer is (C).", {"prompt_tokens": "lots"}), "usage.prompt_tokens"),
    "negative tokens": (200, body("The answer is (C).", {"completion_tokens": -4000}), "usage.completion_tokens"),
    "a boolean count": (200, body("The answer is (C).", {"prompt_tokens": True}), "usage.prompt_tokens"),
    "usage a list": (200, body("The answer is (C).", [1, 2]), "usage is a list"),
    "a lone surrogate": (200, b'{"choices": [{"message": {"content": "A\\ud800"}}]}', "lone surrogate"),
    "no choices": (200, b'{"choices": []}', "no choices[0]"),
    "a 300,000 character answer": (200, body("x" * 300_000), "over 200,000"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_answer_fails_its_call_with_the_reason(case: str) -> None:
    status, raw, says = BAD[case]
    answer = read_answer(status, raw)
    assert answer.text is None and says in answer.error and "\n" not in answer.error


def test_a_good_answer_keeps_its_text_and_counts() -> None:
    answer = read_answer(200, body("The answer is (C).", {"prompt_tokens": 120, "completion_tokens": 8}))
    assert answer.text == "The answer is (C)." and answer.usage == {"prompt_tokens": 120, "completion_tokens": 8}
    assert read_answer(200, body(None)).text == ""  # a null content is an empty answer (graded 0), not a failure


def test_every_bad_answer_of_an_endpoint_fails_that_call_and_nothing_raises() -> None:
    """Through the relay ask_one uses (serve's forward), with a transport answering each bad body in turn."""
    bodies = [(s, r) for s, r, _ in BAD.values()] + [(200, body("The answer is (B)."))]
    upstream = Upstream(base_url="http://endpoint.test/v1", model="m", timeout_s=5)

    async def run() -> list:
        out = []
        for status, raw in bodies:
            transport = httpx.MockTransport(lambda request, status=status, raw=raw: httpx.Response(status, content=raw))
            async with httpx.AsyncClient(transport=transport) as client:
                out.append(await ask_one(client, "m", upstream, "question?", retries=0))
        return out

    results = asyncio.run(run())
    assert [a.text for a, _ in results] == [None] * len(BAD) + ["The answer is (B)."]
    billed = [n for (_, n), (status, _) in zip(results, bodies) if status == 200]
    assert billed[:-1] == [1] * (len(billed) - 1) and billed[-1] == 0  # answered with a 200, then failed: may cost


def test_no_token_count_makes_a_call_cost_less_than_its_text() -> None:
    costs = cost_table(["m"], {"m": {"price_input_per_mtok": 1.0, "price_output_per_mtok": 2.0}})
    prompt, text = "q" * 400, "a" * 40
    floor = call_cost(costs, prompt, text, {})
    assert floor == pytest.approx((estimate_tokens(prompt) * 1.0 + estimate_tokens(text) * 2.0) / 1e6)
    for usage in ({"prompt_tokens": -(10**9)}, {"completion_tokens": -5}, {"prompt_tokens": 0, "completion_tokens": 0}):
        assert call_cost(costs, prompt, text, usage) == pytest.approx(floor)
    assert call_cost(costs, prompt, text, {"prompt_tokens": 1000, "completion_tokens": 100}) == pytest.approx(
        1200 / 1e6
    )


def test_nan_token_counts_fail_the_call_in_one_line_without_a_logged_traceback(caplog) -> None:
    """Python's json reads NaN; the relay cannot pass it on as JSON: the call fails with one line, not a traceback."""
    raw = b'{"choices": [{"message": {"content": "The answer is (C)."}}], "usage": {"prompt_tokens": NaN}}'
    upstream = Upstream(base_url="http://endpoint.test/v1", model="m", timeout_s=5)

    async def run():
        transport = httpx.MockTransport(lambda request: httpx.Response(200, content=raw))
        async with httpx.AsyncClient(transport=transport) as client:
            return await ask_one(client, "m", upstream, "question?", retries=1)

    answer, billed = asyncio.run(run())
    assert answer.text is None and "NaN or Infinity" in answer.error and "\n" not in answer.error
    assert billed == 2  # answered with a 200 twice (the retry), then failed: may cost
    assert "Traceback" not in caplog.text and "Out of range float" not in caplog.text


def test_a_key_the_endpoint_echoes_in_a_200_never_reaches_the_answer(monkeypatch) -> None:
    """What live onboarding logs (live/<name>.jsonl) and MLflow's answers.json come from this answer: scrubbed."""
    key = "sk-live-onboard-0123456789abcdef"
    monkeypatch.setenv("LOCUS_TEST_KEY", key)
    upstream = Upstream(base_url="http://endpoint.test/v1", model="m", timeout_s=5, api_key_env="LOCUS_TEST_KEY")

    def echo(request: httpx.Request) -> httpx.Response:
        said = f"The answer is (C). You sent {request.headers['authorization']}"
        return httpx.Response(200, json={"choices": [{"message": {"content": said}}], "usage": {"prompt_tokens": 3}})

    async def run():
        async with httpx.AsyncClient(transport=httpx.MockTransport(echo)) as client:
            return await ask_one(client, "m", upstream, "question?", retries=0)

    answer, _ = asyncio.run(run())
    assert answer.text == "The answer is (C). You sent Bearer [redacted]" and answer.usage == {"prompt_tokens": 3}

"""Upstreams that misbehave: endless or huge bodies, a huge event-stream line, keep-alive lines forever, deeply
nested JSON; each is cut at the router's bounds (configured small here) and becomes the fallback chain, never a
500; a good client is answered meanwhile. Numbers in requests are range-checked (400, not 500)."""

from __future__ import annotations

import asyncio
import json
import threading

import httpx
import pytest

from locus_pipeline.serve import ServeConfig, create_app
from tests.locus_pipeline.serve.helpers import QUERY, FakeUpstreams, chat, client_for, host, upstream_config
from tests.locus_pipeline.serve_home import ServerThread

SMALL = {"max_response_bytes": 64 << 10, "max_line_bytes": 8 << 10, "max_error_bytes": 1 << 10}
DEEP = "[" * 600 + "]" * 600


class Endless(httpx.AsyncByteStream):
    """``head`` once, then ``chunk`` forever (each after a pause of ``pause`` s); counts the bytes it gave."""

    def __init__(self, chunk: bytes, head: bytes = b"", pause: float = 0.0) -> None:
        self.chunk, self.head, self.pause, self.sent = chunk, head, pause, 0

    async def __aiter__(self):
        if self.head:
            self.sent += len(self.head)
            yield self.head
        while True:
            await asyncio.sleep(self.pause)  # why: a slow upstream is the thing under test
            self.sent += len(self.chunk)
            yield self.chunk


def chosen_of(built, tmp_path) -> str:
    with client_for(built, tmp_path) as dry:
        return dry.post("/route", json={"query": QUERY}).json()["chosen"]


def hostile_first(chosen: str, hostile):
    fake = FakeUpstreams()

    def handler(request: httpx.Request) -> httpx.Response:
        return hostile(request) if request.url.host == host(chosen) else fake(request)

    return httpx.MockTransport(handler)


EVENT = b'data: {"model": "m", "choices": [{"index": 0, "delta": {"content": "a"}}]}\n\n'
CASES = {  # name: (the hostile answer, streamed request?, the fallbacks metric's reason)
    "huge error body": (lambda: (500, Endless(b"e" * 4096, b'{"error": "')), False, "http_500"),
    "endless 200 body": (lambda: (200, Endless(b" " * 4096, b'{"a": "')), False, "too_large"),
    "huge single event line": (lambda: (200, Endless(b"x" * 4096, b"data: ")), True, "line_too_long"),
    "endless event stream": (lambda: (200, Endless(EVENT)), True, None),  # past max_response_bytes: cut mid-stream
    "keep-alive lines forever": (lambda: (200, Endless(b"\n", pause=0.01)), True, "timeout"),
    "deep JSON error": (lambda: (500, DEEP.encode()), False, "http_500"),
    "deep JSON answer": (lambda: (200, DEEP.encode()), False, "bad_response"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_hostile_upstream_is_cut_at_the_bounds_and_falls_back(built, tmp_path, case):
    answer, stream, reason = CASES[case]
    status, content = answer()
    streams = []

    def hostile(request: httpx.Request) -> httpx.Response:
        if isinstance(content, Endless):
            streams.append(content)
            return httpx.Response(
                status, stream=content, headers={"content-type": "text/event-stream" if stream else "application/json"}
            )
        return httpx.Response(status, content=content)

    chosen = chosen_of(built, tmp_path)
    models = upstream_config(defaults={"timeout_s": 0.3}, gateway=SMALL)
    with client_for(built, tmp_path, models=models, transport=hostile_first(chosen, hostile)) as client:
        r = client.post("/v1/chat/completions", json=chat(stream=stream))
        metrics = client.get("/metrics").text
    assert r.status_code == 200
    if reason is None:  # the stream had begun: it ends with an error event, not a 200 that grows without end
        assert r.headers["x-locus-model"] == chosen
        assert json.loads(r.text.strip().splitlines()[-1][6:])["error"]["code"] == "stream_interrupted"
        assert len(r.content) <= SMALL["max_response_bytes"] + 8192
    else:
        assert r.headers["x-locus-model"] != chosen and r.headers["x-locus-fallbacks-used"] == "1"
        assert f'locus_fallbacks_total{{model="{chosen}",reason="{reason}"}} 1.0' in metrics
    for s in streams:  # what the router read of it: the bound and a chunk, not the endless rest
        assert s.sent <= SMALL["max_response_bytes"] + 2 * 4096


def test_a_deep_json_client_error_is_relayed_as_text_not_a_recursion_error(built, tmp_path):
    def deep(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, content=DEEP.encode(), headers={"content-type": "application/json"})

    with client_for(built, tmp_path, models=upstream_config(), transport=httpx.MockTransport(deep)) as client:
        r = client.post("/v1/chat/completions", json=chat())
    assert r.status_code == 400 and r.text == DEEP


def test_a_good_client_is_answered_while_an_upstream_sends_keep_alive_lines(built, tmp_path):
    chosen = chosen_of(built, tmp_path)
    started = threading.Event()

    class KeepAlive(httpx.AsyncByteStream):
        async def __aiter__(self):
            started.set()
            while True:
                await asyncio.sleep(0.01)  # why: the keep-alive cadence of the hostile upstream under test
                yield b"\n"

    def hostile(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=KeepAlive(), headers={"content-type": "text/event-stream"})

    path = tmp_path / "models.json"
    path.write_text(json.dumps(upstream_config(defaults={"timeout_s": 3}, gateway=SMALL)))
    app = create_app(
        ServeConfig(home=str(built["home"].path), models_config=str(path)), transport=hostile_first(chosen, hostile)
    )
    results = {}
    with ServerThread(app) as router, httpx.Client(base_url=router.url, timeout=30) as client:
        slow = threading.Thread(
            target=lambda: results.setdefault("slow", client.post("/v1/chat/completions", json=chat(stream=True)))
        )
        slow.start()
        assert started.wait(30)
        good = client.post(
            "/v1/chat/completions", json=chat(model=next(n for n in ["alpha-7b", "beta-13b"] if n != chosen))
        )
        slow.join(30)
    assert good.status_code == 200 and good.json()["choices"][0]["message"]["content"].startswith("from up-")
    assert results["slow"].status_code == 200 and results["slow"].headers["x-locus-fallbacks-used"] == "1"


@pytest.mark.parametrize(
    "field, value, message",
    [
        (
            "max_tokens",
            int("9" * 400),
            "max_tokens=" + "9" * 20 + "... (400 characters) must be an integer in [1, 10000000]",
        ),
        ("max_completion_tokens", 0, "max_completion_tokens=0 must be an integer in [1, 10000000]"),
        ("max_tokens", 1.5, "max_tokens=1.5 must be an integer"),
        ("temperature", 3, "temperature=3 must be a number in [0, 2]"),
        ("temperature", int("9" * 400), "temperature=999"),
        ("n", 10**6, "n=1000000 must be an integer in [1, 128]"),
        ("top_p", "high", "top_p='high' must be a number in [0, 1]"),
        ("seed", 2**70, "seed=1180591620717411303424 must be an integer"),
    ],
    ids=[
        "max_tokens-400-digits",
        "max_completion_tokens-0",
        "max_tokens-float",
        "temperature-3",
        "temperature-400-digits",
        "n-huge",
        "top_p-text",
        "seed-too-large",
    ],
)
def test_numbers_out_of_range_are_a_400_naming_the_field(built, tmp_path, field, value, message):
    with client_for(
        built, tmp_path, models=upstream_config(), transport=httpx.MockTransport(FakeUpstreams())
    ) as client:
        r = client.post("/v1/chat/completions", json=chat(**{field: value}))
    assert r.status_code == 400 and message in r.json()["error"]["message"]
    assert r.json()["error"]["param"] == field


@pytest.mark.parametrize(
    "body, message",
    [
        (
            {"query": "x", "input_tokens": int("9" * 400)},
            "input_tokens must be an integer in [0, 1,000,000,000] (got 400 digits)",
        ),
        ({"query": "x", "output_tokens": -1}, "output_tokens must be an integer in [0, 1,000,000,000] (got -1)"),
    ],
    ids=["input_tokens-400-digits", "output_tokens-negative"],
)
def test_route_range_checks_its_numbers(built, tmp_path, body, message):
    with client_for(built, tmp_path) as client:
        r = client.post("/route", json=body)
    assert r.status_code == 400 and message in r.json()["error"]["message"]

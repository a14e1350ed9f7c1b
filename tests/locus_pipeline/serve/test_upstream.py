"""Upstreams that fail: real sockets (slow, failing), credentials echoed back, streams cut or not event streams."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse, StreamingResponse

from locus_pipeline.serve import ServeConfig, create_app
from tests.locus_pipeline.serve.helpers import NAMES, QUERY, FakeUpstreams, chat, client_for, host, upstream_config
from tests.locus_pipeline.serve_home import ServerThread


def fake_upstream_app(kind: str) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def completions(body: dict):
        if kind == "slow":
            await asyncio.sleep(3)  # why: a slow upstream is the thing under test
        if kind == "failing":
            return JSONResponse({"error": {"message": "overloaded"}}, status_code=503)
        if body.get("stream"):

            async def events():
                for word in ("real", " socket"):
                    yield f"data: {json.dumps({'model': body['model'], 'choices': [{'delta': {'content': word}}]})}\n\n"
                yield "data: [DONE]\n\n"

            return StreamingResponse(events(), media_type="text/event-stream")
        return {
            "object": "chat.completion",
            "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok from good"}}],
        }

    return app


def test_real_sockets_slow_and_failing_upstreams_fall_back(built, tmp_path):
    with client_for(built, tmp_path) as dry:
        decision = dry.post("/route", json={"query": QUERY}).json()
    chosen = decision["chosen"]
    first, second = decision["fallbacks"][:2]
    with (
        ServerThread(fake_upstream_app("slow")) as slow,
        ServerThread(fake_upstream_app("failing")) as failing,
        ServerThread(fake_upstream_app("good")) as good,
    ):
        url = {chosen: slow.url, first: failing.url}
        models = {
            "defaults": {"timeout_s": 0.5},
            "models": {n: {"base_url": f"{url.get(n, good.url)}/v1"} for n in NAMES},
        }
        path = tmp_path / "models.yaml"
        import yaml

        path.write_text(yaml.safe_dump(models))
        app = create_app(ServeConfig(home=str(built["home"].path), models_config=str(path)))
        with ServerThread(app) as router:
            with httpx.Client(base_url=router.url, timeout=30) as client:
                r = client.post("/v1/chat/completions", json=chat())
                s = client.post("/v1/chat/completions", json=chat(stream=True))
                metrics = client.get("/metrics").text
    assert r.status_code == 200, r.text
    assert r.headers["x-locus-model"] == second and r.json()["model"] == second
    assert r.json()["choices"][0]["message"]["content"] == "ok from good"
    assert s.headers["x-locus-model"] == second
    assert [json.loads(line[6:])["model"] for line in s.text.splitlines() if line.startswith("data: {")] == [second] * 2
    assert f'locus_fallbacks_total{{model="{chosen}",reason="timeout"}} 2.0' in metrics
    assert f'locus_fallbacks_total{{model="{first}",reason="http_503"}} 2.0' in metrics
    # (the streamed request is counted once its body is sent, which may land after the /metrics call)
    assert 'locus_request_latency_seconds_count{endpoint="/v1/chat/completions"}' in metrics


def test_credentials_an_upstream_echoes_are_scrubbed_from_the_502_and_the_log(built, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("LOCUS_TEST_KEY", "sk-live-0123456789abcdef")

    def echo(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            500,
            text=f"bad gateway; you sent Authorization: {request.headers['authorization']} "
            f"and api_key=other-secret-123",
        )

    with client_for(
        built, tmp_path, models=upstream_config(), transport=httpx.MockTransport(echo), n_fallbacks=1
    ) as client:
        r = client.post("/v1/chat/completions", json=chat())
    assert r.status_code == 502
    for text in (r.text, caplog.text):
        assert "0123456789abcdef" not in text and "other-secret-123" not in text
    assert "[redacted]" in r.text


def test_a_relayed_client_error_is_scrubbed_too(built, tmp_path, monkeypatch):
    monkeypatch.setenv("LOCUS_TEST_KEY", "k-very-secret")

    def echo(request: httpx.Request) -> httpx.Response:
        return httpx.Response(401, json={"error": {"message": f"bad key {request.headers['authorization']}"}})

    with client_for(built, tmp_path, models=upstream_config(), transport=httpx.MockTransport(echo)) as client:
        r = client.post("/v1/chat/completions", json=chat())
    assert r.status_code == 401 and "k-very-secret" not in r.text


class _CutStream(httpx.AsyncByteStream):
    async def __aiter__(self):
        yield b'data: {"id": "c", "model": "m", "choices": [{"index": 0, "delta": {"content": "hel"}}]}\n\n'
        raise httpx.ReadError("connection reset by peer")


def test_a_stream_cut_mid_way_ends_with_an_error_event(built, tmp_path):
    def cut(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=_CutStream(), headers={"content-type": "text/event-stream"})

    with client_for(built, tmp_path, models=upstream_config(), transport=httpx.MockTransport(cut)) as client:
        r = client.post("/v1/chat/completions", json=chat(stream=True))
    events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
    assert json.loads(events[0])["choices"][0]["delta"]["content"] == "hel"
    assert json.loads(events[-1])["error"]["code"] == "stream_interrupted"


def test_a_streamed_200_that_is_not_an_event_stream_falls_back(built, tmp_path):
    with client_for(built, tmp_path) as dry:
        chosen = dry.post("/route", json={"query": QUERY}).json()["chosen"]
    fake = FakeUpstreams()

    def broken_first(request: httpx.Request) -> httpx.Response:
        if request.url.host == host(chosen):
            return httpx.Response(200, content=b"<html>not json</html>", headers={"content-type": "text/event-stream"})
        return fake(request)

    with client_for(built, tmp_path, models=upstream_config(), transport=httpx.MockTransport(broken_first)) as client:
        r = client.post("/v1/chat/completions", json=chat(stream=True))
        metrics = client.get("/metrics").text
    assert r.status_code == 200 and r.headers["x-locus-model"] != chosen and r.headers["x-locus-fallbacks-used"] == "1"
    assert f'locus_fallbacks_total{{model="{chosen}",reason="bad_response"}} 1.0' in metrics


KEY = "sk-live-0123456789abcdefghij"


def _escaped(text: str) -> str:
    return "".join(f"\\u{ord(c):04x}" for c in text)


def test_a_key_written_as_unicode_escapes_in_a_client_error_is_scrubbed(built, tmp_path, monkeypatch):
    """The body is parsed and re-serialised for the client: the key must be scrubbed after the JSON decoding too."""
    monkeypatch.setenv("LOCUS_TEST_KEY", KEY)

    def echo(request: httpx.Request) -> httpx.Response:
        body = (
            '{"error": {"message": "invalid key ' + _escaped(KEY) + '", "param": "' + _escaped("Bearer " + KEY) + '"}}'
        )
        return httpx.Response(401, content=body.encode(), headers={"content-type": "application/json"})

    with client_for(built, tmp_path, models=upstream_config(), transport=httpx.MockTransport(echo)) as client:
        r = client.post("/v1/chat/completions", json=chat())
    assert r.status_code == 401 and "[redacted]" in r.json()["error"]["message"]
    assert KEY[8:16] not in r.text and KEY[8:16] not in json.dumps(r.json())


def test_a_key_near_the_cut_of_a_5xx_body_leaks_no_characters(built, tmp_path, monkeypatch, caplog):
    """5xx bodies are cut to 300 characters for the 502 and the log: scrubbed before the cut, so a key that starts
    at character 290 leaks none of its characters."""
    monkeypatch.setenv("LOCUS_TEST_KEY", KEY)

    def echo(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, text="x" * 290 + KEY + " and more")

    with client_for(
        built, tmp_path, models=upstream_config(), transport=httpx.MockTransport(echo), n_fallbacks=1
    ) as client:
        r = client.post("/v1/chat/completions", json=chat())
    assert r.status_code == 502
    for text in (r.text, caplog.text):
        assert "sk-live" not in text and "01234567" not in text


def test_keys_split_cut_or_escaped_are_scrubbed():
    from locus_pipeline.serve.scrub import scrub_body, scrub_credentials

    key = "abcd-efgh-ijkl-mnop-qrst"  # not key-shaped: only knowing it finds it
    assert scrub_credentials(f"got {key}!", [key]) == "got [redacted]!"
    assert scrub_credentials(f"cut: {key[:11]}", [key]) == "cut: [redacted]"  # a body cut inside the key
    assert scrub_credentials(f"tail: {key[-9:]}", [key]) == "tail: [redacted]"  # a log cut before it
    assert key[:10] not in scrub_credentials(f"split: {key[:12]} / {key[12:]}", [key])  # two halves
    assert key[12:20] not in scrub_credentials(f"split: {key[:12]} / {key[12:]}", [key])
    data, text = scrub_body(('{"m": "' + _escaped(key) + '", "' + _escaped(key) + '": 1}').encode(), [key])
    assert data == {"m": "[redacted]", "[redacted]": 1} and key[:8] not in text
    assert scrub_body(b"not json " + key.encode(), [key]) == (None, "not json [redacted]")


def _pieces(text: str, size: int = 7, sep: str = " ") -> str:
    return sep.join(text[i : i + size] for i in range(0, len(text), size))


ECHOES = {  # how a hostile upstream writes the key back
    "7-character pieces": lambda key: "you sent " + _pieces(key),
    "pieces on lines": lambda key: "you sent\n" + _pieces(key, 7, "\n"),
    "zero-width spaces": lambda key: "you sent " + "\u200b".join(key),
    "word joiners and a BOM": lambda key: "you sent " + "\u2060\ufeff".join(key),
    "base64": lambda key: "auth=" + base64.b64encode(f"Authorization: Bearer {key}".encode()).decode(),
    "base64, shifted": lambda key: "blob " + base64.b64encode(f"x{key}y".encode()).decode(),
    "base64, url-safe": lambda key: base64.urlsafe_b64encode(f"ab{key}".encode()).decode(),
    "unicode escapes, not JSON": lambda key: "<html>key " + _escaped(key) + "</html>",
}


@pytest.mark.parametrize("echo", list(ECHOES))
def test_a_key_echoed_in_pieces_invisibly_joined_base64_or_escaped_is_redacted(
    built, tmp_path, monkeypatch, caplog, echo
):
    monkeypatch.setenv("LOCUS_TEST_KEY", KEY)
    raw = base64.b64encode(KEY.encode()).decode()

    def hostile(status: int):
        return lambda request: httpx.Response(status, text=ECHOES[echo](KEY))

    for status in (500, 401):  # a 5xx (the 502's detail and the log) and a relayed client error
        with client_for(
            built, tmp_path, models=upstream_config(), transport=httpx.MockTransport(hostile(status)), n_fallbacks=0
        ) as client:
            r = client.post("/v1/chat/completions", json=chat())
        assert r.status_code == status and "[redacted]" in r.text
        for text in (r.text, r.content.decode("unicode_escape", "replace"), caplog.text):
            flat = "".join(c for c in text if c.isalnum() or c in "-_")
            for i in range(0, len(KEY) - 6):  # no 7 characters of the key, in any form
                assert KEY[i : i + 7] not in flat
            assert raw[4:12] not in text


KEY = "sk-live-echoed-0123456789abcdef"


def echoing_200(request: httpx.Request) -> httpx.Response:
    """An upstream that answers 200 and echoes the request's Authorization header in its answer."""
    said = f"you sent {request.headers['authorization']}; and with a zero-width space: {KEY[:10]}\u200b{KEY[10:]}"
    if json.loads(request.content).get("stream"):
        chunk = {"id": "c", "model": "m", "choices": [{"index": 0, "delta": {"content": said}}]}
        return httpx.Response(
            200,
            content=f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode(),
            headers={"content-type": "text/event-stream"},
        )
    return httpx.Response(
        200,
        json={
            "id": "x",
            "model": "m",
            KEY: "a key as a field name",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": said}}],
        },
    )


def test_a_key_an_upstream_echoes_in_a_200_answer_reaches_no_client(built, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("LOCUS_TEST_KEY", KEY)
    with client_for(built, tmp_path, models=upstream_config(), transport=httpx.MockTransport(echoing_200)) as client:
        plain = client.post("/v1/chat/completions", json=chat(locus={"explain": True}))
        streamed = client.post("/v1/chat/completions", json=chat(stream=True))
    assert plain.status_code == 200 and streamed.status_code == 200
    for text in (plain.text, streamed.text, caplog.text):
        assert "0123456789abcdef" not in text and "echoed-0123" not in text
    assert plain.json()["choices"][0]["message"]["content"].startswith("you sent Bearer [redacted]")
    assert "[redacted]" in streamed.text and streamed.text.rstrip().endswith("data: [DONE]")
    home = Path(built["home"].path)
    assert not [p for p in home.rglob("*") if p.is_file() and b"0123456789abcdef" in p.read_bytes()]  # nor any file


def test_an_answer_without_the_key_is_passed_on_as_it_came():
    from locus_pipeline.serve.scrub import scrub_answer

    answer = {"content": "api_key = 'sk-example-not-a-key' \u200d\U0001f469\u200d\U0001f467 \\u0041", "n": 3}
    assert scrub_answer(answer, [KEY]) == answer  # code a model writes, emoji joined by ZWJ, escapes: untouched
    assert scrub_answer({"content": f"x{KEY}y"}, [KEY]) == {"content": "x[redacted]y"}


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_is_an_upstream_failure_not_followed_and_not_relayed(built, tmp_path, monkeypatch, status):
    monkeypatch.setenv("LOCUS_TEST_KEY", KEY)
    fake, chosen = FakeUpstreams(), None
    with client_for(built, tmp_path) as dry:
        chosen = dry.post("/route", json={"query": QUERY}).json()["chosen"]

    def redirecting(request: httpx.Request) -> httpx.Response:
        if request.url.host == host(chosen):
            return httpx.Response(status, headers={"location": "http://elsewhere.test/steal"}, text="Found")
        return fake(request)

    models = upstream_config(gateway={"allowed_fails": 1, "cooldown_s": 30})
    with client_for(
        built, tmp_path, models=models, transport=httpx.MockTransport(redirecting), n_fallbacks=1
    ) as client:
        moved = client.post("/v1/chat/completions", json=chat(locus={"explain": True}))
        alone = client.post("/v1/chat/completions", json=chat(model=chosen, fallbacks=False))
        metrics = client.get("/metrics").text
    assert moved.status_code == 200 and moved.headers["x-locus-model"] != chosen  # fallback moved on
    (why,) = moved.json()["locus"]["skipped"]
    assert why["reason"] == f"http_{status}" and why["status"] == 502
    assert f'locus_upstream_cooldowns_total{{model="{chosen}"}} 1.0' in metrics  # its cooldown started
    assert alone.status_code == 503 and "location" not in alone.headers  # cooled down now: not tried again
    assert all(h != "elsewhere.test" for h, _, _ in fake.seen)  # nothing (no key) went where it pointed

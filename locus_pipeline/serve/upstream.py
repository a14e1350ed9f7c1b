"""Forwarding a chat completion to a pool model's OpenAI-compatible upstream: what counts as a failure that moves
down the fallback chain (:class:`UpstreamFailed`), credentials scrubbed from what is relayed or logged (serve/scrub.py),
and an
event stream passed through with each chunk's ``model`` rewritten (:func:`rewrite_sse`)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from dataclasses import dataclass
from typing import AsyncIterator, Callable, Sequence

import httpx
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from locus_pipeline.serve.config import GatewaySettings, Upstream
from locus_pipeline.serve.scrub import (
    MAX_JSON_DEPTH,
    is_event_line,
    json_or_none,
    scrub_answer,
    scrub_body,
    scrub_credentials,
)

log = logging.getLogger("locus.serve")

RETRY_STATUSES = {408, 409, 425, 429}  # plus every 5xx: the next model of the fallback chain is tried

MAX_DETAIL_CHARS = 300  # of an upstream's error body, in a 502's detail and the log (cut after scrubbing)


class UpstreamFailed(Exception):
    """An upstream that did not answer usably (timeout, connection, retryable status, not JSON / not an event
    stream): the next model of the fallback chain is tried. ``reason`` labels the fallbacks metric; ``status`` is
    what a client gets when there is no next model (the upstream's own status, 504 for a timeout, else 502)."""

    def __init__(self, model: str, reason: str, detail: str, status: int | None = None) -> None:
        super().__init__(detail)
        self.model, self.reason, self.detail = model, reason, detail
        self.status = status or (504 if reason == "timeout" else 502)


class ReadLimit(Exception):
    """What an upstream sent broke one of the gateway's bounds (:class:`Bounds`): ``reason`` labels the fallbacks
    metric (timeout, too_large, line_too_long)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason, self.detail = reason, detail


@dataclass(frozen=True)
class Bounds:
    """What the gateway reads from one upstream answer at most (the models config's ``gateway:`` section)."""

    timeout_s: float  # the upstream's: an answer complete within it; in a stream, each event within it of the last
    max_response_bytes: int = 16 << 20
    max_line_bytes: int = 1 << 20  # one line of an event stream
    max_error_bytes: int = 64 << 10  # of an error body: only this prefix is read, scrubbed and relayed
    max_stream_s: float = 600.0  # a whole event stream

    @classmethod
    def of(cls, upstream: Upstream, settings: GatewaySettings | None) -> "Bounds":
        if settings is None:
            return cls(upstream.timeout_s)
        return cls(
            upstream.timeout_s,
            settings.max_response_bytes,
            settings.max_line_bytes,
            settings.max_error_bytes,
            settings.max_stream_s,
        )


async def read_bounded(resp: httpx.Response, bounds: Bounds, deadline: float, *, prefix: int | None = None) -> bytes:
    """The body of ``resp``, read by ``deadline`` (the event loop's clock) and at most ``bounds.max_response_bytes``
    of it (ReadLimit beyond either); with ``prefix``, only its first ``prefix`` bytes (the rest is never read)."""
    cap = bounds.max_response_bytes if prefix is None else prefix
    chunks, size = [], 0
    try:
        async with asyncio.timeout_at(deadline):
            async for chunk in resp.aiter_bytes():
                chunks.append(chunk)
                size += len(chunk)
                if size > cap:
                    if prefix is not None:
                        break
                    raise ReadLimit(
                        "too_large", f"the answer is larger than {cap:,} bytes (gateway.max_response_bytes)"
                    )
    except TimeoutError:
        raise ReadLimit("timeout", f"no complete answer within {bounds.timeout_s:g} s") from None
    return b"".join(chunks)[:cap]


async def event_lines(resp: httpx.Response, bounds: Bounds) -> AsyncIterator[str]:
    """The lines of an event stream, within ``bounds``: each at most max_line_bytes, all of them at most
    max_response_bytes, each event (a line that is neither blank nor a ``:`` comment) within timeout_s of the
    previous one or of the start (keep-alive lines do not extend it), the whole within max_stream_s; ReadLimit
    beyond any. Lines are split here, not by httpx, whose line reader has no length limit."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    next_event, end = start + bounds.timeout_s, start + bounds.max_stream_s
    chunks = resp.aiter_bytes()
    buffer, scanned, total = bytearray(), 0, 0
    while True:
        newline = buffer.find(b"\n", scanned)
        if newline < 0:
            scanned = len(buffer)
            if scanned > bounds.max_line_bytes:
                raise ReadLimit(
                    "line_too_long",
                    f"an event stream line is longer than {bounds.max_line_bytes:,} bytes (gateway.max_line_bytes)",
                )
            left = min(next_event, end) - loop.time()
            try:
                if left <= 0:
                    raise TimeoutError
                chunk = await asyncio.wait_for(chunks.__anext__(), left)
            except StopAsyncIteration:
                if buffer:
                    yield buffer.decode("utf-8", "replace")
                return
            except TimeoutError:
                raise ReadLimit(
                    "timeout",
                    f"no event within {bounds.timeout_s:g} s"
                    if loop.time() < end
                    else f"the event stream lasted longer than {bounds.max_stream_s:g} s (gateway.max_stream_s)",
                ) from None
            total += len(chunk)
            if total > bounds.max_response_bytes:
                raise ReadLimit(
                    "too_large",
                    f"the event stream is larger than {bounds.max_response_bytes:,} bytes (gateway.max_response_bytes)",
                )
            buffer += chunk
            continue
        line = bytes(buffer[:newline]).rstrip(b"\r").decode("utf-8", "replace")
        del buffer[: newline + 1]
        scanned = 0
        if line.strip() and not line.startswith(":"):
            next_event = loop.time() + bounds.timeout_s
        yield line


async def rewrite_sse(
    resp: httpx.Response,
    name: str,
    first: str,
    lines: AsyncIterator[str],
    on_usage: Callable[[object], None] = lambda usage: None,
    known: Sequence[str] = (),
) -> AsyncIterator[bytes]:
    """Pass an SSE stream through line by line (``first``, then the rest of ``lines``), with each chunk's ``model``
    set to the pool model's name (a chunk's ``usage``, when the upstream sends one, goes to ``on_usage``). An
    upstream that fails mid-way, or breaks the gateway's bounds, ends the stream with an error event
    (``data: {"error": {...}}``, as OpenAI's API sends one), not with a 200 that just stops. The ``known`` secrets
    are scrubbed from each event (a secret split across events, a few characters each, is not recognised)."""

    async def all_lines() -> AsyncIterator[str]:
        yield first
        async for line in lines:
            yield line

    try:
        async for line in all_lines():
            if line.startswith("data:") and line[5:].strip() not in ("", "[DONE]"):
                chunk = json_or_none(line[5:].encode("utf-8"))
                if isinstance(chunk, dict):
                    if chunk.get("usage"):
                        on_usage(chunk["usage"])
                    scrubbed = scrub_answer(chunk, known)
                    assert isinstance(scrubbed, dict)  # scrub_answer keeps a dict a dict (only strings change)
                    if "model" in chunk or scrubbed != chunk:
                        if "model" in scrubbed:
                            scrubbed["model"] = name
                        line = "data: " + json.dumps(scrubbed, separators=(",", ":"))
                else:
                    line = scrub_credentials(line, known, patterns=False)
            elif known:
                line = scrub_credentials(line, known, patterns=False)
            yield (line + "\n").encode("utf-8")
    except (httpx.HTTPError, ReadLimit) as err:
        what = err.detail if isinstance(err, ReadLimit) else type(err).__name__
        log.warning("upstream %s failed mid-stream (%s: %s)", name, type(err).__name__, scrub_credentials(str(err)))
        error = {
            "error": {
                "message": f"the upstream of {name} failed mid-stream ({what}); the answer is incomplete",
                "type": "upstream_error",
                "code": "stream_interrupted",
            }
        }
        yield f"\ndata: {json.dumps(error)}\n\n".encode("utf-8")
    finally:
        await resp.aclose()


async def forward(
    client: httpx.AsyncClient,
    name: str,
    upstream: Upstream,
    body: dict,
    stream: bool,
    *,
    token: str | None = None,
    on_usage: Callable[[object], None] = lambda usage: None,
    settings: GatewaySettings | None = None,
) -> Response:
    """The upstream's answer; raises UpstreamFailed on a timeout, a connection error, a retryable status, a 200
    that is not JSON (an event stream whose first line is not one, with ``stream``), an answer beyond the gateway's
    bounds (:class:`Bounds` from ``settings``) or anything else the answer breaks in the gateway: whatever an
    upstream sends moves down the fallback chain, never a 500; a redirect (3xx) is a failure too, never followed.
    Credentials (the upstream's key, the gateway's ``token``) are scrubbed from every detail and relayed error body
    (scrub_credentials) and from every answer, 200 or streamed (scrub_answer): the one boundary where bodies come in.
    The answer's ``usage``
    goes to ``on_usage``."""
    key = os.environ.get(upstream.api_key_env) if upstream.api_key_env else None
    secrets_known = [s for s in (key, token) if s]
    try:
        return await _forward(
            client, name, upstream, body, stream, key, secrets_known, on_usage, Bounds.of(upstream, settings)
        )
    except UpstreamFailed as fail:
        fail.detail = scrub_credentials(fail.detail, secrets_known)
        raise
    except Exception as err:  # an answer that breaks the gateway in a way not foreseen: the next model, not a 500
        log.exception(
            "the answer of %s's upstream broke the gateway (%s): trying the next model", name, type(err).__name__
        )
        raise UpstreamFailed(name, "bad_response", f"an answer the gateway cannot use ({type(err).__name__})") from None


async def _forward(
    client: httpx.AsyncClient,
    name: str,
    upstream: Upstream,
    body: dict,
    stream: bool,
    key: str | None,
    secrets_known: list[str],
    on_usage: Callable[[object], None],
    bounds: Bounds,
) -> Response:
    payload = {**body, "model": upstream.model}
    headers = {"content-type": "application/json"}
    if key:
        headers["authorization"] = f"Bearer {key}"
    request = client.build_request(
        "POST", f"{upstream.base_url}/chat/completions", json=payload, headers=headers, timeout=upstream.timeout_s
    )
    deadline = asyncio.get_running_loop().time() + upstream.timeout_s  # the headers and a whole non-streamed answer
    try:
        async with asyncio.timeout_at(deadline):
            resp = await client.send(request, stream=True)
    except (httpx.TimeoutException, TimeoutError) as err:
        raise UpstreamFailed(name, "timeout", f"no answer within {upstream.timeout_s:g} s ({type(err).__name__})")
    except httpx.HTTPError as err:
        raise UpstreamFailed(name, "connection", f"{type(err).__name__}: {err}")
    try:
        return await _answer(resp, name, upstream, stream, secrets_known, on_usage, bounds, deadline)
    except ReadLimit as err:
        await resp.aclose()
        raise UpstreamFailed(name, err.reason, err.detail) from None
    except httpx.TimeoutException as err:
        await resp.aclose()
        raise UpstreamFailed(name, "timeout", f"no answer within {upstream.timeout_s:g} s ({type(err).__name__})")
    except httpx.HTTPError as err:
        await resp.aclose()
        raise UpstreamFailed(name, "connection", f"{type(err).__name__}: {err}")


async def _answer(
    resp: httpx.Response,
    name: str,
    upstream: Upstream,
    stream: bool,
    secrets_known: list[str],
    on_usage: Callable[[object], None],
    bounds: Bounds,
    deadline: float,
) -> Response:
    if 300 <= resp.status_code < 400:  # never followed (the key would go where it points) nor relayed: a failure
        await resp.aclose()
        raise UpstreamFailed(
            name,
            f"http_{resp.status_code}",
            f"HTTP {resp.status_code}: a redirect, not an answer "
            "(not followed: the upstream's base_url should name the endpoint itself)",
            502,
        )
    if resp.status_code >= 500 or resp.status_code in RETRY_STATUSES:  # a bounded prefix, scrubbed off the loop
        raw = await read_bounded(resp, bounds, deadline, prefix=bounds.max_error_bytes)
        await resp.aclose()
        _, text = await run_in_threadpool(scrub_body, raw, secrets_known)
        raise UpstreamFailed(
            name, f"http_{resp.status_code}", f"HTTP {resp.status_code}: {text[:MAX_DETAIL_CHARS]}", resp.status_code
        )
    headers_out = {"x-locus-model": name, "x-locus-upstream-model": upstream.model}
    if stream and resp.status_code == 200:  # the first event decides: an event stream, or the next model
        lines = event_lines(resp, bounds)
        try:
            first = ""
            while not first.strip():
                first = await lines.__anext__()
        except StopAsyncIteration:
            await resp.aclose()
            raise UpstreamFailed(name, "bad_response", "the event stream ended before its first event")
        if not is_event_line(first):
            await resp.aclose()
            raise UpstreamFailed(
                name, "bad_response", f"not an event stream: {scrub_credentials(first[:200], secrets_known)!r}"
            )
        return StreamingResponse(
            rewrite_sse(resp, name, first, lines, on_usage, secrets_known),
            status_code=200,
            headers=headers_out,
            media_type=resp.headers.get("content-type", "text/event-stream"),
        )
    if resp.status_code != 200:  # relayed (a bounded prefix), less any credential it echoes (decoded, then scrubbed)
        raw = await read_bounded(resp, bounds, deadline, prefix=bounds.max_error_bytes)
        await resp.aclose()
        data, text = await run_in_threadpool(scrub_body, raw, secrets_known)
        if data is None:
            return Response(
                text.encode("utf-8"),
                status_code=resp.status_code,
                headers=headers_out,
                media_type=resp.headers.get("content-type"),
            )
        return _json_response(data, name, resp.status_code, headers_out)
    try:
        raw = await read_bounded(resp, bounds, deadline)
    finally:
        await resp.aclose()
    data = await run_in_threadpool(json_or_none, raw) if len(raw) > 1 << 18 else json_or_none(raw)
    if data is None:
        text = (await run_in_threadpool(scrub_body, raw[: bounds.max_error_bytes], secrets_known))[1]
        raise UpstreamFailed(name, "bad_response", f"not JSON (or nested deeper than {MAX_JSON_DEPTH}): {text[:200]!r}")
    if secrets_known:  # an answer echoing the key: scrubbed before the client, the answer log or MLflow sees it
        data = (
            await run_in_threadpool(scrub_answer, data, secrets_known)
            if len(raw) > 1 << 16
            else scrub_answer(data, secrets_known)
        )
    if isinstance(data, dict):
        data["model"] = name
        on_usage(data.get("usage"))
    return _json_response(data, name, resp.status_code, headers_out)


def _json_response(data: object, name: str, status: int, headers: dict) -> JSONResponse:
    """``data`` as the client's JSON; an answer holding NaN or Infinity (Python's json reads them, JSON has none)
    fails like any answer the gateway cannot pass on, in one line (not a logged traceback per answer)."""
    try:
        return JSONResponse(data, status_code=status, headers=headers)
    except ValueError:
        raise UpstreamFailed(
            name,
            "bad_response",
            "the answer holds NaN or Infinity (e.g. in usage's token counts): not JSON, whose numbers are finite",
        ) from None

"""Forwarding a chat completion to a pool model's OpenAI-compatible upstream: what counts as a failure that moves
down the fallback chain (:class:`UpstreamFailed`), credentials scrubbed from what is relayed or logged, and an
event stream passed through with each chunk's ``model`` rewritten (:func:`rewrite_sse`)."""

from __future__ import annotations

import json
import logging
import os
import re
from typing import AsyncIterator, Callable, Sequence

import httpx
from fastapi.responses import JSONResponse, Response, StreamingResponse

from locus_pipeline.serve.config import Upstream

log = logging.getLogger("locus.serve")

RETRY_STATUSES = {408, 409, 425, 429}  # plus every 5xx: the next model of the fallback chain is tried

_CREDENTIAL = re.compile(r"(?i)(bearer\s+|(?:authorization|api[_-]?key|x-api-key|access[_-]?token)[\"']?\s*[:=]\s*[\"']?"
                         r"(?:bearer\s+)?)([^\s\"',;}]+)")
_KEY_SHAPED = re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_-]{8,}")
PARTIAL = 8  # any run of this many characters of a known secret is redacted (a key cut short, or split in two)
MAX_DETAIL_CHARS = 300  # of an upstream's error body, in a 502's detail and the log (cut after scrubbing)


def _redact_known(text: str, secret: str) -> str:
    """``text`` with every run of at least PARTIAL characters of ``secret`` replaced (the whole secret, its first
    or last characters where a body was cut, each half where it was split)."""
    if len(secret) < PARTIAL:
        return text.replace(secret, "[redacted]")
    windows = sorted({secret[i:i + PARTIAL] for i in range(len(secret) - PARTIAL + 1)})
    starts = [m.start() for m in re.finditer("(?=(?:" + "|".join(map(re.escape, windows)) + "))", text)]
    if not starts:
        return text
    out, end = [], 0
    for start in starts:  # merge the overlapping windows into runs
        if out and start <= out[-1][1]:
            out[-1][1] = start + PARTIAL
        else:
            out.append([start, start + PARTIAL])
    pieces = []
    for start, stop in out:
        pieces += [text[end:start], "[redacted]"]
        end = stop
    return "".join(pieces) + text[end:]


def scrub_credentials(text: str, known: Sequence[str] = ()) -> str:
    """``text`` (an upstream's error body, an exception) with credentials replaced by ``[redacted]``: the ``known``
    secrets wherever they appear (whole, cut short or split: any PARTIAL characters of one), Authorization /
    api-key values and key-shaped strings (``sk-...``), so that an upstream echoing the request's headers never
    puts a key into a 502 body or the log. Scrub what the client or the log will read: after every decoding
    (:func:`scrub_body`) and before any cut."""
    for secret in known:
        if secret:
            text = _redact_known(text, secret)
    text = _CREDENTIAL.sub(lambda m: m.group(1) + "[redacted]", text)
    return _KEY_SHAPED.sub("[redacted]", text)


def _scrub_value(value: object, known: Sequence[str]) -> object:
    if isinstance(value, str):
        return scrub_credentials(value, known)
    if isinstance(value, list):
        return [_scrub_value(v, known) for v in value]
    if isinstance(value, dict):
        return {scrub_credentials(str(k), known): _scrub_value(v, known) for k, v in value.items()}
    return value


def scrub_body(raw: bytes, known: Sequence[str] = ()) -> tuple[object | None, str]:
    """An upstream's body, decoded as far as it goes and scrubbed after each step: (the JSON value with every
    string scrubbed, or None when not JSON; the scrubbed text). A key written as ``\\uXXXX`` escapes is plain
    text once parsed, and is scrubbed there."""
    text = scrub_credentials(raw.decode("utf-8", "replace"), known)
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return None, text
    data = _scrub_value(data, known)
    return data, json.dumps(data, ensure_ascii=False)


def _is_event_line(line: str) -> bool:
    """Whether ``line`` is a line of a server-sent event stream whose data is JSON (or ``[DONE]``)."""
    if line.startswith((":", "event:", "id:", "retry:")):
        return True
    if not line.startswith("data:"):
        return False
    data = line[5:].strip()
    try:
        return data == "[DONE]" or isinstance(json.loads(data), (dict, list))
    except ValueError:
        return False


class UpstreamFailed(Exception):
    """An upstream that did not answer usably (timeout, connection, retryable status, not JSON / not an event
    stream): the next model of the fallback chain is tried. ``reason`` labels the fallbacks metric; ``status`` is
    what a client gets when there is no next model (the upstream's own status, 504 for a timeout, else 502)."""

    def __init__(self, model: str, reason: str, detail: str, status: int | None = None) -> None:
        super().__init__(detail)
        self.model, self.reason, self.detail = model, reason, detail
        self.status = status or (504 if reason == "timeout" else 502)


async def rewrite_sse(resp: httpx.Response, name: str, first: str, lines: AsyncIterator[str],
                      on_usage: Callable[[object], None] = lambda usage: None) -> AsyncIterator[bytes]:
    """Pass an SSE stream through line by line (``first``, then the rest of ``lines``), with each chunk's ``model``
    set to the pool model's name (a chunk's ``usage``, when the upstream sends one, goes to ``on_usage``). An
    upstream that fails mid-way ends the stream with an error event
    (``data: {"error": {...}}``, as OpenAI's API sends one), not with a 200 that just stops."""

    async def all_lines() -> AsyncIterator[str]:
        yield first
        async for line in lines:
            yield line

    try:
        async for line in all_lines():
            if line.startswith("data:") and line[5:].strip() not in ("", "[DONE]"):
                try:
                    chunk = json.loads(line[5:])
                    if isinstance(chunk, dict) and chunk.get("usage"):
                        on_usage(chunk["usage"])
                    if isinstance(chunk, dict) and "model" in chunk:
                        chunk["model"] = name
                        line = "data: " + json.dumps(chunk, separators=(",", ":"))
                except ValueError:
                    pass  # not JSON: pass it through as it came
            yield (line + "\n").encode("utf-8")
    except httpx.HTTPError as err:
        log.warning("upstream %s failed mid-stream (%s: %s)", name, type(err).__name__, scrub_credentials(str(err)))
        error = {"error": {"message": f"the upstream of {name} failed mid-stream ({type(err).__name__}); the answer "
                                      "is incomplete", "type": "upstream_error", "code": "stream_interrupted"}}
        yield f"\ndata: {json.dumps(error)}\n\n".encode("utf-8")
    finally:
        await resp.aclose()



async def forward(client: httpx.AsyncClient, name: str, upstream: Upstream, body: dict, stream: bool, *,
                  token: str | None = None, on_usage: Callable[[object], None] = lambda usage: None) -> Response:
    """The upstream's answer; raises UpstreamFailed on a timeout, a connection error, a retryable status or a
    200 that is not JSON (an event stream whose first line is not one, with ``stream``). Credentials (the
    upstream's key, the router's ``token``) are scrubbed from every detail and relayed error body
    (scrub_credentials). The answer's ``usage`` goes to ``on_usage``."""
    key = os.environ.get(upstream.api_key_env) if upstream.api_key_env else None
    secrets_known = [s for s in (key, token) if s]
    try:
        return await _forward(client, name, upstream, body, stream, key, secrets_known, on_usage)
    except UpstreamFailed as fail:
        fail.detail = scrub_credentials(fail.detail, secrets_known)
        raise


async def _forward(client: httpx.AsyncClient, name: str, upstream: Upstream, body: dict, stream: bool,
                   key: str | None, secrets_known: list[str], on_usage: Callable[[object], None]) -> Response:
    payload = {**body, "model": upstream.model}
    headers = {"content-type": "application/json"}
    if key:
        headers["authorization"] = f"Bearer {key}"
    request = client.build_request("POST", f"{upstream.base_url}/chat/completions", json=payload,
                                   headers=headers, timeout=upstream.timeout_s)
    try:
        resp = await client.send(request, stream=True)
    except httpx.TimeoutException as err:
        raise UpstreamFailed(name, "timeout", f"no answer within {upstream.timeout_s:g} s ({type(err).__name__})")
    except httpx.HTTPError as err:
        raise UpstreamFailed(name, "connection", f"{type(err).__name__}: {err}")
    if resp.status_code >= 500 or resp.status_code in RETRY_STATUSES:
        _, text = scrub_body(await resp.aread(), secrets_known)
        await resp.aclose()
        raise UpstreamFailed(name, f"http_{resp.status_code}", f"HTTP {resp.status_code}: {text[:MAX_DETAIL_CHARS]}",
                             resp.status_code)
    headers_out = {"x-locus-model": name, "x-locus-upstream-model": upstream.model}
    if stream and resp.status_code == 200:  # the first line decides: an event stream, or the next model
        lines = resp.aiter_lines()
        try:
            first = ""
            while not first.strip():
                first = await lines.__anext__()
        except (httpx.HTTPError, StopAsyncIteration) as err:
            await resp.aclose()
            raise UpstreamFailed(name, "bad_response" if isinstance(err, StopAsyncIteration) else "connection",
                             f"the event stream ended before its first event ({type(err).__name__})")
        if not _is_event_line(first):
            await resp.aclose()
            raise UpstreamFailed(name, "bad_response", f"not an event stream: {scrub_credentials(first, secrets_known)[:200]!r}")
        return StreamingResponse(rewrite_sse(resp, name, first, lines, on_usage), status_code=200, headers=headers_out,
                                 media_type=resp.headers.get("content-type", "text/event-stream"))
    try:
        raw = await resp.aread()
    except httpx.HTTPError as err:
        raise UpstreamFailed(name, "connection", f"{type(err).__name__}: {err}")
    finally:
        await resp.aclose()
    if resp.status_code != 200:  # relayed as it came, less any credential it echoes (decoded, then scrubbed)
        data, text = scrub_body(raw, secrets_known)
        if data is None:
            return Response(text.encode("utf-8"), status_code=resp.status_code, headers=headers_out,
                            media_type=resp.headers.get("content-type"))
        return JSONResponse(data, status_code=resp.status_code, headers=headers_out)
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        raise UpstreamFailed(name, "bad_response", f"not JSON: {scrub_body(raw, secrets_known)[1][:200]!r}")
    if isinstance(data, dict):
        data["model"] = name
        on_usage(data.get("usage"))
    return JSONResponse(data, status_code=resp.status_code, headers=headers_out)


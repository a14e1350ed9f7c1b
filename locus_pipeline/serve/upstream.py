"""Forwarding a chat completion to a pool model's OpenAI-compatible upstream: what counts as a failure that moves
down the fallback chain (:class:`UpstreamFailed`), credentials scrubbed from what is relayed or logged, and an
event stream passed through with each chunk's ``model`` rewritten (:func:`rewrite_sse`)."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import re
from dataclasses import dataclass
from typing import AsyncIterator, Callable, Sequence

import httpx
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from locus_pipeline.serve.config import GatewaySettings, Upstream

log = logging.getLogger("locus.serve")

RETRY_STATUSES = {408, 409, 425, 429}  # plus every 5xx: the next model of the fallback chain is tried

_CREDENTIAL = re.compile(r"(?i)(bearer\s+|(?:authorization|api[_-]?key|x-api-key|access[_-]?token)[\"']?\s*[:=]\s*[\"']?"
                         r"(?:bearer\s+)?)([^\s\"',;}]+)")
_KEY_SHAPED = re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_-]{8,}")
PARTIAL = 6  # any run of this many characters of a known secret is redacted (a key cut short, split, in pieces)
MAX_DETAIL_CHARS = 300  # of an upstream's error body, in a 502's detail and the log (cut after scrubbing)
MAX_JSON_DEPTH = 64  # an upstream's JSON nested deeper is treated as not JSON
# characters that show nothing: format characters (zero-width spaces and joiners, bidi marks, the BOM, tags),
# variation selectors, the combining grapheme joiner and Hangul fillers; removed before secrets are looked for
_INVISIBLE = re.compile("[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e"
                        "\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb\U000e0000-\U000e0fff]")
_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})")


def _unescape(match: re.Match) -> str:
    code = int(match.group(1), 16)
    return match.group(0) if 0xD800 <= code <= 0xDFFF else chr(code)  # a surrogate half stays as written


def secret_forms(secret: str) -> list[str]:
    """The strings an upstream may echo ``secret`` as: itself and its base64 encodings (standard and URL-safe) at
    each of the three byte alignments (the characters that depend on the secret's bytes only), so that a key
    inside a base64-encoded blob is found too."""
    raw, forms = secret.encode("utf-8"), [secret]
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + raw).decode("ascii")
        core = encoded[(shift * 8 + 5) // 6:((shift + len(raw)) * 8) // 6]  # the characters of the secret alone
        forms += [core, core.replace("+", "-").replace("/", "_")]
    return list(dict.fromkeys(f for f in forms if f))


def _redact_known(text: str, forms: Sequence[str]) -> str:
    """``text`` with every run of PARTIAL-character pieces of any of ``forms`` replaced: the whole secret, its
    first or last characters where a body was cut, the pieces where it was split. One pass over ``text`` with a
    set lookup per position (linear in the text, whatever the secrets)."""
    short = [f for f in forms if len(f) < PARTIAL]
    for form in short:
        text = text.replace(form, "[redacted]")
    windows = {f[i:i + PARTIAL] for f in forms if len(f) >= PARTIAL for i in range(len(f) - PARTIAL + 1)}
    runs: list[list[int]] = []
    for start in range(len(text) - PARTIAL + 1):
        if text[start:start + PARTIAL] in windows:
            if runs and start <= runs[-1][1]:  # overlapping windows merge into one run
                runs[-1][1] = start + PARTIAL
            else:
                runs.append([start, start + PARTIAL])
    if not runs:
        return text
    pieces, end = [], 0
    for start, stop in runs:
        pieces += [text[end:start], "[redacted]"]
        end = stop
    return "".join(pieces) + text[end:]


def scrub_credentials(text: str, known: Sequence[str] = (), *, patterns: bool = True) -> str:
    """``text`` (an upstream's error body, an exception) with credentials replaced by ``[redacted]``: the ``known``
    secrets wherever they appear (whole, cut short, split or in pieces: any PARTIAL characters of one; also
    base64-encoded, written as ``\\uXXXX`` escapes, or with invisible characters between its characters, which
    are removed and decoded first), Authorization / api-key values and key-shaped strings (``sk-...``), so that an
    upstream echoing the request's headers never puts a key into a 502 body or the log. Scrub what the client or
    the log will read: after every decoding (:func:`scrub_body`) and before any cut; linear in ``text``, which
    callers bound (an error body's prefix).

    ``patterns=False`` (an answer's text, which may rightly hold ``api_key = ...`` in code it writes): the known
    secrets only, and the text comes back as it was (invisible characters, escapes) unless one was found."""
    secrets_known = [s for s in known if s]
    if secrets_known:
        seen = _ESCAPE.sub(_unescape, _INVISIBLE.sub("", text))
        redacted = _redact_known(seen, [f for s in secrets_known for f in secret_forms(s)])
        if patterns or redacted != seen:
            text = redacted
    if not patterns:
        return text
    text = _CREDENTIAL.sub(lambda m: m.group(1) + "[redacted]", text)
    return _KEY_SHAPED.sub("[redacted]", text)


def _scrub_value(value: object, known: Sequence[str], patterns: bool = True) -> object:
    if isinstance(value, str):
        return scrub_credentials(value, known, patterns=patterns)
    if isinstance(value, list):
        return [_scrub_value(v, known, patterns) for v in value]
    if isinstance(value, dict):
        return {scrub_credentials(str(k), known, patterns=patterns): _scrub_value(v, known, patterns)
                for k, v in value.items()}
    return value


def scrub_answer(data: object, known: Sequence[str]) -> object:
    """An upstream's usable answer (parsed JSON, any status) with the known secrets (its key, the gateway's token)
    scrubbed from every string: what the client, the live answer log and MLflow get. Only the known secrets: an
    answer may rightly hold key-shaped text (code it writes), which the error bodies' patterns would redact."""
    return _scrub_value(data, [k for k in known if k], False) if any(known) else data


def scrub_body(raw: bytes, known: Sequence[str] = ()) -> tuple[object | None, str]:
    """An upstream's body, decoded as far as it goes and scrubbed after each step: (the JSON value with every
    string scrubbed, or None when not JSON; the scrubbed text). A key written as ``\\uXXXX`` escapes is plain
    text once parsed, and is scrubbed there."""
    text = scrub_credentials(raw.decode("utf-8", "replace"), known)
    data = _json_or_none(raw)
    if data is None:
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
        return cls(upstream.timeout_s, settings.max_response_bytes, settings.max_line_bytes,
                   settings.max_error_bytes, settings.max_stream_s)


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
                    raise ReadLimit("too_large", f"the answer is larger than {cap:,} bytes (gateway.max_response_bytes)")
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
                raise ReadLimit("line_too_long", f"an event stream line is longer than {bounds.max_line_bytes:,} bytes "
                                                 "(gateway.max_line_bytes)")
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
                raise ReadLimit("timeout", f"no event within {bounds.timeout_s:g} s" if loop.time() < end else
                                f"the event stream lasted longer than {bounds.max_stream_s:g} s "
                                "(gateway.max_stream_s)") from None
            total += len(chunk)
            if total > bounds.max_response_bytes:
                raise ReadLimit("too_large", f"the event stream is larger than {bounds.max_response_bytes:,} bytes "
                                             "(gateway.max_response_bytes)")
            buffer += chunk
            continue
        line = bytes(buffer[:newline]).rstrip(b"\r").decode("utf-8", "replace")
        del buffer[:newline + 1]
        scanned = 0
        if line.strip() and not line.startswith(":"):
            next_event = loop.time() + bounds.timeout_s
        yield line


async def rewrite_sse(resp: httpx.Response, name: str, first: str, lines: AsyncIterator[str],
                      on_usage: Callable[[object], None] = lambda usage: None,
                      known: Sequence[str] = ()) -> AsyncIterator[bytes]:
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
                chunk = _json_or_none(line[5:].encode("utf-8"))
                if isinstance(chunk, dict):
                    if chunk.get("usage"):
                        on_usage(chunk["usage"])
                    scrubbed = scrub_answer(chunk, known)
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
        error = {"error": {"message": f"the upstream of {name} failed mid-stream ({what}); the answer is incomplete",
                           "type": "upstream_error", "code": "stream_interrupted"}}
        yield f"\ndata: {json.dumps(error)}\n\n".encode("utf-8")
    finally:
        await resp.aclose()


def _json_or_none(raw: bytes) -> object | None:
    """``raw`` parsed as JSON, or None when it is not JSON or nests deeper than MAX_JSON_DEPTH (what the gateway
    re-serialises stays far from Python's recursion limit)."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return data if _depth(data) <= MAX_JSON_DEPTH else None


def _depth(value: object) -> int:
    """How deep ``value`` nests (iterative; stops counting past MAX_JSON_DEPTH)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            deepest = max(deepest, depth)
            if deepest > MAX_JSON_DEPTH:
                return deepest
            stack.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return deepest


async def forward(client: httpx.AsyncClient, name: str, upstream: Upstream, body: dict, stream: bool, *,
                  token: str | None = None, on_usage: Callable[[object], None] = lambda usage: None,
                  settings: GatewaySettings | None = None) -> Response:
    """The upstream's answer; raises UpstreamFailed on a timeout, a connection error, a retryable status, a 200
    that is not JSON (an event stream whose first line is not one, with ``stream``), an answer beyond the gateway's
    bounds (:class:`Bounds` from ``settings``) or anything else the answer breaks in the gateway: whatever an
    upstream sends moves down the fallback chain, never a 500; a redirect (3xx) is a failure too, never followed.
    Credentials (the upstream's key, the gateway's ``token``) are scrubbed from every detail and relayed error body
    (scrub_credentials) and from every answer, 200 or streamed (scrub_answer): the one boundary where bodies come in. The answer's ``usage``
    goes to ``on_usage``."""
    key = os.environ.get(upstream.api_key_env) if upstream.api_key_env else None
    secrets_known = [s for s in (key, token) if s]
    try:
        return await _forward(client, name, upstream, body, stream, key, secrets_known, on_usage,
                              Bounds.of(upstream, settings))
    except UpstreamFailed as fail:
        fail.detail = scrub_credentials(fail.detail, secrets_known)
        raise
    except Exception as err:  # an answer that breaks the gateway in a way not foreseen: the next model, not a 500
        log.exception("the answer of %s's upstream broke the gateway (%s): trying the next model", name,
                      type(err).__name__)
        raise UpstreamFailed(name, "bad_response", f"an answer the gateway cannot use ({type(err).__name__})") from None


async def _forward(client: httpx.AsyncClient, name: str, upstream: Upstream, body: dict, stream: bool,
                   key: str | None, secrets_known: list[str], on_usage: Callable[[object], None],
                   bounds: Bounds) -> Response:
    payload = {**body, "model": upstream.model}
    headers = {"content-type": "application/json"}
    if key:
        headers["authorization"] = f"Bearer {key}"
    request = client.build_request("POST", f"{upstream.base_url}/chat/completions", json=payload,
                                   headers=headers, timeout=upstream.timeout_s)
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


async def _answer(resp: httpx.Response, name: str, upstream: Upstream, stream: bool, secrets_known: list[str],
                  on_usage: Callable[[object], None], bounds: Bounds, deadline: float) -> Response:
    if 300 <= resp.status_code < 400:  # never followed (the key would go where it points) nor relayed: a failure
        await resp.aclose()
        raise UpstreamFailed(name, f"http_{resp.status_code}", f"HTTP {resp.status_code}: a redirect, not an answer "
                                   "(not followed: the upstream's base_url should name the endpoint itself)", 502)
    if resp.status_code >= 500 or resp.status_code in RETRY_STATUSES:  # a bounded prefix, scrubbed off the loop
        raw = await read_bounded(resp, bounds, deadline, prefix=bounds.max_error_bytes)
        await resp.aclose()
        _, text = await run_in_threadpool(scrub_body, raw, secrets_known)
        raise UpstreamFailed(name, f"http_{resp.status_code}", f"HTTP {resp.status_code}: {text[:MAX_DETAIL_CHARS]}",
                             resp.status_code)
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
        if not _is_event_line(first):
            await resp.aclose()
            raise UpstreamFailed(name, "bad_response", f"not an event stream: {scrub_credentials(first[:200], secrets_known)!r}")
        return StreamingResponse(rewrite_sse(resp, name, first, lines, on_usage, secrets_known), status_code=200,
                                 headers=headers_out,
                                 media_type=resp.headers.get("content-type", "text/event-stream"))
    if resp.status_code != 200:  # relayed (a bounded prefix), less any credential it echoes (decoded, then scrubbed)
        raw = await read_bounded(resp, bounds, deadline, prefix=bounds.max_error_bytes)
        await resp.aclose()
        data, text = await run_in_threadpool(scrub_body, raw, secrets_known)
        if data is None:
            return Response(text.encode("utf-8"), status_code=resp.status_code, headers=headers_out,
                            media_type=resp.headers.get("content-type"))
        return _json_response(data, name, resp.status_code, headers_out)
    try:
        raw = await read_bounded(resp, bounds, deadline)
    finally:
        await resp.aclose()
    data = await run_in_threadpool(_json_or_none, raw) if len(raw) > 1 << 18 else _json_or_none(raw)
    if data is None:
        text = (await run_in_threadpool(scrub_body, raw[:bounds.max_error_bytes], secrets_known))[1]
        raise UpstreamFailed(name, "bad_response", f"not JSON (or nested deeper than {MAX_JSON_DEPTH}): {text[:200]!r}")
    if secrets_known:  # an answer echoing the key: scrubbed before the client, the answer log or MLflow sees it
        data = await run_in_threadpool(scrub_answer, data, secrets_known) if len(raw) > 1 << 16 else \
            scrub_answer(data, secrets_known)
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
        raise UpstreamFailed(name, "bad_response", "the answer holds NaN or Infinity (e.g. in usage's token counts): "
                                                   "not JSON, whose numbers are finite") from None

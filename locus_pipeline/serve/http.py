"""The gateway's HTTP plumbing: OpenAI-style errors (:class:`ApiError`, :func:`error_response`), the request-body
limit (:class:`BodyLimitMiddleware`) and the limit on wrong bearer tokens (:class:`WrongTokenLimiter`)."""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from typing import Any, Callable

from fastapi.responses import JSONResponse

log = logging.getLogger("locus.serve")


class ApiError(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", **extra: Any) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.extra = status, message, kind, extra


def error_response(status: int, message: str, kind: str = "invalid_request_error", **extra: Any) -> JSONResponse:
    """OpenAI-style error body: {"error": {"message", "type", ...}}."""
    return JSONResponse({"error": {"message": message, "type": kind, **extra}}, status_code=status)


def parse_json(body: bytes) -> Any:
    """A request body as JSON, or a 400 that says why (not JSON; nested deeper than the parser goes), never a 500."""
    try:
        return json.loads(body)
    except ValueError:
        raise ApiError(400, "the body is not JSON (send Content-Type: application/json and a JSON body)") from None
    except RecursionError:
        raise ApiError(400, "the body nests JSON deeper than this gateway parses (about 1,000 levels)") from None


class BodyLimitMiddleware:
    """Refuses a request body larger than ``max_bytes`` with 413, before any of it is parsed or forwarded: by its
    Content-Length, or while it arrives (chunked). The accepted body (at most ``max_bytes``) is replayed to the app."""

    def __init__(self, app, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or self.max_bytes <= 0:
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length", b"")
        if length.isdigit() and int(length) > self.max_bytes:
            await self._refuse(scope, receive, send)
            return
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
            if size > self.max_bytes:
                await self._refuse(scope, receive, send)
                return
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()  # after the body: the disconnect a streaming response listens for

        await self.app(scope, replay, send)

    async def _refuse(self, scope, receive, send) -> None:
        await error_response(
            413,
            f"the request body is larger than {self.max_bytes:,} bytes, the limit of this gateway "
            "(locus serve --max-body-bytes)",
            code="request_too_large",
        )(scope, receive, send)


class WrongTokenLimiter:
    """Requests with a missing or wrong bearer token, per client address: each is logged (with the address and the
    path) until ``limit`` of them fall within ``window_s``; then that client's further wrong tokens are answered
    429 (one log line says so) until the window has passed. The right token is always accepted, so a client
    sharing an address (a proxy) with someone guessing is not locked out."""

    def __init__(
        self,
        limit: int = 10,
        window_s: float = 60.0,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_clients: int = 10_000,
    ) -> None:
        self.limit, self.window_s, self.clock, self.max_clients = limit, window_s, clock, max_clients
        self.failures: dict[str, deque[float]] = {}

    def _recent(self, client: str) -> deque[float]:
        now = self.clock()
        times = self.failures.get(client)
        if times is None:
            if len(self.failures) >= self.max_clients:  # bounded memory: forget clients whose window has passed
                self.failures = {c: t for c, t in self.failures.items() if t and now - t[-1] < self.window_s}
            times = self.failures[client] = deque()
        while times and now - times[0] >= self.window_s:
            times.popleft()
        return times

    def refuse(self, client: str, path: str) -> ApiError:
        """The error for one wrong token from ``client`` (401, or 429 past the limit), logged as said above."""
        times = self._recent(client)
        times.append(self.clock())
        if len(times) <= self.limit:
            log.warning(
                "wrong or missing bearer token from %s on %s (%d in the last %g s)",
                client,
                path,
                len(times),
                self.window_s,
            )
            return ApiError(
                401, "missing or wrong bearer token (Authorization: Bearer <token>)", kind="authentication_error"
            )
        if len(times) == self.limit + 1:
            log.warning(
                "more than %d wrong bearer tokens from %s in %g s: answered 429 until fewer",
                self.limit,
                client,
                self.window_s,
            )
        wait = self.window_s - (self.clock() - times[0])
        return ApiError(
            429,
            f"too many requests with a wrong bearer token from this address; retry in {max(wait, 1):.0f} s",
            kind="rate_limit_error",
            code="too_many_wrong_tokens",
        )

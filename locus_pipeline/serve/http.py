"""The router's HTTP plumbing: OpenAI-style errors (:class:`ApiError`, :func:`error_response`) and the request-body
limit (:class:`BodyLimitMiddleware`)."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse


class ApiError(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", **extra: Any) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.extra = status, message, kind, extra


def error_response(status: int, message: str, kind: str = "invalid_request_error", **extra: Any) -> JSONResponse:
    """OpenAI-style error body: {"error": {"message", "type", ...}}."""
    return JSONResponse({"error": {"message": message, "type": kind, **extra}}, status_code=status)


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
        await error_response(413, f"the request body is larger than {self.max_bytes:,} bytes, the limit of this router "
                                  "(locus serve --max-body-bytes)", code="request_too_large")(scope, receive, send)


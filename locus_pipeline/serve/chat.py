"""The OpenAI-compatible endpoint's logic (``POST /v1/chat/completions``): which model the request names
(``locus``, ``locus:<quality_weight>`` or a pool model), the text routed (the last user message), the decision,
then the chosen model's upstream and down its fallback chain; a dry run (--dry-run) answers with the decision
only, and without an upstream and no dry run the answer is a 503."""

from __future__ import annotations

import json
import logging
import secrets
import time
from typing import Any

from fastapi.responses import JSONResponse, Response

from locus_model.routing import RoutingError, check_quality_weight, estimate_tokens, fallback_chain
from locus_pipeline.serve.http import ApiError
from locus_pipeline.serve.router import Router
from locus_pipeline.serve.snapshot import Snapshot
from locus_pipeline.serve.upstream import UpstreamFailed, forward

log = logging.getLogger("locus.serve")

ROUTER_MODEL = "locus"


async def chat_completion(router: Router, body: Any) -> Response:
    """Route the request's last user message and forward the request (``body``, parsed JSON) to the chosen model's
    upstream, down the fallback chain on failures; the decision only in a dry run, a 503 when no upstream is
    configured."""
    if not isinstance(body, dict):
        raise ApiError(400, "the body must be a JSON object")
    snap = router.snapshot
    weight, pinned = parse_router_model(body.get("model"), snap)
    extra = body.pop("locus", None) or {}
    if not isinstance(extra, dict):
        raise ApiError(400, "'locus' must be an object {candidates?, max_cost?, max_params?, explain?}")
    text = last_user_text(body.get("messages"))
    stream = bool(body.get("stream", False))
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    prompt = "\n".join(str(m.get("content", "")) for m in body["messages"] if isinstance(m, dict))
    decision = await router.decide(
        snap, text, candidates=[pinned] if pinned else extra.get("candidates"), max_cost=extra.get("max_cost"),
        max_params=extra.get("max_params"), quality_weight=weight, input_tokens=estimate_tokens(prompt),
        output_tokens=max_tokens if isinstance(max_tokens, int) else None, need_upstream=True)
    if pinned:  # a named model answers; its embedding neighbours are its fallbacks
        decision["fallbacks"] = [snap.names[i] for i in _neighbours(router, snap, pinned)]
    if snap.dry_run:
        return _dry_run_answer(decision, stream)
    if not snap.upstreams:  # never a 200 without an upstream unless a dry run was asked for
        raise ApiError(503, f"no upstream is configured for {decision['chosen']!r} (the model this request routes "
                            "to) nor any other pool model. How to fix: start locus serve with --models-config naming "
                            f"pool models with a base_url (e.g. {decision['chosen']!r}), or with --dry-run for answers "
                            "that only name the decision; POST /route returns the decision", kind="server_error",
                       code="no_upstream_configured")
    errors = []
    for name in [decision["chosen"], *decision["fallbacks"]]:
        try:
            resp = await forward(router.client, name, snap.upstreams[name], body, stream, token=router.config.token)
        except UpstreamFailed as fail:
            router.metrics.fallbacks.labels(fail.model, fail.reason).inc()
            errors.append({"model": fail.model, "reason": fail.reason, "detail": fail.detail})
            log.warning("upstream %s failed (%s); trying the next model of the fallback chain", name, fail.detail)
            continue
        router.metrics.answers.labels(name).inc()
        if extra.get("explain") is True and isinstance(resp, JSONResponse) and resp.status_code == 200:
            answer = json.loads(resp.body)  # the routing explanation in the body too: {"locus": {...}}
            if isinstance(answer, dict):
                answer["locus"] = {**decision, "answered_by": name, "fallbacks_used": len(errors)}
                resp = JSONResponse(answer, headers={k: v for k, v in resp.headers.items() if k.startswith("x-locus")})
        resp.headers["x-locus-chosen"] = decision["chosen"]
        resp.headers["x-locus-fallbacks-used"] = str(len(errors))
        return resp
    raise ApiError(502, f"every model of the fallback chain failed: {errors}", kind="upstream_error")


def last_user_text(messages: Any) -> str:
    """The text of the last user message (string content, or the text parts of a content list)."""
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages must be a non-empty list of {role, content}")
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                content = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
            if isinstance(content, str) and content.strip():
                return content
            raise ApiError(400, "the last user message has no text to route")
    raise ApiError(400, "messages hold no user message: the router routes the last user message")


def parse_router_model(model: Any, snap: Snapshot) -> tuple[float | None, str | None]:
    """(quality_weight or None for the default, pinned pool model or None) of a request's ``model``."""
    if not isinstance(model, str) or not model:
        raise ApiError(400, f"model must be {ROUTER_MODEL!r}, '{ROUTER_MODEL}:<quality_weight>' or a pool model")
    if model == ROUTER_MODEL:
        return None, None
    if model.startswith(ROUTER_MODEL + ":"):
        try:
            w = float(model.split(":", 1)[1])
        except ValueError:
            raise ApiError(400, f"model {model!r}: the quality weight after 'locus:' must be a number in [0, 1]")
        try:
            return check_quality_weight(w), None
        except RoutingError as err:
            raise ApiError(400, f"model {model!r}: {err}")
    if model in snap.index:
        return None, model
    raise ApiError(404, f"model {model!r} is neither {ROUTER_MODEL!r}, '{ROUTER_MODEL}:<w>' nor a pool model "
                        "(GET /v1/models)", kind="invalid_request_error", code="model_not_found")


def _neighbours(router: Router, snap: Snapshot, name: str) -> list[int]:
    return fallback_chain(snap.embeddings, snap.index[name], snap.routable_rows, k=router.config.n_fallbacks).tolist()


def _dry_run_answer(decision: dict, stream: bool) -> Response:
    """A dry run (--dry-run): the decision only, marked as a dry run in the body, the headers and the text."""
    content = (f"[locus dry-run] would route to {decision['chosen']} "
               f"(fallbacks: {', '.join(decision['fallbacks']) or 'none'})")
    headers = {"x-locus-model": decision["chosen"], "x-locus-dry-run": "true"}
    base = {"id": f"locus-dryrun-{secrets.token_hex(6)}", "created": int(time.time()), "model": decision["chosen"],
            "locus": {"dry_run": True, **decision}}
    if stream:
        chunk = {**base, "object": "chat.completion.chunk",
                 "choices": [{"index": 0, "delta": {"role": "assistant", "content": content}, "finish_reason": "stop"}]}
        body = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n"
        return Response(body, media_type="text/event-stream", headers=headers)
    answer = {**base, "object": "chat.completion",
              "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
              "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}
    return JSONResponse(answer, headers=headers)

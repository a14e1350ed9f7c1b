"""The OpenAI-compatible endpoint's logic (``POST /v1/chat/completions``): which model the request names
(``locus``, ``locus:<quality_weight>`` or a pool model), the text routed (the last user message), the decision,
then the chosen model's upstream and down its fallback chain; a dry run (--dry-run) answers with the decision
only, and without an upstream and no dry run the answer is a 503."""

from __future__ import annotations

import json
import logging
import math
import secrets
import time
from functools import partial
from typing import Any, Mapping

from fastapi.responses import JSONResponse, Response

from locus_model.routing import RoutingError, check_quality_weight, estimate_tokens
from locus_pipeline.serve.gateway import Gateway
from locus_pipeline.serve.http import ApiError, error_response
from locus_pipeline.serve.snapshot import Snapshot
from locus_pipeline.serve.upstream import UpstreamFailed, forward

log = logging.getLogger("locus.serve")

ROUTER_MODEL = "locus"


async def chat_completion(gateway: Gateway, body: Any, headers: Mapping[str, str] | None = None) -> Response:
    """Route the request's last user message and forward the request (``body``, parsed JSON) to the chosen model's
    upstream, down the fallback chain on failures (as far as the request allows: :func:`fallbacks_allowed`); the
    decision only in a dry run, a 503 when no upstream is configured."""
    if not isinstance(body, dict):
        raise ApiError(400, "the body must be a JSON object")
    snap = gateway.snapshot
    weight, pinned = parse_router_model(body.get("model"), snap)
    extra = body.pop("locus", None) or {}
    if not isinstance(extra, dict):
        raise ApiError(400, "'locus' must be an object {candidates?, max_cost?, max_params?, explain?}")
    allowed = fallbacks_allowed(
        body, headers or {}, default=gateway.models.gateway.pinned_fallbacks if pinned else True
    )
    check_numbers(body)
    text = last_user_text(body.get("messages"))
    stream = bool(body.get("stream", False))
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    prompt = "\n".join(str(m.get("content", "")) for m in body["messages"] if isinstance(m, dict))
    client = gateway.identity.client_of(headers or {})
    assert client is not None, "the app authorizes the request before this: its caller is a configured client"
    routed = await gateway.decide(  # POST /route's own decision: the same candidates, caps and weight
        snap,
        text,
        candidates=extra.get("candidates"),
        max_cost=extra.get("max_cost"),
        max_params=extra.get("max_params"),
        quality_weight=weight,
        input_tokens=estimate_tokens(prompt),
        output_tokens=max_tokens if isinstance(max_tokens, int) else None,
        need_upstream=True,
        pinned=pinned,
        client=client,
    )
    decision = routed.body
    decision["fallbacks"] = _chain_after(decision, allowed, snap, extra.get("candidates"))
    if snap.dry_run:
        learned = gateway.issue(routed, decision["chosen"], client)
        response = _dry_run_answer(decision, stream)
        response.headers.update(learned)
        return response
    if not snap.upstreams:  # never a 200 without an upstream unless a dry run was asked for
        raise ApiError(
            503,
            f"no upstream is configured for {decision['chosen']!r} (the model this request routes "
            "to) nor any other pool model. How to fix: start locus serve with --models-config naming "
            f"pool models with a base_url (e.g. {decision['chosen']!r}), or with --dry-run for answers "
            "that only name the decision; POST /route returns the decision",
            kind="server_error",
            code="no_upstream_configured",
        )
    chain = [decision["chosen"], *decision["fallbacks"]]
    errors = []
    for name in chain:
        left = gateway.cooldowns.remaining(name)
        if left > 0:
            gateway.metrics.fallbacks.labels(name, "cooldown").inc()
            errors.append(
                {
                    "model": name,
                    "reason": "cooldown",
                    "status": 503,
                    "detail": f"cooled down after repeated failures, tried again in {left:.0f} s",
                }
            )
            continue
        assert gateway.client is not None, "the app's lifespan opens the upstream client before requests are served"
        try:
            resp = await forward(
                gateway.client,
                name,
                snap.upstreams[name],
                body,
                stream,
                token=gateway.config.token,
                on_usage=partial(gateway.record_usage, snap, name),
                settings=gateway.models.gateway,
            )
        except UpstreamFailed as fail:
            gateway.metrics.fallbacks.labels(fail.model, fail.reason).inc()
            gateway.cooldowns.failed(name)
            errors.append({"model": fail.model, "reason": fail.reason, "status": fail.status, "detail": fail.detail})
            log.warning("upstream %s failed (%s); trying the next model of the fallback chain", name, fail.detail)
            continue
        gateway.cooldowns.succeeded(name)
        gateway.metrics.answers.labels(name).inc()
        learned = gateway.issue(routed, name, client)  # the answer's request id: its outcome grades `name`
        if extra.get("explain") is True and isinstance(resp, JSONResponse) and resp.status_code == 200:
            answer = json.loads(bytes(resp.body))  # the routing explanation in the body too: {"locus": {...}}
            if isinstance(answer, dict):
                answer["locus"] = {
                    **decision,
                    "answered_by": name,
                    "fallbacks_used": len(errors),
                    "skipped": errors,
                }  # why each model before it did not answer
                resp = JSONResponse(answer, headers={k: v for k, v in resp.headers.items() if k.startswith("x-locus")})
        resp.headers["x-locus-chosen"] = decision["chosen"]
        resp.headers["x-locus-serves"] = decision["serves"]["by"]
        resp.headers["x-locus-fallbacks-used"] = str(len(errors))
        resp.headers.update(learned)
        return resp
    if len(chain) == 1:  # no fallback allowed: the upstream's own failure, scrubbed
        failure = errors[0]
        how = (
            'pinned requests do not fall back unless asked: send "fallbacks": true (or a list of pool models), '
            f"the header {FALLBACKS_HEADER}: true, or set gateway.pinned_fallbacks in the models config"
            if pinned
            else "fallbacks were turned off by this request"
        )
        what = f"is {failure['detail']}" if failure["reason"] == "cooldown" else f"failed: {failure['detail']}"
        headers = {
            "x-locus-model": failure["model"],
            "x-locus-chosen": failure["model"],
            "x-locus-fallbacks-used": "0",
            "x-locus-serves": decision["serves"]["by"],
        }
        if failure["reason"] == "cooldown":
            headers["retry-after"] = str(math.ceil(gateway.cooldowns.remaining(failure["model"])))
        return JSONResponse(
            {
                "error": {
                    "message": f"the upstream of {failure['model']} {what} ({how})",
                    "type": "upstream_error",
                    "code": failure["reason"],
                }
            },
            status_code=failure["status"],
            headers=headers,
        )
    if all(e["reason"] == "cooldown" for e in errors):  # as the pinned 503: when to try again (the soonest back)
        soonest = min(gateway.cooldowns.remaining(e["model"]) for e in errors)
        resp = error_response(
            503,
            f"every model of the fallback chain is cooled down after repeated failures: {errors}",
            kind="upstream_error",
            code="cooldown",
        )
        resp.headers["retry-after"] = str(max(1, math.ceil(soonest)))
        return resp
    raise ApiError(502, f"every model of the fallback chain failed: {errors}", kind="upstream_error")


FALLBACKS_HEADER = "x-locus-fallbacks"


def fallbacks_allowed(body: dict, headers: Mapping[str, str], *, default: bool) -> bool | list[str]:
    """Whether the request may fall back to other models when its model's upstream fails, or to which ones: the
    body's ``fallbacks`` (LiteLLM's name: true, false or a list of pool models) or ``disable_fallbacks: true``, else
    the ``x-locus-fallbacks`` header (true / false), else ``default`` (on for a routed request; the models config's
    ``gateway.pinned_fallbacks`` for a pinned one). Both fields leave the body: they are not forwarded."""
    given, disable = body.pop("fallbacks", None), body.pop("disable_fallbacks", None)
    if disable is not None and not isinstance(disable, bool):
        raise ApiError(400, f"disable_fallbacks={disable!r} must be true or false")
    if disable:
        return False
    if given is not None:
        if isinstance(given, bool) or (isinstance(given, list) and all(isinstance(g, str) for g in given)):
            return given
        raise ApiError(400, "fallbacks must be true, false or a list of pool model names")
    header = headers.get(FALLBACKS_HEADER)
    if header is None:
        return default
    if header.strip().lower() not in ("true", "false", "1", "0"):
        raise ApiError(400, f"the header {FALLBACKS_HEADER}: {header[:40]!r} must be true or false")
    return header.strip().lower() in ("true", "1")


def _chain_after(decision: dict, allowed: bool | list[str], snap: Snapshot, candidates: Any = None) -> list[str]:
    """The models tried after the chosen one: its fallback chain, none, or the request's own list (pool models
    with an upstream, among the request's ``candidates`` when it gives them)."""
    if allowed is True:
        return decision["fallbacks"]
    if allowed is False:
        return []
    unknown = [n for n in allowed if n not in snap.index or (snap.upstreams and n not in snap.upstreams)]
    if unknown:
        raise ApiError(400, f"fallbacks {unknown[:5]} are not pool models with an upstream (GET /v1/models)")
    outside = [n for n in allowed if isinstance(candidates, list) and n not in candidates]
    if outside:
        raise ApiError(
            400,
            f"fallbacks {outside[:5]} are not among the request's candidates: a request's "
            "fallbacks stay within its candidates (add them to locus.candidates, or drop them)",
        )
    return [n for n in dict.fromkeys(allowed) if n != decision["chosen"]]


# OpenAI's ranges for the numbers of a chat request: (integer only, low, high)
NUMBER_RANGES = {
    "max_tokens": (True, 1, 10**7),
    "max_completion_tokens": (True, 1, 10**7),
    "n": (True, 1, 128),
    "temperature": (False, 0, 2),
    "top_p": (False, 0, 1),
    "presence_penalty": (False, -2, 2),
    "frequency_penalty": (False, -2, 2),
    "top_logprobs": (True, 0, 20),
    "seed": (True, -(2**63), 2**63 - 1),
}


def check_numbers(body: dict) -> None:
    """A 400 naming the field and its range for a number of the request outside OpenAI's range (a 400-digit
    max_tokens is refused here, before anything converts it to a float)."""
    for key, (integer, low, high) in NUMBER_RANGES.items():
        value = body.get(key)
        if value is None:
            continue
        kind = "an integer" if integer else "a number"
        ok = isinstance(value, int) if integer else isinstance(value, (int, float))
        if not ok or isinstance(value, bool) or not low <= value <= high:  # a NaN fails the comparison too
            shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:20] + f"... ({len(repr(value))} characters)"
            raise ApiError(400, f"{key}={shown} must be {kind} in [{low}, {high}]", param=key, code="invalid_value")


def last_user_text(messages: Any) -> str:
    """The text of the last user message (string content, or the text parts of a content list)."""
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages must be a non-empty list of {role, content}")
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                content = "\n".join(
                    str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text"
                )
            if isinstance(content, str) and content.strip():
                return content
            raise ApiError(400, "the last user message has no text to route")
    raise ApiError(400, "messages hold no user message: the gateway routes the last user message")


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
    raise ApiError(
        404,
        f"model {model!r} is neither {ROUTER_MODEL!r}, '{ROUTER_MODEL}:<w>' nor a pool model (GET /v1/models)",
        kind="invalid_request_error",
        code="model_not_found",
    )


def _dry_run_answer(decision: dict, stream: bool) -> Response:
    """A dry run (--dry-run): the decision only, marked as a dry run in the body, the headers and the text."""
    content = (
        f"[locus dry-run] would route to {decision['chosen']} (fallbacks: {', '.join(decision['fallbacks']) or 'none'})"
    )
    headers = {
        "x-locus-model": decision["chosen"],
        "x-locus-dry-run": "true",
        "x-locus-serves": decision["serves"]["by"],
    }
    base = {
        "id": f"locus-dryrun-{secrets.token_hex(6)}",
        "created": int(time.time()),
        "model": decision["chosen"],
        "locus": {"dry_run": True, **decision},
    }
    if stream:
        chunk = {
            **base,
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        }
        body = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n"
        return Response(body, media_type="text/event-stream", headers=headers)
    answer = {
        **base,
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }
    return JSONResponse(answer, headers=headers)

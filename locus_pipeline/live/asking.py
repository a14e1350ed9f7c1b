"""Asking a live endpoint one question (``locus onboard --endpoint``): the call through ``locus serve``'s upstream
client with retries, its answer read as untrusted input (types, sizes, token counts), and what the call costs at the
entry's prices, never less than its tokens say."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

from locus_model.routing.costs import estimate_tokens
from locus_pipeline.intake.messages import printable
from locus_pipeline.serve.config import Upstream
from locus_pipeline.serve.upstream import UpstreamFailed, forward

MAX_ANSWER_CHARS = 200_000  # an answer longer than this fails its call (MMLU-Pro answers run to a few thousand)
MAX_TOKENS = 10_000_000  # a token count past this in ``usage`` fails its call (no call of 4,000 output tokens has it)


@dataclass(frozen=True)
class Answer:
    """One endpoint answer as read: the text and token counts (``usage``: only non-negative integers), or the error
    that fails the call. Every field of the body is untrusted: its type, size and counts are checked here."""

    text: str | None
    usage: dict
    error: str = ""


def read_answer(status_code: int, body: bytes) -> Answer:
    """An endpoint's answer to one question (the HTTP status and the raw body) checked as untrusted input: a body that
    is not JSON, a ``content`` that is not a string (or too long, or holding a lone surrogate), token counts that are
    not non-negative integers each fail the call with the reason; nothing raises."""
    shown = body[:300].decode("utf-8", "replace")
    if status_code != 200:
        return Answer(None, {}, f"HTTP {status_code}: {printable(shown)}")
    try:
        data = json.loads(body)
        text = data["choices"][0]["message"]["content"]
    except (ValueError, RecursionError):
        return Answer(None, {}, f"the answer is not JSON: {printable(shown)}")
    except (KeyError, IndexError, TypeError):
        return Answer(None, {}, f"no choices[0].message.content in the answer: {printable(shown)}")
    text = "" if text is None else text
    if not isinstance(text, str):
        return Answer(None, {}, f"choices[0].message.content is a {type(text).__name__}, not text")
    if len(text) > MAX_ANSWER_CHARS:
        return Answer(None, {}, f"an answer of {len(text):,} characters, over {MAX_ANSWER_CHARS:,}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return Answer(None, {}, "the answer holds a lone surrogate (not valid Unicode text)")
    usage = data.get("usage") if isinstance(data, dict) else None
    usage = {} if usage is None else usage
    if not isinstance(usage, dict):
        return Answer(None, {}, f"usage is a {type(usage).__name__}, not an object of token counts")
    counts = {}
    for key in ("prompt_tokens", "completion_tokens"):
        value = usage.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOKENS:
            return Answer(
                None,
                {},
                f"usage.{key} is {printable(repr(value))[:60]}, not a count of tokens "
                f"(an integer from 0 to {MAX_TOKENS:,})",
            )
        counts[key] = value
    return Answer(text, counts)


async def ask_one(client, name: str, upstream: Upstream, prompt: str, retries: int) -> tuple[Answer, int]:
    """(the answer or the last error, calls the endpoint answered with a 200 that failed anyway: they may be billed)
    of one question, retried on the failures serve moves on from and on a bad answer."""
    body = {"messages": [{"role": "user", "content": prompt}], "temperature": 0, "max_tokens": 4000}
    answer, billed = Answer(None, {}, ""), 0
    for attempt in range(retries + 1):
        if attempt:
            await asyncio.sleep(min(8.0, 0.5 * 2 ** (attempt - 1)))
        try:
            response = await forward(client, name, upstream, body, stream=False)
        except UpstreamFailed as fail:
            answer = Answer(None, {}, f"{fail.reason}: {printable(fail.detail)}")
            billed += fail.reason == "bad_response"  # a 200 whose body is not JSON: answered, maybe billed
            continue
        except (ValueError, RecursionError) as err:  # an answer the relay cannot even re-encode (a lone surrogate)
            answer, billed = Answer(None, {}, f"an answer that is not valid text ({type(err).__name__})"), billed + 1
            continue
        answer = read_answer(response.status_code, bytes(response.body))
        if answer.text is not None:
            return answer, billed
        if response.status_code == 200:
            billed += 1
        elif response.status_code in (400, 401, 403, 404):  # not transient: retrying asks the same of a refusal
            break
    return answer, billed


def call_cost(costs, prompt: str, text: str, usage: dict) -> float:
    """USD of one call: the endpoint's prices times its reported token counts (read_answer: integers >= 0), each
    estimated from the text when not reported or reported as 0 (a count never makes a call cost less than nothing)."""
    if costs is None:
        return 0.0
    tokens_in = _count(usage.get("prompt_tokens")) or estimate_tokens(prompt)
    tokens_out = _count(usage.get("completion_tokens")) or estimate_tokens(text)
    return float(costs.costs(tokens_in, tokens_out)[0])


def _count(value) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


__all__ = ["Answer", "MAX_ANSWER_CHARS", "MAX_TOKENS", "ask_one", "call_cost", "read_answer"]

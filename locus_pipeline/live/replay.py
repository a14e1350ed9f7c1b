"""``locus replay --model NAME``: an OpenAI-compatible endpoint that answers each MMLU-Pro question as the recorded
model NAME did (its letter in data/mmlu-pro/answers.parquet), for tests and demos of live onboarding.

The question is recognised from the prompt's text (locus_model.data.mmlu_pro_bank.question_prompt's form, the last
user message); the reply is "The answer is (X)." with the recorded letter, or "no answer given" where the model's
harness extracted none (graded wrong). A prompt that is not an MMLU-Pro question, or one the model has no record
of, gets a 400 with an OpenAI-style error body.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from locus_model.data.mmlu_pro_bank import AnswerBank, query_of_prompt, read_answer_bank
from locus_model.routing.costs import estimate_tokens
from locus_pipeline.home_location import REPO_ROOT

MMLU_PRO = REPO_ROOT / "data" / "mmlu-pro"
NO_ANSWER = "no answer given"


def _error(status: int, message: str, code: str) -> JSONResponse:
    return JSONResponse(
        {"error": {"message": message, "type": "invalid_request_error", "code": code}}, status_code=status
    )


def replay_text(bank: AnswerBank, model: str, query_ids: dict[str, str], prompt: str) -> str | JSONResponse:
    """The recorded answer text for a prompt, or the 400 that says why there is none."""
    query = query_of_prompt(prompt)
    query_id = query_ids.get(query) if query is not None else None
    if query_id is None:
        return _error(
            400,
            "the prompt is not an MMLU-Pro question of the bank (locus replay answers only prompts "
            "built by locus_model.data.mmlu_pro_bank.question_prompt)",
            "unknown_prompt",
        )
    try:
        letter = bank.recorded_letter(model, query_id)
    except KeyError:
        return _error(400, f"{model} has no recorded answer to {query_id} (its published file lacks it)", "no_record")
    return f"The answer is ({letter})." if letter else NO_ANSWER


def replay_app(model: str, data: str | Path = MMLU_PRO) -> FastAPI:
    bank = read_answer_bank(data)
    known = sorted(bank.recorded["model"].astype(str).unique())
    if model not in known:
        raise ValueError(f"--model {model!r} is not a recorded MMLU-Pro model; use one of: {', '.join(known)}")
    query_ids = dict(zip(bank.questions["query"], bank.questions["query_id"]))
    app = FastAPI(title=f"locus replay: {model}")
    recorded = bank.recorded[bank.recorded["model"].astype(str) == model]
    app.state.recorded, app.state.questions = (
        int(recorded["query_id"].nunique()),
        int(bank.questions["query_id"].nunique()),
    )

    @app.get("/v1/models")
    def models() -> dict:
        return {"object": "list", "data": [{"id": model, "object": "model", "owned_by": "mmlu-pro-replay"}]}

    @app.get("/healthz")
    def healthz() -> dict:
        return {"status": "ok", "model": model}

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        try:
            body = await request.json()
            users = [m for m in body["messages"] if m.get("role") == "user"]
            prompt = users[-1]["content"]
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            return _error(400, "expected a JSON body with messages: [{role: user, content: <prompt>}]", "bad_request")
        text = replay_text(bank, model, query_ids, prompt if isinstance(prompt, str) else "")
        if isinstance(text, JSONResponse):
            return text
        usage = {"prompt_tokens": estimate_tokens(prompt), "completion_tokens": estimate_tokens(text)}
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {**usage, "total_tokens": sum(usage.values())},
        }

    return app


def replay(model: str, *, host: str = "127.0.0.1", port: int = 8001, data: str | Path = MMLU_PRO) -> None:
    app = replay_app(model, data)
    print(startup_summary(app, model, host, port), flush=True)
    uvicorn.run(app, host=host, port=port, log_level="warning")


def startup_summary(app: FastAPI, model: str, host: str, port: int) -> str:
    """What `locus replay` prints at start-up: the model it answers as, from how many recorded answers, where."""
    return (
        f"locus replay: http://{host}:{port}/v1 answers as {model} (its {app.state.recorded:,} recorded answers "
        f"to {app.state.questions:,} MMLU-Pro questions; other prompts get a 400)\n"
        f"  use it as an upstream: base_url http://{host}:{port}/v1, model {model} (no API key)"
    )

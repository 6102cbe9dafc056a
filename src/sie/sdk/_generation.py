"""What both clients share for generation: the request bodies of ``/v1/generate``, the OpenAI chat and
responses routes (only the fields a caller set), the SSE payloads of a stream, and the typed results.

Generation is not idempotent: a request that may have reached the server is never sent again (the
clients' retry policy for these calls retries only what is refused before any work: a cold model, a
full queue, a connection that never opened).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final, cast

from sie.sdk._errors import RequestError, ServerError
from sie.sdk._fields import given
from sie.sdk._types import GenerateResult

_DONE: Final = "[DONE]"
CHAT_PATH: Final = "/v1/chat/completions"
RESPONSES_PATH: Final = "/v1/responses"


def generate_path(model: str) -> str:
    """``/v1/generate/{id}`` with the SIE-safe id (``/`` written ``__``), as the public SDK sends it."""
    return f"/v1/generate/{model.replace('/', '__')}"


def generate_body(
    prompt: str,
    max_new_tokens: int,
    *,
    stream: bool,
    temperature: float | None,
    top_p: float | None,
    stop: Sequence[str] | None,
    frequency_penalty: float | None,
    presence_penalty: float | None,
    grammar: Mapping[str, Any] | None,
    seed: int | None,
    logit_bias: Mapping[str, float] | None,
    options: Mapping[str, Any] | None,
    logprobs: bool = False,
    top_logprobs: int | None = None,
) -> dict[str, Any]:
    """The native body: the fields a caller set; ``stream`` only when streaming, ``top_logprobs`` only
    with ``logprobs``, as the public SDK sends them."""
    fields = {
        "temperature": temperature,
        "top_p": top_p,
        "stop": list(stop) if stop is not None else None,
        "frequency_penalty": frequency_penalty,
        "presence_penalty": presence_penalty,
        "grammar": dict(grammar) if grammar is not None else None,
        "seed": seed,
        "logit_bias": dict(logit_bias) if logit_bias is not None else None,
        "options": dict(options) if options is not None else None,
        "logprobs": True if logprobs else None,
        "top_logprobs": top_logprobs if logprobs else None,
        "stream": True if stream else None,
    }
    return {"prompt": prompt, "max_new_tokens": max_new_tokens, **given(fields)}


def chat_body(
    model: str,
    messages: Sequence[Mapping[str, Any]],
    stream: bool,
    fields: Mapping[str, Any],
    extra_body: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """OpenAI's body: ``model`` as given (with its ``/``), the fields a caller set, ``extra_body`` last."""
    body: dict[str, Any] = {"model": model, "messages": list(messages), **given(fields)}
    if stream:
        body["stream"] = True
    return body | dict(extra_body or {})


def responses_body(
    model: str,
    input: str | Sequence[Mapping[str, Any]],
    max_output_tokens: int | None,
    temperature: float | None,
    top_p: float | None,
    seed: int | None,
) -> dict[str, Any]:
    fields = {
        "max_output_tokens": max_output_tokens,
        "temperature": temperature,
        "top_p": top_p,
        "seed": seed,
    }
    return {"model": model, "input": input if isinstance(input, str) else list(input), **given(fields)}


END: Final = object()  # what ``sse_line`` answers for ``data: [DONE]``


def sse_line(line: str) -> Any:
    """One SSE line's chunk (checked by ``checked_chunk``), ``END`` at ``[DONE]``, or None for a line
    that carries none (a ``: keep-alive`` comment, a blank, ``event:``/``id:``)."""
    if not line.startswith("data:"):
        return None
    data = line[5:].removeprefix(" ").rstrip("\r")
    if data == _DONE:
        return END
    try:
        chunk = json.loads(data)
    except json.JSONDecodeError as error:
        raise RequestError(f"Malformed SSE chunk from server: {error}") from None
    return checked_chunk(chunk)


def checked_chunk(chunk: Any) -> Any:
    """A chunk, or the ``ServerError`` its ``error`` stands for (a failure after the stream began)."""
    error = chunk.get("error") if isinstance(chunk, dict) else None
    if not isinstance(error, dict):
        return chunk
    request_id = chunk.get("request_id") or chunk.get("id")
    param = error.get("param")
    raise ServerError(
        str(error.get("message") or "stream error"),
        str(error.get("code") or "error"),
        param=param if isinstance(param, str) else None,
        request={"id": request_id} if isinstance(request_id, str) else None,
    )


def generate_result(data: Any) -> GenerateResult:
    """The typed result of a JSON answer; ``model`` and ``text`` must be strings, as the public SDK holds."""
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("text"), str)
        or not isinstance(data.get("model"), str)
    ):
        raise RequestError("Generate response missing string 'model'/'text' field")
    keys = ("model", "text", "finish_reason", "usage", "ttft_ms", "tpot_ms", "logprobs")
    return cast(GenerateResult, {key: data[key] for key in keys if data.get(key) is not None})

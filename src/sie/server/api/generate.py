"""``POST /v1/generate/{model}``: the native generation route, one result or SIE-native SSE chunks.

The path holds the SIE-safe id (``Qwen__Qwen3-0.6B``: ``/`` written ``__``), as the public gateway's
contract has it, or the catalogue id itself (the public server refuses that with 400). The body is the public request model
(``wire.generation.GenerateRequest``), JSON or msgpack; the result is ``{model, text, finish_reason,
usage, ttft_ms, tpot_ms}``, in JSON, or msgpack when the ``Accept`` header names it. With ``stream: true``
every chunk is ``{request_id, seq, text_delta, done}`` and the last one carries ``finish_reason``,
``usage`` and ``ttft_ms`` (or ``error``, when the generation failed after its first chunk).
"""

from __future__ import annotations

import base64
import binascii
import uuid
from collections.abc import AsyncIterator
from typing import Any, Final

import msgspec
from fastapi import Request, Response

from sie import __version__
from sie.adapters.batch import ImageData
from sie.adapters.generation.grammar import GrammarSpec
from sie.adapters.generation.sampling import TokenLogprob
from sie.catalog.errors import InvalidInput
from sie.engine.ops.generate import Delta, Finished, GenerationAsk, Running
from sie.errors import told
from sie.http.parts import model_path
from sie.http.routes import PostRoute
from sie.server.api.native import engine_of, model_of
from sie.server.api.sse import DONE, KEEP_ALIVE, data, event_stream, with_keep_alive
from sie.wire import codec
from sie.wire.generation import (
    ChunkError,
    GenerateChunk,
    GenerateImage,
    GenerateRequest,
    GenerateResponse,
    GenerateUsage,
    GrammarBody,
)

# What ``options`` may set besides the typed fields (which win over it).
_OPTIONS: Final = frozenset(
    {"temperature", "top_p", "top_k", "seed", "frequency_penalty", "presence_penalty"}
)


def catalog_id(path_id: str) -> str:
    """The catalogue id of a path id: the SIE-safe form (``Qwen__Qwen3-0.6B``), or the id itself
    (the public server refuses a ``/`` here; this one takes it as every other route does)."""
    return path_id.replace("__", "/")


def grammar_of(body: GrammarBody | None) -> tuple[GrammarSpec | None, bool]:
    if body is None:
        return None, False
    given = [
        spec
        for spec in (
            GrammarSpec.json_schema(body.json_schema) if body.json_schema is not None else None,
            GrammarSpec("regex", body.regex) if body.regex is not None else None,
            GrammarSpec("ebnf", body.ebnf) if body.ebnf is not None else None,
        )
        if spec is not None
    ]
    if len(given) != 1:
        raise InvalidInput("'grammar' must set exactly one of 'json_schema', 'regex' and 'ebnf'")
    if given[0].kind == "ebnf" and body.strict:
        raise InvalidInput("'grammar.strict' is not supported with 'ebnf': its output cannot be verified")
    return given[0], bool(body.strict)


def logit_bias_of(bias: dict[str, float] | None) -> dict[int, float]:
    """OpenAI's token-id strings as ids (the model's vocabulary is checked when the model is known)."""
    if not bias:
        return {}
    try:
        return {int(token): value for token, value in bias.items()}
    except ValueError:
        raise InvalidInput("'logit_bias' keys must be token ids (integers as strings)") from None


def ask_of(body: GenerateRequest) -> GenerationAsk:
    options = msgspec.structs.asdict(body.options) if body.options is not None else {}
    logprobs = bool(body.logprobs) or body.top_logprobs is not None
    typed = {
        "temperature": body.temperature,
        "top_p": body.top_p,
        "seed": body.seed,
        "frequency_penalty": body.frequency_penalty,
        "presence_penalty": body.presence_penalty,
        "logit_bias": logit_bias_of(body.logit_bias) or None,
        "top_logprobs": (body.top_logprobs or 0) if logprobs else None,
    }
    grammar, strict = grammar_of(body.grammar)
    images = tuple(_image(image, i) for i, image in enumerate(body.images or ()))
    # With images the prompt is one user turn beside them, through the model's chat template (as the
    # public server renders it); without, it is the raw text.
    turn = [
        {
            "role": "user",
            "content": [{"type": "image"}] * len(images) + [{"type": "text", "text": body.prompt}],
        }
    ]
    return GenerationAsk(
        max_new_tokens=body.max_new_tokens,
        prompt=None if images else body.prompt,
        messages=turn if images else None,
        images=images,
        sampling={k: v for k, v in options.items() if v is not None}
        | {k: v for k, v in typed.items() if v is not None},
        stop=tuple(body.stop or ()),
        grammar=grammar,
        strict=strict,
    )


MAX_IMAGE_BYTES: Final = 16 * 1024 * 1024  # decoded, per image (the public bound)


def _image(image: GenerateImage, index: int) -> ImageData:
    try:
        data = base64.b64decode(image.data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidInput(f"images[{index}].data is not standard base64: {exc}") from None
    if len(data) > MAX_IMAGE_BYTES:
        raise InvalidInput(f"images[{index}] holds {len(data)} bytes; at most {MAX_IMAGE_BYTES} decoded")
    return ImageData(data, image.format.lower() if image.format else None)


def usage_of(finished: Finished) -> GenerateUsage:
    total = finished.prompt_tokens + finished.completion_tokens
    return GenerateUsage(finished.prompt_tokens, finished.completion_tokens, total)


def per_token_ms(finished: Finished) -> float | None:
    """The time per output token after the first (``tpot_ms``)."""
    if finished.completion_tokens < 2:
        return None
    return (finished.elapsed_s - finished.ttft_s) * 1000 / (finished.completion_tokens - 1)


async def generate(request: Request) -> Response:
    engine = engine_of(request)
    model = catalog_id(model_of(request))
    engine.require_generator(model)
    raw = await request.body()
    body = codec.decode(raw, request.headers.get("content-type"), GenerateRequest)
    running = await engine.generate(model, ask_of(body))
    headers = {"X-SIE-Server-Version": __version__}
    if body.stream:
        return event_stream(running, _Chunks().render, headers)
    finished, steps = await running.finished_with_logprobs()
    result = GenerateResponse(
        model=model,
        text=finished.text,
        finish_reason=finished.finish_reason,
        usage=usage_of(finished),
        ttft_ms=finished.ttft_s * 1000,
        tpot_ms=per_token_ms(finished),
        logprobs=native_logprobs(running, tuple(steps))
        if body.logprobs or body.top_logprobs is not None
        else None,
    )
    as_json = not codec.is_msgpack(request.headers.get("accept"))  # JSON unless msgpack is asked for
    return Response(
        codec.encode(result, as_json=as_json), media_type=codec.media_type(as_json=as_json), headers=headers
    )


def native_logprobs(running: Running, logprobs: tuple[TokenLogprob, ...]) -> list[dict[str, Any]] | None:
    """The native result's (and chunk's) ``logprobs``: each token with its text, id, log-probability
    and its top alternatives; None when none were asked for or made."""
    if not logprobs:
        return None
    piece = running.piece
    return [
        {
            "token": piece(one.token),
            "token_id": one.token,
            "logprob": one.logprob,
            "top_logprobs": [{"token": piece(t), "token_id": t, "logprob": lp} for t, lp in one.top],
        }
        for one in logprobs
    ]


class _Chunks:
    """The native chunks of one stream, numbered from 0."""

    def __init__(self) -> None:
        self._id = f"gen-{uuid.uuid4().hex}"
        self._seq = 0

    def _chunk(self, **fields: Any) -> bytes:
        chunk = GenerateChunk(request_id=self._id, seq=self._seq, **fields)
        self._seq += 1
        return data(msgspec.json.encode(chunk))

    async def render(self, running: Running) -> AsyncIterator[bytes]:
        try:
            async for event in with_keep_alive(running.events()):
                if event is None:
                    yield KEEP_ALIVE
                elif isinstance(event, Delta):
                    yield self._chunk(
                        text_delta=event.text, done=False, logprobs=native_logprobs(running, event.logprobs)
                    )
                else:
                    yield self._chunk(
                        text_delta="",
                        done=True,
                        finish_reason=event.finish_reason,
                        usage=usage_of(event),
                        ttft_ms=event.ttft_s * 1000,
                    )
        except Exception as exc:  # after the first chunk the status is sent: the error is a chunk
            rule, message = told(exc)
            yield self._chunk(text_delta="", done=True, error=ChunkError(str(rule.code), message))
        yield DONE


ROUTES = (PostRoute(model_path("/v1/generate"), generate, ("generate",), GenerateRequest, GenerateResponse),)

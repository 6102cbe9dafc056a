"""OpenAI's generation routes: ``POST /v1/chat/completions``, ``/v1/completions`` and ``/v1/responses``,
each whole or streamed (``stream: true``), so the ``openai`` client and the public SDK's chat methods
work unchanged.

The model is the catalogue id (``Qwen/Qwen3-0.6B``, a ``:profile`` variant included). Chat renders the
messages through the model's own chat template (with the profile's ``chat_template_kwargs``, overlaid
by the request's); ``response_format`` (JSON Schema, JSON object, and the public gateway's ``regex``
and ``grammar`` types) and SGLang's ``regex`` and ``ebnf`` fields are enforced while decoding;
``tools`` reach the template, calls in the model's ``<tool_call>`` format come back as ``tool_calls``
(``tool_choice`` ``required`` or a named function forces one, its arguments held to the tool's schema
by the grammar). A stream sends the role first,
then content deltas, then the finish reason, then (``stream_options.include_usage``) the usage on a
chunk with no choices, then ``[DONE]``, as OpenAI does. Errors are OpenAI's ``{"error": {...}}``.
A cold model is loaded before answering: OpenAI clients do not honour ``Retry-After``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, Final, TypeVar

import msgspec
from fastapi import Request, Response

from sie import __version__
from sie.adapters.batch import ImageData
from sie.adapters.generation import tool_calls
from sie.adapters.generation.grammar import GrammarSpec
from sie.adapters.generation.sampling import TokenLogprob
from sie.catalog.errors import InvalidInput
from sie.engine.ops.generate import Delta, Finished, GenerationAsk, Running
from sie.errors import told
from sie.http.errors import openai_error_response
from sie.http.routes import PostRoute
from sie.server.api.data_uri import BadImageInput, image_from_data_uri
from sie.server.api.generate import logit_bias_of
from sie.server.api.native import engine_of
from sie.server.api.openai_compat import OpenAIError
from sie.server.api.sse import DONE, KEEP_ALIVE, data, event_stream, with_keep_alive
from sie.wire import codec
from sie.wire.codec import WireDecodeError
from sie.wire.generation import (
    ChatCompletionRequest,
    ChatMessage,
    CompletionRequest,
    ContentPart,
    ResponseFormat,
    ResponsesRequest,
)

T = TypeVar("T", bound=msgspec.Struct)

_HEADERS: Final = {"X-SIE-Server-Version": __version__}
_FINISH: Final = {"stop": "stop", "length": "length"}
# Images one chat may carry (each is decoded and resized within the model's pixel bounds; the body
# limit bounds their bytes).
MAX_CHAT_IMAGES: Final = 16


def _json(value: Any, status: int = 200) -> Response:
    return Response(msgspec.json.encode(value), status_code=status, media_type=codec.JSON, headers=_HEADERS)


def _stops(stop: str | list[str] | None) -> tuple[str, ...]:
    if stop is None:
        return ()
    return (stop,) if isinstance(stop, str) else tuple(stop)  # at most 4: the wire struct's bound


def _decoded(raw: bytes, into: type[T]) -> T:
    """The body as ``into``; a field the route does not know is refused (400 ``unsupported_field``,
    as the public gateway does) rather than silently ignored. The structs forbid unknown fields, so
    only a body msgspec refused is read again, to name the field."""
    try:
        return codec.decode(raw, codec.JSON, into, strict=False)
    except WireDecodeError:
        unknown = _unknown_fields(raw, into)
        if unknown:
            raise OpenAIError(400, f"Unsupported field '{unknown[0]}'", "unsupported_field") from None
        raise


def _unknown_fields(raw: bytes, into: type[msgspec.Struct]) -> list[str]:
    try:
        fields = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return []
    if not isinstance(fields, dict):
        return []
    return sorted(set(fields) - {f.encode_name for f in msgspec.structs.fields(into)})


def _format_grammar(
    fmt: ResponseFormat | None, regex: str | None, ebnf: str | None
) -> tuple[GrammarSpec | None, bool]:
    """``response_format`` and SGLang's ``regex`` / ``ebnf`` extensions: at most one constraint."""
    given: list[tuple[GrammarSpec, bool]] = []
    schema = fmt.json_schema.schema if fmt is not None and fmt.json_schema is not None else None
    if fmt is not None and fmt.type == "json_schema" and schema is not None:
        assert fmt.json_schema is not None
        given.append((GrammarSpec.json_schema(schema), bool(fmt.json_schema.strict)))
    elif fmt is not None and fmt.type in ("regex", "grammar"):
        source = fmt.regex if fmt.type == "regex" else fmt.grammar
        if source is None:
            raise InvalidInput(f"response_format of type '{fmt.type}' needs its '{fmt.type}' field")
        given.append((GrammarSpec("regex" if fmt.type == "regex" else "ebnf", source), False))
    elif fmt is not None and fmt.type != "text":  # json_object, or a json_schema without its schema
        given.append((GrammarSpec("json_object", ""), False))
    if regex is not None:
        given.append((GrammarSpec("regex", regex), False))
    if ebnf is not None:
        given.append((GrammarSpec("ebnf", ebnf), False))
    if len(given) > 1:
        raise InvalidInput("Set one of 'response_format', 'regex' and 'ebnf'")
    return given[0] if given else (None, False)


def _sampling(body: ChatCompletionRequest | CompletionRequest, top_logprobs: int | None) -> dict[str, Any]:
    return {
        "temperature": body.temperature,
        "top_p": body.top_p,
        "top_k": body.top_k,
        "seed": body.seed,
        "frequency_penalty": body.frequency_penalty,
        "presence_penalty": body.presence_penalty,
        "repetition_penalty": body.repetition_penalty,
        "logit_bias": logit_bias_of(body.logit_bias) or None,
        "top_logprobs": top_logprobs,
    }


def _content(message: ChatMessage, images: list[ImageData]) -> str | list[dict[str, Any]] | None:
    """Text parts joined into one string, as every template here reads them; parts that carry language
    codes go to the template as parts, since that template (TranslateGemma's) reads them from there.
    A message with ``image_url`` parts goes as parts, each image an ``{"type": "image"}`` placeholder
    of the template's, its bytes added to ``images`` in order."""
    if message.content is None or isinstance(message.content, str):
        return message.content
    if any(part.type == "image_url" for part in message.content):
        return [_image_or_text(part, images) for part in message.content]
    for part in message.content:
        if part.type != "text":
            raise InvalidInput(f"Content parts of type '{part.type}' are not supported by this model")
    if any(p.source_lang_code is not None or p.target_lang_code is not None for p in message.content):
        return [
            {key: value for key, value in msgspec.structs.asdict(p).items() if value is not None}
            for p in message.content
        ]
    return "".join(part.text or "" for part in message.content)


def _image_or_text(part: ContentPart, images: list[ImageData]) -> dict[str, Any]:
    if part.type == "text":
        return {"type": "text", "text": part.text or ""}
    if part.type != "image_url":
        raise InvalidInput(f"Content parts of type '{part.type}' are not supported by this model")
    if len(images) == MAX_CHAT_IMAGES:
        raise InvalidInput(f"A chat may carry at most {MAX_CHAT_IMAGES} images")
    url = (part.image_url or {}).get("url")
    where = f"image {len(images)}"
    if not isinstance(url, str):
        raise InvalidInput(f"{where}: an image_url part needs image_url.url, a data URI")
    try:
        image = image_from_data_uri(url, where)
    except BadImageInput as exc:
        raise InvalidInput(str(exc)) from None
    images.append(ImageData(image.data, image.format))
    return {"type": "image"}


def _messages(messages: list[ChatMessage]) -> tuple[list[dict[str, Any]], tuple[ImageData, ...]]:
    """The messages as the chat template reads them, and the images of their parts in order."""
    if not messages:
        raise InvalidInput("'messages' must not be empty")
    rendered = []
    images: list[ImageData] = []
    for message in messages:
        one: dict[str, Any] = {"role": message.role, "content": _content(message, images)}
        if message.name is not None:
            one["name"] = message.name
        if message.tool_calls:
            one["tool_calls"] = [
                {**call, "function": {**call.get("function", {}), "arguments": _arguments(call)}}
                for call in message.tool_calls
            ]
        if message.tool_call_id is not None:
            one["tool_call_id"] = message.tool_call_id
        rendered.append(one)
    return rendered, tuple(images)


def _arguments(call: dict[str, Any]) -> Any:
    """A previous call's arguments as the template expects them: a mapping (OpenAI sends JSON text)."""
    arguments = call.get("function", {}).get("arguments")
    if isinstance(arguments, str):
        try:
            return msgspec.json.decode(arguments)
        except msgspec.DecodeError:
            return arguments
    return arguments


def _chat_ask(body: ChatCompletionRequest) -> GenerationAsk:
    grammar, strict = _format_grammar(body.response_format, body.regex, body.ebnf)
    tools = body.tools if body.tools and body.tool_choice != "none" else None
    choice = body.tool_choice
    if tools and (choice == "required" or isinstance(choice, dict)):
        if grammar is not None:
            raise InvalidInput("A forced tool call cannot be combined with 'response_format'")
        name = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
        try:
            grammar = GrammarSpec("lark", tool_calls.forced(tools, name))
        except ValueError as exc:
            raise InvalidInput(str(exc)) from None
    top = (body.top_logprobs or 0) if body.logprobs else None
    if body.top_logprobs is not None and not body.logprobs:
        raise InvalidInput("'top_logprobs' requires 'logprobs': true")
    messages, images = _messages(body.messages)
    return GenerationAsk(
        max_new_tokens=body.max_completion_tokens or body.max_tokens,
        messages=messages,
        images=images,
        tools=tools,
        template_options=dict(body.chat_template_kwargs or {}),
        sampling=_sampling(body, top),
        stop=_stops(body.stop),
        grammar=grammar,
        strict=strict,
    )


def _usage(finished: Finished) -> dict[str, int]:
    total = finished.prompt_tokens + finished.completion_tokens
    return {
        "prompt_tokens": finished.prompt_tokens,
        "completion_tokens": finished.completion_tokens,
        "total_tokens": total,
    }


def _chat_logprobs(running: Running, logprobs: list[TokenLogprob]) -> dict[str, Any]:
    def entry(token: int, logprob: float) -> dict[str, Any]:
        piece = running.piece(token)
        return {"token": piece, "logprob": logprob, "bytes": list(piece.encode())}

    return {
        "content": [
            entry(one.token, one.logprob) | {"top_logprobs": [entry(t, lp) for t, lp in one.top]}
            for one in logprobs
        ]
    }


async def chat_completions(request: Request) -> Response:
    engine = engine_of(request)
    try:
        body = _decoded(await request.body(), ChatCompletionRequest)
        engine.require_generator(body.model)
        ask = _chat_ask(body)
        running = await engine.generate(body.model, ask, wait_loaded=True)
    except OpenAIError as exc:
        return exc.response()
    except Exception as exc:
        return openai_error_response(exc)
    reply = _Reply(running, body.model, "chatcmpl", with_tools=ask.tools is not None)
    if body.stream:
        usage = bool(body.stream_options and body.stream_options.include_usage)
        return event_stream(running, lambda r: reply.chat_stream(usage), _HEADERS)
    try:
        return _json(await reply.chat_whole(logprobs=body.logprobs is True))
    except Exception as exc:
        return openai_error_response(exc)


class _Reply:
    """One generation's answer in OpenAI's shapes."""

    def __init__(self, running: Running, model: str, prefix: str, with_tools: bool = False) -> None:
        self.running, self.model, self.with_tools = running, model, with_tools
        self.id = f"{prefix}-{uuid.uuid4().hex}"
        self.created = int(time.time())

    def _object(self, kind: str, choices: list[dict[str, Any]], **rest: Any) -> dict[str, Any]:
        """One OpenAI object of this answer: its id, kind, creation time and model, then ``rest``."""
        return {
            "id": self.id,
            "object": kind,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        } | rest

    async def collect(self) -> tuple[Finished, list[TokenLogprob]]:
        try:
            return await self.running.finished_with_logprobs()
        finally:
            self.running.close()

    async def chat_whole(self, logprobs: bool) -> dict[str, Any]:
        finished, steps = await self.collect()
        message: dict[str, Any] = {"role": "assistant", "content": finished.text}
        reason = _FINISH[finished.finish_reason]
        if self.with_tools:
            content, calls = tool_calls.parse(finished.text)
            if calls:
                message = {
                    "role": "assistant",
                    "content": content or None,
                    "tool_calls": [c.openai() for c in calls],
                }
                reason = "tool_calls"
        choice = {
            "index": 0,
            "message": message,
            "logprobs": _chat_logprobs(self.running, steps) if logprobs else None,
            "finish_reason": reason,
        }
        return self._object("chat.completion", [choice], usage=_usage(finished))

    def _chunk(self, delta: dict[str, Any], reason: str | None = None, logprobs: Any = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": reason}
        return data(msgspec.json.encode(self._object("chat.completion.chunk", [choice])))

    async def chat_stream(self, include_usage: bool) -> AsyncIterator[bytes]:
        yield self._chunk({"role": "assistant", "content": ""})
        held: list[str] = []  # with tools: the text from the first "<tool_call>" on, parsed at the end
        try:
            async for event in with_keep_alive(self.running.events()):
                if event is None:
                    yield KEEP_ALIVE
                elif isinstance(event, Delta):
                    text = event.text
                    if self.with_tools and (held or tool_calls.OPEN in text or _opens_call(text)):
                        held.append(text)
                        continue
                    logprobs = _chat_logprobs(self.running, list(event.logprobs)) if event.logprobs else None
                    if text or logprobs:
                        yield self._chunk({"content": text}, logprobs=logprobs)
                else:
                    reason = _FINISH[event.finish_reason]
                    if held:
                        content, calls = tool_calls.parse("".join(held))
                        if content:
                            yield self._chunk({"content": content})
                        if calls:
                            yield self._chunk({"tool_calls": [c.openai(i) for i, c in enumerate(calls)]})
                            reason = "tool_calls"
                    yield self._chunk({}, reason)
                    if include_usage:
                        usage = self._object("chat.completion.chunk", [], usage=_usage(event))
                        yield data(msgspec.json.encode(usage))
        except Exception as exc:
            yield data(msgspec.json.encode(_error_body(exc)))
        yield DONE

    async def completion_whole(self, prompt: str, echo: bool) -> dict[str, Any]:
        finished, _ = await self.collect()
        choice = {
            "text": (prompt if echo else "") + finished.text,
            "index": 0,
            "logprobs": None,
            "finish_reason": _FINISH[finished.finish_reason],
        }
        return self._object("text_completion", [choice], usage=_usage(finished))

    def _text_chunk(self, text: str, reason: str | None = None) -> dict[str, Any]:
        return self._object(
            "text_completion", [{"text": text, "index": 0, "logprobs": None, "finish_reason": reason}]
        )

    async def completion_stream(self, include_usage: bool, echo: str) -> AsyncIterator[bytes]:
        try:
            if echo:
                yield data(msgspec.json.encode(self._text_chunk(echo)))
            async for event in with_keep_alive(self.running.events()):
                if event is None:
                    yield KEEP_ALIVE
                elif isinstance(event, Delta):
                    if event.text:
                        yield data(msgspec.json.encode(self._text_chunk(event.text)))
                else:
                    yield data(msgspec.json.encode(self._text_chunk("", _FINISH[event.finish_reason])))
                    if include_usage:
                        last = self._object("text_completion", [], usage=_usage(event))
                        yield data(msgspec.json.encode(last))
        except Exception as exc:
            yield data(msgspec.json.encode(_error_body(exc)))
        yield DONE


def _opens_call(text: str) -> bool:
    """A delta that may be the start of ``<tool_call>`` split over tokens (``<tool``, ``<``)."""
    tail = text[text.rfind("<") :] if "<" in text else ""
    return bool(tail) and tool_calls.OPEN.startswith(tail)


def _error_body(exc: Exception) -> dict[str, Any]:
    """An error after the stream began: OpenAI's envelope as one more event."""
    rule, message = told(exc)
    return {"error": {"message": message, "type": "server_error", "param": None, "code": str(rule.code)}}


async def completions(request: Request) -> Response:
    engine = engine_of(request)
    try:
        body = _decoded(await request.body(), CompletionRequest)
        engine.require_generator(body.model)
        prompts = [body.prompt] if isinstance(body.prompt, str) else body.prompt
        if len(prompts) != 1 or not prompts[0]:
            raise InvalidInput("'prompt' must be one non-empty string")
        grammar, strict = _format_grammar(body.response_format, body.regex, body.ebnf)
        ask = GenerationAsk(
            max_new_tokens=body.max_tokens,
            prompt=prompts[0],
            sampling=_sampling(body, None),
            stop=_stops(body.stop),
            grammar=grammar,
            strict=strict,
        )
        running = await engine.generate(body.model, ask, wait_loaded=True)
    except OpenAIError as exc:
        return exc.response()
    except Exception as exc:
        return openai_error_response(exc)
    reply = _Reply(running, body.model, "cmpl")
    echo = prompts[0] if body.echo else ""
    if body.stream:
        usage = bool(body.stream_options and body.stream_options.include_usage)
        return event_stream(running, lambda r: reply.completion_stream(usage, echo), _HEADERS)
    try:
        return _json(await reply.completion_whole(prompts[0], bool(body.echo)))
    except Exception as exc:
        return openai_error_response(exc)


def _responses_ask(body: ResponsesRequest) -> GenerationAsk:
    messages: list[dict[str, Any]] = []
    if body.instructions:
        messages.append({"role": "system", "content": body.instructions})
    if isinstance(body.input, str):
        messages.append({"role": "user", "content": body.input})
    else:
        for message in body.input:
            content = message.content
            if not isinstance(content, str):
                parts = [p for p in content if p.get("type") in ("input_text", "output_text", "text")]
                if len(parts) != len(content):
                    raise InvalidInput("Only text content parts are supported on /v1/responses")
                content = "".join(str(p.get("text", "")) for p in parts)
            role = "system" if message.role == "developer" else message.role
            messages.append({"role": role, "content": content})
    grammar: GrammarSpec | None = None
    strict = False
    fmt = body.text.format if body.text else None
    if fmt is not None and fmt.type == "json_object":
        grammar = GrammarSpec("json_object", "")
    elif fmt is not None and fmt.type == "json_schema":  # without a schema: any JSON object
        if fmt.schema is None:
            grammar = GrammarSpec("json_object", "")
        else:
            grammar, strict = GrammarSpec.json_schema(fmt.schema), bool(fmt.strict)
    return GenerationAsk(
        max_new_tokens=body.max_output_tokens,
        messages=messages,
        sampling={"temperature": body.temperature, "top_p": body.top_p, "seed": body.seed},
        grammar=grammar,
        strict=strict,
    )


def _response_object(reply: _Reply, text: str, status: str, finished: Finished | None) -> dict[str, Any]:
    output = {
        "type": "message",
        "id": f"msg_{reply.id.removeprefix('resp-')}",
        "status": status,
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}] if finished else [],
    }
    usage = None
    if finished is not None:
        usage = {
            "input_tokens": finished.prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": finished.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": finished.prompt_tokens + finished.completion_tokens,
        }
    incomplete = finished is not None and finished.finish_reason == "length"
    return {
        "id": reply.id.replace("resp-", "resp_"),
        "object": "response",
        "created_at": reply.created,
        "status": "incomplete" if incomplete else status,
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "model": reply.model,
        "output": [output] if finished is not None else [],
        "parallel_tool_calls": False,
        "tool_choice": "none",
        "tools": [],
        "usage": usage,
        "error": None,
    }


async def responses(request: Request) -> Response:
    engine = engine_of(request)
    try:
        body = _decoded(await request.body(), ResponsesRequest)
        engine.require_generator(body.model)
        running = await engine.generate(body.model, _responses_ask(body), wait_loaded=True)
    except OpenAIError as exc:
        return exc.response()
    except Exception as exc:
        return openai_error_response(exc)
    reply = _Reply(running, body.model, "resp")
    if body.stream:
        return event_stream(running, lambda r: _response_events(reply), _HEADERS)
    try:
        finished, _ = await reply.collect()
    except Exception as exc:
        return openai_error_response(exc)
    return _json(_response_object(reply, finished.text, "completed", finished))


async def _response_events(reply: _Reply) -> AsyncIterator[bytes]:
    """The Responses API's typed events, each numbered (``sequence_number``), as ``openai`` reads them."""
    seq = 0

    def event(kind: str, **fields: Any) -> bytes:
        nonlocal seq
        payload = {"type": kind, "sequence_number": seq, **fields}
        seq += 1
        return b"event: " + kind.encode() + b"\n" + data(msgspec.json.encode(payload))

    item_id = f"msg_{reply.id.removeprefix('resp-')}"
    shell = _response_object(reply, "", "in_progress", None)
    yield event("response.created", response=shell)
    yield event("response.in_progress", response=shell)
    item = {"type": "message", "id": item_id, "status": "in_progress", "role": "assistant", "content": []}
    yield event("response.output_item.added", output_index=0, item=item)
    part = {"type": "output_text", "text": "", "annotations": []}
    where = {"item_id": item_id, "output_index": 0, "content_index": 0}
    yield event("response.content_part.added", **where, part=part)
    try:
        async for one in with_keep_alive(reply.running.events()):
            if one is None:
                yield KEEP_ALIVE
            elif isinstance(one, Delta):
                if one.text:
                    yield event("response.output_text.delta", **where, delta=one.text, logprobs=[])
            else:
                text = one.text
                yield event("response.output_text.done", **where, text=text, logprobs=[])
                yield event("response.content_part.done", **where, part=part | {"text": text})
                done_item = item | {"status": "completed", "content": [part | {"text": text}]}
                yield event("response.output_item.done", output_index=0, item=done_item)
                yield event("response.completed", response=_response_object(reply, text, "completed", one))
    except Exception as exc:
        rule, message = told(exc)
        yield event("error", code=str(rule.code), message=message, param=None)


ROUTES = (
    PostRoute(
        "/v1/chat/completions",
        chat_completions,
        ("openai-compat",),
        ChatCompletionRequest,
        None,
        json_only=True,
        openai_errors=True,
    ),
    PostRoute(
        "/v1/completions",
        completions,
        ("openai-compat",),
        CompletionRequest,
        None,
        json_only=True,
        openai_errors=True,
    ),
    PostRoute(
        "/v1/responses",
        responses,
        ("openai-compat",),
        ResponsesRequest,
        None,
        json_only=True,
        openai_errors=True,
    ),
)

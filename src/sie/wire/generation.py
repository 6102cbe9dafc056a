"""The generation bodies: the native ``/v1/generate/{model}`` and OpenAI's chat completions,
completions and responses, with their answers and stream chunks.

msgspec decodes them; the bounds of the public server's request model (``top_p`` in (0, 1], penalties
in [-2, 2], at most 1,024 ``logit_bias`` entries each in [-100, 100], ``top_logprobs`` up to 20, a
signed 64-bit seed) are ``Meta`` constraints, so a body past one is refused with msgspec's message
naming the field. Unknown fields are ignored, as OpenAI's SDKs send new ones first.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

_Temperature = Annotated[float, msgspec.Meta(ge=0.0, le=2.0)]
_TopP = Annotated[float, msgspec.Meta(gt=0.0, le=1.0)]
_Penalty = Annotated[float, msgspec.Meta(ge=-2.0, le=2.0)]
_Seed = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
_Bias = dict[str, Annotated[float, msgspec.Meta(ge=-100.0, le=100.0)]]
_LogitBias = Annotated[_Bias, msgspec.Meta(max_length=1024)]
_TopLogprobs = Annotated[int, msgspec.Meta(ge=0, le=20)]
_Tokens = Annotated[int, msgspec.Meta(ge=1)]


class GrammarBody(msgspec.Struct, forbid_unknown_fields=True):
    """Exactly one of ``json_schema``, ``regex`` and ``ebnf`` (checked after decoding)."""

    json_schema: dict[str, Any] | None = None
    regex: Annotated[str, msgspec.Meta(max_length=4096)] | None = None
    ebnf: Annotated[str, msgspec.Meta(max_length=8192)] | None = None
    label: str | None = None
    strict: bool | None = None


class GenerateImage(msgspec.Struct):
    """One inline image: standard base64, at most 16 MiB decoded (the public bounds)."""

    data: Annotated[str, msgspec.Meta(min_length=1, max_length=22_369_624)]
    format: Annotated[str, msgspec.Meta(min_length=1, max_length=32, pattern="^[A-Za-z0-9.+-]+$")] | None = (
        None
    )


class GenerateOptions(msgspec.Struct, forbid_unknown_fields=True):
    """The sampler fields ``options`` may carry (the typed top-level fields win)."""

    temperature: Annotated[float, msgspec.Meta(ge=0.0)] | None = None
    top_p: _TopP | None = None
    top_k: Annotated[int, msgspec.Meta(ge=0)] | None = None
    seed: _Seed | None = None
    frequency_penalty: _Penalty | None = None
    presence_penalty: _Penalty | None = None


class GenerateRequest(msgspec.Struct):
    """``POST /v1/generate/{model}``. ``images`` go with the prompt as one user turn through the
    model's chat template (a vision-language model's); ``lora_adapter`` is in the public model and not
    served here: the schema says so (a null adapter)."""

    prompt: Annotated[str, msgspec.Meta(min_length=1)]
    max_new_tokens: _Tokens
    images: Annotated[list[GenerateImage], msgspec.Meta(min_length=1, max_length=16)] | None = None
    grammar: GrammarBody | None = None
    temperature: Annotated[float, msgspec.Meta(ge=0.0)] | None = None
    top_p: _TopP | None = None
    options: GenerateOptions | None = None
    stop: list[Annotated[str, msgspec.Meta(min_length=1)]] | None = None
    stream: bool | None = None
    frequency_penalty: _Penalty | None = None
    presence_penalty: _Penalty | None = None
    seed: _Seed | None = None
    logit_bias: _LogitBias | None = None
    logprobs: bool | None = None
    top_logprobs: _TopLogprobs | None = None
    routing_key: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    lora_adapter: None = None


class GenerateUsage(msgspec.Struct, omit_defaults=True):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class GenerateResponse(msgspec.Struct):
    model: str
    text: str
    finish_reason: str
    usage: GenerateUsage
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    logprobs: list[dict[str, Any]] | None = (
        None  # asked for with ``logprobs`` (ours: the public streams them only)
    )


class ChunkError(msgspec.Struct, omit_defaults=True):
    code: str
    message: str
    param: str | None = None


class GenerateChunk(msgspec.Struct, omit_defaults=True):
    """One event of a native stream; the last has ``done`` and the usage (or ``error``)."""

    request_id: str
    seq: int
    text_delta: str
    done: bool
    finish_reason: str | None = None
    usage: GenerateUsage | None = None
    ttft_ms: float | None = None
    logprobs: list[dict[str, Any]] | None = None
    error: ChunkError | None = None


# -- OpenAI ---------------------------------------------------------------------------------------


class ContentPart(msgspec.Struct):
    """A chat message's part. ``source_lang_code`` / ``target_lang_code``: the fields TranslateGemma's
    chat template reads from its one text part (its model card's request layout)."""

    type: str
    text: str | None = None
    image_url: dict[str, Any] | None = None
    source_lang_code: str | None = None
    target_lang_code: str | None = None


class ChatMessage(msgspec.Struct):
    role: str
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


class JsonSchemaFormat(msgspec.Struct):
    name: str | None = None
    schema: dict[str, Any] | None = None
    strict: bool | None = None
    description: str | None = None


class ResponseFormat(msgspec.Struct):
    """OpenAI's ``response_format``, and the two more the public gateway takes (what the public
    ``sie-mcp`` sends for them): ``{"type": "regex", "regex": ...}`` and ``{"type": "grammar",
    "grammar": <EBNF>, "syntax": "ebnf"}``, bounded as the native ``grammar``'s."""

    type: Literal["text", "json_object", "json_schema", "regex", "grammar"]
    json_schema: JsonSchemaFormat | None = None
    regex: Annotated[str, msgspec.Meta(max_length=4096)] | None = None
    grammar: Annotated[str, msgspec.Meta(max_length=8192)] | None = None
    syntax: Literal["ebnf"] | None = None


class StreamOptions(msgspec.Struct):
    include_usage: bool | None = None


class _Sampled(msgspec.Struct, forbid_unknown_fields=True):
    """What every OpenAI generation body shares. A field the route does not know is refused (the
    public gateway's ``unsupported_field``), so the schema says ``additionalProperties: false``."""

    model: str
    temperature: _Temperature | None = None
    top_p: _TopP | None = None
    top_k: Annotated[int, msgspec.Meta(ge=0)] | None = None  # vLLM's and SGLang's extension
    n: Annotated[int, msgspec.Meta(ge=1, le=1)] | None = None  # one choice per request
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    stop: str | Annotated[list[str], msgspec.Meta(max_length=4)] | None = None
    seed: _Seed | None = None
    frequency_penalty: _Penalty | None = None
    presence_penalty: _Penalty | None = None
    logit_bias: _LogitBias | None = None
    user: str | None = None
    repetition_penalty: Annotated[float, msgspec.Meta(gt=0.0, le=2.0)] | None = None  # vLLM's, SGLang's
    safety_identifier: str | None = None  # validated and dropped, as the public gateway does
    lora_adapter: None = None  # generation runs the base model
    # SGLang's structured-output extensions, beside ``response_format``.
    regex: str | None = None
    ebnf: str | None = None


class ChatCompletionRequest(_Sampled):
    messages: Annotated[list[ChatMessage], msgspec.Meta(min_length=1)] = msgspec.field(default_factory=list)
    max_tokens: _Tokens | None = None
    max_completion_tokens: _Tokens | None = None
    logprobs: bool | None = None
    top_logprobs: _TopLogprobs | None = None
    response_format: ResponseFormat | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    best_of: Annotated[int, msgspec.Meta(ge=1, le=1)] | None = None
    include_reasoning: bool | None = None


class CompletionRequest(_Sampled):
    prompt: (
        Annotated[str, msgspec.Meta(min_length=1)]
        | Annotated[list[str], msgspec.Meta(min_length=1, max_length=1)]
    ) = ""
    max_tokens: _Tokens | None = 16
    logprobs: None = None  # not served here; chat completions carry logprobs
    echo: bool | None = None
    suffix: None = None
    best_of: Annotated[int, msgspec.Meta(ge=1, le=1)] | None = None
    response_format: ResponseFormat | None = None


class ResponseInputMessage(msgspec.Struct):
    role: str
    content: str | list[dict[str, Any]]
    type: str | None = None


class ResponseTextFormat(msgspec.Struct):
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    schema: dict[str, Any] | None = None
    strict: bool | None = None


class ResponseText(msgspec.Struct):
    format: ResponseTextFormat | None = None


class ResponsesRequest(msgspec.Struct, forbid_unknown_fields=True):
    model: str
    input: str | list[ResponseInputMessage]
    instructions: str | None = None
    max_output_tokens: _Tokens | None = None
    temperature: _Temperature | None = None
    top_p: _TopP | None = None
    seed: _Seed | None = None
    stream: bool | None = None
    text: ResponseText | None = None
    store: bool | None = None
    user: str | None = None

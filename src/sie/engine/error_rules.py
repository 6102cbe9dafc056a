"""The one table from the engine's exceptions to what a caller is told: status, wire code, Retry-After.

It sits below every front end. The HTTP routes render a rule as the native ``{"detail": ...}`` body or,
on ``/v1/embeddings``, as OpenAI's ``{"error": ...}`` body (with the OpenAI code and status the public
server uses there); a queue worker will put the same code into its replies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from sie.engine.errors import (
    EngineClosed,
    InferenceFailed,
    InvalidInput,
    LoraLoading,
    ModelLoadFailed,
    ModelLoading,
    ModelNotFound,
    Overloaded,
    PayloadTooLarge,
    ResourceExhausted,
)
from sie.wire.codec import WireDecodeError
from sie.wire.errors import ErrorCode

OOM_RETRY_AFTER_S: Final = 5  # the public server's default


@dataclass(frozen=True)
class OpenAIRule:
    status: int
    code: str
    type: str = "server_error"


@dataclass(frozen=True)
class ErrorRule:
    status: int
    code: ErrorCode
    openai: OpenAIRule
    retry_after: str | None = None


_BAD_REQUEST: Final = OpenAIRule(400, "invalid_request", "invalid_request_error")
_UNAVAILABLE: Final = OpenAIRule(503, "model_not_available")

ERROR_TABLE: Final[dict[type[Exception], ErrorRule]] = {
    WireDecodeError: ErrorRule(400, ErrorCode.INVALID_INPUT, _BAD_REQUEST),
    InvalidInput: ErrorRule(400, ErrorCode.INVALID_INPUT, _BAD_REQUEST),
    ModelNotFound: ErrorRule(
        404, ErrorCode.MODEL_NOT_FOUND, OpenAIRule(404, "model_not_found", "invalid_request_error")
    ),
    PayloadTooLarge: ErrorRule(
        413, ErrorCode.PAYLOAD_TOO_LARGE, OpenAIRule(413, "payload_too_large", "invalid_request_error")
    ),
    ModelLoadFailed: ErrorRule(502, ErrorCode.MODEL_LOAD_FAILED, _UNAVAILABLE),
    ModelLoading: ErrorRule(503, ErrorCode.MODEL_LOADING, _UNAVAILABLE, "5"),
    LoraLoading: ErrorRule(503, ErrorCode.LORA_LOADING, _UNAVAILABLE, "1"),
    Overloaded: ErrorRule(503, ErrorCode.QUEUE_FULL, OpenAIRule(503, "server_overloaded"), "1"),
    EngineClosed: ErrorRule(503, ErrorCode.MODEL_NOT_LOADED, _UNAVAILABLE, "5"),
    InferenceFailed: ErrorRule(500, ErrorCode.INFERENCE_ERROR, OpenAIRule(500, "inference_error")),
    ResourceExhausted: ErrorRule(
        503, ErrorCode.RESOURCE_EXHAUSTED, OpenAIRule(503, "server_overloaded"), str(OOM_RETRY_AFTER_S)
    ),
}

UNEXPECTED: Final = ErrorRule(500, ErrorCode.INTERNAL_ERROR, OpenAIRule(500, "internal_error"))
"""What an exception outside the table becomes (its text stays in the log): kept beside the table so
``/openapi.json``, which documents every rule, documents this one too."""


def rule_for(exc: Exception) -> ErrorRule | None:
    """The rule of the nearest class in ``exc``'s MRO; None means an unexpected error (``UNEXPECTED``)."""
    for cls in type(exc).__mro__:
        rule = ERROR_TABLE.get(cls)
        if rule is not None:
            return rule
    return None

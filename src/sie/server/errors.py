"""Error bodies, rendered from the engine's one error table (``engine.error_rules``): the HTTP status
and OpenAI's code of each wire code live here, the engine knows neither.

Native endpoints answer ``{"detail": {"code", "message"}}``; ``/v1/embeddings`` answers OpenAI's
``{"error": {...}}`` so the ``openai`` client raises its own errors. Errors always answer JSON (the
public server does the same even when msgpack was asked for). A 500 never carries internal text: the
traceback goes to the log, the client gets a stable code.
"""

from __future__ import annotations

from dataclasses import dataclass
from http import HTTPStatus
from typing import Final

from fastapi import Request
from fastapi.responses import JSONResponse

from sie.engine.error_rules import ERROR_TABLE, ErrorRule, told
from sie.engine.errors import ModelLoadFailed
from sie.wire.errors import ErrorCode, error_envelope, openai_error_envelope


@dataclass(frozen=True)
class OpenAIRule:
    status: int
    code: str
    type: str = "server_error"


@dataclass(frozen=True)
class HttpRule:
    """A wire code over HTTP: the native status, and the OpenAI envelope's status and code (the public
    server's, on ``/v1/embeddings``)."""

    status: int
    openai: OpenAIRule


_BAD_REQUEST: Final = OpenAIRule(400, "invalid_request", "invalid_request_error")
_UNAVAILABLE: Final = OpenAIRule(503, "model_not_available")

HTTP: Final[dict[ErrorCode, HttpRule]] = {
    ErrorCode.INVALID_INPUT: HttpRule(400, _BAD_REQUEST),
    ErrorCode.MODEL_NOT_FOUND: HttpRule(404, OpenAIRule(404, "model_not_found", "invalid_request_error")),
    ErrorCode.MODEL_NOT_SERVED: HttpRule(400, OpenAIRule(400, "model_not_served", "invalid_request_error")),
    ErrorCode.PAYLOAD_TOO_LARGE: HttpRule(413, OpenAIRule(413, "payload_too_large", "invalid_request_error")),
    ErrorCode.MODEL_LOAD_FAILED: HttpRule(502, _UNAVAILABLE),
    ErrorCode.MODEL_LOADING: HttpRule(503, _UNAVAILABLE),
    ErrorCode.LORA_LOADING: HttpRule(503, _UNAVAILABLE),
    ErrorCode.QUEUE_FULL: HttpRule(503, OpenAIRule(503, "server_overloaded")),
    ErrorCode.MODEL_NOT_LOADED: HttpRule(503, _UNAVAILABLE),
    ErrorCode.INFERENCE_ERROR: HttpRule(500, OpenAIRule(500, "inference_error")),
    ErrorCode.RESOURCE_EXHAUSTED: HttpRule(503, OpenAIRule(503, "server_overloaded")),
    ErrorCode.INTERNAL_ERROR: HttpRule(500, OpenAIRule(500, "internal_error")),
}


def http_of(rule: ErrorRule) -> HttpRule:
    return HTTP[rule.code]


def retry_after(rule: ErrorRule) -> str | None:
    """The ``Retry-After`` header value of a native answer."""
    return None if rule.retry_after_s is None else str(rule.retry_after_s)


def native_error_response(exc: Exception) -> JSONResponse:
    rule, message = told(exc)
    extra: dict[str, object] = {}
    if isinstance(exc, ModelLoadFailed):
        extra = {"error_class": exc.error_class, "attempts": exc.attempts, "permanent": exc.permanent}
    wait = retry_after(rule)
    headers = {"Retry-After": wait} if wait else None
    body = error_envelope(rule.code, message, **extra)
    return JSONResponse(body, status_code=http_of(rule).status, headers=headers)


def openai_retry_after(status: int) -> str | None:
    """Every OpenAI-envelope 503 invites a retry after a second, whatever the native rule says: OpenAI
    clients back off on their own schedule and only need to know that retrying is right."""
    return "1" if status == HTTPStatus.SERVICE_UNAVAILABLE else None


def openai_error(status: int, message: str, code: str, error_type: str) -> JSONResponse:
    """One OpenAI-envelope answer; the route's own refusals (e.g. ``unsupported_field``) use it too."""
    retry_after = openai_retry_after(status)
    headers = {"Retry-After": retry_after} if retry_after else None
    return JSONResponse(openai_error_envelope(message, code, error_type), status_code=status, headers=headers)


def openai_error_response(exc: Exception, native_code: bool = False) -> JSONResponse:
    """OpenAI's envelope with OpenAI's code, or with the native code where the public server puts that
    there (``/v1/rerank``)."""
    rule, message = told(exc)
    openai = http_of(rule).openai
    return openai_error(openai.status, message, rule.code.value if native_code else openai.code, openai.type)


async def handle_native_error(_: Request, exc: Exception) -> JSONResponse:
    return native_error_response(exc)


HANDLED: Final = tuple(ERROR_TABLE)

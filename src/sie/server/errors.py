"""Error bodies, rendered from the engine's one error table (``engine.error_rules``).

Native endpoints answer ``{"detail": {"code", "message"}}``; ``/v1/embeddings`` answers OpenAI's
``{"error": {...}}`` so the ``openai`` client raises its own errors. Errors always answer JSON (the
public server does the same even when msgpack was asked for). A 500 never carries internal text: the
traceback goes to the log, the client gets a stable code.
"""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Final

from fastapi import Request
from fastapi.responses import JSONResponse

from sie.engine.error_rules import ERROR_TABLE, UNEXPECTED, ErrorRule, rule_for
from sie.engine.errors import ModelLoadFailed
from sie.wire.errors import error_envelope, openai_error_envelope

log = logging.getLogger(__name__)

INTERNAL_MESSAGE: Final = "Internal server error"


def _rule(exc: Exception) -> tuple[ErrorRule, str]:
    """The rule for ``exc`` and the message a client may see (never an unexpected error's text)."""
    rule = rule_for(exc)
    if rule is None:
        log.error("unhandled error", exc_info=exc)
        return UNEXPECTED, INTERNAL_MESSAGE
    return rule, str(exc)


def native_error_response(exc: Exception) -> JSONResponse:
    rule, message = _rule(exc)
    extra: dict[str, object] = {}
    if isinstance(exc, ModelLoadFailed):
        extra = {"error_class": exc.error_class, "attempts": exc.attempts, "permanent": exc.permanent}
    headers = {"Retry-After": rule.retry_after} if rule.retry_after else None
    return JSONResponse(error_envelope(rule.code, message, **extra), status_code=rule.status, headers=headers)


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
    rule, message = _rule(exc)
    code = rule.code.value if native_code else rule.openai.code
    return openai_error(rule.openai.status, message, code, rule.openai.type)


async def handle_native_error(_: Request, exc: Exception) -> JSONResponse:
    return native_error_response(exc)


HANDLED: Final = tuple(ERROR_TABLE)

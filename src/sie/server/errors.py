"""One table from exceptions to HTTP status, wire code and Retry-After, for the native endpoints.

Errors always answer JSON (the public server does the same even when msgpack was asked for). A 500
never carries internal text: the traceback goes to the log, the client gets a stable code.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final

from fastapi import Request
from fastapi.responses import JSONResponse

from sie.engine.errors import (
    EngineClosed,
    InferenceFailed,
    InvalidInput,
    ModelLoadFailed,
    ModelLoading,
    ModelNotFound,
    Overloaded,
)
from sie.wire.codec import WireDecodeError
from sie.wire.errors import ErrorCode, error_envelope

log = logging.getLogger(__name__)


class PayloadTooLarge(Exception):
    """The body or one item's text is over its configured limit."""


@dataclass(frozen=True)
class ErrorRule:
    status: int
    code: ErrorCode
    retry_after: str | None = None


ERROR_TABLE: Final[dict[type[Exception], ErrorRule]] = {
    WireDecodeError: ErrorRule(400, ErrorCode.INVALID_INPUT),
    InvalidInput: ErrorRule(400, ErrorCode.INVALID_INPUT),
    ModelNotFound: ErrorRule(404, ErrorCode.MODEL_NOT_FOUND),
    PayloadTooLarge: ErrorRule(413, ErrorCode.PAYLOAD_TOO_LARGE),
    ModelLoadFailed: ErrorRule(502, ErrorCode.MODEL_LOAD_FAILED),
    ModelLoading: ErrorRule(503, ErrorCode.MODEL_LOADING, "5"),
    Overloaded: ErrorRule(503, ErrorCode.QUEUE_FULL, "1"),
    EngineClosed: ErrorRule(503, ErrorCode.MODEL_NOT_LOADED, "5"),
    InferenceFailed: ErrorRule(500, ErrorCode.INFERENCE_ERROR),
}


def rule_for(exc: Exception) -> ErrorRule | None:
    for cls in type(exc).__mro__:
        rule = ERROR_TABLE.get(cls)
        if rule is not None:
            return rule
    return None


def native_error_response(exc: Exception) -> JSONResponse:
    rule = rule_for(exc)
    if rule is None:
        log.error("unhandled error", exc_info=exc)
        return JSONResponse(
            error_envelope(ErrorCode.INTERNAL_ERROR, "Internal server error"), status_code=500
        )
    extra: dict[str, object] = {}
    if isinstance(exc, ModelLoadFailed):
        extra = {"error_class": exc.error_class, "attempts": exc.attempts, "permanent": exc.permanent}
    headers = {"Retry-After": rule.retry_after} if rule.retry_after else None
    return JSONResponse(
        error_envelope(rule.code, str(exc), **extra), status_code=rule.status, headers=headers
    )


async def handle_native_error(_: Request, exc: Exception) -> JSONResponse:
    return native_error_response(exc)


HANDLED: Final = tuple(ERROR_TABLE)

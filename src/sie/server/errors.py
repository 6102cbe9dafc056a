"""Native-endpoint error bodies, rendered from the engine's one error table (``engine.error_rules``).

Errors always answer JSON (the public server does the same even when msgpack was asked for). A 500
never carries internal text: the traceback goes to the log, the client gets a stable code.
"""

from __future__ import annotations

import logging
from typing import Final

from fastapi import Request
from fastapi.responses import JSONResponse

from sie.engine.error_rules import ERROR_TABLE, rule_for
from sie.engine.errors import ModelLoadFailed
from sie.wire.errors import ErrorCode, error_envelope

log = logging.getLogger(__name__)


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

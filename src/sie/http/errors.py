"""Every error answer over HTTP, rendered from the one error table (``sie.errors``): each wire code's
status (and, on the OpenAI routes, OpenAI's status and code) lives here; the engine, the catalogue
and the cluster know neither.

A process answers in the envelope of its API (``Envelope``): the server's native
``{"detail": {"code", "message"}}`` (its OpenAI routes: OpenAI's ``{"error": {...}}``, so the ``openai``
client raises its own errors), the gateway's native envelope with the message also at the top level
(where the public gateway puts it), sie-config's ``{"detail": {"error": <code>, ...}}`` (the public
service's FastAPI bodies, and its 500s; an auth refusal there is a bare ``{"detail": "<message>"}``).
Errors always answer JSON (the public server does the same even when msgpack was asked for), with
``Retry-After`` when the code invites a retry and ``X-SIE-Error-Code``. A 500 never carries internal
text: the traceback goes to the log, the client gets a stable code.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from http import HTTPStatus
from typing import Any, Final

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sie import __version__
from sie.errors import FOREIGN, ErrorRule, SieError, WireCode, retry_after, told
from sie.http.metrics import classify
from sie.wire.errors import ConfigErrorCode, ErrorCode, error_envelope, openai_error_envelope

ERROR_CODE_HEADER: Final = "X-SIE-Error-Code"


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
# The public server's OpenAI routes carry its native code for an input past a bound.
_TOO_LONG: Final = OpenAIRule(400, ErrorCode.INPUT_TOO_LONG.value, "invalid_request_error")


def _plain(status: int) -> HttpRule:
    """A code only the gateway or sie-config answers, never on an OpenAI route."""
    return HttpRule(status, OpenAIRule(status, HTTPStatus(status).phrase.lower().replace(" ", "_")))


HTTP: Final[dict[WireCode, HttpRule]] = {
    ErrorCode.INVALID_INPUT: HttpRule(400, _BAD_REQUEST),
    ErrorCode.MODEL_NOT_FOUND: HttpRule(404, OpenAIRule(404, "model_not_found", "invalid_request_error")),
    ErrorCode.MODEL_NOT_SERVED: HttpRule(400, OpenAIRule(400, "model_not_served", "invalid_request_error")),
    ErrorCode.INPUT_TOO_LONG: HttpRule(400, _TOO_LONG),
    ErrorCode.PAYLOAD_TOO_LARGE: HttpRule(413, OpenAIRule(413, "payload_too_large", "invalid_request_error")),
    ErrorCode.MODEL_LOAD_FAILED: HttpRule(502, _UNAVAILABLE),
    ErrorCode.MODEL_LOADING: HttpRule(503, _UNAVAILABLE),
    ErrorCode.LORA_LOADING: HttpRule(503, _UNAVAILABLE),
    ErrorCode.QUEUE_FULL: HttpRule(503, OpenAIRule(503, "server_overloaded")),
    ErrorCode.MODEL_NOT_LOADED: HttpRule(503, _UNAVAILABLE),
    ErrorCode.INFERENCE_ERROR: HttpRule(500, OpenAIRule(500, "inference_error")),
    # The model answered outside the grammar it was held to: an invalid answer from upstream.
    ErrorCode.MODEL_OUTPUT_PARSE_ERROR: HttpRule(502, OpenAIRule(502, "model_output_parse_error")),
    # A generation past its profile's deadline: the public server's 504 for a non-streaming one.
    ErrorCode.GENERATION_TIMEOUT: HttpRule(504, OpenAIRule(504, "timeout")),
    ErrorCode.RESOURCE_EXHAUSTED: HttpRule(503, OpenAIRule(503, "server_overloaded")),
    ErrorCode.INTERNAL_ERROR: HttpRule(500, OpenAIRule(500, "internal_error")),
    ErrorCode.PROVISIONING: _plain(503),
    ErrorCode.GPU_NOT_CONFIGURED: _plain(503),
    ErrorCode.UNAUTHORIZED: _plain(401),
    ErrorCode.FORBIDDEN: _plain(403),
    ErrorCode.POOL_NOT_FOUND: _plain(404),
    ErrorCode.BUNDLE_CONFLICT: _plain(409),
    ConfigErrorCode.INVALID_MODEL_ID: _plain(400),
    ConfigErrorCode.MODEL_NOT_FOUND: _plain(404),
    ConfigErrorCode.BUNDLE_NOT_FOUND: _plain(404),
    ConfigErrorCode.PARSE_ERROR: _plain(400),
    ConfigErrorCode.VALIDATION_ERROR: _plain(422),
    ConfigErrorCode.CONTENT_CONFLICT: _plain(409),
    ConfigErrorCode.BUNDLE_CONFLICT: _plain(409),
    ConfigErrorCode.MISSING_FIELD: _plain(400),
    ConfigErrorCode.INVALID_MODEL_SPEC: _plain(400),
    ConfigErrorCode.PAYLOAD_TOO_LARGE: _plain(413),
    ConfigErrorCode.IDEMPOTENCY_MISMATCH: _plain(422),
    ConfigErrorCode.IDEMPOTENT_INFLIGHT_CANCELLED: _plain(503),
    ConfigErrorCode.NATS_UNAVAILABLE: _plain(503),
    ConfigErrorCode.MODEL_ID_MISMATCH: _plain(400),
    ConfigErrorCode.CONFIG_STORE_REQUIRED: _plain(409),
}


class BodyTooLarge(SieError):
    """A body past the process's limit, refused before a route reads it: the public server's 413 with
    its code for every input past a bound (``BY_CLASS``)."""

    code = ErrorCode.INPUT_TOO_LONG

    def __init__(self, limit: int) -> None:
        super().__init__(f"Request body exceeds the limit of {limit} bytes (SIE_MAX_REQUEST_BODY_BYTES)")


# The classes answered with another status than their code's: ``INPUT_TOO_LONG`` is a 400 for a text
# past a model's window and a 413 for a body past the limit, as the public server answers each.
BY_CLASS: Final[dict[type[SieError], HttpRule]] = {
    BodyTooLarge: HttpRule(413, OpenAIRule(413, ErrorCode.INPUT_TOO_LONG.value, "invalid_request_error")),
}


class Unauthorized(SieError):
    """No token, or one that matches none (the gateway's and sie-config's messages)."""

    code = ErrorCode.UNAUTHORIZED


class Forbidden(SieError):
    """A token that may not do this (a client token on an admin route)."""

    code = ErrorCode.FORBIDDEN


class AuthMisconfigured(SieError):
    """Auth is on and no token is configured: the server's fault, said so (no secret in it)."""

    code = ErrorCode.INTERNAL_ERROR


class Envelope(Enum):
    """The shape of a process's error bodies (see the module docstring)."""

    NATIVE = "native"
    GATEWAY = "gateway"
    CONFIG = "config"


def envelope_at(path: str, envelope: Envelope) -> Envelope:
    """A gateway's inference routes answer exactly as the server's do (their clients are the server's);
    its own API (auth, pools, config reads) puts the message at the top as well."""
    if envelope is Envelope.GATEWAY and classify(path) is not None:
        return Envelope.NATIVE
    return envelope


def http_of(rule: ErrorRule) -> HttpRule:
    return HTTP[rule.code]


def http_for(exc: Exception, rule: ErrorRule) -> HttpRule:
    """How ``exc`` is answered: its class's rule where ``BY_CLASS`` has one, else its code's."""
    for cls in type(exc).__mro__:
        if cls in BY_CLASS:
            return BY_CLASS[cls]
    return http_of(rule)


def http_variants(rule: ErrorRule) -> list[HttpRule]:
    """Every way ``rule``'s code is answered (its own rule, and its classes' in ``BY_CLASS``), for the
    OpenAPI document."""
    return [http_of(rule), *(http for cls, http in BY_CLASS.items() if cls.code == rule.code)]


def _body(exc: Exception, rule: ErrorRule, message: str, envelope: Envelope) -> dict[str, Any]:
    details = exc.details() if isinstance(exc, SieError) else {}
    if envelope is Envelope.CONFIG:
        if isinstance(rule.code, ConfigErrorCode):
            return {"detail": {"error": rule.code.value, **details}}
        if rule.code is ErrorCode.INTERNAL_ERROR:  # its refusals' shape and case, no text of the exception's
            return {"detail": {"error": rule.code.value.lower(), "message": message}}
        return {"detail": message}  # FastAPI's bare detail, as the public service's auth answers
    body = error_envelope(rule.code, message, **details)
    return {"message": message, **body} if envelope is Envelope.GATEWAY else body


def error_response(exc: Exception, envelope: Envelope = Envelope.NATIVE) -> JSONResponse:
    """The answer to ``exc`` in ``envelope``; an error outside the table is a 500 whose text stays in
    the log (``told``)."""
    rule, message = told(exc)
    own = exc.body(message) if isinstance(exc, SieError) else None
    headers = {"X-SIE-Server-Version": __version__}
    if isinstance(exc, SieError):
        headers.update(exc.extra_headers)
    if envelope is not Envelope.CONFIG:
        headers[ERROR_CODE_HEADER] = rule.code.value
    wait = retry_after(exc, rule)
    if wait is not None:
        headers["Retry-After"] = str(wait)
    body = own if own is not None else _body(exc, rule, message, envelope)
    return JSONResponse(body, status_code=http_for(exc, rule).status, headers=headers)


def openai_retry_after(status: int) -> str | None:
    """Every OpenAI-envelope 503 invites a retry after a second, whatever the native rule says: OpenAI
    clients back off on their own schedule and only need to know that retrying is right."""
    return "1" if status == HTTPStatus.SERVICE_UNAVAILABLE else None


def openai_error(
    status: int, message: str, code: str, error_type: str, extra_headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """One OpenAI-envelope answer; the route's own refusals (e.g. ``unsupported_field``) use it too."""
    wait = openai_retry_after(status)
    headers = {**(extra_headers or {}), **({"Retry-After": wait} if wait else {})}
    return JSONResponse(
        openai_error_envelope(message, code, error_type), status_code=status, headers=headers or None
    )


def openai_error_response(exc: Exception, native_code: bool = False) -> JSONResponse:
    """OpenAI's envelope with OpenAI's code, or with the native code where the public server puts that
    there (``/v1/rerank``)."""
    rule, message = told(exc)
    openai = http_for(exc, rule).openai
    code = rule.code.value if native_code else openai.code
    extra = exc.extra_headers if isinstance(exc, SieError) else None
    return openai_error(openai.status, message, code, openai.type, extra)


def install(app: Starlette, envelope: Envelope) -> None:
    """Every error a route raises, answered in ``envelope``: the root's classes, the lower layers'
    client errors (``FOREIGN``) and, outermost, anything else as a 500."""

    async def handle(request: Request, exc: Exception) -> Response:
        return error_response(exc, envelope_at(request.url.path, envelope))

    handled: list[type[Exception]] = [SieError, *FOREIGN, Exception]
    for exc_type in handled:
        app.add_exception_handler(exc_type, handle)
    if envelope is Envelope.CONFIG:  # FastAPI's JSON for a route that does not exist (404, 405)

        async def no_route(_: Request, exc: Exception) -> Response:
            assert isinstance(exc, HTTPException)
            return JSONResponse({"detail": exc.detail}, exc.status_code, headers=exc.headers)

        app.add_exception_handler(HTTPException, no_route)

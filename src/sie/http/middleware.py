"""Pure ASGI middleware (no per-request task overhead): body size limit and identity headers."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sie.core.instance import RUNTIME_INSTANCE
from sie.errors import SieError
from sie.http.errors import BodyTooLarge, Envelope, envelope_at, error_response, openai_error_response

log = logging.getLogger(__name__)


class BodyLimit:
    """Answers 413 ``INPUT_TOO_LONG`` once a body passes ``limit`` bytes, without reading the rest into memory.

    The refusal comes before any route runs, so it is rendered here in the envelope of the route that
    was asked: OpenAI's on ``openai_routes`` (their clients parse nothing else), the process's elsewhere.
    ``refusal`` is the error answered (sie-config words its own, with its code).
    """

    def __init__(
        self,
        app: ASGIApp,
        limit: int,
        openai_routes: Sequence[BaseRoute] = (),
        envelope: Envelope = Envelope.NATIVE,
        refusal: Callable[[int], SieError] = BodyTooLarge,
    ) -> None:
        self.app = app
        self.limit = limit
        self.openai_routes = tuple(openai_routes)
        self.envelope = envelope
        self.refusal = refusal

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit():
            if int(declared) > self.limit:
                await self._reject(scope, receive, send)
                return
            # The server frames such a body by its length (a chunked one has no length that counts),
            # so it cannot pass the limit: nothing to count.
            if b"transfer-encoding" not in headers:
                await self.app(scope, receive, send)
                return
        seen = 0
        started = False
        refused: SieError | None = None  # the refusal raised into the app, once the body is too long

        async def counting_receive() -> Message:
            nonlocal seen, refused
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    refused = self.refusal(self.limit)
                    raise refused
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except SieError as exc:
            if exc is not refused or started:
                raise
            await self._reject(scope, receive, send)

    async def _reject(self, scope: Scope, receive: Receive, send: Send) -> None:
        exc = self.refusal(self.limit)
        openai = any(route.matches(scope)[0] is Match.FULL for route in self.openai_routes)
        envelope = envelope_at(scope["path"], self.envelope)
        response = openai_error_response(exc) if openai else error_response(exc, envelope)
        await response(scope, receive, send)


class IdentityHeaders:
    """Adds ``X-SIE-Runtime-Instance`` (random per process) to every response, errors included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._header = (b"x-sie-runtime-instance", RUNTIME_INSTANCE.encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_identity(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), self._header]
            await send(message)

        await self.app(scope, receive, send_with_identity)


class SdkVersionSkew:
    """Logs one warning per SDK ``major.minor`` that is too far from ours (same rule as the public SIE:
    a different major, or minors more than one apart). The request itself is never refused."""

    def __init__(self, app: ASGIApp, server_version: str) -> None:
        self.app = app
        self._server = _major_minor(server_version)
        self._warned: set[tuple[int, int]] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self._server is not None:
            raw = dict(scope["headers"]).get(b"x-sie-sdk-version")
            sdk = _major_minor(raw.decode("latin-1")) if raw else None
            if sdk is not None and sdk not in self._warned and _skewed(sdk, self._server):
                self._warned.add(sdk)
                log.warning("SDK version %d.%d is not compatible with server %d.%d", *sdk, *self._server)
        await self.app(scope, receive, send)


def _major_minor(version: str) -> tuple[int, int] | None:
    parts = version.strip().split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def _skewed(sdk: tuple[int, int], server: tuple[int, int]) -> bool:
    return sdk[0] != server[0] or abs(sdk[1] - server[1]) > 1

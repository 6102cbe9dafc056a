"""Pure ASGI middleware (no per-request task overhead): body size limit and identity headers."""

from __future__ import annotations

import secrets
from typing import Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sie.server.errors import PayloadTooLarge, native_error_response

RUNTIME_INSTANCE: Final = secrets.token_hex(32)


class BodyLimit:
    """Answers 413 once a body passes ``limit`` bytes, without reading the rest into memory."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._reject(scope, receive, send)
            return
        seen = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise PayloadTooLarge(self._message())
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except PayloadTooLarge:
            if started:
                raise
            await self._reject(scope, receive, send)

    def _message(self) -> str:
        return f"Request body exceeds the limit of {self.limit} bytes (SIE_MAX_REQUEST_BODY_BYTES)"

    async def _reject(self, scope: Scope, receive: Receive, send: Send) -> None:
        await native_error_response(PayloadTooLarge(self._message()))(scope, receive, send)


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

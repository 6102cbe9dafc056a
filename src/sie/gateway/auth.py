"""Gateway auth (``SIE_AUTH_MODE``): ``none``, or ``token``/``static`` with bearer tokens.

Probes (``/healthz``, ``/readyz``) are always open, and ``/``, ``/health``, ``/metrics`` and ``/ws/*``
too with ``SIE_AUTH_EXEMPT_OPERATIONAL``. Mutations of pools and configs (POST, PUT, DELETE under
``/v1/pools``, ``/v1/config``, ``/v1/admin``) need ``SIE_ADMIN_TOKEN`` instead of a client token.
Tokens are compared in constant time. Refusals answer ``{"detail": {"code", "message"}}`` (the
server's envelope) with the message also at the top level, where the public gateway puts it.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

ALWAYS_OPEN: Final = ("/healthz", "/readyz")
OPERATIONAL: Final = ("/", "/health", "/metrics")
ADMIN_PREFIXES: Final = ("/v1/config", "/v1/admin", "/v1/pools")
MUTATIONS: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})
ENABLED_MODES: Final = frozenset({"token", "static"})


@dataclass(frozen=True)
class AuthConfig:
    mode: str
    tokens: Sequence[str]
    admin_token: str | None
    exempt_operational: bool

    @property
    def enabled(self) -> bool:
        return self.mode.lower() in ENABLED_MODES


def _matches(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())


def _bearer(scope: Scope) -> str | None:
    for key, value in scope.get("headers", []):
        if key == b"authorization":
            text: str = value.decode("latin-1").strip()
            return text[7:].strip() if text[:7].lower() == "bearer " else text
    return None


def _refusal(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"message": message, "detail": {"code": code, "message": message}}, status)


class Auth:
    def __init__(self, app: ASGIApp, config: AuthConfig) -> None:
        self.app = app
        self.config = config

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or not self.config.enabled:
            await self.app(scope, receive, send)
            return
        refusal = self.refusal(scope.get("method", "GET"), scope["path"], _bearer(scope))
        if refusal is None:
            await self.app(scope, receive, send)
        elif scope["type"] == "http":
            await refusal(scope, receive, send)
        else:
            await send({"type": "websocket.close", "code": 1008})

    def refusal(self, method: str, path: str, token: str | None) -> JSONResponse | None:
        config = self.config
        if path in ALWAYS_OPEN:
            return None
        if config.exempt_operational and (path in OPERATIONAL or path.startswith("/ws/")):
            return None
        if method in MUTATIONS and path.startswith(ADMIN_PREFIXES):
            if not config.admin_token:
                return _refusal(403, "FORBIDDEN", "Admin token not configured")
            if token is None or not _matches(token, config.admin_token):
                return _refusal(403, "FORBIDDEN", "Admin token required")
            return None
        if not config.tokens:
            return _refusal(500, "INTERNAL_ERROR", "Gateway auth enabled but no tokens configured")
        if token is None:
            return _refusal(401, "UNAUTHORIZED", "Missing Authorization header")
        # Every token is compared, so the time taken does not say which one nearly matched.
        if not any([_matches(token, expected) for expected in config.tokens]):
            return _refusal(401, "UNAUTHORIZED", "Invalid token")
        return None

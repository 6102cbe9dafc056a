"""Gateway auth (``SIE_AUTH_MODE``): ``none``, or ``token``/``static`` with bearer tokens.

Probes (``/healthz``, ``/readyz``) are always open, and ``/``, ``/health``, ``/metrics`` and ``/ws/*``
too with ``SIE_AUTH_EXEMPT_OPERATIONAL``. Mutations of pools and configs (POST, PUT, DELETE under
``/v1/pools``, ``/v1/config``, ``/v1/admin``) need ``SIE_ADMIN_TOKEN`` instead of a client token.
Tokens are compared in constant time. Refusals are the edge's (``sie.http.errors``, the gateway's
envelope: the message at the top level too, where the public gateway puts it).
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from starlette.types import ASGIApp, Receive, Scope, Send

from sie.errors import SieError
from sie.http.errors import AuthMisconfigured, Envelope, Forbidden, Unauthorized, error_response

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
            await error_response(refusal, Envelope.GATEWAY)(scope, receive, send)
        else:
            await send({"type": "websocket.close", "code": 1008})

    def refusal(self, method: str, path: str, token: str | None) -> SieError | None:
        config = self.config
        if path in ALWAYS_OPEN:
            return None
        if config.exempt_operational and (path in OPERATIONAL or path.startswith("/ws/")):
            return None
        if method in MUTATIONS and path.startswith(ADMIN_PREFIXES):
            if not config.admin_token:
                return Forbidden("Admin token not configured")
            if token is None or not _matches(token, config.admin_token):
                return Forbidden("Admin token required")
            return None
        if not config.tokens:
            return AuthMisconfigured("Gateway auth enabled but no tokens configured")
        if token is None:
            return Unauthorized("Missing Authorization header")
        # Every token is compared, so the time taken does not say which one nearly matched.
        if not any([_matches(token, expected) for expected in config.tokens]):
            return Unauthorized("Invalid token")
        return None

"""Bearer auth at the edge of the gateway and of the server (``SIE_AUTH_MODE``): ``none``, or
``token``/``static`` with bearer tokens. An unknown mode never reaches here: the settings refuse to
start on one (a typo must not serve everyone).

Probes (``/healthz``, ``/readyz``) are always open, and ``/``, ``/health``, ``/metrics`` and the two
status sockets too with ``SIE_AUTH_EXEMPT_OPERATIONAL``: exact paths, so a route added later is not
opened by its prefix. Three scopes, one token each may hold:

- a **client** token (``SIE_AUTH_TOKENS``) runs inference and reads, ``POST /v1/configs/resolve``
  included (a read, though it is a POST);
- a **pool** token (``SIE_AUTH_POOL_TOKENS``, also a client token) creates pools, and renews,
  deletes and routes into the pools it created (the pool records a hash of it as its owner);
- the **admin** token (``SIE_ADMIN_TOKEN``) writes cluster config and manages every pool.

Tokens are compared in constant time, each of them, so the time taken does not say which nearly
matched. The caller's scopes travel in ``scope["state"]["principal"]`` for the handlers that check
ownership. Refusals are the edge's (``sie.http.errors``), in the process's envelope.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Receive, Scope, Send

from sie.errors import SieError
from sie.http.errors import AuthMisconfigured, Envelope, Forbidden, Unauthorized, error_response

ALWAYS_OPEN: Final = frozenset({"/healthz", "/readyz"})
OPERATIONAL: Final = frozenset({"/", "/health", "/metrics", "/ws/status", "/ws/cluster-status"})
CONFIG_PREFIXES: Final = ("/v1/config", "/v1/admin")
POOL_PREFIX: Final = "/v1/pools"
READS_BY_POST: Final = frozenset({"/v1/configs/resolve"})
MUTATIONS: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})
PRINCIPAL: Final = "principal"


class AuthMode(StrEnum):
    NONE = "none"
    TOKEN = "token"
    STATIC = "static"  # the public name's alias of ``token``


@dataclass(frozen=True)
class Principal:
    """Who a request is: ``owner`` is a one-way hash of its token (what a pool records), never the token."""

    owner: str | None
    admin: bool = False
    pools: bool = False

    def may_manage(self, pool_owner: str | None) -> bool:
        """The admin manages every pool; a pool token the pools it made; with auth off, anyone anything."""
        return self.admin or self.owner is None or (self.pools and pool_owner == self.owner)

    def may_route_into(self, pool_owner: str | None) -> bool:
        """A pool with an owner takes work from its owner and the admin only."""
        return self.admin or self.owner is None or pool_owner is None or pool_owner == self.owner


OPEN: Final = Principal(owner=None)


def owner_of(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()[:32]


def principal_of(connection: HTTPConnection) -> Principal:
    """The caller as the edge saw it; ``OPEN`` where auth is off (or for a process without it)."""
    found = connection.scope.get("state", {}).get(PRINCIPAL)
    return found if isinstance(found, Principal) else OPEN


@dataclass(frozen=True)
class AuthConfig:
    mode: AuthMode
    tokens: Sequence[str]
    admin_token: str | None
    exempt_operational: bool
    pool_tokens: Sequence[str] = ()

    @property
    def enabled(self) -> bool:
        return self.mode is not AuthMode.NONE


def _matches(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())


def _any_matches(given: str, expected: Sequence[str]) -> bool:
    return any([_matches(given, token) for token in expected])  # a list: every token is compared


def _bearer(scope: Scope) -> str | None:
    for key, value in scope.get("headers", []):
        if key == b"authorization":
            text: str = value.decode("latin-1").strip()
            return text[7:].strip() if text[:7].lower() == "bearer " else text
    return None


class Auth:
    def __init__(self, app: ASGIApp, config: AuthConfig, envelope: Envelope) -> None:
        self.app = app
        self.config = config
        self.envelope = envelope

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or not self.config.enabled:
            await self.app(scope, receive, send)
            return
        try:
            principal = self.authorize(scope.get("method", "GET"), scope["path"], _bearer(scope))
        except SieError as refusal:
            if scope["type"] == "http":
                await error_response(refusal, self.envelope)(scope, receive, send)
            else:
                await send({"type": "websocket.close", "code": 1008})
            return
        scope.setdefault("state", {})[PRINCIPAL] = principal
        await self.app(scope, receive, send)

    def authorize(self, method: str, path: str, token: str | None) -> Principal:
        """The caller's scopes for this request, or the refusal (raised) that answers it."""
        config = self.config
        if path in ALWAYS_OPEN or (config.exempt_operational and path in OPERATIONAL):
            return OPEN
        mutation = method in MUTATIONS and path not in READS_BY_POST
        if mutation and path.startswith(CONFIG_PREFIXES):
            return self._admin(token)
        if mutation and path.startswith(POOL_PREFIX):
            if not (token and config.pool_tokens and _any_matches(token, config.pool_tokens)):
                return self._admin(token)  # without pool tokens, pools are the admin's (the public rule)
            return Principal(owner_of(token), pools=True)
        admin = bool(token and config.admin_token and _matches(token, config.admin_token))
        if not config.tokens and not config.pool_tokens:
            raise AuthMisconfigured("Gateway auth enabled but no tokens configured")
        if token is None:
            raise Unauthorized("Missing Authorization header")
        pools = _any_matches(token, config.pool_tokens)
        if not (pools or _any_matches(token, config.tokens) or admin):
            raise Unauthorized("Invalid token")
        return Principal(owner_of(token), admin=admin, pools=pools)

    def _admin(self, token: str | None) -> Principal:
        admin_token = self.config.admin_token
        if not admin_token:
            raise Forbidden("Admin token not configured")
        if token is None or not _matches(token, admin_token):
            raise Forbidden("Admin token required")
        return Principal(owner_of(token), admin=True, pools=True)

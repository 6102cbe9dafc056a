"""Who may read and who may write configs: the public service's rules.

Reads take the config read token (``SIE_CONFIG_READ_TOKEN``), the inference token (``SIE_AUTH_TOKEN``,
not for the export, which holds the write lock while it is built) or the admin token; writes take the
admin token only. With no token configured the service is open (a laptop, a private network); in
production (``SIE_DEPLOYMENT_ENV``/``SIE_ENV``) it refuses to start that way (``refuse_open``).
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Final

from starlette.requests import Request

from sie.http.errors import Forbidden, Unauthorized

PRODUCTION: Final = frozenset({"prod", "production"})


class OpenInProduction(ValueError):
    """A production deployment with no token: the service would accept anyone's writes."""


@dataclass(frozen=True)
class Tokens:
    read: str | None  # SIE_CONFIG_READ_TOKEN
    inference: str | None  # SIE_AUTH_TOKEN: reads, but not the export
    admin: str | None  # SIE_ADMIN_TOKEN: writes, and every read

    @property
    def open(self) -> bool:
        return self.read is None and self.inference is None and self.admin is None


def refuse_open(deployment_env: str, tokens: Tokens) -> None:
    """At start: a production deployment must configure the tokens its reads and writes take."""
    if deployment_env.strip().lower() not in PRODUCTION:
        return
    if tokens.open:
        raise OpenInProduction(
            "sie-config requires SIE_ADMIN_TOKEN (and SIE_CONFIG_READ_TOKEN for reads) in production "
            "(SIE_DEPLOYMENT_ENV/SIE_ENV); refusing to serve unauthenticated"
        )


def bearer(request: Request) -> str:
    value = request.headers.get("Authorization", "").strip()
    return value[7:].strip() if value.lower().startswith("bearer ") else value


def _same(presented: str, expected: str) -> bool:
    return hmac.compare_digest(presented.encode(), expected.encode())


def require_read(request: Request, tokens: Tokens, *, export: bool = False) -> None:
    if tokens.open:
        return
    accepted = [tokens.read, tokens.admin] if export else [tokens.read, tokens.admin, tokens.inference]
    token = bearer(request)
    if not token:
        raise Unauthorized("Missing Authorization header")
    if not any(_same(token, expected) for expected in accepted if expected is not None):
        raise Forbidden("Invalid token")


def require_write(request: Request, tokens: Tokens) -> None:
    if tokens.admin is None:
        if not tokens.open:
            raise Forbidden("Write operations require SIE_ADMIN_TOKEN (read tokens are not sufficient).")
        return
    token = bearer(request)
    if not token:
        raise Unauthorized("Missing Authorization header")
    if not _same(token, tokens.admin):
        raise Forbidden("Admin token required for config mutations")

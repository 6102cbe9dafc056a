"""Who may read and who may write configs: the public service's rules.

Reads take the config read token (``SIE_CONFIG_READ_TOKEN``), the inference token (``SIE_AUTH_TOKEN``,
not for the export, which holds the write lock while it is built) or the admin token; writes take the
admin token only. With no token configured the service is open (a laptop, a private network); in
production (``SIE_DEPLOYMENT_ENV``/``SIE_ENV``) it refuses to start that way (``refuse_open``).
"""

from __future__ import annotations

import hmac
from typing import Final

from starlette.requests import Request

from sie.control.settings import ConfigServiceSettings
from sie.http.errors import Forbidden, Unauthorized

PRODUCTION: Final = frozenset({"prod", "production"})


class OpenInProduction(ValueError):
    """A production deployment with no token: the service would accept anyone's writes."""


def refuse_open(settings: ConfigServiceSettings) -> None:
    """At start: a production deployment must configure the tokens its reads and writes take."""
    if settings.deployment_env.strip().lower() not in PRODUCTION:
        return
    if all(t is None for t in (settings.admin_token, settings.config_read_token, settings.auth_token)):
        raise OpenInProduction(
            "sie-config requires SIE_ADMIN_TOKEN (and SIE_CONFIG_READ_TOKEN for reads) in production "
            "(SIE_DEPLOYMENT_ENV/SIE_ENV); refusing to serve unauthenticated"
        )


def bearer(request: Request) -> str:
    value = request.headers.get("Authorization", "").strip()
    return value[7:].strip() if value.lower().startswith("bearer ") else value


def _same(presented: str, expected: str) -> bool:
    return hmac.compare_digest(presented.encode(), expected.encode())


def require_read(request: Request, settings: ConfigServiceSettings, *, export: bool = False) -> None:
    tokens = [settings.config_read_token, settings.admin_token]
    if not export:
        tokens.append(settings.auth_token)
    configured = [settings.config_read_token, settings.auth_token, settings.admin_token]
    if all(t is None for t in configured):
        return
    token = bearer(request)
    if not token:
        raise Unauthorized("Missing Authorization header")
    if not any(_same(token, expected) for expected in tokens if expected is not None):
        raise Forbidden("Invalid token")


def require_write(request: Request, settings: ConfigServiceSettings) -> None:
    if settings.admin_token is None:
        if settings.config_read_token is not None or settings.auth_token is not None:
            raise Forbidden("Write operations require SIE_ADMIN_TOKEN (read tokens are not sufficient).")
        return
    token = bearer(request)
    if not token:
        raise Unauthorized("Missing Authorization header")
    if not _same(token, settings.admin_token):
        raise Forbidden("Admin token required for config mutations")

"""Who may read and who may write configs: the public service's rules.

Reads take the config read token (``SIE_CONFIG_READ_TOKEN``), the inference token (``SIE_AUTH_TOKEN``,
not for the export, which holds the write lock while it is built) or the admin token; writes take the
admin token only. With no token configured the service is open (a laptop, a private network), except
where ``SIE_DEPLOYMENT_ENV``/``SIE_ENV`` says production: then it refuses to serve unauthenticated.
"""

from __future__ import annotations

import hmac
import os
from typing import Final

from fastapi import HTTPException, Request

from sie.control.settings import ConfigServiceSettings

PRODUCTION: Final = frozenset({"prod", "production"})


def bearer(request: Request) -> str:
    value = request.headers.get("Authorization", "").strip()
    return value[7:].strip() if value.lower().startswith("bearer ") else value


def _same(presented: str, expected: str) -> bool:
    return hmac.compare_digest(presented.encode(), expected.encode())


def _refuse_open_in_production(*, write: bool) -> None:
    if any(
        os.environ.get(var, "").strip().lower() in PRODUCTION for var in ("SIE_DEPLOYMENT_ENV", "SIE_ENV")
    ):
        required = "SIE_ADMIN_TOKEN" if write else "SIE_CONFIG_READ_TOKEN (or SIE_ADMIN_TOKEN)"
        raise HTTPException(
            403, f"config service requires {required} in production (refusing to serve unauthenticated)"
        )


def require_read(request: Request, settings: ConfigServiceSettings, *, export: bool = False) -> None:
    tokens = [settings.config_read_token, settings.admin_token]
    if not export:
        tokens.append(settings.auth_token)
    configured = [settings.config_read_token, settings.auth_token, settings.admin_token]
    if all(t is None for t in configured):
        _refuse_open_in_production(write=False)
        return
    token = bearer(request)
    if not token:
        raise HTTPException(401, "Missing Authorization header")
    if not any(_same(token, expected) for expected in tokens if expected is not None):
        raise HTTPException(403, "Invalid token")


def require_write(request: Request, settings: ConfigServiceSettings) -> None:
    if settings.admin_token is None:
        if settings.config_read_token is not None or settings.auth_token is not None:
            raise HTTPException(
                403, "Write operations require SIE_ADMIN_TOKEN (read tokens are not sufficient)."
            )
        _refuse_open_in_production(write=True)
        return
    token = bearer(request)
    if not token:
        raise HTTPException(401, "Missing Authorization header")
    if not _same(token, settings.admin_token):
        raise HTTPException(403, "Admin token required for config mutations")

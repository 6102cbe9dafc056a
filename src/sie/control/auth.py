"""Who may read and who may write configs.

Writes take the admin token only. Reads, by the public service's rule, take the config read token
(``SIE_CONFIG_READ_TOKEN``), the inference token (``SIE_AUTH_TOKEN``, not for the export, which holds
the write lock while it is built) or the admin token, and ``/metrics`` is open. Once a read token is
set, reads and ``/metrics`` take it or the admin token and nothing else: every tenant holds the
inference token, and the catalogue (hub ids, weight paths, bundles) and the service's metrics are the
operator's. ``POST /v1/configs/resolve`` is a read. With no token configured the service is open (a
laptop, a private network); in production (``SIE_DEPLOYMENT_ENV``/``SIE_ENV``) it refuses to start that
way (``refuse_open``).
"""

from __future__ import annotations

import hmac
import logging
from dataclasses import dataclass
from typing import Final

from starlette.requests import Request

from sie.http.errors import Forbidden, Unauthorized

log = logging.getLogger(__name__)

PRODUCTION: Final = frozenset({"prod", "production"})


class OpenInProduction(ValueError):
    """A production deployment with no token: the service would accept anyone's writes."""


@dataclass(frozen=True)
class Tokens:
    read: str | None  # SIE_CONFIG_READ_TOKEN
    inference: str | None  # SIE_AUTH_TOKEN: reads (not the export) while no read token is set
    admin: str | None  # SIE_ADMIN_TOKEN: writes, and every read

    @property
    def open(self) -> bool:
        return self.read is None and self.inference is None and self.admin is None

    def readers(self, *, export: bool = False) -> list[str]:
        """The tokens a read takes."""
        if self.read is not None or export:
            candidates = [self.read, self.admin]
        else:
            candidates = [self.inference, self.admin]
        return [token for token in candidates if token is not None]


def refuse_open(deployment_env: str, tokens: Tokens) -> None:
    """At start: a production deployment must configure the tokens its reads and writes take; a read
    token equal to the admin token is one token that writes, said so."""
    if tokens.read is not None and tokens.admin is not None and _same(tokens.read, tokens.admin):
        log.warning(
            "SIE_CONFIG_READ_TOKEN equals SIE_ADMIN_TOKEN, so every holder of the read token can write "
            "configs; give the read token its own value"
        )
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
    token = bearer(request)
    if not token:
        raise Unauthorized("Missing Authorization header")
    if not any(_same(token, expected) for expected in tokens.readers(export=export)):
        raise Forbidden("Invalid token")


def require_metrics(request: Request, tokens: Tokens) -> None:
    """``/metrics`` is a read once a read token is set, and open before (as the public service's)."""
    if tokens.read is not None:
        require_read(request, tokens)


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

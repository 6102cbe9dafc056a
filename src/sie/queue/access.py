"""Who a process is to NATS and where NATS is: user and password, a token, an NKey seed or a creds
file, and TLS, from settings (never only inside the URL). Apart from ``connection`` so that the
settings, which every process reads, need no NATS client (the server installs without one): a URL is
logged with its user info replaced.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit


def redacted(url: str) -> str:
    """``url`` without its user info (``nats://user:secret@host`` → ``nats://***@host``)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))


@dataclass(frozen=True)
class NatsAccess:
    """Where NATS is and who this process is to it (the chart gives each role its own user)."""

    servers: list[str]
    user: str | None = None
    password: str | None = None
    token: str | None = None
    creds_file: Path | None = None
    nkey_seed_file: Path | None = None
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None

    def __repr__(self) -> str:  # a dataclass's own repr would print the password
        return f"NatsAccess({self.described()!r}, user={self.user!r})"

    def described(self) -> str:
        return ",".join(redacted(server) for server in self.servers)

    def tls(self) -> ssl.SSLContext | None:
        """TLS when a CA or a client certificate is set (a ``tls://`` URL alone uses the system CAs)."""
        if self.tls_ca is None and self.tls_cert is None:
            return None
        context = ssl.create_default_context(cafile=str(self.tls_ca) if self.tls_ca else None)
        if self.tls_cert is not None:
            context.load_cert_chain(str(self.tls_cert), str(self.tls_key) if self.tls_key else None)
        return context

    def options(self) -> dict[str, Any]:
        """nats-py's keyword arguments for these credentials."""
        options: dict[str, Any] = {}
        if self.user is not None:
            options["user"], options["password"] = self.user, self.password or ""
        if self.token is not None:
            options["token"] = self.token
        if self.creds_file is not None:
            options["user_credentials"] = str(self.creds_file)
        if self.nkey_seed_file is not None:
            options["nkeys_seed"] = str(self.nkey_seed_file)
        context = self.tls()
        if context is not None:
            options["tls"] = context
        return options

"""The upstreams this process loaded at startup, one client each, and the switch over all of them
(``SIE_REMOTE_SERVING``): what a remote profile asks for the client it calls."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

import httpx

from sie.catalog.catalog import CatalogEntry
from sie.engine.errors import ModelLoadFailed
from sie.upstream.client import UpstreamClient
from sie.upstream.config import REMOTE_SERVING_ENV, Upstream

log = logging.getLogger(__name__)

# The load-failure class a remote profile without a usable upstream reports, as a failed load does.
CONFIG_CLASS = "config"


class UpstreamPool:
    def __init__(
        self,
        upstreams: Mapping[str, Upstream],
        enabled: bool = True,
        transport: Callable[[str], httpx.AsyncBaseTransport | None] = lambda _: None,
    ) -> None:
        """``transport`` picks a transport per upstream name (tests route one to an in-process app)."""
        self.enabled = enabled
        self._clients = {name: UpstreamClient(name, up, transport(name)) for name, up in upstreams.items()}

    @property
    def names(self) -> list[str]:
        return sorted(self._clients)

    def client(self, entry: CatalogEntry) -> UpstreamClient:
        """The client a remote profile calls, or why it cannot: serving switched off, or an upstream
        the startup file does not define (502 ``MODEL_LOAD_FAILED``, as the public load fails)."""
        name = entry.profile.upstream or ""
        if not self.enabled:
            raise ModelLoadFailed(
                entry.name, f"remote serving is switched off ({REMOTE_SERVING_ENV})", 1, True, CONFIG_CLASS
            )
        found = self._clients.get(name)
        if found is None:
            log.warning(
                "model %r names upstream %r, which the upstreams file does not define", entry.name, name
            )
            raise ModelLoadFailed(
                entry.name,
                "its remote profile's upstream is not defined in this server's upstreams file",
                1,
                True,
                CONFIG_CLASS,
            )
        return found

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()

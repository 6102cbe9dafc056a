"""The upstreams this process loaded at startup, one client each, and the switch over all of them
(``SIE_REMOTE_SERVING``): what a remote profile asks for the client it calls.

The pool also keeps what ``/v1/models`` shows of each remote profile, as the public registry has it:
a remote profile "loads" when the first request reaches it (nothing is fetched: its upstream is looked
up), so it is ``available`` until then, ``loaded`` once its upstream was found, and ``failed`` with the
reason when it was not (remote serving off, or an upstream the file does not define)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Literal

import httpx

from sie.catalog.catalog import CatalogEntry
from sie.engine.errors import ModelLoadFailed
from sie.upstream.client import UpstreamClient
from sie.upstream.config import REMOTE_SERVING_ENV, Upstream

log = logging.getLogger(__name__)

# The load-failure class a remote profile without a usable upstream reports, as a failed load does.
CONFIG_CLASS = "config"

RemoteState = Literal["available", "loaded", "failed"]


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
        # What a request found for each (catalogue name, upstream) pair: None when its client was found.
        # Keyed by the upstream too, so a config that names another upstream starts over.
        self._found: dict[tuple[str, str], ModelLoadFailed | None] = {}

    @property
    def names(self) -> list[str]:
        return sorted(self._clients)

    @property
    def kinds(self) -> dict[str, str]:
        """Each loaded upstream's kind (``openai``, ``sie``), whether or not remote serving is on."""
        return {name: client.upstream.kind.value for name, client in self._clients.items()}

    def state(self, entry: CatalogEntry) -> tuple[RemoteState, ModelLoadFailed | None]:
        """What ``/v1/models`` shows for a remote profile: its state, and why it failed."""
        key = (entry.name, entry.profile.upstream or "")
        if key not in self._found:
            return "available", None
        failure = self._found[key]
        return ("loaded", None) if failure is None else ("failed", failure)

    def client(self, entry: CatalogEntry) -> UpstreamClient:
        """The client a remote profile calls, or why it cannot: serving switched off, or an upstream
        the startup file does not define (502 ``MODEL_LOAD_FAILED``, as the public load fails)."""
        name = entry.profile.upstream or ""
        try:
            found = self._find(entry, name)
        except ModelLoadFailed as failure:
            self._found[(entry.name, name)] = failure
            raise
        self._found[(entry.name, name)] = None
        return found

    def _find(self, entry: CatalogEntry, name: str) -> UpstreamClient:
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

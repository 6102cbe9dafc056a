"""How a gateway or a worker keeps up with ``sie-config``: bootstrap from the export, a fetch whenever
a delta on NATS says sie-config wrote, and the epoch polled to recover whatever the deltas missed.

The follower holds the writer's models as the server's ``ModelConfig``s and hands the whole set to
``apply`` whenever it changes; the process overlays them on the catalogue it started from (the
writer's copy of a model wins). What it holds only ever comes from sie-config's export, over HTTP
with the read token:

- a delta (``sie.config.models.{bundle}`` for a worker, ``sie.config.models._all`` for a gateway:
  ``sie.queue.contract``; the process subscribes and hands it to ``on_delta``) is only a trigger to
  read the writer's epoch now, and its export when the epoch moved. Its body is never applied: anyone
  who can publish on NATS can write any ``model_config`` and any ``router_id`` into one. What a flood
  of deltas sets off is coalesced, one look per ``DELTA_FETCH_INTERVAL_S``; a delta from a producer not
  in the trusted list sets off nothing (a filter against noise, not a defence: the fetch is);
- every ``poll_interval_s`` the epoch (and bundle set hash) is read; a difference fetches the export;
- every ``full_export_interval_s`` (0: never after the first) the export is fetched regardless.

The export is authoritative: it replaces the set, so a model gone from the writer goes here too.
A config that does not parse with this release's schema, or whose ``adapter_path`` is not a class of
the family table (``catalog.bundles.foreign_adapter``), is left out with one warning, never
half-applied.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

import httpx
import msgspec
import yaml
from pydantic import ValidationError

from sie.catalog.bundles import foreign_adapter
from sie.catalog.model_config import ModelConfig

log = logging.getLogger(__name__)

HTTP_TIMEOUT_S: Final = 10.0
FIRST_RETRY_S: Final = 1.0
MAX_RETRY_S: Final = 60.0
DELTA_FETCH_INTERVAL_S: Final = 0.5  # the most often deltas make a follower fetch the export

Apply = Callable[[dict[str, ModelConfig]], Awaitable[None]]


def trusted(producer: str, allowed: list[str]) -> bool:
    """``producer`` is an allowed id or starts with one and a dash (``sie-config`` → ``sie-config-0``)."""
    return any(producer == entry or producer.startswith(f"{entry}-") for entry in allowed)


@dataclass(frozen=True)
class FollowerSettings:
    url: str
    token: str | None
    poll_interval_s: float
    full_export_interval_s: float
    trusted_producers: list[str]
    trust_any_producer: bool = False


class Producer(msgspec.Struct):
    """The one thing a follower reads of a delta: who says it sent it (the rest is never read)."""

    producer_id: str | None = None
    router_id: str | None = None


class ConfigFollower:
    def __init__(
        self,
        settings: FollowerSettings,
        apply: Apply,
        name: str,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._settings = settings
        self._apply = apply
        self._name = name  # "gateway" or "worker": for the logs
        self.epoch: int | None = None  # None until the first export
        self.bundles_hash = ""
        self._seen_hash = ""  # the writer's bundle set hash as last polled; held once an export lands
        self.configs: dict[str, ModelConfig] = {}
        self.last_sync = 0.0  # monotonic time of the last export applied
        self._parsed: dict[str, ModelConfig | None] = {}  # raw YAML → parsed (None: left out)
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._fetch_due = False  # a delta asked for the export
        self._delta_fetched = -DELTA_FETCH_INTERVAL_S  # monotonic time of the last fetch a delta set off
        self._warned_untrusted = False
        headers = {"Authorization": f"Bearer {settings.token}"} if settings.token else {}
        self._http = httpx.AsyncClient(
            base_url=settings.url.rstrip("/"), headers=headers, timeout=HTTP_TIMEOUT_S, transport=transport
        )

    # -- the export and the epoch ------------------------------------------------------------
    async def _get(self, path: str) -> Any:
        response = await self._http.get(path)
        response.raise_for_status()
        return response.json()

    def _parse(self, model_id: str, text: str) -> ModelConfig | None:
        if text not in self._parsed:
            try:
                config = ModelConfig.model_validate(yaml.safe_load(text))
            except (yaml.YAMLError, ValidationError, ValueError) as exc:
                log.warning("config of %s from sie-config does not parse here; left out: %s", model_id, exc)
                self._parsed[text] = None
                return None
            paths = {config.resolve_profile(name).adapter_path for name in config.profiles}
            refused = sorted(filter(None, map(foreign_adapter, paths)))
            if refused:
                log.warning("config of %s from sie-config is left out: %s", model_id, "; ".join(refused))
            self._parsed[text] = None if refused else config
        return self._parsed[text]

    async def sync(self) -> list[str]:
        """Fetch the export and make it the set; the ids it added or changed."""
        snapshot = await self._get("/v1/configs/export")
        configs: dict[str, ModelConfig] = {}
        texts: set[str] = set()
        for model in snapshot.get("models") or []:
            text = model.get("raw_yaml")
            if not text:
                config = model.get("model_config")
                text = yaml.safe_dump(config, sort_keys=False) if isinstance(config, dict) else ""
            texts.add(text)
            parsed = self._parse(str(model.get("model_id")), text) if text else None
            if parsed is not None:
                configs[parsed.sie_id] = parsed
        # The parse cache keeps what the writer holds now: every text it ever held would otherwise stay.
        self._parsed = {text: parsed for text, parsed in self._parsed.items() if text in texts}
        async with self._lock:
            changed = sorted(i for i, config in configs.items() if self.configs.get(i) != config)
            differs = configs != self.configs
            self.configs = configs
            self.epoch = int(snapshot.get("epoch") or 0)
            self.bundles_hash = self._seen_hash
            self.last_sync = time.monotonic()
            if differs:
                await self._apply(dict(configs))
        log.info("%s: config epoch %d, %d models from sie-config", self._name, self.epoch, len(configs))
        return changed

    async def _poll(self) -> bool:
        """Whether the writer moved past what this follower holds."""
        answer = await self._get("/v1/configs/epoch")
        epoch, bundles_hash = int(answer.get("epoch") or 0), str(answer.get("bundles_hash") or "")
        moved = epoch != self.epoch or (bundles_hash and bundles_hash != self.bundles_hash)
        self._seen_hash = bundles_hash
        if moved and self.epoch is not None and epoch < self.epoch:
            log.warning(
                "sie-config's epoch went back (%d < %d): its store was lost? re-exporting", epoch, self.epoch
            )
        return bool(moved)

    async def run(self, stop: asyncio.Event) -> None:
        """Bootstrap (retrying with backoff), then poll until ``stop``."""
        wait = FIRST_RETRY_S
        while not stop.is_set() and self.epoch is None:
            try:
                await self._poll()
                await self.sync()
            except (httpx.HTTPError, ValueError) as exc:
                log.warning(
                    "%s: sie-config at %s not reachable (%s); retrying in %.0fs",
                    self._name,
                    self._settings.url,
                    exc,
                    wait,
                )
                await self._sleep(stop, wait)
                wait = min(wait * 2, MAX_RETRY_S)
        full = self._settings.full_export_interval_s
        while not stop.is_set():
            await self._sleep(stop, self._settings.poll_interval_s)
            if stop.is_set():
                break
            try:
                if self._fetch_due:
                    await self._fetch_for_delta(stop)
                    continue
                due = full > 0 and time.monotonic() - self.last_sync >= full
                if await self._poll() or due:
                    await self.sync()
            except (httpx.HTTPError, ValueError) as exc:
                log.warning("%s: config poll of %s failed: %s", self._name, self._settings.url, exc)

    async def _fetch_for_delta(self, stop: asyncio.Event) -> None:
        """What a delta asked for, no sooner than ``DELTA_FETCH_INTERVAL_S`` after the last time: the
        deltas that arrive meanwhile are answered by this one look. The epoch is read first and the
        export only if it moved, so forged deltas cost sie-config a cheap read; a writer without a
        store keeps epoch 0, and then only its export can tell."""
        wait = self._delta_fetched + DELTA_FETCH_INTERVAL_S - time.monotonic()
        if wait > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait)
            if stop.is_set():
                return
        self._fetch_due = False
        self._delta_fetched = time.monotonic()
        if await self._poll() or self.epoch == 0:
            changed = await self.sync()
            if changed:
                shown = ", ".join(changed[:10]) + (
                    f" and {len(changed) - 10} more" if len(changed) > 10 else ""
                )
                log.info(
                    "%s: after a config delta, epoch %d from sie-config: %s", self._name, self.epoch, shown
                )

    async def _sleep(self, stop: asyncio.Event, seconds: float) -> None:
        """Until ``stop``, a wake-up (``nudge``, a delta) or ``seconds``. A wake-up that came while the
        follower was busy is not lost: the event stays set until a sleep consumes it."""
        waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._wake.wait())]
        try:
            await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
        self._wake.clear()

    def nudge(self) -> None:
        """Poll now (a work item named a model this process does not know yet)."""
        self._wake.set()

    async def close(self) -> None:
        await self._http.aclose()

    # -- deltas ------------------------------------------------------------------------------
    async def on_delta(self, data: bytes) -> None:
        """A delta: fetch the export soon (``run`` does). Nothing of its body is applied."""
        try:
            sender = msgspec.json.decode(data, type=Producer)
        except msgspec.DecodeError:
            log.debug("%s: ignoring a malformed config delta", self._name)
            return
        producer = sender.producer_id or sender.router_id or ""
        if not self._settings.trust_any_producer and not trusted(producer, self._settings.trusted_producers):
            if not self._warned_untrusted:  # once: the producer is whatever the sender wrote
                self._warned_untrusted = True
                log.warning(
                    "%s: ignoring config deltas from untrusted producers (first: %r; "
                    "SIE_NATS_CONFIG_TRUSTED_PRODUCERS: %s)",
                    self._name,
                    producer[:64],
                    ",".join(self._settings.trusted_producers),
                )
            return
        self._fetch_due = True
        self._wake.set()

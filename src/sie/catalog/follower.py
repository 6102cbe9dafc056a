"""How a gateway or a worker keeps up with ``sie-config``: bootstrap from the export, live deltas on
NATS, and the epoch polled to recover whatever the deltas missed.

The follower holds the writer's models as the server's ``ModelConfig``s and hands the whole set to
``apply`` whenever it changes; the process overlays them on the catalogue it started from (the
writer's copy of a model wins). Three paths feed it, from fastest to surest:

- a delta (``sie.config.models.{bundle}`` for a worker, ``sie.config.models._all`` for a gateway:
  ``sie.queue.contract``; the process subscribes and hands it to ``on_delta``) from a trusted producer
  is applied at once; the local epoch advances only when the delta is the very
  next one, so a gap stays visible to the poll;
- every ``poll_interval_s`` the epoch (and bundle set hash) is read; a difference fetches the export;
- every ``full_export_interval_s`` (0: never after the first) the export is fetched regardless.

The export is authoritative: it replaces the set, so a model gone from the writer goes here too.
A config that does not parse with this release's schema is left out with one warning, never
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

from sie.catalog.model_config import ModelConfig

log = logging.getLogger(__name__)

HTTP_TIMEOUT_S: Final = 10.0
FIRST_RETRY_S: Final = 1.0
MAX_RETRY_S: Final = 60.0

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


class ConfigFollower:
    def __init__(self, settings: FollowerSettings, apply: Apply, name: str) -> None:
        self._settings = settings
        self._apply = apply
        self._name = name  # "gateway" or "worker": for the logs
        self.epoch: int | None = None  # None until the first export
        self.bundles_hash = ""
        self._seen_hash = ""  # the writer's bundle set hash as last polled; held once an export lands
        self.configs: dict[str, ModelConfig] = {}
        self.last_sync = 0.0  # monotonic time of the last export applied
        self._parsed: dict[str, ModelConfig | None] = {}  # raw YAML → parsed (None: does not parse)
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        headers = {"Authorization": f"Bearer {settings.token}"} if settings.token else {}
        self._http = httpx.AsyncClient(
            base_url=settings.url.rstrip("/"), headers=headers, timeout=HTTP_TIMEOUT_S
        )

    # -- the export and the epoch ------------------------------------------------------------
    async def _get(self, path: str) -> Any:
        response = await self._http.get(path)
        response.raise_for_status()
        return response.json()

    def _parse(self, model_id: str, text: str) -> ModelConfig | None:
        if text not in self._parsed:
            try:
                raw = yaml.safe_load(text)
                self._parsed[text] = ModelConfig.model_validate(raw)
            except (yaml.YAMLError, ValidationError, ValueError) as exc:
                log.warning("config of %s from sie-config does not parse here; left out: %s", model_id, exc)
                self._parsed[text] = None
        return self._parsed[text]

    async def sync(self) -> None:
        """Fetch the export and make it the set (under the lock: deltas wait)."""
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
        # The parse cache keeps what the writer holds now: every delta's text would otherwise stay for ever.
        self._parsed = {text: parsed for text, parsed in self._parsed.items() if text in texts}
        async with self._lock:
            changed = configs != self.configs
            self.configs = configs
            self.epoch = int(snapshot.get("epoch") or 0)
            self.bundles_hash = self._seen_hash
            self.last_sync = time.monotonic()
            if changed:
                await self._apply(dict(configs))
        log.info("%s: config epoch %d, %d models from sie-config", self._name, self.epoch, len(configs))

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
                due = full > 0 and time.monotonic() - self.last_sync >= full
                if await self._poll() or due:
                    await self.sync()
            except (httpx.HTTPError, ValueError) as exc:
                log.warning("%s: config poll of %s failed: %s", self._name, self._settings.url, exc)

    async def _sleep(self, stop: asyncio.Event, seconds: float) -> None:
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._wake.wait())]
            try:
                await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in waiters:
                    waiter.cancel()

    def nudge(self) -> None:
        """Poll now (a work item named a model this process does not know yet)."""
        self._wake.set()

    async def close(self) -> None:
        await self._http.aclose()

    # -- deltas ------------------------------------------------------------------------------
    async def on_delta(self, data: bytes) -> None:
        try:
            delta = msgspec.json.decode(data)
            producer = str(delta.get("producer_id") or delta.get("router_id") or "")
            epoch = int(delta["epoch"])
            text = str(delta.get("model_config") or "")
            model_id = str(delta.get("model_id") or "")
        except (msgspec.DecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            log.warning("%s: ignoring a malformed config delta: %s", self._name, exc)
            return
        if not self._settings.trust_any_producer and not trusted(producer, self._settings.trusted_producers):
            log.warning(
                "%s: ignoring a config delta from untrusted producer %r (SIE_NATS_CONFIG_TRUSTED_PRODUCERS: %s)",
                self._name,
                producer,
                ",".join(self._settings.trusted_producers),
            )
            return
        async with self._lock:
            if self.epoch is None:
                return  # the bootstrap's export will hold it
            config = self._parse(model_id, text) if text else None
            if text and config is None:
                return  # the epoch stays: the poll's export gets the writer's whole state
            if config is not None and self.configs.get(config.sie_id) != config:
                self.configs = {**self.configs, config.sie_id: config}
                await self._apply(dict(self.configs))
                log.info("%s: applied config delta for %s (epoch %d)", self._name, config.sie_id, epoch)
            if epoch == self.epoch + 1:
                self.epoch = epoch
            elif epoch > self.epoch + 1:
                self.nudge()  # a delta was missed: fetch the export now rather than at the next poll

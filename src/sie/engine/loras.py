"""The LoRA adapters of one loaded model: loaded in the background on first use, kept in LRU order.

A request naming a LoRA that is not loaded starts its load and is answered 503 ``LORA_LOADING`` with
``Retry-After: 1`` (the public SDK retries it); once loaded, the LoRA's items batch only with items of
the same LoRA (``Forward.lora``). At most ``capacity`` stay loaded: a load beyond that evicts the least
recently used LoRA that no request is using. A failed load is remembered for ``retry_after_s`` and
reported to the requests naming it (400, naming the LoRA and its load-failure class; the exception,
with its folders and URLs, goes to the log only), then tried again. At most ``max_failed`` failures
are remembered (the oldest forgotten first), so ids that fail cannot grow this without bound. Which
ids may get here at all is the registry's check (``weights.lora_sources``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from sie.adapters.contract import TakesLora
from sie.catalog.errors import InvalidInput
from sie.engine.errors import LoraLoading
from sie.engine.load_errors import LoadErrorClass, classify, told

log = logging.getLogger(__name__)

FAILED_LORA_RETRY_S: Final = 30.0
MAX_FAILED_LORAS: Final = 64


@dataclass
class _Lora:
    task: asyncio.Task[None] | None = field(default=None, repr=False)
    loaded: bool = False
    error: LoadErrorClass | None = None
    failed_at: float = 0.0
    users: int = 0  # requests between ``using`` and their answer


class Loras:
    def __init__(
        self,
        model: str,
        adapter: TakesLora,
        capacity: int,
        locate: Callable[[str], Path],
        device: Executor,
        retry_after_s: float = FAILED_LORA_RETRY_S,
        max_failed: int = MAX_FAILED_LORAS,
    ) -> None:
        self._model = model
        self._adapter = adapter
        self._capacity = capacity
        self._locate = locate
        self._device = device
        self._retry_after_s = retry_after_s
        self._max_failed = max_failed
        self._loras: OrderedDict[str, _Lora] = OrderedDict()  # least recently used first

    def loaded(self) -> list[str]:
        return [name for name, lora in self._loras.items() if lora.loaded]

    def preload(self, name: str) -> None:
        """Start loading ``name`` (a profile's LoRA, when its model loads); failures are only logged."""
        if name not in self._loras:
            self._start(name)

    @contextmanager
    def using(self, name: str | None) -> Iterator[str | None]:
        """Hold LoRA ``name`` for one request (None: the base model): raises ``LoraLoading`` while it
        loads and ``InvalidInput`` when its load failed; a held LoRA is never evicted."""
        if name is None:
            yield None
            return
        lora = self._ready(name)
        lora.users += 1
        try:
            yield name
        finally:
            lora.users -= 1

    def _ready(self, name: str) -> _Lora:
        lora = self._loras.get(name)
        if lora is not None and lora.error is not None:
            if time.monotonic() - lora.failed_at < self._retry_after_s:
                raise InvalidInput(
                    f"LoRA '{name}' for model '{self._model}' failed to load ({lora.error.value}): "
                    f"{told(lora.error)}"
                )
            del self._loras[name]
            lora = None
        if lora is None:
            self._start(name)
            raise LoraLoading(self._model, name)
        if not lora.loaded:
            raise LoraLoading(self._model, name)
        self._loras.move_to_end(name)
        return lora

    def _start(self, name: str) -> None:
        lora = _Lora()
        self._loras[name] = lora
        lora.task = asyncio.create_task(self._load(name, lora), name=f"lora:{self._model}:{name}")

    async def _load(self, name: str, lora: _Lora) -> None:
        started = time.perf_counter()
        loop = asyncio.get_running_loop()
        try:
            path = await asyncio.to_thread(self._locate, name)  # may download
            await loop.run_in_executor(self._device, self._adapter.load_lora, name, path)
        except Exception as exc:
            lora.error, lora.failed_at = classify(exc, 1).error_class, time.monotonic()
            log.warning(
                "LoRA %s for %s failed to load (%s): %s: %s",
                name,
                self._model,
                lora.error.value,
                type(exc).__name__,
                exc,
            )
            self._forget_failures()
            return
        if self._loras.get(name) is not lora:  # dropped while loading (model closed)
            await loop.run_in_executor(self._device, self._adapter.unload_lora, name)
            return
        lora.loaded = True
        log.info("LoRA %s for %s loaded in %.2f s", name, self._model, time.perf_counter() - started)
        await self._evict(keep=name)

    def _forget_failures(self) -> None:
        """Drop the oldest remembered failures beyond ``max_failed`` (a request for one loads anew)."""
        failed = [name for name, lora in self._loras.items() if lora.error is not None]
        for name in failed[: max(len(failed) - self._max_failed, 0)]:
            del self._loras[name]

    async def _evict(self, keep: str) -> None:
        """Unload least recently used LoRAs beyond the capacity; ones in use wait for a later load."""
        loop = asyncio.get_running_loop()
        while len(self.loaded()) > self._capacity:
            victim = next(
                (n for n, lora in self._loras.items() if lora.loaded and lora.users == 0 and n != keep), None
            )
            if victim is None:
                return
            del self._loras[victim]  # new requests for it start a fresh load, queued after this unload
            await loop.run_in_executor(self._device, self._adapter.unload_lora, victim)
            log.info("LoRA %s for %s evicted (at most %d loaded)", victim, self._model, self._capacity)

    def close(self) -> None:
        for lora in self._loras.values():
            if lora.task is not None and not lora.task.done():
                lora.task.cancel()
        self._loras.clear()

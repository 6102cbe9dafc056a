"""The one submit path every operation takes: prepare the inputs, queue them on the model's worker, await
every item. Where to prepare is decided here: tiny requests on the event loop, the rest on a pool."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from sie.adapters.batch import AnnotatedText, ImageData, MediaPair, ModelInput
from sie.adapters.contract import Trait
from sie.adapters.runtime.images import images_of
from sie.catalog.errors import InvalidInput
from sie.core.task import UnsupportedInput
from sie.engine.errors import future_safe
from sie.engine.pixels import ImageLimits, PixelBudget
from sie.engine.registry import Held
from sie.engine.runner import BatchGroup
from sie.engine.worker import ItemResult
from sie.wire.responses import Timing

# Requests with at most this many characters of text are tokenized on the event loop: a 10-word text
# takes 33 us there, while handing it to the pool costs the loop 55 us and the request ~120 us (two
# thread wake-ups). Longer texts go to the pool so the loop keeps admitting requests meanwhile.
INLINE_TOKENIZE_CHARS: Final = 160

R = TypeVar("R")


@dataclass(frozen=True)
class Inference:
    """One request's items through a model: per-item results in input order, and what preparing them
    cost (seconds, tokens)."""

    results: list[ItemResult]
    tokenization_ms: float
    tokens: int

    def timing(self, started: float, postprocessed: bool) -> Timing:
        results = self.results
        return Timing(
            total_ms=(time.perf_counter() - started) * 1000,
            queue_ms=max(r.queue_ms for r in results),
            tokenization_ms=self.tokenization_ms,
            inference_ms=max(r.inference_ms for r in results),
            postprocessing_ms=max(r.postprocessing_ms for r in results) if postprocessed else None,
        )

    @staticmethod
    def joined(parts: Sequence[Inference]) -> Inference:
        """Several submissions of one request (a score's query and documents) as one."""
        return Inference(
            [r for part in parts for r in part.results],
            sum(part.tokenization_ms for part in parts),
            sum(part.tokens for part in parts),
        )


def _input_chars(inputs: Sequence[ModelInput]) -> int:
    """Text size, for choosing where to prepare; an image always goes to the pool (decoding is slow)."""
    return sum(
        len(one)
        if isinstance(one, str)
        else len(one.data)
        if isinstance(one, ImageData)
        else len(one.text) + (INLINE_TOKENIZE_CHARS + 1 if one.metadata else 0)  # metadata: to the pool
        if isinstance(one, AnnotatedText)
        else INLINE_TOKENIZE_CHARS + 1  # a pair that may hold images: to the pool
        if isinstance(one, MediaPair)
        else len(one[0]) + len(one[1])
        for one in inputs
    )


class Infer:
    def __init__(self, preprocessor_workers: int, images: ImageLimits | None = None) -> None:
        self._pool = ThreadPoolExecutor(preprocessor_workers, thread_name_prefix="sie-tok")
        self._images = images or ImageLimits()
        self._pixels = PixelBudget(self._images.max_inflight_pixels)

    async def __call__(self, held: Held, inputs: list[ModelInput], group: BatchGroup) -> Inference:
        """Check the images from their headers, take their pixels from the engine's budget, prepare
        (on the loop when tiny, else on the pool), queue on the model's worker, await all. The pixels
        are given back once every item is answered (``sie.engine.pixels`` says why)."""
        adapter = held.model.adapter
        started = time.perf_counter()
        inline = (
            Trait.PREPARES_ON_POOL not in adapter.traits and _input_chars(inputs) <= INLINE_TOKENIZE_CHARS
        )
        images = images_of(inputs)
        pixels = await self._prepared_on(inline, self._images.pixels, images) if images else 0
        checked_ms = (time.perf_counter() - started) * 1000
        async with self._pixels.taken(pixels):
            preparing = time.perf_counter()
            prepare = future_safe(adapter.prepare)
            prepared = await self._prepared_on(inline, prepare, inputs, group.forward)
            tokenization_ms = checked_ms + (time.perf_counter() - preparing) * 1000
            futures = held.worker.submit(prepared, group)
            try:
                results: list[ItemResult] = await asyncio.gather(*futures)
            except BaseException:
                for future in futures:
                    future.cancel()
                raise
        return Inference(results, tokenization_ms, sum(item.cost for item in prepared))

    async def _prepared_on(self, inline: bool, call: Callable[..., R], *args: Any) -> R:
        """``call(*args)`` on the loop when ``inline``, else on the pool; a family's refusal of an
        input is the client's ``InvalidInput``."""
        try:
            if inline:
                return call(*args)
            return await asyncio.get_running_loop().run_in_executor(self._pool, call, *args)
        except UnsupportedInput as exc:
            raise InvalidInput(str(exc)) from exc

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

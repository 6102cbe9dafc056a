"""The one submit path every operation takes: prepare the inputs, queue them on the model's worker, await
every item. Where to prepare is decided here: tiny requests on the event loop, the rest on a pool."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from sie.adapters.batch import AnnotatedText, ImageData, ItemOutputs, MediaPair, ModelInput, Prepared
from sie.adapters.contract import Trait
from sie.adapters.runtime.images import images_of
from sie.catalog.errors import InvalidInput
from sie.core.extraction import Extraction
from sie.core.options import Capability, Modality
from sie.core.task import UnsupportedInput
from sie.engine.errors import RefusedItem, future_safe
from sie.engine.pixels import ImageLimits, PixelBudget
from sie.engine.registry import Held
from sie.engine.runner import BatchGroup
from sie.engine.worker import ItemResult
from sie.wire.responses import ContentTokens, ScoreUsage, Timing, Usage

# Requests with at most this many characters of text are tokenized on the event loop: a 10-word text
# takes 33 us there, while handing it to the pool costs the loop 55 us and the request ~120 us (two
# thread wake-ups). Longer texts go to the pool so the loop keeps admitting requests meanwhile.
INLINE_TOKENIZE_CHARS: Final = 160

R = TypeVar("R")


@dataclass(frozen=True)
class Inference:
    """One request's items through a model: per-item results in input order, the time preparing them
    took, and what they bill (``usage``): ``tokens`` (each item's ``Prepared.input_tokens``),
    ``images`` read (None for a model that takes none) and the pairs' ``content`` tokens (None unless
    every item told its own)."""

    results: list[ItemResult]
    tokenization_ms: float
    tokens: int
    images: int | None = None
    content: int | None = None
    item_tokens: tuple[int, ...] = ()  # each input's billed tokens (0 when it failed), in input order

    def timing(self, started: float, postprocessed: bool) -> Timing:
        results = self.results
        return Timing(
            total_ms=(time.perf_counter() - started) * 1000,
            queue_ms=max(r.queue_ms for r in results),
            tokenization_ms=self.tokenization_ms,
            inference_ms=max(r.inference_ms for r in results),
            postprocessing_ms=max(r.postprocessing_ms for r in results) if postprocessed else None,
        )

    def usage(self) -> Usage:
        return Usage(self.tokens, self.images)

    def score_usage(self) -> ScoreUsage:
        details = ContentTokens(self.content) if self.content is not None else None
        return ScoreUsage(self.tokens, self.images, details)

    @staticmethod
    def joined(parts: Sequence[Inference]) -> Inference:
        """Several submissions of one request (a score's query and documents) as one."""
        images = [part.images for part in parts if part.images is not None]
        contents = [part.content for part in parts]
        return Inference(
            [r for part in parts for r in part.results],
            sum(part.tokenization_ms for part in parts),
            sum(part.tokens for part in parts),
            sum(images) if images else None,
            None if None in contents else sum(c for c in contents if c is not None),
            tuple(t for part in parts for t in part.item_tokens),
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
    def __init__(
        self, preprocessor_workers: int, images: ImageLimits | None = None, image_workers: int = 1
    ) -> None:
        self._pool = ThreadPoolExecutor(preprocessor_workers, thread_name_prefix="sie-tok")
        # A request carrying images is checked and decoded on threads of its own (SIE_IMAGE_WORKERS),
        # so a burst of large images does not hold up the tokenization of text requests.
        self._image_pool = ThreadPoolExecutor(image_workers, thread_name_prefix="sie-img")
        self._images = images or ImageLimits()
        self._pixels = PixelBudget(self._images.max_inflight_pixels)

    async def __call__(self, held: Held, inputs: list[ModelInput], group: BatchGroup) -> Inference:
        """Check the images from their headers, take their pixels from the engine's budget, prepare
        (on the loop when tiny, else on the image pool when the request carries images, else on the
        tokenization pool), queue on the model's worker, await all. The pixels are given back once
        every item is answered (``sie.engine.pixels`` says why)."""
        adapter = held.model.adapter
        started = time.perf_counter()
        inline = (
            Trait.PREPARES_ON_POOL not in adapter.traits and _input_chars(inputs) <= INLINE_TOKENIZE_CHARS
        )
        images = images_of(inputs)
        where = None if inline else self._image_pool if images else self._pool
        pixels = await self._prepared_on(where, self._images.pixels, images) if images else 0
        checked_ms = (time.perf_counter() - started) * 1000
        async with self._pixels.taken(pixels):
            preparing = time.perf_counter()
            # On the loop a StopIteration is already a RuntimeError (a coroutine turns it into one);
            # only a pool's future needs the guard.
            prepare = adapter.prepare if where is None else future_safe(adapter.prepare)
            prepared = await self._prepared_on(where, prepare, inputs, group.forward)
            tokenization_ms = checked_ms + (time.perf_counter() - preparing) * 1000
            queued = [item for item in prepared if item.error is None]
            if len(queued) < len(prepared) and Capability.EXTRACT not in group.forward.outputs:
                index, error = next((i, p.error) for i, p in enumerate(prepared) if p.error is not None)
                raise RefusedItem(error, index)
            futures = held.worker.submit(queued, group) if queued else []
            try:
                # A lone item (most queries) is awaited as it is: gather's own future and callbacks
                # are a measurable share of a lone request.
                ran: list[ItemResult] = (
                    [await futures[0]] if len(futures) == 1 else await asyncio.gather(*futures)
                )
            except BaseException:
                for future in futures:
                    future.cancel()
                raise
        results = _in_input_order(prepared, ran)
        return _billed(results, tokenization_ms, inputs, prepared, Modality.IMAGE in adapter.inputs)

    async def _prepared_on(self, where: Executor | None, call: Callable[..., R], *args: Any) -> R:
        """``call(*args)`` on the loop when ``where`` is None, else on that pool; a family's refusal of
        an input is the client's ``InvalidInput``."""
        try:
            if where is None:
                return call(*args)
            return await asyncio.get_running_loop().run_in_executor(where, call, *args)
        except UnsupportedInput as exc:
            raise InvalidInput(str(exc)) from exc

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._image_pool.shutdown(wait=False, cancel_futures=True)


def _in_input_order(prepared: Sequence[Prepared], ran: Sequence[ItemResult]) -> list[ItemResult]:
    """Every item's result in input order: the ones that ran, and the refused ones answered with their
    error (an extraction's ``items[i].error``) without having waited for anything."""
    answers = iter(ran)
    return [
        next(answers)
        if item.error is None
        else ItemResult(ItemOutputs(extraction=Extraction(error=item.error)), 0.0, 0.0, 0.0)
        for item in prepared
    ]


def _billed(
    results: list[ItemResult],
    tokenization_ms: float,
    inputs: Sequence[ModelInput],
    prepared: Sequence[Prepared],
    takes_images: bool,
) -> Inference:
    """What ``usage`` reports: each item's ``input_tokens``, the images it read (counted for a model
    that takes images, 0 included) and its pair's ``content`` tokens when its family tells them. An
    item that failed (refused before the device, or given an ``error`` by its family's forward) is
    billed nothing, as the public server bills it."""
    ok = [r.outputs.extraction is None or r.outputs.extraction.error is None for r in results]
    billed = [(one, item) for one, item, good in zip(inputs, prepared, ok, strict=True) if good]
    contents = [item.content for _, item in billed]
    item_tokens = tuple(item.input_tokens if good else 0 for item, good in zip(prepared, ok, strict=True))
    return Inference(
        results,
        tokenization_ms,
        sum(item_tokens),
        len(images_of([one for one, _ in billed])) if takes_images else None,
        None if not contents or None in contents else sum(c for c in contents if c is not None),
        item_tokens,
    )

"""What a request's images may cost the engine, counted in pixels from their headers before any is
decoded (a 280 KB PNG can claim 88 million of them, 265 MB as RGB).

Three bounds, each at most the next: one image (``SIE_MAX_IMAGE_PIXELS``), one request's images
together (``SIE_MAX_REQUEST_PIXELS``), and every image the engine holds decoded at once, across the
requests and queue work items being prepared, queued and batched (``SIE_MAX_INFLIGHT_PIXELS``). The
first two are the client's error (400); the third is a wait: a request takes its pixels from the
budget before its images are decoded and gives them back when its last item is answered, since a
family may keep a decoded page in its prepared item until the batch runs (ColPali). In queue mode
each work item is its own request, so the in-flight budget is what bounds a worker's fetched batch.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from dataclasses import dataclass

from sie.adapters.batch import ImageData
from sie.adapters.runtime.images import MAX_PIXELS, image_size
from sie.catalog.errors import InvalidInput

_NOTHING: AbstractAsyncContextManager[None] = nullcontext()  # reusable: it holds no state


@dataclass(frozen=True)
class ImageLimits:
    """Pixels per image, per request and in flight (the models resize to about 2 MP at most)."""

    max_image_pixels: int = 40_000_000  # SIE_MAX_IMAGE_PIXELS
    max_request_pixels: int = 256_000_000  # SIE_MAX_REQUEST_PIXELS
    max_inflight_pixels: int = 1_024_000_000  # SIE_MAX_INFLIGHT_PIXELS

    def __post_init__(self) -> None:
        """Each bound at most the next: an image over the request's budget could never be served, a
        request over the in-flight budget would wait forever."""
        if not 0 < self.max_image_pixels <= MAX_PIXELS:
            raise ValueError(
                f"SIE_MAX_IMAGE_PIXELS (max_image_pixels) is {self.max_image_pixels}; it must be between "
                f"1 and {MAX_PIXELS}, Pillow's ceiling"
            )
        if self.max_request_pixels < self.max_image_pixels:
            raise ValueError(
                f"SIE_MAX_REQUEST_PIXELS ({self.max_request_pixels}) must be at least "
                f"SIE_MAX_IMAGE_PIXELS ({self.max_image_pixels})"
            )
        if self.max_inflight_pixels < self.max_request_pixels:
            raise ValueError(
                f"SIE_MAX_INFLIGHT_PIXELS ({self.max_inflight_pixels}) must be at least "
                f"SIE_MAX_REQUEST_PIXELS ({self.max_request_pixels})"
            )

    def pixels(self, images: Sequence[ImageData]) -> int:
        """The images' pixels, each read from its header; ``InvalidInput`` at the first image over
        its maximum or once the request's total passes its budget (the rest are not even opened).
        Runs on the CPU pool: parsing a header may read a few chunks of a hostile file."""
        total = 0
        for image in images:
            width, height = image_size(image)
            if width * height > self.max_image_pixels:
                raise InvalidInput(
                    f"Image of {width}x{height} ({width * height} pixels) is over the limit of "
                    f"{self.max_image_pixels} pixels per image (SIE_MAX_IMAGE_PIXELS). Send it smaller."
                )
            total += width * height
            if total > self.max_request_pixels:
                raise InvalidInput(
                    f"Request's images hold more than {self.max_request_pixels} pixels, the limit per "
                    "request (SIE_MAX_REQUEST_PIXELS). Send fewer or smaller images per request."
                )
        return total


class PixelBudget:
    """Pixels the engine may hold decoded at once, granted first come, first served: a request
    waits until its share fits, and no smaller one behind it overtakes it (it would never fit
    while smaller ones kept arriving). Loop-bound, like the rest of the engine's bookkeeping."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._waiting: deque[tuple[int, asyncio.Future[None]]] = deque()

    def taken(self, pixels: int) -> AbstractAsyncContextManager[None]:
        """``pixels`` of the budget for the duration of the block; ``pixels`` is at most ``limit``. A
        text request takes none, and pays no generator for it."""
        return self._holding(pixels) if pixels else _NOTHING

    @asynccontextmanager
    async def _holding(self, pixels: int) -> AsyncIterator[None]:
        await self._take(pixels)
        try:
            yield
        finally:
            self._give(pixels)

    async def _take(self, pixels: int) -> None:
        if pixels > self.limit:  # ImageLimits keeps a request's budget within this one
            raise ValueError(f"{pixels} pixels can never fit a budget of {self.limit}")
        if not self._waiting and self.used + pixels <= self.limit:
            self.used += pixels
            return
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (pixels, granted)
        self._waiting.append(entry)
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():  # granted, then cancelled: give it back
                self._give(pixels)
            else:
                self._waiting.remove(entry)
                self._wake()  # the head may have been what held the others back
            raise

    def _give(self, pixels: int) -> None:
        self.used -= pixels
        self._wake()

    def _wake(self) -> None:
        while self._waiting and self.used + self._waiting[0][0] <= self.limit:
            pixels, granted = self._waiting.popleft()
            self.used += pixels
            granted.set_result(None)

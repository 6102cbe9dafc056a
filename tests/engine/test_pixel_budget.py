"""The engine's pixel limits at the seam, with no model: ``ImageLimits.pixels`` reads sizes from the
headers and stops at the first image over a limit; ``PixelBudget`` grants pixels first come, first
served, and a cancelled waiter leaves nothing behind."""

from __future__ import annotations

import asyncio
import io

import pytest
from PIL import Image

from sie.adapters.batch import ImageData
from sie.catalog.errors import InvalidInput
from sie.engine.pixels import ImageLimits, PixelBudget


def _image(width: int, height: int) -> ImageData:
    out = io.BytesIO()
    Image.new("L", (width, height), 7).save(out, format="PNG")
    return ImageData(out.getvalue(), "png")


LIMITS = ImageLimits(max_image_pixels=10_000, max_request_pixels=25_000, max_inflight_pixels=50_000)


def test_pixels_are_the_sum_of_the_header_sizes() -> None:
    assert LIMITS.pixels([_image(100, 100), _image(50, 40), _image(1, 1)]) == 12_001


def test_the_first_image_over_its_limit_stops_the_count() -> None:
    """The image after it is not even opened: garbage there would otherwise be the error."""
    with pytest.raises(InvalidInput, match=r"101x100 \(10100 pixels\).*SIE_MAX_IMAGE_PIXELS"):
        LIMITS.pixels([_image(10, 10), _image(101, 100), ImageData(b"not an image")])


def test_a_request_over_its_budget_is_refused_at_the_image_that_passes_it() -> None:
    with pytest.raises(InvalidInput, match=r"more than 25000 pixels.*SIE_MAX_REQUEST_PIXELS"):
        LIMITS.pixels([_image(100, 100), _image(100, 100), _image(100, 51), ImageData(b"not an image")])


def test_limits_that_cannot_all_be_met_are_refused() -> None:
    with pytest.raises(ValueError, match="SIE_MAX_IMAGE_PIXELS"):
        ImageLimits(max_image_pixels=90_000_000)
    with pytest.raises(ValueError, match="SIE_MAX_REQUEST_PIXELS"):
        ImageLimits(max_image_pixels=10, max_request_pixels=9)
    with pytest.raises(ValueError, match="SIE_MAX_INFLIGHT_PIXELS"):
        ImageLimits(max_image_pixels=10, max_request_pixels=20, max_inflight_pixels=19)


async def _holding(budget: PixelBudget, pixels: int, release: asyncio.Event, log: list[int]) -> None:
    async with budget.taken(pixels):
        log.append(pixels)
        await release.wait()


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_share_that_does_not_fit_waits_and_no_smaller_one_overtakes_it() -> None:
    budget, log = PixelBudget(100), []
    first, second, third = asyncio.Event(), asyncio.Event(), asyncio.Event()
    tasks = [asyncio.create_task(_holding(budget, 60, first, log))]
    await _settle()
    tasks.append(asyncio.create_task(_holding(budget, 50, second, log)))
    await _settle()
    tasks.append(asyncio.create_task(_holding(budget, 10, third, log)))  # would fit, but waits its turn
    await _settle()
    assert (log, budget.used) == ([60], 60)
    first.set()
    await _settle()
    assert (log, budget.used) == ([60, 50, 10], 60)
    second.set()
    third.set()
    await asyncio.gather(*tasks)
    assert budget.used == 0


async def test_a_cancelled_waiter_takes_nothing_and_lets_the_next_in() -> None:
    budget, log = PixelBudget(100), []
    hold, never = asyncio.Event(), asyncio.Event()
    holder = asyncio.create_task(_holding(budget, 70, hold, log))
    await _settle()
    blocked = asyncio.create_task(_holding(budget, 80, never, log))  # heads the queue
    await _settle()
    small = asyncio.create_task(_holding(budget, 30, hold, log))  # fits, but behind it
    await _settle()
    assert log == [70]
    blocked.cancel()
    await _settle()
    assert (log, budget.used) == ([70, 30], 100)
    hold.set()
    await asyncio.gather(holder, small)
    assert blocked.cancelled() and budget.used == 0


async def test_a_waiter_cancelled_as_it_is_granted_gives_its_share_back() -> None:
    budget, log, never = PixelBudget(100), [], asyncio.Event()
    held = budget.taken(100)
    await held.__aenter__()
    waiter = asyncio.create_task(_holding(budget, 100, never, log))
    await _settle()
    await held.__aexit__(None, None, None)  # grants the waiter, which has not run since
    assert budget.used == 100
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert log == [] and budget.used == 0


async def test_no_pixels_take_no_turn() -> None:
    budget = PixelBudget(10)
    # A request without images never waits behind one with.
    async with budget.taken(10), budget.taken(0):
        assert budget.used == 10

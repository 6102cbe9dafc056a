"""The metered units a work result carries, under the public worker's names (``input_tokens``,
``images``, ``content_input_tokens``): the worker takes them from its response's ``usage``, the
gateway sums a request's results back into one ``usage``.

Only counts travel (never an estimate); a key a result does not carry was not counted there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from sie.wire.responses import ContentTokens, ScoreUsage, Usage

INPUT_TOKENS: Final = "input_tokens"
IMAGES: Final = "images"
CONTENT_INPUT_TOKENS: Final = "content_input_tokens"


def units_of(usage: Usage | ScoreUsage) -> dict[str, int]:
    units = {INPUT_TOKENS: usage.input_tokens}
    if usage.images is not None:
        units[IMAGES] = usage.images
    if isinstance(usage, ScoreUsage) and usage.input_tokens_details is not None:
        units[CONTENT_INPUT_TOKENS] = usage.input_tokens_details.content_tokens
    return units


def summed(results: Sequence[Mapping[str, int] | None]) -> ScoreUsage:
    """One request's usage from its results' units: tokens summed, ``images`` where any result
    counted images, the content tokens only where every result told them (a partial sum would
    under-report the content and over-report the template)."""
    told = [units or {} for units in results]
    images = [units[IMAGES] for units in told if IMAGES in units]
    contents = [units.get(CONTENT_INPUT_TOKENS) for units in told]
    content = sum(c for c in contents if c is not None) if told and None not in contents else None
    return ScoreUsage(
        sum(units.get(INPUT_TOKENS, 0) for units in told),
        sum(images) if images else None,
        ContentTokens(content) if content is not None else None,
    )


def plain(usage: ScoreUsage) -> Usage:
    """An encode or extract response's ``usage``: no content breakdown there."""
    return Usage(usage.input_tokens, usage.images)

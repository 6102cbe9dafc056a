"""Reading a document longer than a model's word window as overlapping windows, and merging what
each window found back into one answer for the document.

GLiNER reads at most ``max_len`` words (384 for most checkpoints) and drops the rest with a warning,
so an entity on page two of a document would be silently missed. A longer document is read as
windows of ``max_len`` words, each sharing ``overlap`` words with the one before. Every span is
taken from exactly one window: the window that *owns* the word it starts at, ownership changing
hands in the middle of each overlap. A span owned there starts at least ``overlap / 2`` words inside
its window and, being at most that long, ends inside it too, so no span is taken from a window edge
where it may have been cut, and none is found twice. Spans of neighbouring windows are decoded
apart, so they may still overlap each other; ``resolve_overlaps`` settles that as the library's
greedy decoding would (highest score first).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from sie.core.extraction import Entity

# gliner's whitespace word splitter (a run of word characters, or one other character), which glirel
# splits its words with too: the words windows are counted in.
WORD: Final = re.compile(r"\w+(?:[-_]\w+)*|\S")
# Words a window shares with the one before: GLiNER's spans are at most 12 words (``max_width``), so
# a span owned by a window (starting at least 32 words from its edge) is whole inside it.
WINDOW_OVERLAP_WORDS: Final = 64
# Most windows one document is read in (about 40,000 words at 384 a window); a longer one is refused
# rather than read in part.
MAX_WINDOWS: Final = 128


@dataclass(frozen=True)
class Window:
    """``text[start:end]`` is read whole; it owns the spans that start in ``[own_from, own_to)``."""

    start: int
    end: int
    own_from: int
    own_to: int


def overlap_for(max_words: int) -> int:
    """The overlap for a window of ``max_words``: at most half of it, so every window reads new words."""
    return min(WINDOW_OVERLAP_WORDS, max_words // 2)


def plan_windows(
    words: Sequence[tuple[int, int]], max_words: int, text_length: int, overlap: int | None = None
) -> list[Window]:
    """Windows over a document's words (``(start, end)`` character offsets, in order); one window of
    the whole text when its words fit in one. ``overlap``: the words each shares with the one before
    (``overlap_for`` when None; below ``max_words``)."""
    count = len(words)
    if count <= max_words:
        return [Window(0, text_length, 0, text_length + 1)]
    overlap = overlap_for(max_words) if overlap is None else overlap
    stride = max_words - overlap
    firsts = list(range(0, count - overlap, stride))
    # Ownership passes to the next window in the middle of the overlap the two share.
    owned_from = [0] + [first + overlap // 2 for first in firsts[1:]]
    windows = []
    for index, first in enumerate(firsts):
        last = min(first + max_words, count) - 1
        own_to = words[owned_from[index + 1]][0] if index + 1 < len(firsts) else text_length + 1
        own_from = words[owned_from[index]][0] if index else 0
        windows.append(Window(words[first][0], words[last][1], own_from, own_to))
    return windows


def owned(window: Window, found: Sequence[Entity], text: str) -> list[Entity]:
    """The spans ``window`` found (offsets into its own text) that it owns, with document offsets."""
    kept = []
    for entity in found:
        start, end = (entity.start or 0) + window.start, (entity.end or 0) + window.start
        if window.own_from <= start < window.own_to:
            kept.append(Entity(text[start:end], entity.label, entity.score, start, end))
    return kept


def resolve_overlaps(entities: Sequence[Entity], flat: bool, multi_label: bool) -> list[Entity]:
    """Highest score first, a span is kept unless it clashes with one kept already: with ``flat`` any
    overlap clashes, otherwise only a partial one (nesting is allowed); the same span under another
    label clashes unless ``multi_label``. In document order."""
    kept: list[Entity] = []
    for entity in sorted(entities, key=lambda e: -e.score):
        if not any(_clash(entity, other, flat, multi_label) for other in kept):
            kept.append(entity)
    return sorted(kept, key=lambda e: (e.start or 0, e.end or 0))


def _clash(a: Entity, b: Entity, flat: bool, multi_label: bool) -> bool:
    a_start, a_end, b_start, b_end = a.start or 0, a.end or 0, b.start or 0, b.end or 0
    if (a_start, a_end) == (b_start, b_end):
        return not multi_label
    if a_start >= b_end or b_start >= a_end:
        return False
    nested = (a_start <= b_start and b_end <= a_end) or (b_start <= a_start and a_end <= b_end)
    return flat or not nested

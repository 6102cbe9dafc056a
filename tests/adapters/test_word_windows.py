"""Windows over a long document's words, which window owns a span, and settling overlaps between
spans that different windows found."""

from __future__ import annotations

import itertools

import pytest

from sie.adapters.runtime.word_windows import (
    WINDOW_OVERLAP_WORDS,
    Window,
    overlap_for,
    owned,
    plan_windows,
    resolve_overlaps,
)
from sie.core.extraction import Entity


def words_of(text: str) -> list[tuple[int, int]]:
    spans, at = [], 0
    for word in text.split(" "):
        spans.append((at, at + len(word)))
        at += len(word) + 1
    return spans


def test_a_text_that_fits_is_one_window_of_all_of_it():
    text = "one two three"
    assert plan_windows(words_of(text), 3, len(text)) == [Window(0, len(text), 0, len(text) + 1)]


@pytest.mark.parametrize(("count", "max_words"), [(100, 40), (81, 40), (80, 40), (1000, 384), (5, 1), (7, 2)])
def test_windows_cover_every_word_and_each_word_has_one_owner_with_context_either_side(count, max_words):
    text = " ".join(f"w{i}" for i in range(count))
    words = words_of(text)
    windows = plan_windows(words, max_words, len(text))
    overlap = overlap_for(max_words)
    starts = [s for s, _ in words]
    spans = [
        (starts.index(w.start), next(i for i, (_, e) in enumerate(words) if e == w.end)) for w in windows
    ]
    assert all(last - first + 1 <= max_words for first, last in spans)
    assert spans[0][0] == 0 and spans[-1][1] == count - 1
    # Each window starts ``overlap`` words before the one before it ends: no gap, no extra window.
    assert all(b_first == a_last + 1 - overlap for (_, a_last), (b_first, _) in itertools.pairwise(spans))
    for index, word_start in enumerate(starts):
        owners = [k for k, w in enumerate(windows) if w.own_from <= word_start < w.own_to]
        assert len(owners) == 1, index
        first, last = spans[owners[0]]
        assert first <= index <= last
        # A span of up to overlap/2 words starting here ends inside the owner.
        assert index + overlap // 2 - 1 <= last or last == count - 1
        assert index - first >= overlap // 2 or first == 0
    if count > max_words:
        assert len(windows) == len(range(0, count - overlap, max_words - overlap))


def test_the_overlap_is_64_words_or_half_a_small_window():
    assert overlap_for(384) == WINDOW_OVERLAP_WORDS == 64
    assert overlap_for(24) == 12 and overlap_for(1) == 0


def entity(start: int, end: int, label: str = "person", score: float = 0.9, text: str = "") -> Entity:
    return Entity(text or "x" * (end - start), label, score, start, end)


def test_owned_spans_move_to_document_offsets_and_slice_from_the_document():
    text = "aaaa Alice bbbb Bob"
    window = Window(5, len(text), own_from=11, own_to=len(text) + 1)
    found = [entity(0, 5, score=0.8), entity(11, 14, score=0.7)]  # "Alice" (not owned), "Bob"
    assert owned(window, found, text) == [Entity("Bob", "person", 0.7, 16, 19)]


def test_flat_keeps_no_overlap_highest_score_first():
    a, b, c = entity(0, 10, score=0.6), entity(5, 15, score=0.9), entity(20, 25, score=0.5)
    assert resolve_overlaps([a, b, c], flat=True, multi_label=False) == [b, c]


def test_nested_keeps_nesting_but_not_partial_overlap():
    outer, inner, partial = entity(0, 20, score=0.9), entity(5, 10, score=0.8), entity(15, 25, score=0.7)
    assert resolve_overlaps([partial, inner, outer], flat=False, multi_label=False) == [outer, inner]


def test_the_same_span_under_two_labels_only_with_multi_label():
    person, place = entity(0, 5, "person", 0.9), entity(0, 5, "location", 0.8)
    assert resolve_overlaps([place, person], flat=True, multi_label=False) == [person]
    assert resolve_overlaps([place, person], flat=True, multi_label=True) == [person, place]

"""Bounded stand-ins for the three places GLiFormer's decoding does work that grows with the square
of a document's length, put in place of the library's own (``install``, once per process).

The library reads a head's BIO scores (start, end, inside per word and class) into spans:

- ``SpanDecoder._calculate_span_score`` pairs, in Python, every start above the threshold with every
  end of its class and checks the inside scores between them: a document whose every word clears a
  low threshold pairs millions (35 s for a 256-word document on a random-weight model). Here the
  pairs come from tensor operations (each start's ends lie before the next word whose inside score
  is below the threshold; a sparse table gives the minimum inside score of any range), a few
  thousand at a time.
- ``SpanDecoder.greedy_search`` kept the best spans that overlap none kept before, comparing each
  with every one kept; for flat (non-overlapping) decoding, an occupancy count per word answers
  the same question in one slice.
- GLiNER's ``extract_spans_from_tokens`` proposes the structuring head's entity candidates from a
  starts x ends matrix over every class at once; here class by class.

A document keeps at most ``MAX_SPANS`` candidate spans and ``MAX_PROPOSALS`` structuring proposals
(the public server's bounds): every one, in the library's order and with its scores, when it has
fewer; else the best-scoring ones (ties in the library's order), which are the ones overlap removal
takes first. tests/adapters/test_gliformer_decoding.py holds each to the library's original on random
scores.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any, Final

import gliformer.tasks.anchored_extraction as anchored_extraction
import gliformer.tasks.structuring.model as structuring_model
import torch
from gliformer.tasks.span_decoder import Span, SpanDecoder

MAX_SPANS: Final = 4096
MAX_PROPOSALS: Final = 2048
# Start-end pairs scored at a time: a few tens of megabytes of tensors whatever the document.
_PAIRS_AT_ONCE: Final = 1 << 20
_INSTALLED = threading.Lock()
ORIGINALS: Final[dict[str, Any]] = {}


def install() -> None:
    """Put the bounded functions in place of the library's (once; later calls do nothing)."""
    with _INSTALLED:
        if ORIGINALS:
            return
        ORIGINALS["span_score"] = SpanDecoder._calculate_span_score
        ORIGINALS["greedy_search"] = SpanDecoder.greedy_search
        ORIGINALS["propose"] = structuring_model.extract_spans_from_tokens
        SpanDecoder._calculate_span_score = span_candidates
        SpanDecoder.greedy_search = select_spans
        structuring_model.extract_spans_from_tokens = propose_spans
        anchored_extraction.extract_spans_from_tokens = propose_spans


class _RangeMinimum:
    """The minimum of ``values[i..j]`` (inclusive) along the first axis, for many (i, j) at once."""

    def __init__(self, values: torch.Tensor) -> None:
        self._levels = [values]
        width = 1
        while 2 * width <= values.shape[0]:
            last = self._levels[-1]
            self._levels.append(torch.minimum(last[:-width], last[width:]))
            width *= 2

    def __call__(self, first: torch.Tensor, last: torch.Tensor, column: int) -> torch.Tensor:
        span = last - first + 1
        level = torch.floor(torch.log2(span.to(torch.float64))).to(torch.int64)
        out = torch.empty(first.shape, dtype=self._levels[0].dtype)
        for k in torch.unique(level).tolist():
            rows = level == k
            table = self._levels[k][:, column]
            out[rows] = torch.minimum(table[first[rows]], table[last[rows] - (1 << k) + 1])
        return out


def _pairs(
    starts: torch.Tensor, ends: torch.Tensor, limits: torch.Tensor
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(start index, end index) pairs, ``starts[i] <= ends[j] < limits[i]`` (both ascending), in
    start-major order, ``_PAIRS_AT_ONCE`` at most at a time."""
    first = torch.searchsorted(ends, starts)
    stop = torch.searchsorted(ends, limits)
    counts = (stop - first).clamp(min=0)
    begin = 0
    while begin < len(starts):
        total = torch.cumsum(counts[begin:], 0)
        end = begin + max(1, int(torch.searchsorted(total, _PAIRS_AT_ONCE, right=True)))
        chunk = counts[begin:end]
        rows = torch.repeat_interleave(torch.arange(begin, end), chunk)
        offsets = torch.arange(int(chunk.sum())) - torch.repeat_interleave(
            torch.cumsum(chunk, 0) - chunk, chunk
        )
        if len(rows):
            yield rows, first[rows] + offsets
        begin = end


def _reach(stops: torch.Tensor) -> torch.Tensor:
    """For each word and class, the first word at or after it where ``stops`` holds (a span cannot
    reach it); the number of words when none."""
    words = stops.shape[0]
    positions = torch.arange(words).unsqueeze(1).expand_as(stops)
    marked = torch.where(stops, positions, torch.full_like(positions, words))
    return torch.flip(torch.cummin(torch.flip(marked, (0,)), 0).values, (0,))


def _class_pairs(
    starts: tuple[torch.Tensor, torch.Tensor],
    ends: tuple[torch.Tensor, torch.Tensor],
    reach: torch.Tensor,
    max_width: int | None = None,
    classes: Collection[int] | None = None,
) -> Iterator[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """The (start, end) word pairs of one class a span may join, class by class (those in
    ``classes`` when given) and a few at a time: (class, each pair's start entry (its index in
    ``starts``, the library's order), its start word, its end word). ``starts`` and ``ends`` are
    (words, classes) in the library's order; an end lies before ``reach`` of its start."""
    start_words, start_classes = starts
    end_words, end_classes = ends
    entry = torch.arange(len(start_words))
    for column in torch.unique(start_classes).tolist():
        if classes is not None and column not in classes:
            continue
        mine = start_classes == column
        first_words, entries = start_words[mine], entry[mine]
        last_words = end_words[end_classes == column]
        limits = reach[first_words, column]
        if max_width is not None:
            limits = torch.minimum(limits, first_words + max_width)
        for rows, at in _pairs(first_words, last_words, limits):
            yield column, entries[rows], first_words[rows], last_words[at]


class _Best:
    """The best ``keep`` of a stream of scored candidates, ties in order of their ``rank`` (the
    library's order); all of them when fewer."""

    def __init__(self, keep: int) -> None:
        self._keep = keep
        self._parts: list[tuple[torch.Tensor, ...]] = []
        self._size = 0

    def add(self, score: torch.Tensor, rank: torch.Tensor, *fields: torch.Tensor) -> None:
        self._parts.append((score, rank, *fields))
        self._size += len(score)
        if self._size > 2 * self._keep:
            self._parts = [self._cut()]
            self._size = len(self._parts[0][0])

    def _cut(self) -> tuple[torch.Tensor, ...]:
        columns = [torch.cat(column) for column in zip(*self._parts, strict=True)]
        if len(columns[0]) > self._keep:
            by_rank = torch.argsort(columns[1], stable=True)
            columns = [column[by_rank] for column in columns]
            best = torch.argsort(-columns[0], stable=True)[: self._keep]
            columns = [column[best] for column in columns]
        return tuple(columns)

    def in_rank_order(self) -> tuple[torch.Tensor, ...]:
        if not self._parts:
            return ()
        columns = self._cut()
        order = torch.argsort(columns[1], stable=True)
        return tuple(column[order] for column in columns)


def span_candidates(
    self: SpanDecoder,
    start_idx: Sequence[Sequence[int]],
    end_idx: Sequence[Sequence[int]],
    scores_inside: torch.Tensor,
    scores_start: torch.Tensor,
    scores_end: torch.Tensor,
    id_to_classes: dict[int, str],
    threshold: float,
    max_width: int | None = None,
) -> list[Span]:
    """``SpanDecoder._calculate_span_score``: every (start, end) of one class, start <= end, whose
    inside scores all clear ``threshold``, scored by the least of its inside, start and end scores
    and of one minus the inside scores just outside it; in the library's order (start entry, then
    end), at most ``MAX_SPANS`` (the best)."""
    if not start_idx[0] or not end_idx[0]:
        return []
    inside, start, end = (
        scores.detach().float().cpu() for scores in (scores_inside, scores_start, scores_end)
    )
    words = inside.shape[0]
    starts = (torch.tensor(start_idx[0]), torch.tensor(start_idx[1]))
    ends = (torch.tensor(end_idx[0]), torch.tensor(end_idx[1]))
    outside = torch.full((1, inside.shape[1]), float("inf"))
    left = torch.cat([outside, 1.0 - inside[:-1]])  # one minus the inside score before a word
    right = torch.cat([1.0 - inside[1:], outside])  # ... and after it
    minimum = _RangeMinimum(inside)
    best = _Best(MAX_SPANS)
    classes = set(id_to_classes) if id_to_classes else None
    for column, entries, first, last in _class_pairs(
        starts, ends, _reach(inside < threshold), max_width, classes
    ):
        score = torch.minimum(minimum(first, last, column), start[first, column])
        score = torch.minimum(score, end[last, column])
        score = torch.minimum(score, torch.minimum(left[first, column], right[last, column]))
        best.add(score, entries * words + last, first, last, torch.full_like(first, column))
    found = best.in_rank_order()
    if not found:
        return []
    score, _, first, last, columns = found
    return [
        Span(start=s, end=e, entity_type=id_to_classes.get(c, str(c)), score=v)
        for s, e, c, v in zip(first.tolist(), last.tolist(), columns.tolist(), score.tolist(), strict=True)
    ]


def select_spans(
    self: SpanDecoder, spans: list[Span], flat_ner: bool = True, multi_label: bool = False
) -> list[Span]:
    """``SpanDecoder.greedy_search``: best first, each span kept unless it overlaps one kept before
    (with ``multi_label``, a span over the very words of a kept one does not overlap it); sorted by
    start. Flat decoding counts the kept spans over each word instead of comparing pairs; nested
    decoding is the library's own."""
    if not flat_ner:
        original: Callable[..., list[Span]] = ORIGINALS["greedy_search"]
        return original(self, spans, flat_ner, multi_label)
    if not spans:
        return []
    covered = torch.zeros(max(span.end for span in spans) + 2, dtype=torch.int32)
    exact: dict[tuple[int, int], int] = {}
    kept = []
    for span in sorted(spans, key=lambda one: -one.score):
        # Spans over these very words may be kept already only with multi_label (0 otherwise): the
        # span overlaps nothing when every word it covers is covered by those alone.
        same = exact.get((span.start, span.end), 0) if multi_label else 0
        if int(covered[span.start : span.end + 1].max()) == same:
            kept.append(span)
            covered[span.start : span.end + 1] += 1
            exact[(span.start, span.end)] = same + 1
    kept.sort(key=lambda one: one.start)
    return kept


def propose_spans(
    scores: torch.Tensor, labels: torch.Tensor | None = None, threshold: float = 0.5
) -> tuple[torch.Tensor, torch.Tensor]:
    """GLiNER's ``extract_spans_from_tokens`` for inference: each document's (start, end) spans of
    one class whose start, end and every inside probability exceed ``threshold``, in its order
    (start word and class, then end word), at most ``MAX_PROPOSALS`` (by the least of those
    probabilities); padded ``[B, N, 2]`` with its mask. Training labels go to the original."""
    if labels is not None:
        original: Callable[..., tuple[torch.Tensor, torch.Tensor]] = ORIGINALS["propose"]
        return original(scores, labels, threshold)
    device = scores.device
    probabilities = torch.sigmoid(scores.detach()).cpu()  # in the scores' dtype, as the original compares
    documents = []
    for sample in probabilities:
        documents.append(_proposals(sample, threshold))
    count = max([len(spans) for spans in documents] + [1])
    span_idx = torch.zeros(len(documents), count, 2, dtype=torch.long)
    span_mask = torch.zeros(len(documents), count, dtype=torch.bool)
    for row, spans in enumerate(documents):
        span_idx[row, : len(spans)] = spans
        span_mask[row, : len(spans)] = True
    return span_idx.to(device), span_mask.to(device)


def _proposals(sample: torch.Tensor, threshold: float) -> torch.Tensor:
    words = sample.shape[0]
    start, end, inside = sample[..., 0], sample[..., 1], sample[..., 2]
    start_words, start_classes = (start > threshold).nonzero(as_tuple=True)
    end_words, end_classes = (end > threshold).nonzero(as_tuple=True)
    if not len(start_words) or not len(end_words):
        return torch.empty(0, 2, dtype=torch.long)
    minimum = _RangeMinimum(inside)
    best = _Best(MAX_PROPOSALS)
    for column, entries, first, last in _class_pairs(
        (start_words, start_classes), (end_words, end_classes), _reach(~(inside > threshold))
    ):
        score = torch.minimum(
            minimum(first, last, column), torch.minimum(start[first, column], end[last, column])
        )
        best.add(score.float(), entries * words + last, first, last)
    found = best.in_rank_order()
    if not found:
        return torch.empty(0, 2, dtype=torch.long)
    return torch.stack([found[2], found[3]], dim=1)

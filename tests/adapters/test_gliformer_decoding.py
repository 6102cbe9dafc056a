"""The bounded stand-ins for GLiFormer's span decoding against the library's own functions.

On random BIO scores (runs of words that all clear the threshold, and words that clear none, at many
thresholds, widths and label counts) each stand-in answers exactly what the original answers: the
same spans, in the same order, with the same float scores. Past its bound it keeps the best
candidates, ties in the original's order.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch
from gliformer.tasks.span_decoder import Span, SpanDecoder

from sie.adapters.gliformer import decoding as gliformer_decoding
from sie.adapters.gliformer.decoding import install, propose_spans, select_spans, span_candidates

install()
ORIGINAL_SCORE = gliformer_decoding.ORIGINALS["span_score"]
ORIGINAL_GREEDY = gliformer_decoding.ORIGINALS["greedy_search"]
ORIGINAL_PROPOSE = gliformer_decoding.ORIGINALS["propose"]
DECODER = SpanDecoder.__new__(SpanDecoder)


def scores(generator: torch.Generator, words: int, classes: int) -> torch.Tensor:
    """BIO logits ``[words, classes, 3]``: noise, with stretches pushed high (long runs that clear
    any threshold) and low (words that clear none)."""
    logits = torch.randn(words, classes, 3, generator=generator) * random.choice([1.0, 2.0, 3.0])
    for _ in range(random.randint(0, 3)):
        first = random.randint(0, words - 1)
        logits[first : first + random.randint(1, words), :, :] = random.choice([4.0, -4.0, 0.5])
    return logits


def arguments(logits: torch.Tensor, threshold: float) -> tuple[Any, ...]:
    """What ``SpanDecoder.decode_bio_spans`` hands ``_calculate_span_score``."""
    start, end, inside = logits.permute(2, 0, 1)
    return (
        DECODER._get_indices_above_threshold(start, threshold),
        DECODER._get_indices_above_threshold(end, threshold),
        torch.sigmoid(inside),
        torch.sigmoid(start),
        torch.sigmoid(end),
    )


@pytest.mark.parametrize("seed", range(12))
def test_span_candidates_are_the_librarys(seed: int) -> None:
    random.seed(seed)
    generator = torch.Generator().manual_seed(seed)
    compared = found = 0
    for _ in range(25):
        words, classes = random.randint(1, 40), random.randint(1, 4)
        logits = scores(generator, words, classes)
        names = {i: f"label {i}" for i in range(classes) if random.random() > 0.2}
        for threshold in (0.1, 0.3, 0.5, 0.8):
            for width in (None, 1, 4):
                args = (*arguments(logits, threshold), names, threshold)
                expected = ORIGINAL_SCORE(DECODER, *args, max_width=width)
                assert span_candidates(DECODER, *args, max_width=width) == expected
                compared += 1
                found += len(expected)
    assert found > compared  # the comparisons are of spans, not of empty lists


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("flat_ner", [True, False])
@pytest.mark.parametrize("multi_label", [True, False])
def test_overlap_removal_is_the_librarys(seed: int, flat_ner: bool, multi_label: bool) -> None:
    random.seed(seed)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(25):
        logits = scores(generator, random.randint(1, 40), random.randint(1, 4))
        names = {i: f"label {i}" for i in range(logits.shape[1])}
        candidates = ORIGINAL_SCORE(DECODER, *arguments(logits, 0.3), names, 0.3)
        # Equal scores too, so ties are settled the library's way.
        candidates += [Span(one.start, one.end, "other", one.score) for one in candidates[::3]]
        expected = ORIGINAL_GREEDY(DECODER, list(candidates), flat_ner, multi_label)
        assert select_spans(DECODER, list(candidates), flat_ner, multi_label) == expected


@pytest.mark.parametrize("seed", range(8))
def test_structuring_proposals_are_the_librarys(seed: int) -> None:
    random.seed(seed)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(10):
        batch = [scores(generator, 30, 3) for _ in range(random.randint(1, 3))]
        width = max(len(one) for one in batch)
        logits = torch.full((len(batch), width, 3, 3), -9.0)
        for row, one in enumerate(batch):
            logits[row, : len(one)] = one
        for threshold in (0.1, 0.5, 0.9):
            expected = ORIGINAL_PROPOSE(logits, None, threshold)
            got = propose_spans(logits, None, threshold)
            assert torch.equal(got[1], expected[1])
            assert torch.equal(got[0] * got[1].unsqueeze(-1), expected[0] * expected[1].unsqueeze(-1))


def test_past_the_bound_a_document_keeps_its_best_candidates_in_the_librarys_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every word of a 60-word document clears the threshold: 1,830 spans a label; kept, the best
    100, ordered as the library lists them."""
    monkeypatch.setattr(gliformer_decoding, "MAX_SPANS", 100)
    logits = torch.randn(60, 2, 3, generator=torch.Generator().manual_seed(0)) * 0.5 + 2.0
    args = (*arguments(logits, 0.1), {0: "a", 1: "b"}, 0.1)
    every = ORIGINAL_SCORE(DECODER, *args)
    assert len(every) == 2 * 60 * 61 // 2
    best = sorted(range(len(every)), key=lambda i: -every[i].score)[:100]
    assert span_candidates(DECODER, *args) == [every[i] for i in sorted(best)]


def test_past_the_bound_a_document_keeps_its_best_proposals(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gliformer_decoding, "MAX_PROPOSALS", 50)
    logits = torch.randn(1, 40, 2, 3, generator=torch.Generator().manual_seed(1)) * 0.5 + 2.0
    spans, mask = ORIGINAL_PROPOSE(logits, None, 0.5)
    every = spans[0][mask[0]].tolist()
    probabilities = torch.sigmoid(logits[0])
    # The original lists (start, end) without the class: rebuild each one's class from its order
    # (start word and class, then end word) to score it as the least of its probabilities.
    scored = []
    position = 0
    for start in range(40):
        for column in range(2):
            if probabilities[start, column, 0] <= 0.5:
                continue
            for end in range(start, 40):
                inside = probabilities[start : end + 1, column, 2]
                if probabilities[end, column, 1] > 0.5 and bool((inside > 0.5).all()):
                    assert every[position] == [start, end]
                    score = min(
                        float(inside.min()),
                        float(probabilities[start, column, 0]),
                        float(probabilities[end, column, 1]),
                    )
                    scored.append((position, score))
                    position += 1
    assert position == len(every) > 50
    best = sorted(position for position, _ in sorted(scored, key=lambda pair: -pair[1])[:50])
    got, kept = propose_spans(logits, None, 0.5)
    assert got[0][kept[0]].tolist() == [every[i] for i in best]

"""The GLiNER union (``superlinked/pii-redact``): several GLiNER models as one extract model.

The composition rules (windows, score floor, union by extent and label, name propagation) are held
to hand-worked answers; the whole adapter, on a span GLiNER and a token-level GLiNER built from
configs, to each member's own answers on each window (the members are the GLiNER extractor, which
tests/adapters/test_gliner.py holds to the ``gliner`` library) composed by those rules, alone and in
a batch.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from sie.adapters.contract import Forward, LoadSpec
from sie.adapters.gliner import GlinerExtractor
from sie.adapters.gliner_union import (
    NO_LABELS,
    GlinerUnionExtractor,
    Span,
    UnionOptions,
    composed,
    propagated_names,
    union_spans,
    word_windows,
)
from sie.core.extraction import Entity
from sie.core.options import Capability, ComputePrecision
from sie.core.task import Task, UnsupportedInput
from tests import builders

LABELS = ["person", "location", "organization"]
EXTRACT = frozenset({Capability.EXTRACT})


def test_word_windows_share_their_overlap_and_cover_the_text() -> None:
    text = "a b c d e f g h i j"  # ten one-letter words at even offsets
    assert word_windows(text, 10, 2) == [(0, len(text))]
    assert word_windows(text, 4, 1) == [(0, 7), (6, 13), (12, 19)]  # a-d, d-g, g-j
    eleven = text + " k"  # the last window holds what is left: j-k
    assert word_windows(eleven, 4, 1) == [(0, 7), (6, 13), (12, 19), (18, 21)]
    assert word_windows("x" * 5, 4, 1) == [(0, 5)]


def test_union_keeps_one_span_per_extent_and_label_at_its_best_score_above_the_floor() -> None:
    first = [Span(0, 4, "person", 0.7), Span(10, 14, "city", 0.55), Span(0, 4, "city", 0.9)]
    second = [Span(0, 4, "person", 0.8), Span(2, 6, "person", 0.65)]
    assert union_spans([first, second], 0.6) == [
        Span(0, 4, "person", 0.8),
        Span(0, 4, "city", 0.9),
        Span(2, 6, "person", 0.65),
    ]


def test_a_found_name_is_masked_wherever_it_recurs_as_a_whole_word() -> None:
    text = "John Smith called. Smith and Smithson met John, and Jo Smith left."
    john = text.index("John,")
    spans = [Span(0, 10, "person", 0.9), Span(john, john + 4, "person", 0.7)]  # "John Smith", "John"
    added = propagated_names(text, spans, "person", 3)
    # "Smith" twice more (not inside "Smithson"); "John" is already covered; "Jo" has too few letters.
    assert [(text[s.start : s.end], s.start, s.score) for s in added] == [
        ("Smith", 19, 0.9),
        ("Smith", 55, 0.9),
    ]
    assert propagated_names(text, spans, "location", 3) == []


def test_composed_entities_are_cut_from_the_text_and_sorted() -> None:
    text = "Ann met Bob in Rome and Bob left."
    options = UnionOptions(score_floor=0.5, propagate_label="person")
    found = composed(
        text,
        [[Span(15, 19, "location", 0.8), Span(8, 11, "person", 0.6)], [Span(0, 3, "person", 0.4)]],
        options,
    )
    assert found == [
        Entity("Bob", "person", 0.6, 8, 11),
        Entity("Rome", "location", 0.8, 15, 19),
        Entity("Bob", "person", 0.6, 24, 27),
    ]


@pytest.fixture(scope="module")
def members(splade_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("union")
    return {
        "span": builders.gliner(splade_dir, root / "span"),
        "token": builders.gliner(splade_dir, root / "token", span_mode="token_level"),
    }


def union_spec(members: dict[str, Path], **extra: Any) -> LoadSpec:
    member = {
        "model": "numind/NuNER_Zero",
        "revision": "c" * 40,
        "options": {"merge_adjacent_entities": True},
    }
    return LoadSpec(
        members["span"],
        "cpu",
        ComputePrecision.FLOAT32,
        384,
        loadtime={"members": [{**member, **extra}]},
        fetch=lambda hf_id, revision, path: members["token"],
    )


def run(
    adapter: GlinerUnionExtractor, texts: list[str], labels: list[str], options: dict[str, Any]
) -> list[list[Entity]]:
    forward = Forward(EXTRACT, task=Task.of(labels, options))
    return [one.entities for one in adapter.run(adapter.prepare(texts, forward), forward).extractions or []]


def member_spans(
    extractor: GlinerExtractor, text: str, options: dict[str, Any], window: tuple[int, int]
) -> list[Span]:
    forward = Forward(EXTRACT, task=Task.of(LABELS, options))
    start, end = window
    [found] = extractor.run(extractor.prepare([text[start:end]], forward), forward).extractions or []
    return [
        Span(e.start + start, e.end + start, e.label, e.score)
        for e in found.entities
        if e.start is not None and e.end is not None
    ]


def assert_same(ours: list[Entity], expected: list[Entity]) -> None:
    assert [(e.text, e.label, e.start, e.end) for e in ours] == [
        (e.text, e.label, e.start, e.end) for e in expected
    ]
    assert [e.score for e in ours] == pytest.approx([e.score for e in expected], abs=1e-5)


TEXTS = [
    "Alice Martin lives in Paris and works at Google. Later Martin moved to Berlin with Bob.",
    "ok then",
    " ".join(["Marie Curie was born in Warsaw and worked in Paris at the Sorbonne."] * 4),
]


def test_the_union_is_each_member_on_each_window_composed_alone_and_batched(members: dict[str, Path]) -> None:
    adapter = GlinerUnionExtractor.load(union_spec(members))
    span = GlinerExtractor.load(LoadSpec(members["span"], "cpu", ComputePrecision.FLOAT32, 384))
    token = GlinerExtractor.load(LoadSpec(members["token"], "cpu", ComputePrecision.FLOAT32, 384))
    request = {"score_floor": 0.5, "window_words": 20, "window_overlap": 5, "propagate_label": "person"}
    options = UnionOptions(0.5, 20, 5, "person", 3)
    got = run(adapter, TEXTS, LABELS, request)
    for text, ours in zip(TEXTS, got, strict=True):
        windows = word_windows(text, 20, 5)
        expected = composed(
            text,
            [
                [s for w in windows for s in member_spans(span, text, {}, w)],
                [s for w in windows for s in member_spans(token, text, {"merge_adjacent_entities": True}, w)],
            ],
            options,
        )
        assert_same(ours, expected)
        [alone] = run(adapter, [text], LABELS, request)
        assert_same(alone, ours)
    assert len(word_windows(TEXTS[2], 20, 5)) > 1
    assert any(got), "the built members find something above the floor"


def test_default_labels_serve_a_request_without_labels(members: dict[str, Path]) -> None:
    adapter = GlinerUnionExtractor.load(union_spec(members))
    with_labels = run(adapter, TEXTS[:1], LABELS, {})
    [defaulted] = run(adapter, TEXTS[:1], [], {"default_labels": LABELS})
    assert_same(defaulted, with_labels[0])
    with pytest.raises(UnsupportedInput, match=re.escape(NO_LABELS)):
        adapter.prepare(TEXTS[:1], Forward(EXTRACT, task=Task.of([], {})))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"score_floor": 1.5}, "GLiNER union score_floor must be a finite number between 0 and 1"),
        ({"score_floor": "high"}, "GLiNER union score_floor must be a finite number between 0 and 1"),
        ({"score_floor": 10**400}, "GLiNER union score_floor must be a finite number between 0 and 1"),
        (
            {"name_min_letters": 2**32 - 1},
            "GLiNER union option 'name_min_letters' must be an integer from 1 to 64",
        ),
        ({"window_words": 1}, "GLiNER union option 'window_words' must be an integer of at least 2"),
        ({"window_words": 10, "window_overlap": 10}, "window_overlap must be less than window_words"),
        (
            {"name_min_letters": True},
            "GLiNER union option 'name_min_letters' must be an integer from 1 to 64",
        ),
        ({"propagate_label": 3}, "propagate_label must be a label or null"),
        ({"default_labels": []}, "default_labels must be a non-empty list of labels"),
    ],
)
def test_bad_options_are_refused_before_any_work(
    members: dict[str, Path], options: dict[str, Any], message: str
) -> None:
    adapter = GlinerUnionExtractor.load(union_spec(members))
    with pytest.raises(UnsupportedInput, match=re.escape(message)):
        adapter.prepare(TEXTS[:1], Forward(EXTRACT, task=Task.of(LABELS, options)))


def test_usage_counts_every_token_every_member_reads(members: dict[str, Path]) -> None:
    adapter = GlinerUnionExtractor.load(union_spec(members))
    span = GlinerExtractor.load(LoadSpec(members["span"], "cpu", ComputePrecision.FLOAT32, 384))
    forward = Forward(EXTRACT, task=Task.of(LABELS, {}))
    [union] = adapter.prepare(TEXTS[:1], forward)
    [alone] = span.prepare(TEXTS[:1], forward)
    assert union.cost == 2 * alone.cost  # both members share the packaged BERT's tokenizer


@pytest.mark.parametrize(
    ("member", "message"),
    [
        ({"options": {"labels": ["x"]}}, "sets unsupported option(s) labels"),
        ({"model": ""}, "needs a model"),
        ({"extra": 1}, "is a mapping of model, revision, options"),
    ],
)
def test_a_bad_member_fails_the_load(members: dict[str, Path], member: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        GlinerUnionExtractor.load(union_spec(members, **member))


def test_members_resolve_through_the_engines_tiers(members: dict[str, Path]) -> None:
    """Each member's id, revision and optional local folder go to ``LoadSpec.fetch`` (the engine's
    weight tiers); a union naming no other member fails its load."""
    fetched: list[tuple[str, str | None, str | None]] = []

    def fetch(hf_id: str, revision: str | None, path: str | None) -> Path:
        fetched.append((hf_id, revision, path))
        return members["token"]

    loadtime = {
        "members": [{"model": "numind/NuNER_Zero", "revision": "c" * 40, "weights_path": "/models/nuner"}]
    }
    GlinerUnionExtractor.load(
        LoadSpec(members["span"], "cpu", ComputePrecision.FLOAT32, 384, loadtime=loadtime, fetch=fetch)
    )
    assert fetched == [("numind/NuNER_Zero", "c" * 40, "/models/nuner")]
    with pytest.raises(ValueError, match="needs at least one other member"):
        GlinerUnionExtractor.load(
            LoadSpec(members["span"], "cpu", ComputePrecision.FLOAT32, 384, fetch=fetch)
        )


def test_a_text_of_too_many_windows_is_refused_alone_before_any_work(members: dict[str, Path]) -> None:
    """Every member reads every window, so one item's windows are bounded as GLiNER's are; that item
    fails with ``INPUT_TOO_LONG`` and costs nothing, the text beside it is prepared."""
    adapter = GlinerUnionExtractor.load(union_spec(members))
    forward = Forward(EXTRACT, task=Task.of(LABELS, {"window_words": 2, "window_overlap": 1}))
    long, short = adapter.prepare([" ".join(["word"] * 300), "Alice met Bob"], forward)
    assert long.error is not None and long.error.code == "INPUT_TOO_LONG" and long.cost == 0
    assert "reads at most 128 windows of 2 words; this text needs 299" in long.error.message
    assert short.error is None and short.cost > 0

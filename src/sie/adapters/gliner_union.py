"""The union of several GLiNER models served as one extract model (``superlinked/pii-redact``: the
public PII redaction recipe over ``urchade/gliner_multi_pii-v1`` and ``numind/NuNER_Zero``).

What one checkpoint misses another may find, so every member reads every item and their spans are
combined, as the public server composes them:

1. A text of more than ``window_words`` words (gliner's word split) is read as windows of that many
   words, each sharing ``window_overlap`` words with the next; spans are offset back to the text.
2. Each member reads each window with the request's labels (else the profile's ``default_labels``)
   at its own options (the profile's per-member ``options``; a request's options never reach a
   member). Spans scoring below ``score_floor`` are dropped.
3. Spans with the same start, end and label are one, at the higher score; others all stay.
4. With ``propagate_label`` set, every other whole-word, case-sensitive occurrence of a token of at
   least ``name_min_letters`` letters from a span of that label, not already inside a span, becomes a
   span of that label, scored as the best span the token came from.

The first member is the model's own weights, the others the loadtime ``members`` (each a ``model``
with its ``revision``, resolved through the same tiers as the model; ``weights_path`` names a local
folder instead). Members are our GLiNER extractor, so each one's spans are the ``gliner`` library's.
``usage`` counts every token every member reads, shared window words twice, as the public server.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, NamedTuple, Self

import numpy as np

from sie.adapters.batch import BatchOutputs, ModelInput, Prepared
from sie.adapters.contract import NO_TRAITS, TEXT_ONLY, Forward, LoadSpec, texts_only
from sie.adapters.gliner import GlinerExtractor
from sie.adapters.options import integer_option, unit_option
from sie.adapters.runtime.word_windows import MAX_WINDOWS, WORD, plan_windows
from sie.catalog.families import GLINER_UNION_OPTIONS
from sie.core.extraction import Entity, Extraction, ItemError
from sie.core.options import Capability
from sie.core.task import Task, UnsupportedInput
from sie.wire.errors import ErrorCode

_FAMILY: Final = "GLiNER union"
NO_LABELS: Final = "This model needs labels: pass labels, or set the default_labels option"
_LETTER: Final = r"[^\W\d_]"  # a word character that is neither a digit nor an underscore
# What a member's ``options`` may set: gliner's own options (the public member options
# ``max_prompt_tokens`` and ``batch_size`` tune the public server's batching and are accepted unread).
_MEMBER_OPTIONS: Final = frozenset(
    {"threshold", "flat_ner", "multi_label", "merge_adjacent_entities", "max_prompt_tokens", "batch_size"}
)
_MEMBER_TASK_OPTIONS: Final = frozenset({"threshold", "flat_ner", "multi_label", "merge_adjacent_entities"})
# A name token is a run of letters: no longer bound is useful, and the regular expression that finds
# them takes none past 2**32.
MAX_NAME_LETTERS: Final = 64


@dataclass(frozen=True)
class UnionOptions:
    score_floor: float = 0.0
    window_words: int = 300
    window_overlap: int = 50
    propagate_label: str | None = None
    name_min_letters: int = 3
    default_labels: tuple[str, ...] = ()

    @classmethod
    def of(cls, task: Task) -> UnionOptions:
        floor = unit_option(task, "score_floor", cls.score_floor, _FAMILY)
        size = integer_option(task, "window_words", cls.window_words, _FAMILY, 2)
        overlap = integer_option(task, "window_overlap", cls.window_overlap, _FAMILY, 0)
        letters = integer_option(task, "name_min_letters", cls.name_min_letters, _FAMILY, 1, MAX_NAME_LETTERS)
        if overlap >= size:
            raise UnsupportedInput("window_overlap must be less than window_words")
        label = task.option("propagate_label", None)
        if label is not None and not isinstance(label, str):
            raise UnsupportedInput("propagate_label must be a label or null")
        labels = task.option("default_labels", None)
        if labels is not None and (
            not isinstance(labels, tuple) or not labels or not all(isinstance(x, str) and x for x in labels)
        ):
            raise UnsupportedInput("default_labels must be a non-empty list of labels")
        return cls(floor, size, overlap, label or None, letters, tuple(labels or ()))


def word_windows(text: str, size: int, overlap: int) -> list[tuple[int, int]]:
    """``size``-word windows sharing ``overlap`` words, as ``[start, end)`` character ranges; a text of
    at most ``size`` words is one range covering all of it."""
    words = [match.span() for match in WORD.finditer(text)]
    return [(w.start, w.end) for w in plan_windows(words, size, len(text), overlap)]


class Span(NamedTuple):
    start: int
    end: int
    label: str
    score: float


def union_spans(member_spans: Sequence[Sequence[Span]], floor: float) -> list[Span]:
    """Every member's spans at ``floor`` or above, one per (start, end, label) at its best score."""
    best: dict[tuple[int, int, str], Span] = {}
    for spans in member_spans:
        for span in spans:
            key = (span.start, span.end, span.label)
            if span.score >= floor and (key not in best or span.score > best[key].score):
                best[key] = span
    return sorted(best.values(), key=lambda span: (span.start, span.end))


def propagated_names(text: str, spans: Sequence[Span], label: str, min_letters: int) -> list[Span]:
    """A span of ``label`` for every other whole-word, case-sensitive occurrence of a name token (a run
    of at least ``min_letters`` letters inside a ``label`` span) that no span covers yet."""
    token = re.compile(f"{_LETTER}{{{min_letters},}}")
    best: dict[str, float] = {}
    for span in spans:
        if span.label == label:
            for name in token.findall(text[span.start : span.end]):
                best[name] = max(best.get(name, span.score), span.score)
    added = []
    for name in sorted(best):
        for match in re.finditer(f"(?<!{_LETTER}){re.escape(name)}(?!{_LETTER})", text):
            start, end = match.span()
            if not any(span.start <= start and span.end >= end for span in spans):
                added.append(Span(start, end, label, best[name]))
    return added


def composed(text: str, member_spans: Sequence[Sequence[Span]], options: UnionOptions) -> list[Entity]:
    """One text's union of its members' spans, then name propagation, sorted by (start, end)."""
    spans = union_spans(member_spans, options.score_floor)
    if options.propagate_label:
        spans += propagated_names(text, spans, options.propagate_label, options.name_min_letters)
    return [
        Entity(text[s.start : s.end], s.label, s.score, s.start, s.end)
        for s in sorted(spans, key=lambda s: (s.start, s.end))
    ]


@dataclass(frozen=True)
class _Member:
    extractor: GlinerExtractor
    options: Mapping[str, Any]  # its gliner options, the task it always runs with

    def forward(self, labels: Sequence[str]) -> Forward:
        return Forward(frozenset({Capability.EXTRACT}), task=Task.of(labels, self.options))


@dataclass(frozen=True)
class _Document:
    text: str
    windows: list[tuple[int, int]]
    rows: list[list[Prepared]]  # per member, one prepared row per window


class GlinerUnionExtractor:
    family = _FAMILY
    traits = NO_TRAITS
    request_options = GLINER_UNION_OPTIONS
    capabilities = frozenset({Capability.EXTRACT})
    inputs = TEXT_ONLY
    packs_tokens = False

    def __init__(self, members: list[_Member]) -> None:
        self._members = members
        self.tokenizer = members[0].extractor.tokenizer

    @classmethod
    def load(cls, spec: LoadSpec) -> Self:
        """The model's own weights as the first member, each loadtime ``members`` entry after it; a
        member that fails to load frees the ones loaded before it."""
        others = spec.loadtime.get("members")
        if not isinstance(others, list) or not others:
            raise ValueError("a GLiNER union needs at least one other member in loadtime 'members'")
        places: list[tuple[Path, dict[str, Any]]] = [(spec.weights, {})]
        places += [_member_place(spec, one) for one in others]
        members: list[_Member] = []
        try:
            for folder, options in places:
                member_spec = LoadSpec(
                    folder, spec.device, spec.precision, spec.max_seq_length, threads=spec.threads
                )
                task_options = {k: v for k, v in options.items() if k in _MEMBER_TASK_OPTIONS}
                members.append(_Member(GlinerExtractor.load(member_spec), task_options))
        except BaseException:
            for member in members:
                member.extractor.close()
            raise
        return cls(members)

    def prepare(self, inputs: Sequence[ModelInput], forward: Forward) -> list[Prepared]:
        options, labels = _asked(forward)
        prepared = []
        for text in texts_only(inputs, self.family):
            windows = word_windows(text, options.window_words, options.window_overlap)
            if len(windows) > MAX_WINDOWS:  # every member reads every window: bound one item's work
                prepared.append(
                    Prepared.refused(
                        ItemError(
                            ErrorCode.INPUT_TOO_LONG.value,
                            f"{_FAMILY} reads at most {MAX_WINDOWS} windows of {options.window_words} "
                            f"words; this text needs {len(windows)}: split it or widen window_words",
                        )
                    )
                )
                continue
            rows = [text[start:end] for start, end in windows]
            per_member = [m.extractor.prepare(rows, m.forward(labels)) for m in self._members]
            refused = next((row.error for rows_of in per_member for row in rows_of if row.error), None)
            if refused is not None:  # a member refused a window: the item fails as the member says
                prepared.append(Prepared.refused(refused))
                continue
            ids = np.concatenate([row.ids for rows_of in per_member for row in rows_of])
            weight = sum(row.cost for rows_of in per_member for row in rows_of)
            prepared.append(Prepared(ids, payload=_Document(text, windows, per_member), weight=weight))
        return prepared

    def run(self, batch: Sequence[Prepared], forward: Forward) -> BatchOutputs:
        options, labels = _asked(forward)
        documents: list[_Document] = [item.payload for item in batch]
        found: list[list[list[Span]]] = [[[] for _ in self._members] for _ in documents]
        for position, member in enumerate(self._members):
            rows = [row for document in documents for row in document.rows[position]]
            extractions = iter(member.extractor.run(rows, member.forward(labels)).extractions or [])
            for index, document in enumerate(documents):
                for offset, _ in document.windows:
                    found[index][position] += [
                        Span(e.start + offset, e.end + offset, e.label, e.score)
                        for e in next(extractions).entities
                        if e.start is not None and e.end is not None
                    ]
        return BatchOutputs(
            extractions=[
                Extraction(entities=composed(document.text, spans, options))
                for document, spans in zip(documents, found, strict=True)
            ]
        )

    def close(self) -> None:
        for member in self._members:
            member.extractor.close()


def _asked(forward: Forward) -> tuple[UnionOptions, tuple[str, ...]]:
    """A request's composition options and its labels (else the profile's defaults; none is a 400)."""
    task = forward.task or Task()
    options = UnionOptions.of(task)
    labels = task.labels or options.default_labels
    if not labels:
        raise UnsupportedInput(NO_LABELS)
    return options, labels


def _member_place(spec: LoadSpec, member: Any) -> tuple[Path, dict[str, Any]]:
    """A loadtime member's folder (resolved through ``spec.fetch``) and its gliner options."""
    if not isinstance(member, dict) or set(member) - {"model", "revision", "options", "weights_path"}:
        raise ValueError(
            "each GLiNER union member is a mapping of model, revision, options (and weights_path)"
        )
    model, revision, path = member.get("model"), member.get("revision"), member.get("weights_path")
    if not isinstance(model, str) or not model:
        raise ValueError("a GLiNER union member needs a model")
    options = dict(member.get("options") or {})
    unknown = sorted(set(options) - _MEMBER_OPTIONS)
    if unknown:
        raise ValueError(f"member {model} sets unsupported option(s) {', '.join(unknown)}")
    if spec.fetch is None:
        raise ValueError(f"member {model}: this load cannot fetch other models' weights")
    return spec.fetch(model, revision, path), options

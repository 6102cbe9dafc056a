"""GLiNER zero-shot NER: the request's labels are the entity types, found as character spans of the text.

The ``gliner`` library owns the model: its word splitting, label prompt, span (or token) scoring and
decoding are what the checkpoints were trained with, so ``run`` calls its batch ``inference`` rather
than re-implementing them, and our results are the library's. ``prepare`` still tokenizes with the
backbone's tokenizer on the CPU pool: those ids are what batching weighs and what ``usage`` counts
(the text's tokens with the tokenizer's specials, as the public server bills). Token-level checkpoints
(NuNER Zero) predict one span per word; ``merge_adjacent_entities`` joins neighbouring words of the
same label back into one entity. Bi-encoder checkpoints (GLiNER-bi: labels encoded by a second
encoder) load and run through the same calls; the public ``precompute_labels`` option only caches
label embeddings there, so it changes no result and is accepted and ignored here.

The library reads at most ``max_len`` words of a text; a longer text is read as overlapping windows
of that many words, batched with the other items, and their spans merged (``word_windows``), so an
entity past the first few hundred words is found rather than silently dropped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Self

import numpy as np
import torch
from gliner import GLiNER
from tokenizers import Tokenizer

from sie.adapters.batch import BatchOutputs, ModelInput, Prepared
from sie.adapters.contract import NO_TRAITS, TEXT_ONLY, Forward, LoadSpec, texts_only
from sie.adapters.options import unit_option
from sie.adapters.runtime.tokenizer import TextTokenizer
from sie.adapters.runtime.transformer import place_for_thresholds, release_unloaded
from sie.adapters.runtime.word_windows import (
    MAX_WINDOWS,
    Window,
    overlap_for,
    owned,
    plan_windows,
    resolve_overlaps,
)
from sie.catalog.families import GLINER_OPTIONS
from sie.core.extraction import Entity, Extraction, ItemError, Relation
from sie.core.options import Capability
from sie.core.task import Task, UnsupportedInput
from sie.wire.errors import ErrorCode

_FAMILY: Final = "GLiNER"
NO_LABELS: Final = "GLiNER requires labels parameter for extraction"
BLANK_TEXT: Final = "GLiNER requires non-blank text for extraction"
NO_RELATIONS: Final = (
    "This GLiNER model does not extract relations; options.relation_labels needs a joint "
    "entity-relation model such as knowledgator/gliner-relex-large-v1.0"
)
# A relex model pairs every span above this adjacency score; the public server's floor keeps a low
# entity threshold from pairing every candidate with every other.
MIN_ADJACENCY: Final = 0.5


@dataclass(frozen=True)
class GlinerOptions:
    """A request's runtime options with the public defaults; bad values are the client's error."""

    threshold: float = 0.5
    flat_ner: bool = True
    multi_label: bool = False
    merge_adjacent_entities: bool = False
    relation_labels: tuple[str, ...] = ()  # relation types, for joint entity-relation ("relex") models
    relation_threshold: float | None = None  # None: the entity threshold

    @classmethod
    def of(cls, task: Task) -> GlinerOptions:
        asks_relation_threshold = task.option("relation_threshold", None) is not None
        return cls(
            unit_option(task, "threshold", cls.threshold, _FAMILY),
            _flag(task, "flat_ner", cls.flat_ner),
            _flag(task, "multi_label", cls.multi_label),
            _flag(task, "merge_adjacent_entities", cls.merge_adjacent_entities),
            _relation_labels(task.option("relation_labels", [])),
            unit_option(task, "relation_threshold", 0.0, _FAMILY) if asks_relation_threshold else None,
        )


def _relation_labels(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list | tuple) or any(not isinstance(v, str) or not v.strip() for v in value):
        raise UnsupportedInput("GLiNER relation_labels must be a list of non-empty relation types")
    labels = tuple(label.strip() for label in value)
    if len(set(labels)) != len(labels):
        raise UnsupportedInput("GLiNER relation_labels must not repeat a relation type")
    return labels


def _flag(task: Task, name: str, default: bool) -> bool:
    # A string "false" would be truthy: refuse it rather than silently do the opposite.
    value = task.option(name, default)
    if not isinstance(value, bool):
        raise UnsupportedInput(f"GLiNER {name} must be true or false")
    return value


class GlinerExtractor:
    family = _FAMILY
    traits = NO_TRAITS
    request_options = GLINER_OPTIONS
    capabilities = frozenset({Capability.EXTRACT})
    inputs = TEXT_ONLY
    packs_tokens = False  # gliner pads each batch itself

    def __init__(self, model: Any, tokenizer: TextTokenizer) -> None:
        self._model = model
        self.tokenizer = tokenizer
        self._max_words = int(model.config.max_len)
        self._split_words = model.data_processor.words_splitter
        # Counts a long text's tokens whole (``tokenizer`` truncates): the batching weight of its windows.
        self._counter = tokenizer.untruncated()
        self._relex = getattr(model.config, "relations_layer", None) is not None

    @classmethod
    def load(cls, spec: LoadSpec) -> Self:
        """The folder as ``GLiNER.from_pretrained`` reads it, whichever architecture its config names
        (uni- or bi-encoder, span or token level); a checkpoint without its own tokenizer files names
        its backbone's, which the hub cache supplies (the environment decides offline). Loadtime
        ``max_len`` (words read at once) and ``attn_implementation`` override the checkpoint's.

        CPU runs float32 whatever the precision, as the public server does: spans are kept by
        comparing scores to a threshold, and bfloat16 moves scores across it."""
        if spec.threads and spec.device.startswith("cpu"):
            torch.set_num_threads(spec.threads)
        overrides = {
            key: spec.loadtime[name]
            for name, key in (("max_len", "max_length"), ("attn_implementation", "_attn_implementation"))
            if name in spec.loadtime
        }
        model = GLiNER.from_pretrained(str(spec.weights), map_location="cpu", **overrides)
        place_for_thresholds(model, spec)
        # A copy: TextTokenizer sets its own truncation and padding, gliner's tokenizer must keep its own.
        backend = model.data_processor.transformer_tokenizer.backend_tokenizer
        tokenizer = TextTokenizer(Tokenizer.from_str(backend.to_str()), spec.max_seq_length)
        return cls(model, tokenizer)

    def prepare(self, inputs: Sequence[ModelInput], forward: Forward) -> list[Prepared]:
        task = forward.task
        if task is None or not task.labels:
            raise UnsupportedInput(NO_LABELS)
        options = GlinerOptions.of(task)  # refuse bad options before the item is queued
        if options.relation_labels and not self._relex:
            raise UnsupportedInput(NO_RELATIONS)
        texts = texts_only(inputs, self.family)
        if any(not text.strip() for text in texts):
            raise UnsupportedInput(BLANK_TEXT)
        return [
            self._prepared(ids, text) for ids, text in zip(self.tokenizer.encode(texts), texts, strict=True)
        ]

    def _prepared(self, ids: np.ndarray, text: str) -> Prepared:
        """The text with the windows it is read in; a windowed text weighs its windows' tokens."""
        words = [(start, end) for _, start, end in self._split_words(text)]
        windows = plan_windows(words, self._max_words, len(text))
        if len(windows) == 1:
            return Prepared(ids, payload=_Document(text, windows))
        if len(windows) > MAX_WINDOWS:  # this item alone: the rest of the request is answered
            return Prepared.refused(
                ItemError(
                    ErrorCode.INPUT_TOO_LONG.value,
                    f"GLiNER reads at most {MAX_WINDOWS} windows of {self._max_words} words; this text "
                    f"has {len(words)} words: split it into shorter items",
                )
            )
        (whole,) = self._counter.encode([text])
        read = len(words) + overlap_for(self._max_words) * (len(windows) - 1)  # shared words read twice
        return Prepared(
            ids, payload=_Document(text, windows), weight=math.ceil(len(whole) * read / len(words))
        )

    def run(self, batch: Sequence[Prepared], forward: Forward) -> BatchOutputs:
        assert forward.task is not None
        options = GlinerOptions.of(forward.task)
        documents: list[_Document] = [item.payload for item in batch]
        rows = [document.text[w.start : w.end] for document in documents for w in document.windows]
        relation_rows: list[list[dict[str, Any]]] | None = None
        with torch.inference_mode():
            found = self._model.inference(
                rows,
                list(forward.task.labels),
                flat_ner=options.flat_ner,
                threshold=options.threshold,
                multi_label=options.multi_label,
                batch_size=len(batch),  # a forward holds no more rows than the batch has items
                **self._relation_arguments(options),
            )
        if options.relation_labels:  # asked for relations, a relex model answers (entities, relations)
            found, relation_rows = found
        extractions = []
        spans = iter(found)
        relations = iter(relation_rows or [])
        for document in documents:
            if len(document.windows) == 1:
                entities = [span_entity(span) for span in next(spans)]
            else:
                merged = [
                    entity
                    for window in document.windows
                    for entity in owned(window, [span_entity(span) for span in next(spans)], document.text)
                ]
                entities = resolve_overlaps(merged, options.flat_ner, options.multi_label)
            if options.merge_adjacent_entities:
                entities = merge_adjacent(entities, document.text)
            found_relations = (
                [one for _ in document.windows for one in next(relations)]
                if relation_rows is not None
                else []
            )
            extractions.append(Extraction(entities=entities, relations=best_relations(found_relations)))
        return BatchOutputs(extractions=extractions)

    def _relation_arguments(self, options: GlinerOptions) -> dict[str, Any]:
        """What a relex model's ``inference`` takes besides the entity arguments; nothing for others."""
        if not self._relex:
            return {}
        arguments: dict[str, Any] = {
            "relations": list(options.relation_labels),
            "return_relations": bool(options.relation_labels),
            "adjacency_threshold": max(options.threshold, MIN_ADJACENCY),
        }
        if options.relation_threshold is not None:
            arguments["relation_threshold"] = options.relation_threshold
        return arguments

    def close(self) -> None:
        del self._model
        release_unloaded()


@dataclass(frozen=True)
class _Document:
    text: str
    windows: list[Window]


def span_entity(span: dict[str, Any]) -> Entity:
    return Entity(
        text=str(span["text"]),
        label=str(span["label"]),
        score=float(span["score"]),
        start=int(span["start"]),
        end=int(span["end"]),
    )


def best_relations(found: list[dict[str, Any]]) -> list[Relation]:
    """gliner's relations as (head text, tail text, relation type, score), each triple once at its best
    score (a windowed text can find one in two windows), highest score first."""
    best: dict[tuple[str, str, str], float] = {}
    for one in found:
        key = (str(one["head"]["text"]), str(one["tail"]["text"]), str(one["relation"]))
        best[key] = max(best.get(key, -1.0), float(one["score"]))
    relations = [Relation(head, tail, relation, score) for (head, tail, relation), score in best.items()]
    return sorted(relations, key=lambda r: (-r.score, r.relation, r.head, r.tail))


def merge_adjacent(entities: list[Entity], text: str) -> list[Entity]:
    """Entities of one label that touch (or are one character apart, a space) become one, scored by
    their best part: a token-level model (NuNER Zero) finds "Steve" and "Jobs", a reader wants
    "Steve Jobs". The merged text is sliced from the item, so offsets still slice back to it."""
    merged: list[Entity] = []
    for entity in sorted(entities, key=lambda e: e.start or 0):
        last = merged[-1] if merged else None
        if last is None or entity.label != last.label or (entity.start or 0) > (last.end or 0) + 1:
            merged.append(entity)
            continue
        start, end = last.start or 0, max(last.end or 0, entity.end or 0)
        merged[-1] = Entity(text[start:end], last.label, max(last.score, entity.score), start, end)
    return merged

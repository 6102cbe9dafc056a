"""GLiNER2 zero-shot entities: the request's labels are the entity types, found as character spans.

The ``gliner2`` library owns the model (its schema prompt, word splitting, span or boundary heads
and decoding), so ``run`` calls its ``batch_extract_entities`` with confidences and character spans
and our results are the library's, reshaped as the public server answers them: every span at or above
``threshold`` (0.5), ``text`` cut from the item's own text, sorted by where it starts (ties keep the
library's order: by label, then by confidence). The library reads a text that does not end a
sentence with a period added, so a span may run past the text: it is cut back to the text's end,
and a span made only of that added period is dropped.

A profile naming a ``classification_task`` (gliguard's ``prompt_safety``) makes the model a text
classifier instead: the request's labels (else the profile's ``default_labels``) are the classes of
that task, the library's ``batch_classify_text`` scores them (``multi_label`` from the profile), and
every class at or above ``threshold`` comes back in ``classifications``, best first.

The library reads the labels' prompt and the whole text in one encoder pass and does not cut a text
to the encoder's positions, so on a backbone with a table of absolute positions (BERT-like) an item
whose text and labels need more tokens than that table holds would fail on the device: that item is
refused before it is queued (``items[i].error``, ``INPUT_TOO_LONG``; the others are answered).
``options.overflow_policy: truncate_text`` cuts such a text at a token boundary to the room the labels
leave instead, and ``error`` refuses it with the window refusal every family answers. Relative
(DeBERTa) and rotary (ModernBERT) backbones read any length: nothing is ever cut or refused there, by
construction, whatever the policy.

Schema extraction (``output_schema``), relations and the Decide models are other public adapters over
the same library; this release serves entities and classification.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, Self

import torch
from gliner2 import AutoExtractor
from tokenizers import Tokenizer

from sie.adapters.batch import BatchOutputs, ModelInput, Prepared
from sie.adapters.contract import NO_TRAITS, TEXT_ONLY, Forward, LoadSpec, texts_only
from sie.adapters.options import unit_option
from sie.adapters.runtime.tokenizer import TextTokenizer
from sie.adapters.runtime.transformer import absolute_positions, release_unloaded
from sie.adapters.runtime.window import refusal
from sie.catalog.families import GLINER2_OPTIONS
from sie.core.extraction import Classification, Entity, Extraction, ItemError
from sie.core.options import Capability, OverflowPolicy
from sie.core.task import Task, UnsupportedInput
from sie.wire.errors import ErrorCode

NO_LABELS: Final = "GLiNER2 requires labels parameter for extraction"
DEFAULT_THRESHOLD: Final = 0.5
# The schema prompt's tokens besides the labels' own (markers, the task name, separators), measured
# on the library's collator and rounded up: 2 a label and a margin for the rest.
PROMPT_TOKENS_PER_LABEL: Final = 2
PROMPT_TOKENS: Final = 16


def labels_of(task: Task | None, default: Sequence[str] = ()) -> list[str]:
    labels = list(task.labels) if task and task.labels else list(default)
    if not labels or any(not isinstance(label, str) or not label.strip() for label in labels):
        raise UnsupportedInput(NO_LABELS)
    return labels


def threshold(task: Task | None) -> float:
    return unit_option(task, "threshold", DEFAULT_THRESHOLD, "GLiNER2")


def classifications_of(found: dict[str, Any], task: str, cutoff: float) -> list[Classification]:
    """The library's classes for one text (one dict, or a list of them for a multi-label task) at or
    above ``cutoff``, best first."""
    result = found.get(task)
    candidates = [result] if isinstance(result, dict) else list(result or [])
    kept = [Classification(str(c["label"]), float(c["confidence"])) for c in candidates]
    return sorted((c for c in kept if c.score >= cutoff), key=lambda c: -c.score)


def entities_of(text: str, found: dict[str, Any], labels: Sequence[str]) -> list[Entity]:
    """One text's library result as entities (see the module docstring for the span rule)."""
    entities = []
    spans = found.get("entities", {})
    for label in labels:
        for span in spans.get(label, []):
            start, end = int(span["start"]), min(int(span["end"]), len(text))
            if start >= end:
                continue  # only the period the library added
            entities.append(Entity(text[start:end], label, float(span["confidence"]), start, end))
    return sorted(entities, key=lambda entity: entity.start or 0)


class Gliner2Extractor:
    family = "GLiNER2"
    traits = NO_TRAITS
    request_options = GLINER2_OPTIONS
    capabilities = frozenset({Capability.EXTRACT})
    inputs = TEXT_ONLY
    packs_tokens = False  # the library pads each batch itself

    def __init__(self, model: Any, tokenizer: TextTokenizer, loadtime: dict[str, Any]) -> None:
        self._model = model
        self.tokenizer = tokenizer
        self._counter = tokenizer.untruncated()  # a text's whole length, to refuse what cannot be read
        self._limit = absolute_positions(model.encoder)
        task = loadtime.get("classification_task")
        if task is not None and (not isinstance(task, str) or not task.strip()):
            raise ValueError("GLiNER2 classification_task must be a non-empty string")
        self._classification_task: str | None = task
        # A classifier's classes when the request names none; an entity request must name its types.
        self._default_labels = [str(label) for label in loadtime.get("default_labels") or []] if task else []
        self._multi_label = bool(loadtime.get("multi_label", False))

    @classmethod
    def load(cls, spec: LoadSpec) -> Self:
        """The folder as the library's ``AutoExtractor`` reads it (span or boundary heads). CPU runs
        float32, as for GLiNER: spans are kept by comparing scores to a threshold."""
        if spec.threads and spec.device.startswith("cpu"):
            torch.set_num_threads(spec.threads)
        model = AutoExtractor.from_pretrained(str(spec.weights), map_location=spec.device)
        model.eval()
        backend = model.processor.tokenizer.backend_tokenizer
        tokenizer = TextTokenizer(Tokenizer.from_str(backend.to_str()), spec.max_seq_length)
        return cls(model, tokenizer, spec.loadtime)

    def prepare(self, inputs: Sequence[ModelInput], forward: Forward) -> list[Prepared]:
        labels = labels_of(forward.task, self._default_labels)
        threshold(forward.task)
        texts = texts_only(inputs, self.family)
        fitted: list[str | ItemError] = (
            list(texts) if self._limit is None else self._fitted(texts, labels, self._limit, forward)
        )
        kept = iter(self.tokenizer.encode([text for text in fitted if isinstance(text, str)]))
        return [
            Prepared.refused(text) if isinstance(text, ItemError) else Prepared(next(kept), payload=text)
            for text in fitted
        ]

    def _fitted(
        self, texts: list[str], labels: list[str], limit: int, forward: Forward
    ) -> list[str | ItemError]:
        """Each text as one pass of at most ``limit`` positions reads it with the labels' prompt: whole
        when it fits, else cut (``truncate_text``) or that item's refusal."""
        prompt = (
            sum(len(ids) + PROMPT_TOKENS_PER_LABEL for ids in self._counter.encode(labels)) + PROMPT_TOKENS
        )
        fitted: list[str | ItemError] = []
        for text, whole in zip(texts, self._counter.encode(texts), strict=True):
            needs = len(whole) + prompt
            if needs <= limit:
                fitted.append(text)
            elif refused := refusal(forward, needs, limit):
                fitted.append(refused)
            elif forward.overflow is OverflowPolicy.TRUNCATE_TEXT and (cut := self._cut(text, needs - limit)):
                fitted.append(cut)
            else:
                fitted.append(
                    ItemError(
                        ErrorCode.INPUT_TOO_LONG.value,
                        f"GLiNER2 reads a text and its labels in one pass of at most {limit} tokens; "
                        f"this item needs {needs}: split the text",
                    )
                )
        return fitted

    def _cut(self, text: str, over: int) -> str:
        """``text`` without its last ``over`` tokens, cut at a token boundary ("" when none is left)."""
        spans = self._counter.encode_spans([text])[0]
        ends = spans.offsets[~spans.special, 1]
        keep = len(ends) - over
        return text[: int(ends[keep - 1])] if keep > 0 else ""

    def run(self, batch: Sequence[Prepared], forward: Forward) -> BatchOutputs:
        texts = [item.payload for item in batch]
        if self._classification_task is not None:
            return self._classify(texts, forward.task, self._classification_task)
        labels = labels_of(forward.task, self._default_labels)
        with torch.inference_mode():
            found = self._model.batch_extract_entities(
                texts,
                labels,
                batch_size=len(texts),
                threshold=threshold(forward.task),
                include_confidence=True,
                include_spans=True,
            )
        return BatchOutputs(
            extractions=[
                Extraction(entities=entities_of(text, one, labels))
                for text, one in zip(texts, found, strict=True)
            ]
        )

    def _classify(self, texts: list[str], task: Task | None, name: str) -> BatchOutputs:
        labels = labels_of(task, self._default_labels)
        with torch.inference_mode():
            found = self._model.batch_classify_text(
                texts,
                {name: {"labels": labels, "multi_label": self._multi_label}},
                batch_size=len(texts),
                threshold=0.0,  # every class with its confidence; ``threshold`` is applied below
                include_confidence=True,
            )
        cutoff = threshold(task)
        return BatchOutputs(
            extractions=[Extraction(classifications=classifications_of(one, name, cutoff)) for one in found]
        )

    def close(self) -> None:
        del self._model
        release_unloaded()

"""GLiNER2 zero-shot entities: the request's labels are the entity types, found as character spans.

The ``gliner2`` library owns the model (its schema prompt, word splitting, span or boundary heads
and decoding), so ``run`` calls its ``batch_extract_entities`` with confidences and character spans
and our results are the library's, reshaped as the public server answers them: every span at or above
``threshold`` (0.5), ``text`` cut from the item's own text, sorted by where it starts (ties keep the
library's order: by label, then by confidence). The library reads a text that does not end a
sentence with a period added, so a span may run past the text: it is cut back to the text's end,
and a span made only of that added period is dropped.

Schema extraction (``output_schema``), relations, classification and the Decide models are other
public adapters over the same library; this release serves the entity one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, Self

import torch
from gliner2 import AutoExtractor
from tokenizers import Tokenizer

from sie.adapters.base import (
    TEXT_ONLY,
    BatchOutputs,
    Forward,
    LoadSpec,
    ModelInput,
    Prepared,
    Task,
    UnsupportedInput,
    texts_only,
    unit_option,
)
from sie.adapters.registry import GLINER2_OPTIONS
from sie.adapters.tokenizer import TextTokenizer
from sie.core.extraction import Entity, Extraction
from sie.core.heap import collect_unloaded
from sie.core.options import Capability, Pooling

NO_LABELS: Final = "GLiNER2 requires labels parameter for extraction"
DEFAULT_THRESHOLD: Final = 0.5


def labels_of(task: Task | None) -> list[str]:
    labels = list(task.labels) if task else []
    if not labels or any(not isinstance(label, str) or not label.strip() for label in labels):
        raise UnsupportedInput(NO_LABELS)
    return labels


def threshold(task: Task | None) -> float:
    return unit_option(task, "threshold", DEFAULT_THRESHOLD, "GLiNER2")


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
    request_options = GLINER2_OPTIONS
    capabilities = frozenset({Capability.EXTRACT})
    inputs = TEXT_ONLY
    dims: dict[Capability, int] = {}  # noqa: RUF012  # entities only
    default_pooling = Pooling.CLS  # unused: no embeddings
    packs_tokens = False  # the library pads each batch itself

    def __init__(self, model: Any, tokenizer: TextTokenizer) -> None:
        self._model = model
        self.tokenizer = tokenizer

    @classmethod
    def load(cls, spec: LoadSpec) -> Self:
        """The folder as the library's ``AutoExtractor`` reads it (span or boundary heads). CPU runs
        float32, as for GLiNER: spans are kept by comparing scores to a threshold."""
        if spec.threads and spec.device.startswith("cpu"):
            torch.set_num_threads(spec.threads)
        model = AutoExtractor.from_pretrained(str(spec.weights), map_location=spec.device)
        model.eval()
        backend = model.processor.tokenizer.backend_tokenizer
        return cls(model, TextTokenizer(Tokenizer.from_str(backend.to_str()), spec.max_seq_length))

    def prepare(self, inputs: Sequence[ModelInput], forward: Forward) -> list[Prepared]:
        labels_of(forward.task)
        threshold(forward.task)
        texts = texts_only(inputs, self.family)
        return [
            Prepared(ids, payload=text) for ids, text in zip(self.tokenizer.encode(texts), texts, strict=True)
        ]

    def run(self, batch: Sequence[Prepared], forward: Forward) -> BatchOutputs:
        labels = labels_of(forward.task)
        texts = [item.payload for item in batch]
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

    def close(self) -> None:
        del self._model
        collect_unloaded()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

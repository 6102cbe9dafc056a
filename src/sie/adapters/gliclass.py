"""GLiClass zero-shot text classification: the request's labels are the classes, each scored against
the text in one forward (the labels and the text share one sequence, ``<<LABEL>>`` markers before
each label and ``<<SEP>>`` before the text).

The ``gliclass`` library owns the model: its input layout (labels, separator, instruction as its
``prompt``, the text), tokenization and scorer are what the checkpoints were trained with, so ``run``
builds the inputs with its pipeline's ``prepare_inputs`` and reads the model's logits, as the public
server does. Scores: ``single-label`` (the default; a profile's ``classification_type`` or the
request's picks the other) is a softmax over the labels, except with one label, where the sigmoid
stands alone (a softmax over one would always be 1.0); ``multi-label`` a sigmoid per label. Every
label comes back, best first (ties in request order); ``threshold`` above 0 keeps those at or above it.

A text too long to keep the labels in the model's window is refused, not silently cut: the labels
come after the text in most checkpoints, and truncation would drop them. The refusal is that item's
(``items[i].error``, ``INPUT_TOO_LONG``), as the public server's; the request's other items are answered.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, Self

import numpy as np
import torch
from gliclass import GLiClassModel, ZeroShotClassificationPipeline
from tokenizers import Tokenizer
from transformers import AutoTokenizer

from sie.adapters.batch import BatchOutputs, ModelInput, Prepared
from sie.adapters.contract import NO_TRAITS, TEXT_ONLY, Forward, LoadSpec, texts_only
from sie.adapters.options import unit_option
from sie.adapters.runtime.tokenizer import TextTokenizer
from sie.adapters.runtime.transformer import place_for_thresholds, release_unloaded
from sie.catalog.families import GLICLASS_OPTIONS
from sie.core.extraction import Classification, Extraction, ItemError
from sie.core.options import Capability
from sie.core.task import Task, UnsupportedInput
from sie.wire.errors import ErrorCode

NO_LABELS: Final = "Zero-shot classification requires labels parameter."
TYPES: Final = {
    "single-label": "single-label",
    "single": "single-label",
    "multi-label": "multi-label",
    "multi": "multi-label",
}


def classification_type(task: Task | None, default: str) -> str:
    value = task.option("classification_type", default) if task else default
    if not isinstance(value, str) or value.strip().lower().replace("_", "-") not in TYPES:
        raise UnsupportedInput(
            f"GLiClass classification_type must be 'single-label' or 'multi-label', got {value!r}"
        )
    return TYPES[value.strip().lower().replace("_", "-")]


def threshold(task: Task | None) -> float:
    return unit_option(task, "threshold", 0.0, "GLiClass")


def labels_of(task: Task | None) -> list[str]:
    labels = [label.strip() if isinstance(label, str) else label for label in (task.labels if task else ())]
    if not labels:
        raise UnsupportedInput(NO_LABELS)
    if any(not isinstance(label, str) or not label for label in labels):
        raise UnsupportedInput("GLiClass labels must be non-empty strings")
    if len(set(labels)) != len(labels):
        raise UnsupportedInput("GLiClass labels must be unique")
    return labels


def scored(labels: Sequence[str], scores: np.ndarray, keep_at_least: float) -> list[Classification]:
    order = sorted(range(len(labels)), key=lambda i: -float(scores[i]))  # stable: ties in request order
    return [
        Classification(labels[i], float(scores[i]))
        for i in order
        if keep_at_least <= 0 or float(scores[i]) >= keep_at_least
    ]


class GliclassClassifier:
    family = "GLiClass"
    traits = NO_TRAITS
    request_options = GLICLASS_OPTIONS
    capabilities = frozenset({Capability.EXTRACT})
    inputs = TEXT_ONLY
    packs_tokens = False  # the library pads each batch itself

    def __init__(self, pipe: Any, tokenizer: TextTokenizer, default_type: str) -> None:
        self._pipe = pipe
        self.tokenizer = tokenizer
        self._default_type = default_type
        self._window = tokenizer.untruncated()  # the whole composed input, to see whether it fits

    @classmethod
    def load(cls, spec: LoadSpec) -> Self:
        """``GLiClassModel.from_pretrained`` on the folder and the library's pipeline for its
        architecture (uni-encoder, bi-encoder, encoder-decoder), reading at most the model's
        ``max_sequence_length`` tokens. CPU runs float32 whatever the precision, as for GLiNER: the
        scores are compared to thresholds."""
        if spec.threads and spec.device.startswith("cpu"):
            torch.set_num_threads(spec.threads)
        model = GLiClassModel.from_pretrained(str(spec.weights))
        place_for_thresholds(model, spec)
        hf_tokenizer = AutoTokenizer.from_pretrained(str(spec.weights))
        length = spec.max_seq_length or int(hf_tokenizer.model_max_length)
        hf_tokenizer.model_max_length = length
        default_type = classification_type(
            None, str(spec.loadtime.get("classification_type", "single-label"))
        )
        pipeline = ZeroShotClassificationPipeline(
            model,
            hf_tokenizer,
            max_length=length,
            classification_type=default_type,
            device=spec.device,
            progress_bar=False,
        )
        tokenizer = TextTokenizer(Tokenizer.from_str(hf_tokenizer.backend_tokenizer.to_str()), length)
        return cls(pipeline.pipe, tokenizer, default_type)

    def prepare(self, inputs: Sequence[ModelInput], forward: Forward) -> list[Prepared]:
        """The text's own tokens (what ``usage`` bills) and, as the batching weight, the whole input
        the model reads; a text whose input would not fit is refused."""
        texts = texts_only(inputs, self.family)
        task = forward.task
        labels = labels_of(task)
        classification_type(task, self._default_type)
        threshold(task)
        instruction = task.instruction if task else None
        # Uni- and bi-encoder pipelines lay one text out as one input; an encoder-decoder reads the
        # text and the labels apart, and only the text's own length is checked then.
        compose = getattr(self._pipe, "prepare_input", None)
        composed = [compose(text, labels, None, instruction or None) for text in texts] if compose else texts
        windows = self._window.encode(composed)
        limit = self.tokenizer.max_length or 0
        return [
            Prepared(ids, payload=text, weight=len(window))
            if not limit or len(window) <= limit
            else Prepared.refused(  # this item alone: the others in the request are answered
                ItemError(
                    ErrorCode.INPUT_TOO_LONG.value,
                    f"The text and labels take {len(window)} tokens; GLiClass reads at most {limit}: "
                    "shorten the text",
                )
            )
            for ids, text, window in zip(self.tokenizer.encode(texts), texts, windows, strict=True)
        ]

    def run(self, batch: Sequence[Prepared], forward: Forward) -> BatchOutputs:
        task = forward.task
        labels = labels_of(task)
        kind = classification_type(task, self._default_type)
        keep = threshold(task)
        instruction = (task.instruction if task else None) or None
        texts = [item.payload for item in batch]
        with torch.inference_mode():
            inputs = self._pipe.prepare_inputs(
                texts, labels, same_labels=True, examples=None, prompt=instruction
            )
            classes = self._pipe._resolve_max_num_classes(labels, True)
            logits = self._pipe.model(**inputs, max_num_classes=classes).logits[:, : len(labels)].float()
        if kind == "multi-label" or len(labels) == 1:
            scores = torch.sigmoid(logits)
        else:
            scores = torch.softmax(logits, dim=-1)
        rows = scores.cpu().numpy()
        return BatchOutputs(
            extractions=[Extraction(classifications=scored(labels, row, keep)) for row in rows]
        )

    def close(self) -> None:
        del self._pipe
        release_unloaded()

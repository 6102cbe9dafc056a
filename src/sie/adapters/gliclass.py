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
``options.overflow_policy`` as the public adapter reads it: ``truncate_text`` cuts such a text at a token
boundary to the room the labels leave (the labels are never cut), ``error`` refuses it with the window
refusal every family answers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
from sie.adapters.runtime.window import refusal
from sie.catalog.families import GLICLASS_OPTIONS
from sie.core.extraction import Classification, Extraction, ItemError
from sie.core.options import Capability, OverflowPolicy
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


def _past_window(tokens: int, limit: int) -> ItemError:
    return ItemError(
        ErrorCode.INPUT_TOO_LONG.value,
        f"The text and labels take {tokens} tokens; GLiClass reads at most {limit}: shorten the text",
    )


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
        the model reads; a text whose input would not fit is refused, or cut under ``truncate_text``."""
        texts = texts_only(inputs, self.family)
        task = forward.task
        labels = labels_of(task)
        classification_type(task, self._default_type)
        threshold(task)
        instruction = task.instruction if task else None
        # Uni- and bi-encoder pipelines lay one text out as one input; an encoder-decoder reads the
        # text and the labels apart, and only the text's own length is checked then.
        compose = getattr(self._pipe, "prepare_input", None)

        def laid_out(text: str) -> str:
            return str(compose(text, labels, None, instruction or None)) if compose else text

        def window(text: str) -> int:
            return len(self._window.encode([laid_out(text)])[0])

        limit = self.tokenizer.max_length
        fitted: list[tuple[str, int] | ItemError] = []
        for text, whole in zip(texts, self._window.encode([laid_out(t) for t in texts]), strict=True):
            length = len(whole)
            if limit is None or length <= limit:
                fitted.append((text, length))
            elif refused := refusal(forward, length, limit):
                fitted.append(refused)
            elif forward.overflow is OverflowPolicy.TRUNCATE_TEXT:
                fitted.append(self._cut(text, length - limit, window, limit) or _past_window(length, limit))
            else:
                fitted.append(_past_window(length, limit))
        kept = iter(self.tokenizer.encode([one[0] for one in fitted if not isinstance(one, ItemError)]))
        return [
            Prepared.refused(one)  # this item alone: the others in the request are answered
            if isinstance(one, ItemError)
            else Prepared(next(kept), payload=one[0], weight=one[1])
            for one in fitted
        ]

    def _cut(self, text: str, over: int, window: Callable[[str], int], limit: int) -> tuple[str, int] | None:
        """``text`` cut at a token boundary to the room its layout leaves it in ``limit`` (``window``
        counts a text laid out), with that length; None when the labels leave it no room. A cut text
        may tokenize a token apart inside the layout: it is shortened again until it fits."""
        spans = self._window.encode_spans([text])[0]
        ends = [int(end) for end in spans.offsets[~spans.special, 1]]
        keep = len(ends) - over
        while keep > 0:
            cut = text[: ends[keep - 1]]
            length = window(cut)
            if length <= limit:
                return cut, length
            keep -= length - limit
        return None

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

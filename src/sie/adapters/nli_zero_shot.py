"""Zero-shot classification with an NLI cross-encoder, as transformers' ``zero-shot-classification``.

Each candidate label becomes a hypothesis (``hypothesis_template`` with the label in its ``{}``,
default "This text is about {}.") and the model reads (text, hypothesis) as premise and hypothesis.
The entailment class is the first of the config's ``label2id`` whose name starts with "entail" (the
pipeline's rule; MNLI heads put it last, the zeroshot-v2.0 heads first). With ``multi_label`` false
(the default) a text's labels compete: a softmax of their entailment logits. With ``multi_label`` true,
or a single label (a softmax over one label would always be 1.0), each label stands alone: a softmax
over its [contradiction, entailment] logits, contradiction being the last class when entailment is
the first and the first otherwise. Every label comes back with its score, best first.

An item is one text and all its pairs: ``prepare`` encodes them (truncating only the text, so the
hypothesis stays whole) and weighs the item by their tokens. The forward is transformers' own padded
one (DeBERTa-v3, the usual NLI backbone, has no packed path).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Final

import numpy as np
from transformers import AutoModelForSequenceClassification

from sie.adapters.batch import BatchOutputs, ModelInput, Prepared
from sie.adapters.contract import Forward, LoadSpec, texts_only
from sie.adapters.runtime.tokenizer import PairIds
from sie.adapters.runtime.transformer import TransformerAdapter
from sie.adapters.runtime.window import past_window_error
from sie.catalog.families import NLI_OPTIONS
from sie.core.extraction import Classification, Extraction, ItemError
from sie.core.options import Capability, OverflowPolicy
from sie.core.task import Task, UnsupportedInput

log = logging.getLogger(__name__)

DEFAULT_TEMPLATE: Final = "This text is about {}."
NEEDS_LABELS: Final = "Zero-shot classification requires labels parameter."


def entailment_index(label2id: Mapping[str, int]) -> int:
    """The entailment class as transformers finds it; -1 (the last class) when no label names it."""
    return next((int(index) for label, index in label2id.items() if label.lower().startswith("entail")), -1)


def hypotheses(task: Task | None) -> list[str]:
    """The request's labels in its template; refused when there are none or the template has no slot."""
    labels = list(task.labels) if task else []
    if not labels:
        raise UnsupportedInput(NEEDS_LABELS)
    template = task.option("hypothesis_template", DEFAULT_TEMPLATE) if task else DEFAULT_TEMPLATE
    if not isinstance(template, str):
        raise UnsupportedInput(f"option 'hypothesis_template' must be a string, got {template!r}")
    try:
        filled = [template.format(label) for label in labels]
    except (IndexError, KeyError, ValueError) as exc:
        raise UnsupportedInput(f"hypothesis_template {template!r} cannot take a label: {exc}") from exc
    if filled[0] == template:
        raise UnsupportedInput(f"hypothesis_template {template!r} has no '{{}}' where the label goes")
    return filled


def multi_label(task: Task | None) -> bool:
    value: Any = task.option("multi_label", False) if task else False
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if not isinstance(value, bool):
        raise UnsupportedInput(f"option 'multi_label' must be true or false, got {value!r}")
    return value


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probabilities: np.ndarray = shifted / shifted.sum(axis=-1, keepdims=True)
    return probabilities


def label_scores(logits: np.ndarray, entailment: int, independent: bool) -> np.ndarray:
    """One text's label scores from its pairs' logits ``[labels, classes]``."""
    if independent or logits.shape[0] == 1:
        contradiction = -1 if entailment == 0 else 0
        return _softmax(logits[:, [contradiction, entailment]])[:, 1]
    return _softmax(logits[:, entailment])


def ranked(labels: Sequence[str], scores: np.ndarray) -> list[Classification]:
    """Best first, ties in the pipeline's order (the reverse of ``argsort``)."""
    return [Classification(labels[i], float(scores[i])) for i in reversed(np.argsort(scores))]


class NliZeroShotClassifier(TransformerAdapter):
    family = "ZeroShotClassification"
    request_options = NLI_OPTIONS
    auto_class = AutoModelForSequenceClassification
    capabilities = frozenset({Capability.EXTRACT})

    def __init__(self, spec: LoadSpec) -> None:
        super().__init__(spec)
        self.packs_tokens = False  # the padded transformers forward, cut into length chunks
        self._pairs = self.tokenizer.truncating_first_only()
        config = self.backbone.model.config
        if int(config.num_labels) < 2:
            raise ValueError(
                f"an NLI model has entailment and other classes; this one has {config.num_labels}"
            )
        self.entailment = entailment_index(config.label2id)
        if self.entailment == -1:
            log.warning("%s: no label2id entry starts with 'entail'; taking the last class", spec.weights)

    def prepare(self, inputs: Sequence[ModelInput], forward: Forward) -> list[Prepared]:
        texts = texts_only(inputs, self.family)
        filled = hypotheses(forward.task)
        multi_label(forward.task)  # a bad option is refused here, before the item queues
        prepared = []
        for text in texts:
            rows = [(text, h) for h in filled]
            refused = self._past_window(rows, forward)
            if refused is not None:
                prepared.append(Prepared.refused(refused))
                continue
            pairs = [Prepared(p.ids, p.type_ids) for p in self._encode(rows)]
            prepared.append(Prepared(payload=tuple(pairs), weight=sum(len(p.ids) for p in pairs)))
        return prepared

    def _past_window(self, rows: list[tuple[str, str]], forward: Forward) -> ItemError | None:
        """Under ``overflow_policy: error``, the refusal of a text that some hypothesis pushes past
        the window (its longest row counted); None to read it truncated, as the pipeline does."""
        if forward.overflow is not OverflowPolicy.ERROR or self.tokenizer.max_length is None:
            return None
        over = self.tokenizer.past_window(rows)
        return past_window_error(max(over.values()), self.tokenizer.max_length) if over else None

    def _encode(self, pairs: list[tuple[str, str]]) -> list[PairIds]:
        try:
            return self._pairs.encode_pairs(pairs)
        except Exception:  # tokenizers: a hypothesis too long to keep whole; truncate both sides then
            return self.tokenizer.encode_pairs(pairs)

    def run(self, batch: Sequence[Prepared], forward: Forward) -> BatchOutputs:
        pairs = [pair for item in batch for pair in item.payload]
        with self.backbone.running():
            logits = self.backbone.model(**self.backbone.pad(pairs)).logits.float().cpu().numpy()
        labels = forward.task.labels if forward.task else ()
        independent = multi_label(forward.task)
        per_item = np.split(logits, len(batch))
        return BatchOutputs(
            extractions=[
                Extraction(classifications=ranked(labels, label_scores(rows, self.entailment, independent)))
                for rows in per_item
            ]
        )

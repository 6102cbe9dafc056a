"""Rerankers: a sequence-classification model reads each (query, document) pair and gives one score.

The score is the sigmoid of the single logit, as sentence-transformers' ``CrossEncoder`` gives it
and the public server answers. BERT and (XLM-)RoBERTa run the packed forward (a batch of pairs
varies a lot in length, and padding would dominate), then their head on each pair's first token;
other architectures (ModernBERT, DeBERTa, ...) run their own padded transformers forward.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from transformers import AutoModelForSequenceClassification

from sie.adapters.batch import BatchOutputs, ModelInput, Prepared
from sie.adapters.contract import Forward, LoadSpec
from sie.adapters.runtime.packed_bert import ROBERTA_TYPES
from sie.adapters.runtime.transformer import TransformerAdapter
from sie.adapters.runtime.window import refusals, within_window
from sie.core.options import Capability
from sie.core.task import UnsupportedInput


def instructed_pairs(inputs: Sequence[ModelInput], forward: Forward) -> list[tuple[str, str]]:
    """The (query, document) pairs a reranker scores, the request's instruction before each query
    (instruction-tuned rerankers read it there, as the public server puts it); a single text is the
    client's error."""
    pairs = [one for one in inputs if isinstance(one, tuple)]
    if len(pairs) != len(inputs):
        raise UnsupportedInput("Cross-encoder models score (query, document) pairs, not single texts")
    instruction = forward.task.instruction if forward.task else None
    if instruction:
        pairs = [(f"{instruction} {query}", document) for query, document in pairs]
    return pairs


class CrossEncoderScorer(TransformerAdapter):
    family = "CrossEncoder"
    auto_class = AutoModelForSequenceClassification
    capabilities = frozenset({Capability.SCORE})

    def __init__(self, spec: LoadSpec) -> None:
        super().__init__(spec)
        model = self.backbone.model
        if int(model.config.num_labels) != 1:
            raise ValueError(f"a reranker has one output label; this model has {model.config.num_labels}")
        self._head = _first_token_head(model)
        self.packs_tokens = self.backbone.packed is not None and self._head is not None

    def prepare(self, inputs: Sequence[ModelInput], forward: Forward) -> list[Prepared]:
        pairs = instructed_pairs(inputs, forward)
        prepared = [
            Prepared(pair.ids, pair.type_ids, content=pair.content)
            for pair in self.tokenizer.encode_pairs(pairs)
        ]
        return within_window(prepared, refusals(self.tokenizer, pairs, forward))

    def run(self, batch: Sequence[Prepared], forward: Forward) -> BatchOutputs:
        with self.backbone.running(forward.lora):
            logits = self._packed_logits(batch) if self.packs_tokens else self._padded_logits(batch)
            return BatchOutputs(scores=torch.sigmoid(logits.float()).view(-1).cpu().numpy())

    def _packed_logits(self, batch: Sequence[Prepared]) -> torch.Tensor:
        assert self._head is not None
        hidden, tokens = self.backbone.token_states(batch)
        return self._head(hidden.index_select(0, tokens.starts).unsqueeze(1))

    def _padded_logits(self, batch: Sequence[Prepared]) -> torch.Tensor:
        logits: torch.Tensor = self.backbone.model(**self.backbone.pad(batch)).logits
        return logits


def _first_token_head(model: Any) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """The classifier as a function of each pair's first-token state (``[pairs, 1, hidden]``), for the
    heads whose layout is known: BERT pools that token and then classifies, (XLM-)RoBERTa's head takes
    the sequence and reads its first token itself. None: the model keeps its padded forward."""
    pooler = getattr(model.base_model, "pooler", None)
    classifier = model.classifier
    if pooler is not None and isinstance(classifier, torch.nn.Linear):
        return lambda first: classifier(pooler(first))
    if pooler is None and model.config.model_type in ROBERTA_TYPES:
        return classifier  # type: ignore[no-any-return]
    return None

"""Rerankers: a sequence-classification model reads each (query, document) pair and gives one score.

The score is the sigmoid of the single logit, as sentence-transformers' ``CrossEncoder`` gives it
and the public server answers. BERT runs the packed forward (a batch of pairs varies a lot in
length, and padding would dominate), then its pooler and classifier on each pair's first token;
other architectures (XLM-RoBERTa, ModernBERT, ...) run their own padded transformers forward.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import AutoModelForSequenceClassification

from sie.adapters.base import BatchOutputs, Forward, LoadSpec, ModelInput, Prepared, UnsupportedInput
from sie.adapters.transformer import TransformerAdapter
from sie.core.options import Capability, Pooling


class CrossEncoderScorer(TransformerAdapter):
    family = "CrossEncoder"
    auto_class = AutoModelForSequenceClassification
    capabilities = frozenset({Capability.SCORE})
    dims: dict[Capability, int] = {}  # noqa: RUF012  # nothing but scores
    default_pooling = Pooling.CLS  # unused: the classifier reads the first token itself

    def __init__(self, spec: LoadSpec) -> None:
        super().__init__(spec)
        model = self.backbone.model
        if int(model.config.num_labels) != 1:
            raise ValueError(f"a reranker has one output label; this model has {model.config.num_labels}")
        # The packed path needs BERT's own head layout: pooler on the first token, then the classifier.
        self._pooler = getattr(self.backbone.base, "pooler", None)
        self.packs_tokens = self.backbone.packed is not None and self._pooler is not None

    def prepare(self, inputs: Sequence[ModelInput], forward: Forward) -> list[Prepared]:
        pairs = [one for one in inputs if isinstance(one, tuple)]
        if len(pairs) != len(inputs):
            raise UnsupportedInput("Cross-encoder models score (query, document) pairs, not single texts")
        return [Prepared(ids, types) for ids, types in self.tokenizer.encode_pairs(pairs)]

    def run(self, batch: Sequence[Prepared], forward: Forward) -> BatchOutputs:
        with self.backbone.running(forward.lora):
            logits = self._packed_logits(batch) if self.packs_tokens else self._padded_logits(batch)
            return BatchOutputs(scores=torch.sigmoid(logits.float()).view(-1).cpu().numpy())

    def _packed_logits(self, batch: Sequence[Prepared]) -> torch.Tensor:
        assert self._pooler is not None
        hidden, tokens = self.backbone.token_states(batch)
        pooled = self._pooler(hidden.index_select(0, tokens.starts).unsqueeze(1))
        logits: torch.Tensor = self.backbone.model.classifier(pooled)
        return logits

    def _padded_logits(self, batch: Sequence[Prepared]) -> torch.Tensor:
        logits: torch.Tensor = self.backbone.model(**self.backbone.pad(batch)).logits
        return logits

"""Token-classification NER on torch: any ``AutoModelForTokenClassification`` (BERT, RoBERTa, DeBERTa...).

BERT and (XLM-)RoBERTa run the packed forward and their classifier over the real tokens only; other
architectures run their own padded transformers forward (their heads differ: ModernBERT adds a
prediction head first).
Spans, scores and filtering are ``token_entities``', shared with the ONNX Runtime adapter.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from transformers import AutoModelForTokenClassification

from sie.adapters import token_entities
from sie.adapters.batch import BatchOutputs, ModelInput, Prepared
from sie.adapters.contract import Forward, LoadSpec
from sie.adapters.runtime.pooling import unpad
from sie.adapters.runtime.transformer import TransformerAdapter
from sie.core.options import Capability


class TorchTokenNer(TransformerAdapter):
    family = token_entities.FAMILY
    request_options = token_entities.OPTIONS
    auto_class = AutoModelForTokenClassification
    capabilities = frozenset({Capability.EXTRACT})

    def __init__(self, spec: LoadSpec) -> None:
        super().__init__(spec)
        config = self.backbone.model.config
        self.labels = [str(config.id2label[i]) for i in range(int(config.num_labels))]
        # The packed path feeds the encoder's states straight to ``classifier``, BERT's head layout.
        self.packs_tokens = self.backbone.packed is not None and hasattr(self.backbone.model, "classifier")

    def prepare(self, inputs: Sequence[ModelInput], forward: Forward) -> list[Prepared]:
        return token_entities.prepare(self.tokenizer, inputs, forward)

    def run(self, batch: Sequence[Prepared], forward: Forward) -> BatchOutputs:
        with self.backbone.running():
            logits = self._packed_logits(batch) if self.packs_tokens else self._padded_logits(batch)
            rows = logits.float().cpu().numpy()
        per_item = np.split(rows, np.cumsum([len(item.ids) for item in batch])[:-1])
        return BatchOutputs(
            extractions=token_entities.extractions(batch, per_item, self.labels, forward.task)
        )

    def _packed_logits(self, batch: Sequence[Prepared]) -> torch.Tensor:
        hidden, _ = self.backbone.token_states(batch)
        logits: torch.Tensor = self.backbone.model.classifier(hidden)
        return logits

    def _padded_logits(self, batch: Sequence[Prepared]) -> torch.Tensor:
        padded = self.backbone.pad(batch)
        logits: torch.Tensor = self.backbone.model(**padded).logits
        return unpad(logits, padded["attention_mask"])

"""Token-classification NER on ONNX Runtime: an exported ``*ForTokenClassification`` graph whose output
is ``logits`` ``[batch, tokens, classes]``, next to the model's ``config.json`` (its ``id2label``) and
``tokenizer.json``. Spans, scores and filtering are ``token_entities``', shared with the torch adapter.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Self

import numpy as np
import onnxruntime as ort

from sie.adapters import token_entities
from sie.adapters.batch import BatchOutputs, ModelInput, Prepared, TokenBatch
from sie.adapters.contract import TEXT_ONLY, Forward, LoadSpec, Trait
from sie.adapters.runtime.onnx_session import feeds, open_session
from sie.adapters.runtime.tokenizer import TextTokenizer
from sie.core.options import Capability


class OnnxTokenNer:
    family = token_entities.FAMILY
    request_options = token_entities.OPTIONS
    capabilities = frozenset({Capability.EXTRACT})
    inputs = TEXT_ONLY
    packs_tokens = False  # the exported graph takes a padded batch
    traits = frozenset({Trait.RUNS_ONNX})

    def __init__(self, session: ort.InferenceSession, tokenizer: TextTokenizer, labels: list[str]) -> None:
        output = session.get_outputs()[0]
        classes = output.shape[-1]
        if isinstance(classes, int) and classes != len(labels):
            raise ValueError(f"the graph gives {classes} classes but id2label names {len(labels)}")
        self._session = session
        self._output = output.name
        self.tokenizer = tokenizer
        self.labels = labels

    @classmethod
    def load(cls, spec: LoadSpec) -> Self:
        folder = spec.weights if spec.weights.is_dir() else spec.weights.parent
        return cls(
            open_session(spec), TextTokenizer.of(spec), token_entities.id2label(folder / "config.json")
        )

    def prepare(self, inputs: Sequence[ModelInput], forward: Forward) -> list[Prepared]:
        return token_entities.prepare(self.tokenizer, inputs, forward)

    def run(self, batch: Sequence[Prepared], forward: Forward) -> BatchOutputs:
        padded = TokenBatch.pad(batch, self.tokenizer.pad_id)
        (logits,) = self._session.run([self._output], feeds(self._session, padded))
        rows = np.asarray(logits, dtype=np.float32)
        per_item = [rows[i, : len(item.ids)] for i, item in enumerate(batch)]
        return BatchOutputs(
            extractions=token_entities.extractions(batch, per_item, self.labels, forward.task)
        )

    def close(self) -> None:
        del self._session

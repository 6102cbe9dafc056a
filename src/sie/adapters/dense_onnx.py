"""Dense text embeddings with ONNX Runtime: the model's ``last_hidden_state``, pooled like every family.

The session (CUDA provider on a CUDA device) comes from ``onnx_session``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Self

import numpy as np
import onnxruntime as ort
import torch

from sie.adapters.batch import BatchOutputs, ModelInput, Prepared, TokenBatch
from sie.adapters.contract import TEXT_ONLY, Forward, LoadSpec, Trait, texts_only
from sie.adapters.runtime.onnx_session import feeds, open_session
from sie.adapters.runtime.packing import PackedTokens
from sie.adapters.runtime.pooling import pool, unpad
from sie.adapters.runtime.tokenizer import TextTokenizer
from sie.adapters.runtime.window import refusals, within_window
from sie.core.options import Capability, Pooling

_FAMILY: Final = "SentenceTransformer"
_CPU: Final = torch.device("cpu")


class OnnxDenseEncoder:
    family = _FAMILY
    request_options: frozenset[str] = frozenset()
    capabilities = frozenset({Capability.DENSE})
    inputs = TEXT_ONLY
    packs_tokens = False  # the exported graph takes a padded batch
    traits = frozenset({Trait.RUNS_ONNX})

    def __init__(
        self, session: ort.InferenceSession, tokenizer: TextTokenizer, default_pooling: Pooling
    ) -> None:
        self._session = session
        output = session.get_outputs()[0]
        self._output = output.name
        self.tokenizer = tokenizer
        self.dims = {Capability.DENSE: int(output.shape[-1])}
        self.default_pooling = default_pooling

    @classmethod
    def load(cls, spec: LoadSpec) -> Self:
        session = open_session(spec)
        return cls(session, TextTokenizer.of(spec), Pooling(spec.loadtime.get("pooling", "mean")))

    def prepare(self, inputs: Sequence[ModelInput], forward: Forward) -> list[Prepared]:
        texts = texts_only(inputs, _FAMILY)
        prepared = [Prepared(ids) for ids in self.tokenizer.encode(texts)]
        return within_window(prepared, refusals(self.tokenizer, texts, forward))

    def run(self, batch: Sequence[Prepared], forward: Forward) -> BatchOutputs:
        padded = TokenBatch.pad(batch, self.tokenizer.pad_id)
        (hidden,) = self._session.run([self._output], feeds(self._session, padded))
        states = unpad(torch.from_numpy(np.asarray(hidden)), torch.from_numpy(padded.attention_mask))
        pooled = pool(states, PackedTokens.of(batch, _CPU), forward.pooling or self.default_pooling)
        return BatchOutputs(dense=pooled.numpy())

    def close(self) -> None:
        del self._session

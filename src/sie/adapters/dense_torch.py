"""Dense text embeddings with transformers on torch (any encoder folder ``AutoModel`` loads): the
backbone's token states, pooled."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Self

from sie.adapters.base import BatchOutputs, Forward, LoadSpec, ModelInput, Prepared, texts_only
from sie.adapters.pooling import pool, read_default_pooling
from sie.adapters.transformer import Transformer
from sie.core.options import Capability

_FAMILY: Final = "SentenceTransformer"


class TorchDenseEncoder:
    capabilities = frozenset({Capability.DENSE})

    def __init__(self, spec: LoadSpec) -> None:
        self.tokenizer = spec.tokenizer()
        self.backbone = Transformer.load(spec, self.tokenizer.pad_id)
        self.packs_tokens = self.backbone.packed is not None
        self.dims = {Capability.DENSE: self.backbone.hidden_size}
        self.default_pooling = read_default_pooling(spec.weights)

    @classmethod
    def load(cls, spec: LoadSpec) -> Self:
        return cls(spec)

    def prepare(self, inputs: Sequence[ModelInput], is_query: bool) -> list[Prepared]:
        return [Prepared(ids) for ids in self.tokenizer.encode(texts_only(inputs, _FAMILY))]

    def run(self, batch: Sequence[Prepared], forward: Forward) -> BatchOutputs:
        with self.backbone.running():
            hidden, tokens = self.backbone.token_states(batch)
            pooled = pool(hidden, tokens, forward.pooling or self.default_pooling)
            return BatchOutputs(dense=pooled.cpu().numpy())

    def close(self) -> None:
        self.backbone.close()

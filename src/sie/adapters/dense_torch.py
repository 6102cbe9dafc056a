"""Dense text embeddings with transformers on torch (any encoder folder ``AutoModel`` loads): the
backbone's token states, pooled.

Loadtime ``append_eos`` (the public server's option for its SGLang-served LLM embedders): every text
ends with the tokenizer's EOS, which the Mistral-family embedders were trained to pool and whose
tokenizers do not add. The Dense layers a sentence-transformers folder lists after pooling run on the
pooled vector (``dense_head``).
"""

from __future__ import annotations

from collections.abc import Sequence

from sie.adapters.batch import BatchOutputs, Prepared
from sie.adapters.contract import Forward, LoadSpec
from sie.adapters.runtime.dense_head import DenseHead
from sie.adapters.runtime.pooling import pool, read_default_pooling
from sie.adapters.runtime.transformer import TransformerAdapter
from sie.core.options import Capability


class TorchDenseEncoder(TransformerAdapter):
    family = "SentenceTransformer"
    capabilities = frozenset({Capability.DENSE})

    def __init__(self, spec: LoadSpec) -> None:
        super().__init__(spec)
        self._head = DenseHead.of_folder(
            spec.weights, self.backbone.device, spec.loadtime.get("dense_projection_path")
        )
        width = self._head.out_features if self._head else self.backbone.hidden_size
        self.dims = {Capability.DENSE: width}
        self.default_pooling = read_default_pooling(spec.weights)
        if spec.loadtime.get("append_eos"):
            folder = spec.tokenizer_folder
            eos = self.tokenizer.role_ids(folder, ("eos_token",)).get("eos_token")
            if eos is None:
                raise ValueError(f"append_eos is set but the tokenizer in {folder} names no eos_token")
            self.tokenizer = self.tokenizer.ending_with(eos)

    def run(self, batch: Sequence[Prepared], forward: Forward) -> BatchOutputs:
        with self.backbone.running(forward.lora):
            hidden, tokens = self.backbone.token_states(batch)
            pooled = pool(hidden, tokens, forward.pooling or self.default_pooling)
            if self._head is not None:
                pooled = self._head(pooled)
            return BatchOutputs(dense=pooled.cpu().numpy())

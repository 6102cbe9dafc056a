"""BGE-M3: dense, sparse and multivector outputs of one XLM-RoBERTa forward, any subset per request.

The formulas are FlagEmbedding's (the model's reference code):
- dense: the first token's hidden state (normalised later, by the engine, when asked);
- sparse: ``relu(sparse_linear(h))`` per token, the largest weight per token id, weights > 0 only,
  the tokenizer's cls/eos/pad/unk tokens dropped;
- multivector: ``colbert_linear(h)`` of every token after the first, L2-normalised per token.
The two heads ship beside the encoder as ``sparse_linear.pt`` and ``colbert_linear.pt``; they stay
float32 and read float32 hidden states, whatever precision the encoder runs in.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Final

import numpy as np
import torch
import torch.nn.functional as F

from sie.adapters.batch import BatchOutputs, Prepared, SparseVector
from sie.adapters.contract import Forward, LoadSpec
from sie.adapters.runtime.pooling import pool
from sie.adapters.runtime.state_dicts import read_state_dict
from sie.adapters.runtime.transformer import TransformerAdapter
from sie.core.options import Capability, Pooling

_UNUSED_ROLES: Final = ("cls_token", "eos_token", "pad_token", "unk_token")


def _linear(path: Path, device: torch.device) -> torch.nn.Linear:
    state = read_state_dict(path)
    out_features, in_features = state["weight"].shape
    layer = torch.nn.Linear(in_features, out_features)
    layer.load_state_dict(state)
    return layer.eval().to(device)


class BgeM3Encoder(TransformerAdapter):
    family = "BGE-M3"
    capabilities = frozenset({Capability.DENSE, Capability.SPARSE, Capability.MULTIVECTOR})

    def __init__(self, spec: LoadSpec) -> None:
        super().__init__(spec)
        device = self.backbone.device
        self._sparse = _linear(spec.weights / "sparse_linear.pt", device)
        self._colbert = _linear(spec.weights / "colbert_linear.pt", device)
        hidden = self.backbone.hidden_size
        self.dims = {
            Capability.DENSE: hidden,
            Capability.SPARSE: int(self.backbone.model.config.vocab_size),
            Capability.MULTIVECTOR: int(self._colbert.out_features),
        }
        # FlagEmbedding leaves the tokenizer's cls, eos, pad and unk tokens out of sparse vectors.
        unused = self.tokenizer.role_ids(spec.tokenizer_folder, _UNUSED_ROLES).values()
        self._unused = np.fromiter(sorted(set(unused)), dtype=np.int64)

    def run(self, batch: Sequence[Prepared], forward: Forward) -> BatchOutputs:
        out = BatchOutputs()
        with self.backbone.running(forward.lora):
            hidden, tokens = self.backbone.token_states(batch)
            if Capability.DENSE in forward.outputs:
                out.dense = pool(hidden, tokens, forward.pooling or Pooling.CLS).cpu().numpy()
            if Capability.SPARSE in forward.outputs:
                weights = torch.relu(self._sparse(hidden.float()).float()).view(-1).cpu().numpy()
                out.sparse = [
                    self._term_weights(item.ids, w)
                    for item, w in zip(batch, tokens.per_item(weights), strict=True)
                ]
            if Capability.MULTIVECTOR in forward.outputs:
                vectors = F.normalize(self._colbert(hidden.float()).float(), dim=-1).cpu().numpy()
                out.multivector = [v[1:] for v in tokens.per_item(vectors)]  # every token after the first
        return out

    def _term_weights(self, ids: np.ndarray, weights: np.ndarray) -> SparseVector:
        """The largest weight of each token id, positive weights of used tokens only."""
        keep = (weights > 0) & ~np.isin(ids, self._unused)
        ids, weights = ids[keep], weights[keep]
        order = np.argsort(ids, kind="stable")
        ids, weights = ids[order], weights[order]
        terms, starts = np.unique(ids, return_index=True)
        values = np.maximum.reduceat(weights, starts) if len(ids) else weights
        return SparseVector(terms.astype(np.int32), values.astype(np.float32))

    def close(self) -> None:
        del self._sparse, self._colbert
        super().close()

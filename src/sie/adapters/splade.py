"""Sparse lexical vectors from a masked-LM head (SPLADE and the opensearch neural-sparse models).

Each token's vocabulary logits become weights ``log(1 + relu(logit))``; a text's weight for a term is
the largest over its tokens. Only the real tokens pass the head, from the packed layout, a bounded
number at a time: the ``[tokens, vocabulary]`` logits of a whole batch would take gigabytes.

Document-only models (they ship an ``idf.json``) encode queries without a forward: each distinct
query token gets its IDF weight, special tokens dropped, as their model cards prescribe.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np
import torch
from transformers import AutoModelForMaskedLM

from sie.adapters.batch import BatchOutputs, Prepared, SparseVector
from sie.adapters.contract import Forward, LoadSpec
from sie.adapters.runtime.packing import PackedTokens
from sie.adapters.runtime.tokenizer import TextTokenizer
from sie.adapters.runtime.transformer import TransformerAdapter
from sie.core.options import Capability

# Tokens whose vocabulary logits are held at once: 2048 x 30522 float32 is 250 MB.
HEAD_TOKENS: Final = 2048


def mlm_head(model: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    """The masked-LM head of a ``*ForMaskedLM`` model, as a function of the encoder's hidden states."""
    if hasattr(model, "cls"):  # BERT
        head: Callable[[torch.Tensor], torch.Tensor] = model.cls
        return head
    if hasattr(model, "lm_head"):  # RoBERTa, XLM-RoBERTa
        head = model.lm_head
        return head
    if hasattr(model, "head") and hasattr(model, "decoder"):  # ModernBERT
        return lambda hidden: model.decoder(model.head(hidden))
    if hasattr(model, "vocab_projector"):  # DistilBERT
        return lambda hidden: model.vocab_projector(
            model.vocab_layer_norm(model.activation(model.vocab_transform(hidden)))
        )
    raise ValueError(f"{type(model).__name__} has no masked-LM head this adapter knows")


def _segment_max(weights: torch.Tensor, segments: torch.Tensor, count: int) -> torch.Tensor:
    """``[count, vocabulary]``: per sequence, the largest weight of each term over its tokens."""
    out = weights.new_zeros(count, weights.shape[1])
    index = segments.long().unsqueeze(1).expand_as(weights)
    return out.scatter_reduce_(0, index, weights, reduce="amax", include_self=True)


def to_sparse(rows: torch.Tensor) -> list[SparseVector]:
    """Each row's non-zero terms, ascending by token id (one device-to-host copy for the batch)."""
    row, col = rows.nonzero(as_tuple=True)
    values = rows[row, col].float().cpu().numpy()
    counts = np.bincount(row.cpu().numpy(), minlength=rows.shape[0])
    indices = col.to(torch.int32).cpu().numpy()
    cuts = np.cumsum(counts)[:-1]
    return [SparseVector(i, v) for i, v in zip(np.split(indices, cuts), np.split(values, cuts), strict=True)]


def read_idf(folder: Path, tokenizer: TextTokenizer, vocab_size: int) -> np.ndarray | None:
    """``idf.json`` (token -> weight) as a vector over token ids; None when the model ships none."""
    path = folder / "idf.json"
    if not path.exists():
        return None
    table: dict[str, float] = json.loads(path.read_text(encoding="utf-8"))
    idf = np.zeros(vocab_size, dtype=np.float32)
    for token, token_id in tokenizer.vocabulary().items():
        if token in table and token_id < vocab_size:
            idf[token_id] = table[token]
    return idf


class SpladeEncoder(TransformerAdapter):
    family = "SPLADE"
    auto_class = AutoModelForMaskedLM
    capabilities = frozenset({Capability.SPARSE})

    def __init__(self, spec: LoadSpec) -> None:
        super().__init__(spec)
        self._head = mlm_head(self.backbone.model)
        vocab = int(self.backbone.model.config.vocab_size)
        self.dims = {Capability.SPARSE: vocab}
        self._idf = read_idf(spec.weights, self.tokenizer, vocab)
        self._special = np.fromiter(self.tokenizer.special_ids(), dtype=np.int64)

    def run(self, batch: Sequence[Prepared], forward: Forward) -> BatchOutputs:
        if forward.is_query and self._idf is not None:
            return BatchOutputs(sparse=[self._idf_vector(item.ids) for item in batch])
        with self.backbone.running(forward.lora):
            hidden, tokens = self.backbone.token_states(batch)
            return BatchOutputs(sparse=to_sparse(self._term_weights(hidden, tokens)))

    def _term_weights(self, hidden: torch.Tensor, tokens: PackedTokens) -> torch.Tensor:
        """``[sequences, vocabulary]``, the head run over whole sequences, ``HEAD_TOKENS`` at a time."""
        lengths = tokens.host_lengths
        starts = np.concatenate(([0], np.cumsum(lengths)))
        rows: list[torch.Tensor] = []
        first = 0
        while first < len(lengths):
            last = first + 1
            while last < len(lengths) and starts[last + 1] - starts[first] <= HEAD_TOKENS:
                last += 1
            span = slice(int(starts[first]), int(starts[last]))
            weights = torch.log1p(torch.relu(self._head(hidden[span]).float()))
            segments = tokens.segments[span] - first
            rows.append(_segment_max(weights, segments, last - first))
            first = last
        return torch.cat(rows) if len(rows) > 1 else rows[0]

    def _idf_vector(self, ids: np.ndarray) -> SparseVector:
        assert self._idf is not None
        terms = np.setdiff1d(np.unique(ids), self._special)
        weights = self._idf[terms]
        keep = weights > 0
        return SparseVector(terms[keep].astype(np.int32), weights[keep])

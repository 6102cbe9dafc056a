"""jina-colbert-v2: a ColBERT on Jina's rotary XLM-RoBERTa, run by transformers' own
``JinaEmbeddingsV3Model``.

Jina saves the encoder with Hub code of its own (a flash-attn port with rotary positions, a fused
``Wqkv`` and ``emb_ln``/``norm1``/``norm2``), which is the layout transformers' ``jina_embeddings_v3``
converts on load; only its config names the Hub code (``model_type: xlm-roberta``,
``position_embedding_type: rotary``, ``rotary_emb_base``). Reading that config into a
``JinaEmbeddingsV3Config`` loads the weights with no remote code (and on a CPU, which the Hub code's
flash kernels lack); the ColBERT projection ``linear.weight`` beside them runs as for every ColBERT.
The query and document markers (``[QueryMarker]``, ``[DocumentMarker]``) are tokens of the
tokenizer, put after the first token, as the public server puts them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from transformers import JinaEmbeddingsV3Config, JinaEmbeddingsV3Model

from sie.adapters.colbert import ColbertEncoder
from sie.adapters.contract import LoadSpec
from sie.adapters.jina_reranker import ENCODER_CONFIG_KEYS


def read_config(folder: Path) -> JinaEmbeddingsV3Config:
    """The checkpoint's Hub config as transformers' own; a config of another model is refused rather
    than read as this one (absolute positions, LoRA task adapters, no rotary base)."""
    raw = json.loads((folder / "config.json").read_text())
    if raw.get("position_embedding_type") != "rotary":
        raise ValueError(f"{folder} is not a rotary Jina XLM-RoBERTa: its positions are not rotary")
    if raw.get("lora_adaptations"):
        raise ValueError(
            f"{folder} carries LoRA task adapters (jina-embeddings-v3), which this class does not run"
        )
    if "rotary_emb_base" not in raw:
        raise ValueError(f"{folder} names no rotary_emb_base for its rotary positions")
    rope = {"rope_type": "default", "rope_theta": float(raw["rotary_emb_base"])}
    return JinaEmbeddingsV3Config(
        **{key: raw[key] for key in ENCODER_CONFIG_KEYS if key in raw}, rope_parameters=rope
    )


class JinaRotaryXlmRoberta:
    """Loads the checkpoint as ``Transformer.load`` loads a transformers class, with the config read
    from the Hub one (transformers converts the weight names; the load refuses any left unplaced)."""

    @staticmethod
    def from_pretrained(path: str, **kwargs: Any) -> Any:
        return JinaEmbeddingsV3Model.from_pretrained(path, config=read_config(Path(path)), **kwargs)


class JinaColbertEncoder(ColbertEncoder):
    auto_class: ClassVar[Any] = JinaRotaryXlmRoberta

    def __init__(self, spec: LoadSpec) -> None:
        super().__init__(spec)
        self._markers = {
            prefix: self._marker_id(prefix) for prefix in (self._query_prefix, self._doc_prefix) if prefix
        }

    def _marker_id(self, prefix: str) -> int:
        found = self.tokenizer.token_id(prefix.strip())
        if found is None:
            raise ValueError(f"the tokenizer has no token {prefix.strip()!r} to mark queries or documents")
        return found

    @classmethod
    def checkpoint_config(cls, spec: LoadSpec) -> Any:
        return read_config(spec.weights)

    def _marked(self, texts: list[str], prefix: str) -> list[np.ndarray]:
        """Each text's ids with the marker token after its first token ([CLS]); the query and document
        length limits then apply to the marked ids, as for every ColBERT."""
        encoded = self.tokenizer.encode(texts)
        if not prefix:
            return encoded
        marker = np.array([self._markers[prefix]], dtype=np.int64)
        return [np.concatenate((ids[:1], marker, ids[1:])) for ids in encoded]

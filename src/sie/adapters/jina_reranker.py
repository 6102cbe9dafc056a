"""Jina's XLM-RoBERTa reranker (jina-reranker-v2) as transformers' own XLM-RoBERTa classifier.

Jina saves this reranker with Hub code of its own, a port of flash-attn's BERT: the same post-norm
encoder, absolute RoBERTa positions and RoBERTa classification head as transformers'
``XLMRobertaForSequenceClassification``, under other module names and with the query, key and value
projections fused into one ``Wqkv``. Renaming the weights (and splitting ``Wqkv``) gives transformers'
model, which then runs our packed forward like every other XLM-RoBERTa reranker: no Hub code to
trust or download, no flash-attn package, and a CPU path (the Hub code's flash kernels need CUDA).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, ClassVar

import torch
from safetensors.torch import load_file
from transformers import XLMRobertaConfig, XLMRobertaForSequenceClassification

from sie.adapters.contract import LoadSpec
from sie.adapters.cross_encoder import CrossEncoderScorer

_WEIGHTS = "model.safetensors"
_LAYER = r"^roberta\.encoder\.layers\.(\d+)\."
_TO_LAYER = r"roberta.encoder.layer.\1."
_RENAMES = (
    (re.compile(r"^roberta\.emb_ln\."), "roberta.embeddings.LayerNorm."),
    (re.compile(_LAYER + r"mixer\.out_proj\."), _TO_LAYER + "attention.output.dense."),
    (re.compile(_LAYER + r"norm1\."), _TO_LAYER + "attention.output.LayerNorm."),
    (re.compile(_LAYER + r"mlp\.fc1\."), _TO_LAYER + "intermediate.dense."),
    (re.compile(_LAYER + r"mlp\.fc2\."), _TO_LAYER + "output.dense."),
    (re.compile(_LAYER + r"norm2\."), _TO_LAYER + "output.LayerNorm."),
)
_FUSED_QKV = re.compile(_LAYER + r"mixer\.Wqkv\.(weight|bias)$")
# What Jina's Hub configs share with transformers' encoder configs (the reranker's and jina-colbert-v2's);
# the rest (auto_map, use_flash_attn, the LoRA and pooling settings of Jina's embedders) concerns the
# Hub code alone.
ENCODER_CONFIG_KEYS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "hidden_act",
    "max_position_embeddings",
    "type_vocab_size",
    "layer_norm_eps",
    "pad_token_id",
    "bos_token_id",
    "eos_token_id",
)
_CONFIG_KEYS = (*ENCODER_CONFIG_KEYS, "classifier_dropout", "id2label", "label2id", "num_labels")


def read_config(folder: Path) -> XLMRobertaConfig:
    raw = json.loads((folder / "config.json").read_text())
    positions = raw.get("position_embedding_type", "absolute")
    if positions != "absolute":  # Jina's rotary embedders (jina-embeddings-v3) are another model
        raise ValueError(f"{folder} is not a Jina XLM-RoBERTa reranker: its positions are {positions!r}")
    return XLMRobertaConfig(**{key: raw[key] for key in _CONFIG_KEYS if key in raw})


def transformers_state_dict(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Jina's weight names to transformers' XLM-RoBERTa's; names already in that form pass through."""
    renamed: dict[str, torch.Tensor] = {}
    for name, tensor in weights.items():
        fused = _FUSED_QKV.match(name)
        if fused:  # flash-attn's MHA reads the fused projection as (three, heads, head_dim): q, k, v
            layer, kind = fused.groups()
            prefix = f"roberta.encoder.layer.{layer}.attention.self."
            for part, chunk in zip(("query", "key", "value"), tensor.chunk(3, dim=0), strict=True):
                renamed[f"{prefix}{part}.{kind}"] = chunk.contiguous()
            continue
        for pattern, replacement in _RENAMES:
            name = pattern.sub(replacement, name)
        renamed[name] = tensor
    return renamed


class JinaXlmRobertaClassifier:
    """Loads the checkpoint as ``Transformer.load`` loads a transformers class (``from_pretrained``
    with a dtype and attention implementation), which refuses it if any weight found no place."""

    @staticmethod
    def from_pretrained(path: str, **kwargs: Any) -> Any:
        folder = Path(path)
        if not (folder / _WEIGHTS).is_file():
            raise FileNotFoundError(f"{folder} has no {_WEIGHTS}: the Jina reranker loads from safetensors")
        state_dict = transformers_state_dict(load_file(str(folder / _WEIGHTS)))
        return XLMRobertaForSequenceClassification.from_pretrained(
            None, config=read_config(folder), state_dict=state_dict, **kwargs
        )


class JinaRerankerScorer(CrossEncoderScorer):
    family = "Jina reranker"
    auto_class: ClassVar[Any] = JinaXlmRobertaClassifier

    @classmethod
    def checkpoint_config(cls, spec: LoadSpec) -> Any:
        return read_config(spec.weights)

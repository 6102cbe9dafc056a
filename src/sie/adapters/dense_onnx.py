"""Dense text embeddings with ONNX Runtime: the model's ``last_hidden_state``, pooled like every family.

The session uses the CUDA execution provider when the device is CUDA and the provider is present,
otherwise the CPU provider with all graph optimisations and intra-op threads matched to the cores.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Final, Self

import numpy as np
import onnxruntime as ort
import torch

from sie.adapters.base import (
    TEXT_ONLY,
    BatchOutputs,
    Forward,
    LoadSpec,
    ModelInput,
    Prepared,
    TokenBatch,
    texts_only,
)
from sie.adapters.packed_bert import PackedTokens
from sie.adapters.pooling import pool, unpad
from sie.adapters.tokenizer import TextTokenizer
from sie.core.options import Capability, Pooling

_FAMILY: Final = "SentenceTransformer"
_CPU: Final = torch.device("cpu")


def _model_file(weights: Path, name: str | None) -> Path:
    if weights.is_file():
        return weights
    if name:
        return weights / name
    candidates = sorted(weights.glob("*.onnx")) or sorted(weights.glob("onnx/*.onnx"))
    if not candidates:
        raise FileNotFoundError(f"{weights} has no .onnx file")
    return candidates[0]


class OnnxDenseEncoder:
    family = _FAMILY
    capabilities = frozenset({Capability.DENSE})
    inputs = TEXT_ONLY
    packs_tokens = False  # the exported graph takes a padded batch

    def __init__(
        self, session: ort.InferenceSession, tokenizer: TextTokenizer, default_pooling: Pooling
    ) -> None:
        self._session = session
        self._inputs = {i.name for i in session.get_inputs()}
        output = session.get_outputs()[0]
        self._output = output.name
        self.tokenizer = tokenizer
        self.dims = {Capability.DENSE: int(output.shape[-1])}
        self.default_pooling = default_pooling

    @classmethod
    def load(cls, spec: LoadSpec) -> Self:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if spec.threads:
            options.intra_op_num_threads = spec.threads
            options.inter_op_num_threads = 1
        providers = ["CPUExecutionProvider"]
        if spec.device.startswith("cuda") and "CUDAExecutionProvider" in ort.get_available_providers():
            index = int(spec.device.split(":", 1)[1]) if ":" in spec.device else 0
            providers.insert(0, ("CUDAExecutionProvider", {"device_id": index}))  # type: ignore[arg-type]
        path = _model_file(spec.weights, spec.loadtime.get("onnx_file"))
        session = ort.InferenceSession(str(path), sess_options=options, providers=providers)
        return cls(session, spec.tokenizer(), Pooling(spec.loadtime.get("pooling", "mean")))

    def prepare(self, inputs: Sequence[ModelInput], forward: Forward) -> list[Prepared]:
        return [Prepared(ids) for ids in self.tokenizer.encode(texts_only(inputs, _FAMILY))]

    def run(self, batch: Sequence[Prepared], forward: Forward) -> BatchOutputs:
        padded = TokenBatch.pad(batch, self.tokenizer.pad_id)
        feeds = {"input_ids": padded.input_ids, "attention_mask": padded.attention_mask}
        if "token_type_ids" in self._inputs:
            feeds["token_type_ids"] = padded.token_type_ids
        (hidden,) = self._session.run([self._output], feeds)
        states = unpad(torch.from_numpy(np.asarray(hidden)), torch.from_numpy(padded.attention_mask))
        pooled = pool(states, PackedTokens.of(batch, _CPU), forward.pooling or self.default_pooling)
        return BatchOutputs(dense=pooled.numpy())

    def close(self) -> None:
        del self._session

"""Dense text embeddings with ONNX Runtime: the model's ``last_hidden_state`` pooled in NumPy.

The session uses the CUDA execution provider when the device is CUDA and the provider is present,
otherwise the CPU provider with all graph optimisations and intra-op threads matched to the cores.
"""

from __future__ import annotations

from pathlib import Path
from typing import Self

import numpy as np
import onnxruntime as ort

from sie.adapters.base import LoadSpec, TokenBatch
from sie.adapters.pooling import pool
from sie.core.options import Pooling


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
    packs_tokens = False  # the exported graph takes a padded batch

    def __init__(self, session: ort.InferenceSession, default_pooling: Pooling) -> None:
        self._session = session
        self._inputs = {i.name for i in session.get_inputs()}
        output = session.get_outputs()[0]
        self._output = output.name
        self.dims = int(output.shape[-1])
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
        return cls(session, Pooling(spec.loadtime.get("pooling", "mean")))

    def embed(self, batch: TokenBatch, pooling: Pooling) -> np.ndarray:
        feeds = {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask}
        if "token_type_ids" in self._inputs:
            feeds["token_type_ids"] = np.zeros_like(batch.input_ids)
        (hidden,) = self._session.run([self._output], feeds)
        return pool(hidden, batch.attention_mask, batch.lengths, pooling)

    def close(self) -> None:
        del self._session

"""An ONNX Runtime session on the ``LoadSpec``'s device, shared by every ONNX family.

The CUDA execution provider is used when the device is CUDA and the provider is present, otherwise the
CPU provider; all graph optimisations are on and intra-op threads match the cores the engine gives.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

from sie.adapters.batch import TokenBatch
from sie.adapters.contract import LoadSpec


def model_file(weights: Path, name: str | None) -> Path:
    """The graph to load: ``weights`` itself, ``name`` inside it, or its first ``*.onnx`` (or ``onnx/*.onnx``)."""
    if weights.is_file():
        return weights
    if name:
        return weights / name
    candidates = sorted(weights.glob("*.onnx")) or sorted(weights.glob("onnx/*.onnx"))
    if not candidates:
        raise FileNotFoundError(f"{weights} has no .onnx file")
    return candidates[0]


def open_session(spec: LoadSpec) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if spec.threads:
        options.intra_op_num_threads = spec.threads
        options.inter_op_num_threads = 1
    providers: list[str | tuple[str, dict[str, int]]] = ["CPUExecutionProvider"]
    if spec.device.startswith("cuda") and "CUDAExecutionProvider" in ort.get_available_providers():
        index = int(spec.device.split(":", 1)[1]) if ":" in spec.device else 0
        providers.insert(0, ("CUDAExecutionProvider", {"device_id": index}))
    path = model_file(spec.weights, spec.loadtime.get("onnx_file"))
    return ort.InferenceSession(str(path), sess_options=options, providers=providers)


def feeds(session: ort.InferenceSession, padded: TokenBatch) -> dict[str, np.ndarray]:
    """A padded batch as the graph's inputs (``token_type_ids`` only where the export kept it)."""
    names = {one.name for one in session.get_inputs()}
    inputs = {"input_ids": padded.input_ids, "attention_mask": padded.attention_mask}
    if "token_type_ids" in names:
        inputs["token_type_ids"] = padded.token_type_ids
    return inputs

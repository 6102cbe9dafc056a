"""Tokens/s as a fraction of the GPU's dense half-precision peak: the FLOPs one token costs in a BERT
encoder, and the peak looked up by GPU name.

The estimate is the usual one for a transformer forward: each non-embedding parameter is one
multiply-add per token (2 FLOPs), plus attention's two matmuls (scores and the weighted sum of
values), 2 x hidden multiply-adds per position attended, per layer: 4 x layers x hidden x length.
Embedding lookups cost no matmul and are left out. It ignores softmax, layer norms and GELU, which
are memory-bound and small in FLOPs, so the fraction reads as "useful matmul work per second".
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

# Dense (no sparsity) fp16/bf16 tensor-core peaks in TFLOP/s, from the vendors' datasheets. Checked
# in order, so the PCIe H100 is matched before the SXM one; ``--gpu-peak-tflops`` overrides.
PEAK_TFLOPS: Final[tuple[tuple[str, float], ...]] = (
    (r"H100.*PCIe", 756.0),
    (r"H100", 989.0),
    (r"H200", 989.0),
    (r"A100", 312.0),
    (r"\bL4\b", 121.0),
    (r"A10G", 125.0),
)


def peak_tflops(gpu_name: str) -> float | None:
    """The table's peak for a device name such as ``NVIDIA H100 80GB HBM3``; None when unknown."""
    for pattern, tflops in PEAK_TFLOPS:
        if re.search(pattern, gpu_name, flags=re.IGNORECASE):
            return tflops
    return None


@dataclass(frozen=True)
class EncoderDims:
    hidden: int
    layers: int
    intermediate: int

    @classmethod
    def from_config(cls, config_json: Path) -> EncoderDims:
        """From a transformers ``config.json`` (BERT field names)."""
        config = json.loads(config_json.read_text(encoding="utf-8"))
        return cls(
            hidden=int(config["hidden_size"]),
            layers=int(config["num_hidden_layers"]),
            intermediate=int(config["intermediate_size"]),
        )

    @property
    def non_embedding_params(self) -> int:
        """Per layer: Q, K, V and output projections with biases, the two feed-forward linears with
        biases, and the two layer norms (weight and bias)."""
        h, i = self.hidden, self.intermediate
        attention = 4 * (h * h + h)
        feed_forward = (h * i + i) + (i * h + h)
        norms = 2 * 2 * h
        return self.layers * (attention + feed_forward + norms)


def token_weighted_mean_length(lengths: Sequence[int]) -> float:
    """The sequence length an average *token* attends over: sum(n^2) / sum(n). A token of a long
    text attends over more positions, so the plain mean of lengths would undercount attention."""
    total = sum(lengths)
    return sum(n * n for n in lengths) / total if total else 0.0


def flops_per_token(dims: EncoderDims, mean_length: float) -> float:
    return 2.0 * dims.non_embedding_params + 4.0 * dims.layers * dims.hidden * mean_length


def peak_fraction(tokens_per_s: float, per_token: float, peak: float | None) -> float | None:
    """Achieved FLOP/s over the peak (``peak`` in TFLOP/s); None without a peak."""
    if not peak:
        return None
    return tokens_per_s * per_token / (peak * 1e12)

"""Dense text embeddings with transformers on torch (any BERT-like encoder folder)."""

from __future__ import annotations

import logging
from typing import Any, Self

import numpy as np
import torch
from transformers import AutoConfig, AutoModel
from transformers.utils import logging as hf_logging

from sie.adapters.attention import AttentionPlan, plan_attention
from sie.adapters.base import LoadSpec, TokenBatch
from sie.adapters.packed_bert import PackedBert, host_to_device, pool_packed
from sie.adapters.pooling import read_default_pooling
from sie.core.heap import collect_unloaded
from sie.core.options import ComputePrecision, Pooling

log = logging.getLogger(__name__)

_TORCH_DTYPES = {
    ComputePrecision.FLOAT32: torch.float32,
    ComputePrecision.FLOAT16: torch.float16,
    ComputePrecision.BFLOAT16: torch.bfloat16,
}


def _weights_and_autocast(precision: ComputePrecision, device: str) -> tuple[torch.dtype, torch.dtype | None]:
    """bfloat16 on CPU is mixed precision: the linear layers hold bf16 weights and run on AMX under
    autocast, while embeddings, layer norms, softmax and the residual stream stay float32. That keeps
    top-10 retrieval identical to float32, where casting the whole model to bf16 loses a query
    (tests/adapters), and unlike plain autocast over float32 weights it does not re-cast every weight
    on every call (which made one short query slower than float32)."""
    if device.startswith("cpu") and precision is ComputePrecision.BFLOAT16:
        return torch.float32, torch.bfloat16
    return _TORCH_DTYPES[precision], None


def linear_weights_to(model: torch.nn.Module, dtype: torch.dtype) -> None:
    """The weight half of CPU mixed bf16 (public so the benchmark's raw baseline runs the same path)."""
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            module.to(dtype)


class TorchDenseEncoder:
    def __init__(
        self,
        model: Any,
        device: torch.device,
        dims: int,
        default_pooling: Pooling,
        attention: AttentionPlan,
        autocast: torch.dtype | None = None,
        packed: PackedBert | None = None,
    ) -> None:
        self._model = model
        self._device = device
        self._attention = attention
        self._autocast = autocast
        self._packed = packed
        self.packs_tokens = packed is not None
        self.dims = dims
        self.default_pooling = default_pooling

    @classmethod
    def load(cls, spec: LoadSpec) -> Self:
        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # a server log is no terminal
        if spec.threads and spec.device.startswith("cpu"):
            torch.set_num_threads(spec.threads)
        device = torch.device(spec.device)
        weights_dtype, autocast = _weights_and_autocast(spec.precision, spec.device)
        config = AutoConfig.from_pretrained(str(spec.weights))
        packable = spec.loadtime.get("packed", True) and PackedBert.supports_config(config)
        attention = plan_attention(
            spec.attention,
            device,
            autocast or weights_dtype,
            PackedBert.head_dim(config) if packable else None,
        )
        model = AutoModel.from_pretrained(
            str(spec.weights),
            dtype=weights_dtype,
            attn_implementation=spec.loadtime.get("attn_implementation", attention.transformers_impl),
        )
        model.eval().to(device)
        if autocast is not None:
            linear_weights_to(model, autocast)
        dims = int(model.config.hidden_size)
        packed = PackedBert(model, attention) if packable and PackedBert.supports(model) else None
        log.info(
            "attention for %s: %s%s, SDPA backends %s",
            spec.weights,
            attention.packed.value if packed else "padded",
            "" if packed else f" ({model.config._attn_implementation})",
            ", ".join(b.name for b in attention.sdpa),
        )
        return cls(model, device, dims, read_default_pooling(spec.weights), attention, autocast, packed)

    @torch.inference_mode()
    def embed(self, batch: TokenBatch, pooling: Pooling) -> np.ndarray:
        with (
            torch.autocast(
                self._device.type, dtype=self._autocast or torch.bfloat16, enabled=self._autocast is not None
            ),
            self._attention.sdpa_backends(),
        ):
            if self._packed is not None:
                hidden, packing = self._packed.hidden_states(batch, self._device)
                return pool_packed(hidden, packing, pooling).cpu().numpy()
            return self._padded(batch, pooling)

    def _padded(self, batch: TokenBatch, pooling: Pooling) -> np.ndarray:
        ids = host_to_device(batch.input_ids, self._device)
        mask = host_to_device(batch.attention_mask, self._device)
        hidden = self._model(input_ids=ids, attention_mask=mask).last_hidden_state
        if pooling is Pooling.CLS:
            pooled = hidden[:, 0]
        elif pooling is Pooling.LAST:
            lengths = host_to_device(batch.lengths, self._device)
            pooled = hidden[torch.arange(hidden.shape[0], device=self._device), lengths - 1]
        else:
            # Summed in float32: half-precision sums over long sequences lose digits (and can overflow).
            weights = mask.unsqueeze(-1).float()
            pooled = (hidden.float() * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
        vectors: np.ndarray = pooled.float().cpu().numpy()
        return vectors

    def close(self) -> None:
        del self._model, self._packed
        collect_unloaded()
        if self._device.type == "cuda":
            torch.cuda.empty_cache()

"""BERT forward over packed tokens: padding never reaches the linear layers.

A padded batch of mixed lengths spends most of its FLOPs on pad tokens (a 20-token query batched
with a 200-token passage costs ten times its share). Every BERT layer except self-attention works
token by token, so this runs them over the batch's real tokens only, concatenated into one
``[tokens, hidden]`` matrix. Attention needs sequences apart: on a CPU a long sequence attends on
its own, straight from the packed matrix; the others are sorted into length buckets, each
scattered to ``[rows, its longest]`` for one SDPA call with a key mask and gathered back, so
attention (a quarter of a MiniLM layer on a CPU) pays for little padding either. It is the CPU and
GPU counterpart of the public SIE's ``bert_flash`` adapter (flash-attn varlen): the same weights of
the loaded ``transformers`` model (layer norms called as they are, linear layers through ``Dense``),
so vectors match the padded forward (tests/adapters/test_packed_bert.py) and one forward call can
take a whole batch, whatever its spread of lengths.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache, partial
from typing import Any, Final

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend

from sie.adapters.runtime.attention import (
    CPU_BUCKET_CALL_COST,
    AloneKernel,
    AttentionPlan,
    PackedAttention,
    alone_kernel,
    attend_alone_math,
)
from sie.adapters.runtime.packing import PackedTokens, host_to_device
from sie.core.cuts import cheapest_cuts


@dataclass(frozen=True)
class Bucket:
    """Sequences of similar length that share one attention call, padded to the longest of them."""

    offset: int  # first row of this bucket in the padded layout
    rows: int
    longest: int
    key_mask: torch.Tensor | None  # [rows, 1, 1, longest], True on real tokens; None if none is padded


@dataclass(frozen=True)
class BucketLayout:
    """How each sequence attends when attention runs per length bucket (CPUs, GPUs without varlen).

    Sequences of at least ``alone_from`` tokens attend on their own, straight from the packed matrix
    (``alone``). The others are gathered (``gather``) into the padded layout, one bucket after
    another, each ``[rows, longest]``; they are sorted into buckets by length, so a short sequence pays
    attention only up to its bucket's longest.
    """

    alone: tuple[tuple[int, int], ...]  # (first token, length) of each sequence that attends alone
    gather: torch.Tensor | None  # packed rows of the bucketed sequences' tokens; None if that is all
    padded_index: torch.Tensor | None  # row in the padded layout of each gathered token; None if same
    buckets: tuple[Bucket, ...]
    padded_rows: int

    @classmethod
    def of(
        cls,
        lengths: np.ndarray,
        device: torch.device,
        alone_from: int | None = None,
        call_cost: int = CPU_BUCKET_CALL_COST,
    ) -> BucketLayout:
        lengths = lengths.astype(np.int64, copy=False)
        starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        alone = lengths >= alone_from if alone_from is not None else np.zeros(len(lengths), dtype=bool)
        bucketed = np.flatnonzero(~alone)
        order = bucketed[np.argsort(lengths[bucketed], kind="stable")]
        sorted_lengths = lengths[order]
        base = np.zeros_like(lengths)  # each bucketed sequence's first row in the padded layout
        buckets: list[Bucket] = []
        offset = 0
        for span in attention_buckets(sorted_lengths, call_cost):
            first, end = span.start, span.stop
            members = order[first:end]
            longest = int(sorted_lengths[end - 1])
            base[members] = offset + np.arange(end - first) * longest
            key_mask = None
            if sorted_lengths[first] != longest:
                real = np.arange(longest) < sorted_lengths[first:end, None]
                key_mask = host_to_device(real, device).view(end - first, 1, 1, longest)
            buckets.append(Bucket(offset, end - first, longest, key_mask))
            offset += (end - first) * longest
        counts = lengths[bucketed]
        within = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
        token_rows = np.repeat(base[bucketed], counts) + within  # padded-layout row of each gathered token
        identity = offset == len(token_rows) and bool((token_rows == np.arange(offset)).all())
        return cls(
            alone=tuple((int(starts[i]), int(lengths[i])) for i in np.flatnonzero(alone)),
            gather=None
            if len(bucketed) == len(lengths)
            else host_to_device(np.repeat(starts[bucketed], counts) + within, device),
            padded_index=None if identity else host_to_device(token_rows, device),
            buckets=tuple(buckets),
            padded_rows=offset,
        )


def attention_buckets(sorted_lengths: np.ndarray, call_cost: int = CPU_BUCKET_CALL_COST) -> list[range]:
    """Cut ascending lengths into consecutive buckets minimising ``sum(rows x longest^2 + call_cost)``.

    Attention work grows with the square of the padded length, so one 200-token passage must not pad
    sixty 20-token queries to 200; but each bucket is one more call.
    """
    square = sorted_lengths.astype(np.float64) ** 2
    return cheapest_cuts(
        len(sorted_lengths), lambda starts, end: (end - starts) * square[end - 1] + call_cost
    )


# Activations oneDNN applies inside its matmul, by their transformers ``hidden_act`` names: the
# intermediate layer's GELU then costs nothing (alone it was 4% of a bf16 MiniLM forward on a CPU).
_ONEDNN_ACTIVATIONS: Final = {
    "gelu": ("gelu", "none"),
    "gelu_new": ("gelu", "tanh"),
    "gelu_pytorch_tanh": ("gelu", "tanh"),
    "relu": ("relu", ""),
}


@cache
def _onednn_linear() -> Callable[..., torch.Tensor] | None:
    """oneDNN's fused linear (the kernel torch.compile emits for CPU linears), if this build has it
    and this CPU runs oneDNN's bf16 matmuls (AVX-512 and up)."""
    if not torch.backends.mkldnn.is_available():  # type: ignore[no-untyped-call]
        return None
    try:
        if not torch.ops.mkldnn._is_mkldnn_bf16_supported():
            return None
        return torch.ops.mkldnn._linear_pointwise.default
    except (AttributeError, RuntimeError):
        return None


@dataclass(frozen=True)
class Dense:
    """A linear layer and the activation after it, run as one oneDNN kernel for bf16 weights on a CPU.

    On bf16 CPUs ``F.linear`` goes through ``addmm``, which adds the bias in a pass of its own; the
    oneDNN kernel adds it (and the activation) to the accumulator: 10% less time in the matmuls of
    MiniLM, 9% less per forward. Elsewhere (CUDA, float32) it is ``F.linear`` then the activation.
    """

    weight: torch.Tensor
    bias: torch.Tensor | None
    activation: Callable[[torch.Tensor], torch.Tensor] | None = None
    onednn_post_op: tuple[str, str] | None = None  # (attr, algorithm) when oneDNN runs this layer

    @classmethod
    def of(
        cls,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        activation: Callable[[torch.Tensor], torch.Tensor] | None = None,
        activation_name: object = None,
    ) -> Dense:
        if weight.device.type != "cpu" or weight.dtype != torch.bfloat16 or _onednn_linear() is None:
            return cls(weight, bias, activation)
        if activation is None:
            return cls(weight, bias, None, ("none", ""))
        fused = _ONEDNN_ACTIVATIONS.get(activation_name) if isinstance(activation_name, str) else None
        return cls(weight, bias, None, fused) if fused else cls(weight, bias, activation, ("none", ""))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.onednn_post_op is not None:
            attr, algorithm = self.onednn_post_op
            linear = _onednn_linear()
            assert linear is not None
            y = linear(x.to(self.weight.dtype), self.weight, self.bias, attr, [], algorithm)
        else:
            y = F.linear(x, self.weight, self.bias)
        return y if self.activation is None else self.activation(y)


@dataclass(frozen=True)
class Layer:
    """One post-norm BERT layer's weights; dropout is left out, this is inference only."""

    qkv: Dense
    attention_out: Dense
    attention_norm: torch.nn.Module
    intermediate: Dense
    out: Dense
    out_norm: torch.nn.Module

    @classmethod
    def of(cls, layer: Any, activation_name: object) -> Layer:
        qkv_weight, qkv_bias = _fuse_qkv(layer.attention.self)
        attention_out, intermediate, out = layer.attention.output, layer.intermediate, layer.output
        return cls(
            qkv=Dense.of(qkv_weight, qkv_bias),
            attention_out=Dense.of(attention_out.dense.weight, attention_out.dense.bias),
            attention_norm=attention_out.LayerNorm,
            intermediate=Dense.of(
                intermediate.dense.weight,
                intermediate.dense.bias,
                intermediate.intermediate_act_fn,
                activation_name,
            ),
            out=Dense.of(out.dense.weight, out.dense.bias),
            out_norm=out.LayerNorm,
        )

    def with_lora(self, layer: Any, name: str) -> Layer:
        """This layer with LoRA ``name``'s updates merged into copies of the weights it adapts (W + BA,
        PEFT's own delta); the weights it leaves alone are shared, not copied."""
        attention = layer.attention.self
        deltas = [_lora_delta(part, name) for part in (attention.query, attention.key, attention.value)]
        qkv = self.qkv
        if any(delta is not None for delta in deltas):
            size = qkv.weight.shape[0] // 3
            merged = qkv.weight.clone()
            for index, delta in enumerate(deltas):
                if delta is not None:
                    merged[index * size : (index + 1) * size] += delta.to(merged.dtype)
            qkv = replace(qkv, weight=merged)
        return replace(
            self,
            qkv=qkv,
            attention_out=_merged(self.attention_out, layer.attention.output.dense, name),
            intermediate=_merged(self.intermediate, layer.intermediate.dense, name),
            out=_merged(self.out, layer.output.dense, name),
        )


def _lora_delta(module: Any, name: str) -> torch.Tensor | None:
    """PEFT's weight update of LoRA ``name`` on ``module``, or None when the LoRA leaves it alone."""
    if name not in getattr(module, "lora_A", {}):
        return None
    delta: torch.Tensor = module.get_delta_weight(name).detach()
    return delta


def _merged(dense: Dense, module: Any, name: str) -> Dense:
    delta = _lora_delta(module, name)
    return dense if delta is None else replace(dense, weight=dense.weight + delta.to(dense.weight.dtype))


# RoBERTa's layouts (XLM-RoBERTa: BGE-M3, multilingual E5, the BGE rerankers): BERT's layers, with
# positions numbered after the padding index and a classification head that reads the first token itself.
ROBERTA_TYPES: Final = frozenset({"roberta", "xlm-roberta"})
# The encoders with BERT's post-norm layer (fused here as ``Layer``), by ``model_type``: the base model
# class ``AutoModel`` builds for it.
_BASE_MODELS: Final = {"bert": "BertModel", "roberta": "RobertaModel", "xlm-roberta": "XLMRobertaModel"}


class PackedBert:
    """Wraps a loaded ``transformers`` BERT-layout base model; ``supports`` says whether one qualifies."""

    def __init__(self, model: Any, attention: AttentionPlan) -> None:
        self._model = model
        self._plan = attention
        config = model.config
        self._heads = int(config.num_attention_heads)
        self._hidden = int(config.hidden_size)
        self._head_dim = self.head_dim(config)
        self._layers = [Layer.of(layer, config.hidden_act) for layer in model.encoder.layer]
        # RoBERTa numbers positions after its padding index (a sequence's first token sits at pad + 1).
        roberta = config.model_type in ROBERTA_TYPES
        self.first_position = int(model.embeddings.padding_idx) + 1 if roberta else 0
        self._lora_layers: dict[str, list[Layer]] = {}
        # Only a CPU plan has sequences attend alone; the faster kernel for them is measured on the
        # first forward (``alone_kernel``: the compute dtype is the activations', known only then).
        self._flash_alone = attention.alone_from is not None and SDPBackend.FLASH_ATTENTION in attention.sdpa

    def add_lora(self, name: str) -> None:
        """Merged weights for LoRA ``name``, already injected into the wrapped model by PEFT. The packed
        forward runs its own copies of the layer weights, not the model's modules, so the PEFT layers
        would be bypassed here: each LoRA gets layers with its update merged in instead. (Embeddings and
        heads are called as modules, so PEFT's active adapter reaches them directly.)"""
        self._lora_layers[name] = [
            base.with_lora(layer, name)
            for base, layer in zip(self._layers, self._model.encoder.layer, strict=True)
        ]

    def remove_lora(self, name: str) -> None:
        self._lora_layers.pop(name, None)

    @staticmethod
    def supports(model: Any) -> bool:
        base_class = _BASE_MODELS.get(str(model.config.model_type))
        return base_class == type(model).__name__ and PackedBert.supports_config(model.config)

    @staticmethod
    def supports_config(config: Any) -> bool:
        """Whether ``AutoModel`` builds a model of this config that the packed forward runs."""
        return (
            config.model_type in _BASE_MODELS
            and getattr(config, "position_embedding_type", "absolute") == "absolute"
            and not getattr(config, "is_decoder", False)
            and config.hidden_size % config.num_attention_heads == 0
        )

    @staticmethod
    def head_dim(config: Any) -> int:
        return int(config.hidden_size) // int(config.num_attention_heads)

    def hidden_states(self, tokens: PackedTokens, lora: str | None = None) -> torch.Tensor:
        """Last hidden states of the real tokens, ``[tokens, hidden]``, in batch order, with LoRA ``lora``
        (added by ``add_lora``) or the base weights. SDPA calls run on whatever backends the caller
        allows (``AttentionPlan.sdpa_backends``)."""
        device = tokens.ids.device
        if self._plan.packed is PackedAttention.VARLEN:
            attend = partial(self._attend_varlen, tokens)
        else:
            layout = BucketLayout.of(
                tokens.host_lengths, device, self._plan.alone_from, self._plan.bucket_call_cost
            )
            # Zeroed once per forward: pad rows are never written, so they stay zero for every layer.
            padded = self._new_scratch(layout)
            attend = partial(self._attend_by_layout, layout, padded)
        hidden = self._embed(tokens)
        for layer in self._layers if lora is None else self._lora_layers[lora]:
            context = attend(layer.qkv(hidden))
            hidden = layer.attention_norm(layer.attention_out(context) + hidden)
            hidden = layer.out_norm(layer.out(layer.intermediate(hidden)) + hidden)
        return hidden

    def _embed(self, tokens: PackedTokens) -> torch.Tensor:
        ids = tokens.ids.unsqueeze(0)
        hidden: torch.Tensor = self._model.embeddings(
            input_ids=ids,
            position_ids=tokens.positions.unsqueeze(0),
            token_type_ids=tokens.types.unsqueeze(0),
        )
        return hidden.squeeze(0)

    def _new_scratch(self, layout: BucketLayout) -> torch.Tensor | None:
        if layout.padded_index is None:
            return None
        qkv = self._layers[0].qkv
        dtype = torch.get_autocast_dtype(qkv.weight.device.type) if torch.is_autocast_enabled() else None
        return qkv.weight.new_zeros(layout.padded_rows, qkv.weight.shape[0], dtype=dtype)

    def _attend_varlen(self, tokens: PackedTokens, qkv: torch.Tensor) -> torch.Tensor:
        """One flash-attention call over every sequence of the batch: no padding, no mask."""
        assert self._plan.varlen is not None
        count = qkv.shape[0]
        q, k, v = qkv.view(count, 3, self._heads, self._head_dim).unbind(1)
        cu_seqlens, longest = tokens.cu_seqlens, tokens.longest
        out = self._plan.varlen(q, k, v, cu_seqlens, cu_seqlens, longest, longest)
        return out.reshape(count, self._hidden)

    def _attend_by_layout(
        self, layout: BucketLayout, padded: torch.Tensor | None, qkv: torch.Tensor
    ) -> torch.Tensor:
        """``[tokens, hidden]`` contexts from ``[tokens, 3 x hidden]`` projections; ``padded`` is the zeroed
        scratch of the padded layout (None when the gathered rows already are that layout)."""
        context = qkv.new_empty(qkv.shape[0], self._hidden) if layout.alone else None
        if context is not None:
            alone = self._alone_kernel(qkv.dtype)
            for start, length in layout.alone:
                alone(qkv[start : start + length], context[start : start + length], self._heads)
        if not layout.buckets:
            assert context is not None
            return context
        rows = qkv if layout.gather is None else qkv.index_select(0, layout.gather)
        bucketed = self._attend_in_buckets(rows, layout, padded)
        if context is None:
            return bucketed
        assert layout.gather is not None
        return context.index_copy_(0, layout.gather, bucketed)

    def _alone_kernel(self, dtype: torch.dtype) -> AloneKernel:
        """The kernel for sequences that attend alone: the faster one here where flash is allowed."""
        if not self._flash_alone:
            return attend_alone_math
        return alone_kernel(self._heads, self._head_dim, dtype, torch.get_num_threads())

    def _attend_in_buckets(
        self, rows: torch.Tensor, layout: BucketLayout, padded: torch.Tensor | None
    ) -> torch.Tensor:
        if layout.padded_index is None:
            padded = rows
        else:
            assert padded is not None
            # index_copy_ / index_select rather than advanced indexing: 1.5x and 7x faster on CPU.
            padded.index_copy_(0, layout.padded_index, rows)
        context = rows.new_empty(layout.padded_rows, self._hidden)
        for bucket in layout.buckets:
            span = slice(bucket.offset, bucket.offset + bucket.rows * bucket.longest)
            shape = (bucket.rows, bucket.longest, self._heads, self._head_dim)
            q, k, v = padded[span].view(*shape[:2], 3, *shape[2:]).permute(2, 0, 3, 1, 4)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bucket.key_mask)
            context[span].view(shape).copy_(out.transpose(1, 2))
        return context if layout.padded_index is None else context.index_select(0, layout.padded_index)


def _fuse_qkv(attention: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """One ``[3 x hidden, hidden]`` projection instead of three; the original layers become views of
    it, so the weights are not held twice."""
    parts = (attention.query, attention.key, attention.value)
    weight = torch.cat([p.weight.detach() for p in parts]).contiguous()
    bias = torch.cat([p.bias.detach() for p in parts]).contiguous()
    size = parts[0].weight.shape[0]
    for index, part in enumerate(parts):
        part.weight.data = weight[index * size : (index + 1) * size]
        part.bias.data = bias[index * size : (index + 1) * size]
    return weight, bias

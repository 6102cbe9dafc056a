"""Which attention each device and precision gets, and the varlen layout checked on a CPU through the
reference kernel (the real flash varlen kernel needs a CUDA GPU)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend

from sie.adapters.contract import LoadSpec
from sie.adapters.dense_torch import TorchDenseEncoder
from sie.adapters.runtime.attention import (
    CPU_ALONE_FROM_TOKENS,
    EAGER_SDPA,
    FUSED_SDPA,
    GPU_BUCKET_CALL_COST,
    AttentionPlan,
    PackedAttention,
    alone_kernel,
    attend_alone_flash,
    attend_alone_math,
    plan_attention,
    probe_varlen,
    reference_varlen,
    varlen_kernel,
)
from sie.adapters.runtime.packed_bert import PackedBert
from sie.adapters.runtime.pooling import pool
from sie.core.options import AttentionBackend, ComputePrecision, Pooling
from sie.settings.server import Settings
from tests.adapters.test_packed_bert import packed_states, padded_reference, random_batch, tiny_bert
from tests.conftest import dense

CPU, CUDA = torch.device("cpu"), torch.device("cuda")
HALF = (torch.float16, torch.bfloat16)


def found_reference(device: torch.device, dtype: torch.dtype, head_dim: int):
    """A varlen finder for a GPU that has the kernel: hands out the reference implementation."""
    return reference_varlen


def found_nothing(device: torch.device, dtype: torch.dtype, head_dim: int):
    return None


@pytest.mark.parametrize("dtype", [torch.float32, *HALF])
def test_cpu_attends_in_buckets_with_long_sequences_alone(dtype):
    plan = plan_attention(AttentionBackend.AUTO, CPU, dtype, 32, found_reference)
    assert plan.packed is PackedAttention.BUCKETS and plan.varlen is None
    assert plan.alone_from == CPU_ALONE_FROM_TOKENS
    assert plan.transformers_impl == "sdpa" and plan.sdpa == FUSED_SDPA


@pytest.mark.parametrize("backend", [AttentionBackend.AUTO, AttentionBackend.FLASH_ATTENTION_2])
@pytest.mark.parametrize("dtype", HALF)
def test_cuda_half_precision_packs_into_one_varlen_call_per_layer(backend, dtype):
    plan = plan_attention(backend, CUDA, dtype, 32, found_reference)
    assert plan.packed is PackedAttention.VARLEN and plan.varlen is reference_varlen
    assert plan.alone_from is None


@pytest.mark.parametrize(
    ("backend", "dtype", "finder"),
    [
        (AttentionBackend.AUTO, torch.float32, found_reference),  # flash has no float32
        (AttentionBackend.AUTO, torch.float16, found_nothing),  # no varlen kernel, or it failed its probe
        (AttentionBackend.SDPA, torch.float16, found_reference),  # asked for SDPA
        (AttentionBackend.EAGER, torch.bfloat16, found_reference),
    ],
)
def test_cuda_falls_back_to_few_buckets(backend, dtype, finder):
    plan = plan_attention(backend, CUDA, dtype, 32, finder)
    assert plan.packed is PackedAttention.BUCKETS and plan.varlen is None
    assert plan.alone_from is None and plan.bucket_call_cost == GPU_BUCKET_CALL_COST


def test_models_the_packed_forward_cannot_run_never_look_for_varlen():
    def must_not_be_called(*_: object) -> None:
        raise AssertionError("looked for a varlen kernel without a head size")

    plan = plan_attention(AttentionBackend.AUTO, CUDA, torch.float16, None, must_not_be_called)
    assert plan.packed is PackedAttention.BUCKETS


def test_eager_runs_the_reference_math_everywhere():
    for device in (CPU, CUDA):
        plan = plan_attention(AttentionBackend.EAGER, device, torch.float16, 32, found_reference)
        assert plan.sdpa == EAGER_SDPA and plan.transformers_impl == "eager"


def test_no_plan_ever_lets_sdpa_pick_cudnn():
    combos = itertools.product(
        AttentionBackend, (CPU, CUDA, torch.device("mps")), (torch.float32, *HALF), (None, 32)
    )
    for backend, device, dtype, head_dim in combos:
        plan = plan_attention(backend, device, dtype, head_dim, found_reference)
        assert SDPBackend.CUDNN_ATTENTION not in plan.sdpa, (backend, device, dtype)


def test_sdpa_backends_turns_cudnn_off_and_sets_the_order_only_inside():
    plan = plan_attention(AttentionBackend.AUTO, CUDA, torch.float16, 32, found_nothing)
    before = torch._C._get_sdp_priority_order()
    with plan.sdpa_backends():
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert torch.backends.cuda.flash_sdp_enabled() and torch.backends.cuda.mem_efficient_sdp_enabled()
        order = torch._C._get_sdp_priority_order()
        assert [SDPBackend(b) for b in order[:2]] == [
            SDPBackend.FLASH_ATTENTION,
            SDPBackend.EFFICIENT_ATTENTION,
        ]
    assert torch._C._get_sdp_priority_order() == before
    assert torch.backends.cuda.cudnn_sdp_enabled()  # torch's own default is back


def test_no_varlen_kernel_off_cuda():
    assert varlen_kernel(CPU, torch.float16, 32) is None


def test_the_probe_accepts_the_reference_and_catches_a_kernel_that_ignores_sequence_bounds():
    def one_sequence(q, k, v, cu_q, cu_k, max_q, max_k):  # attends across the whole packed batch
        out = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1))
        return out.transpose(0, 1)

    assert probe_varlen(reference_varlen, CPU, torch.float32, 32)
    assert not probe_varlen(one_sequence, CPU, torch.float32, 32)


def varlen_plan() -> AttentionPlan:
    plan = plan_attention(AttentionBackend.AUTO, CUDA, torch.float16, 12, found_reference)
    assert plan.packed is PackedAttention.VARLEN
    return plan


@pytest.mark.parametrize("pooling", list(Pooling))
@pytest.mark.parametrize(
    "lengths", [[7, 1, 33, 12, 64, 2], [9, 9, 9], [5], [60, 3, 63]], ids=["mixed", "uniform", "one", "long"]
)
def test_varlen_layout_equals_the_buckets_and_the_padded_forward(pooling, lengths):
    model = tiny_bert()
    batch = random_batch(np.random.default_rng(11), lengths)
    cpu_plan = plan_attention(AttentionBackend.AUTO, CPU, torch.float32, 12)
    with torch.inference_mode():
        varlen_hidden, tokens = packed_states(PackedBert(model, varlen_plan()), batch, CPU)
        bucket_hidden, _ = packed_states(PackedBert(model, cpu_plan), batch, CPU)
        got = pool(varlen_hidden, tokens, pooling).numpy()
    torch.testing.assert_close(varlen_hidden, bucket_hidden, atol=2e-5, rtol=1e-4)
    np.testing.assert_allclose(got, padded_reference(model, batch, pooling), atol=2e-5, rtol=1e-4)


def test_settings_read_the_public_attention_variable(monkeypatch):
    monkeypatch.setenv("SIE_ATTENTION_BACKEND", "eager")
    assert Settings().attention_backend is AttentionBackend.EAGER
    monkeypatch.setenv("SIE_ATTENTION_BACKEND", "flash")
    with pytest.raises(ValueError, match="auto"):
        Settings()


def test_eager_backend_reaches_the_padded_transformers_forward(minilm_dir):
    spec = LoadSpec(
        minilm_dir, "cpu", ComputePrecision.FLOAT32, 256, {"packed": False}, attention=AttentionBackend.EAGER
    )
    encoder = TorchDenseEncoder.load(spec)
    assert encoder.backbone.model.config._attn_implementation == "eager"
    default = TorchDenseEncoder.load(
        LoadSpec(minilm_dir, "cpu", ComputePrecision.FLOAT32, 256, {"packed": False})
    )
    assert default.backbone.model.config._attn_implementation == "sdpa"


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "padded"])
def test_every_forward_runs_with_cudnn_attention_off(minilm_dir, packed):
    encoder = TorchDenseEncoder.load(
        LoadSpec(minilm_dir, "cpu", ComputePrecision.FLOAT32, 256, {"packed": packed})
    )
    seen: list[bool] = []
    norm = encoder.backbone.base.encoder.layer[0].attention.output.LayerNorm  # both forwards call it
    norm.register_forward_pre_hook(lambda *_: seen.append(torch.backends.cuda.cudnn_sdp_enabled()))
    dense(encoder, ["a short one", "and a longer text"], Pooling.MEAN)
    assert seen == [False]
    assert torch.backends.cuda.cudnn_sdp_enabled()


@pytest.mark.parametrize("dtype", [torch.float32, *HALF])
def test_cuda_never_asks_for_the_out_of_tree_backend(dtype):
    """Grouped-query attention in float32 is declined by flash and memory-efficient SDPA; with the
    out-of-tree backend listed, torch picked it on CUDA and failed ("Invalid backend", found on an
    H200 with a Qwen3 reranker) instead of falling through to math."""
    plan = plan_attention(AttentionBackend.AUTO, CUDA, dtype, 32, found_nothing)
    assert SDPBackend.OVERRIDEABLE not in plan.sdpa and plan.sdpa[-1] is SDPBackend.MATH


def alone_reference(qkv: torch.Tensor, heads: int) -> torch.Tensor:
    """One sequence's attention in float32, heads side by side: ``[tokens, heads x head_dim]``."""
    length = qkv.shape[0]
    q, k, v = qkv.float().view(length, 3, heads, -1).permute(1, 2, 0, 3)
    weights = torch.softmax(q @ k.transpose(1, 2) / q.shape[-1] ** 0.5, -1)
    return (weights @ v).transpose(0, 1).reshape(length, -1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kernel", [attend_alone_math, attend_alone_flash])
@pytest.mark.parametrize("length", [CPU_ALONE_FROM_TOKENS, 131])
def test_both_alone_kernels_compute_one_sequences_attention(kernel, dtype, length):
    heads = 4
    qkv = torch.randn(length, 3 * heads * 16, generator=torch.Generator().manual_seed(length)).to(dtype)
    out = torch.full((length, heads * 16), float("nan"), dtype=dtype)
    with torch.inference_mode(), sdpa_backends_for(FUSED_SDPA):
        kernel(qkv, out, heads)
    want = alone_reference(qkv, heads)
    if dtype is torch.float32:
        torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-4)
    else:
        assert F.cosine_similarity(out.float(), want, dim=-1).min() > 0.9999


def sdpa_backends_for(backends):
    return AttentionPlan(PackedAttention.BUCKETS, backends, "sdpa", CPU_ALONE_FROM_TOKENS).sdpa_backends()


def test_the_alone_kernel_is_measured_once_per_shape_and_is_one_of_the_two(caplog):
    alone_kernel.cache_clear()
    with caplog.at_level("INFO", logger="sie.adapters.runtime.attention"):
        chosen = alone_kernel(4, 16, torch.bfloat16, 1)
        assert alone_kernel(4, 16, torch.bfloat16, 1) is chosen  # measured once
    assert chosen in (attend_alone_math, attend_alone_flash)
    told = [r.getMessage() for r in caplog.records if "attend alone" in r.getMessage()]
    assert len(told) == 1 and chosen.__name__ in told[0] and "attend_alone_math" in told[0]


def test_a_plan_without_flash_keeps_long_sequences_on_the_reference_math():
    """``SIE_ATTENTION_BACKEND=eager``: a long sequence attends alone through the math kernel, never
    the measured choice (which may be flash)."""
    model = tiny_bert()
    eager = PackedBert(model, plan_attention(AttentionBackend.EAGER, CPU, torch.float32, 16))
    fused = PackedBert(model, plan_attention(AttentionBackend.AUTO, CPU, torch.float32, 16))
    assert not eager._flash_alone and fused._flash_alone

"""Which attention kernel runs, chosen once per model load from the device, the precision and
``SIE_ATTENTION_BACKEND``; never left to SDPA's own backend priority.

Why explicit: on CUDA in half precision, ``scaled_dot_product_attention`` with a mask goes to the
cuDNN backend first, and cuDNN builds an execution plan for every new shape. Batches of mixed texts
bring new shapes on every call, so each forward paid about a second of plan building (an H100 served
125 items/s where float32, which cuDNN does not take, served 2572). Every SDPA call the adapters make
therefore runs inside ``AttentionPlan.sdpa_backends()``, a backend list without cuDNN.

The packed BERT forward has two attention layouts:

- ``VARLEN``: one flash-attention call per layer straight over the packed tokens, sequences told apart
  by cumulative lengths (``torch.nn.attention.varlen``); no padding, no mask, no buckets. CUDA with
  float16 or bfloat16 only, where flash attention exists. Before it is used, ``varlen_kernel`` runs it
  once on a small packed input and compares it to ``reference_varlen``; a kernel that fails or
  disagrees leaves the model on buckets, with a warning in the log.
- ``BUCKETS``: sequences sorted into length buckets, one SDPA call each (the CPU layout, where a long
  sequence also attends alone, and the GPU fallback, with a per-call cost sized for kernel launches).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from importlib.util import find_spec
from typing import Final

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from sie.core.options import AttentionBackend

log = logging.getLogger(__name__)

# q, k, v as [tokens, heads, head_dim] over packed sequences, cu_seqlens int32 [sequences + 1], longest
# sequence -> [tokens, heads, head_dim]. The argument order of torch.nn.attention.varlen.varlen_attn.
VarlenKernel = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int, int], torch.Tensor
]


class PackedAttention(StrEnum):
    VARLEN = "varlen"
    BUCKETS = "buckets"


# Every SDPA backend but cuDNN, in the order tried: flash (no mask), memory-efficient (masks, float32),
# the device's own (XPU and other out-of-tree devices), then the reference math. On CUDA the
# device's own is left out: torch picks it there when flash and memory-efficient both decline a call
# (grouped-query attention in float32) and then fails with "Invalid backend" instead of reaching math.
FUSED_SDPA: Final = (
    SDPBackend.FLASH_ATTENTION,
    SDPBackend.EFFICIENT_ATTENTION,
    SDPBackend.OVERRIDEABLE,
    SDPBackend.MATH,
)
EAGER_SDPA: Final = (SDPBackend.MATH,)

# On a CPU, sequences this long attend on their own (``PackedBert._attend_alone``) rather than in a
# bucket through flash attention. Batches of 64 corpus texts, bf16 MiniLM, 9 interleaved rounds:
# 1.07x the items/s of buckets only (median of per-round ratios); 96 did as well, 32 worse.
CPU_ALONE_FROM_TOKENS: Final = 64

# One attention call's fixed cost in units of (query token x key token) work, used to cut buckets.
# CPU: SDPA's dispatch plus the bucket's slice; on MiniLM anything from 2000 to 18000 gave the same
# throughput within noise. GPU: a bucket is a few kernel launches (~25 us of host time), during which
# an H100 does some 10^6 token pairs of BERT attention, so a GPU cuts into few buckets.
CPU_BUCKET_CALL_COST: Final = 64 * 64
GPU_BUCKET_CALL_COST: Final = 1 << 20


@dataclass(frozen=True)
class AttentionPlan:
    """What one loaded model's attention runs on."""

    packed: PackedAttention
    sdpa: tuple[SDPBackend, ...]  # backends SDPA may use, in priority order
    transformers_impl: str  # ``attn_implementation`` of the ordinary padded forward
    alone_from: int | None = None  # bucket layout: sequences this long attend alone (CPU)
    bucket_call_cost: int = CPU_BUCKET_CALL_COST
    varlen: VarlenKernel | None = None  # set exactly when ``packed`` is VARLEN

    @contextmanager
    def sdpa_backends(self) -> Iterator[None]:
        """Every SDPA call inside runs on ``sdpa`` only, tried in that order."""
        with sdpa_kernel(list(self.sdpa), set_priority=True):
            yield


# One sequence's attention, alone (no padding, no mask): ``qkv`` ``[tokens, 3 x heads x head_dim]``
# (the fused projection's rows), written into ``out`` ``[tokens, heads x head_dim]``.
AloneKernel = Callable[[torch.Tensor, torch.Tensor, int], None]

# The length the two alone kernels are timed at: the middle of the sequences that attend alone.
CALIBRATION_TOKENS: Final = 128
# Flash replaces the math kernel only when it takes less than this share of its time.
FLASH_MARGIN: Final = 0.85


def _split_heads(qkv: torch.Tensor, heads: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``q``, ``k``, ``v`` of one sequence as ``[heads, tokens, head_dim]`` views of its fused rows."""
    q, k, v = qkv.view(qkv.shape[0], 3, heads, -1).permute(1, 2, 0, 3)
    return q, k, v


def attend_alone_math(qkv: torch.Tensor, out: torch.Tensor, heads: int) -> None:
    """Two batched matmuls over the heads and a softmax. Where CPU flash attention spends its time on
    per-block calls (two small GEMMs per 32 queries per head at head_dim 32) these three calls are
    faster: on an AMD EPYC (9c3d616) they cut a MiniLM forward's attention by about a third. The
    scores are rounded to the compute dtype before the softmax (flash keeps them in float32)."""
    q, k, v = _split_heads(qkv, heads)
    length = q.shape[1]
    ignored = q.new_empty(()).expand(heads, length, length)  # beta=0: only the shape counts
    scores = torch.baddbmm(ignored, q, k.transpose(1, 2), beta=0.0, alpha=q.shape[2] ** -0.5)
    out.view(length, heads, -1).copy_(torch.bmm(torch.softmax(scores, -1), v).transpose(0, 1))


def attend_alone_flash(qkv: torch.Tensor, out: torch.Tensor, heads: int) -> None:
    """The same through SDPA (flash on a CPU, under the plan's backends). Where the CPU multiplies
    bfloat16 in tiles (AMX) and its softmax is slow, this is the faster one: 1.3x at 64 tokens to 3x
    at 512 on a 2-core Xeon with AMX, bf16, 12 heads of 32."""
    q, k, v = _split_heads(qkv, heads)
    context = F.scaled_dot_product_attention(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0))
    out.view(q.shape[1], heads, -1).copy_(context[0].transpose(0, 1))


@cache
def alone_kernel(heads: int, head_dim: int, dtype: torch.dtype, threads: int) -> AloneKernel:
    """The faster alone kernel on this machine for this shape, precision and thread count: each timed
    on a random sequence of ``CALIBRATION_TOKENS`` (best of seven, after a warm-up), once per process
    and shape; flash only when clearly faster (``FLASH_MARGIN``). Which one wins depends on the CPU
    (see the two kernels), not on the model, so it is measured rather than guessed; both compute the
    same attention."""
    generator = torch.Generator().manual_seed(0)
    qkv = torch.randn(CALIBRATION_TOKENS, 3 * heads * head_dim, generator=generator).to(dtype)
    out = qkv.new_empty(CALIBRATION_TOKENS, heads * head_dim)

    def best_of(kernel: AloneKernel) -> float:
        with torch.inference_mode(), sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]):
            kernel(qkv, out, heads)
            runs = []
            for _ in range(7):
                started = time.perf_counter()
                kernel(qkv, out, heads)
                runs.append(time.perf_counter() - started)
        return min(runs)

    timed = {kernel: best_of(kernel) for kernel in (attend_alone_math, attend_alone_flash)}
    # Flash only by a clear margin: where the two are close, two processes of one machine (a server
    # and its queue worker) could otherwise choose apart from timing noise and differ in the last bits.
    clearly = timed[attend_alone_flash] < FLASH_MARGIN * timed[attend_alone_math]
    chosen = attend_alone_flash if clearly else attend_alone_math
    log.info(
        "sequences that attend alone (%d heads of %d, %s, %d threads) use %s: %s",
        heads,
        head_dim,
        dtype,
        threads,
        chosen.__name__,
        ", ".join(f"{k.__name__} {t * 1e6:.0f} us" for k, t in timed.items()),
    )
    return chosen


def plan_attention(
    backend: AttentionBackend,
    device: torch.device,
    dtype: torch.dtype,
    head_dim: int | None,
    varlen: Callable[[torch.device, torch.dtype, int], VarlenKernel | None] | None = None,
) -> AttentionPlan:
    """The plan for a model whose attention runs in ``dtype`` on ``device``.

    ``auto`` and ``flash_attention_2`` are the same here: flash kernels wherever they exist, the fused
    SDPA backends elsewhere (the public SIE's rule too: flash never in float32 or off CUDA). ``sdpa``
    keeps the packed forward on buckets; ``eager`` runs SDPA's reference math only. ``head_dim`` is
    None for models the packed forward does not run. ``varlen`` finds the varlen kernel (default:
    ``varlen_kernel``; tests pass one that runs ``reference_varlen``).
    """
    find_varlen = varlen_kernel if varlen is None else varlen
    sdpa: tuple[SDPBackend, ...]
    if backend is AttentionBackend.EAGER:
        sdpa, transformers_impl = EAGER_SDPA, "eager"
    else:
        sdpa, transformers_impl = FUSED_SDPA, "sdpa"
    if device.type == "cpu":
        return AttentionPlan(PackedAttention.BUCKETS, sdpa, transformers_impl, CPU_ALONE_FROM_TOKENS)
    if device.type == "cuda":
        sdpa = tuple(b for b in sdpa if b is not SDPBackend.OVERRIDEABLE)
    half = dtype in (torch.float16, torch.bfloat16)
    flash = (
        device.type == "cuda"
        and half
        and backend in (AttentionBackend.AUTO, AttentionBackend.FLASH_ATTENTION_2)
    )
    if flash and find_spec("flash_attn") is not None:
        transformers_impl = "flash_attention_2"
    kernel = find_varlen(device, dtype, head_dim) if flash and head_dim is not None else None
    if kernel is not None:
        return AttentionPlan(PackedAttention.VARLEN, sdpa, transformers_impl, varlen=kernel)
    return AttentionPlan(
        PackedAttention.BUCKETS, sdpa, transformers_impl, bucket_call_cost=GPU_BUCKET_CALL_COST
    )


def reference_varlen(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_q: int,
    max_k: int,
) -> torch.Tensor:
    """What a varlen kernel computes, one sequence at a time through SDPA's math: the yardstick the
    real kernel is checked against at load, and the stand-in that runs the varlen layout on a CPU."""
    out = torch.empty_like(q)
    bounds = cu_seqlens_q.tolist()
    for start, end in itertools.pairwise(bounds):
        with sdpa_kernel(SDPBackend.MATH):
            attended = F.scaled_dot_product_attention(
                q[start:end].transpose(0, 1), k[start:end].transpose(0, 1), v[start:end].transpose(0, 1)
            )
        out[start:end] = attended.transpose(0, 1)
    return out


def varlen_kernel(device: torch.device, dtype: torch.dtype, head_dim: int) -> VarlenKernel | None:
    """torch's flash varlen attention if it runs on this device and precision and agrees with
    ``reference_varlen`` on a probe; otherwise None (the caller falls back to buckets)."""
    if device.type != "cuda" or dtype not in (torch.float16, torch.bfloat16):
        return None
    if head_dim % 8 or head_dim > 256 or not torch.backends.cuda.is_flash_attention_available():
        return None
    if torch.cuda.get_device_capability(device) < (8, 0):
        return None
    kernel = _torch_varlen()
    if kernel is None:
        return None
    try:
        agrees = probe_varlen(kernel, device, dtype, head_dim)
    except RuntimeError as exc:
        log.warning("varlen attention failed its probe on %s (%s); using length buckets", device, exc)
        return None
    if not agrees:
        log.warning("varlen attention disagrees with the reference on %s; using length buckets", device)
        return None
    return kernel


@cache
def _torch_varlen() -> VarlenKernel | None:
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn  # type: ignore[return-value]


def probe_varlen(kernel: VarlenKernel, device: torch.device, dtype: torch.dtype, head_dim: int) -> bool:
    """Runs ``kernel`` on three packed sequences laid out exactly as the packed forward lays them out
    (q, k and v as strided views of one ``[tokens, 3, heads, head_dim]`` projection) and compares it
    with ``reference_varlen`` in float32."""
    heads, lengths = 2, (5, 1, 11)
    generator = torch.Generator().manual_seed(0)
    qkv = torch.randn(sum(lengths), 3, heads, head_dim, generator=generator).to(device, dtype)
    cu_seqlens = torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32, device=device)
    longest = max(lengths)
    q, k, v = qkv.unbind(1)
    with torch.inference_mode():
        got = kernel(q, k, v, cu_seqlens, cu_seqlens, longest, longest)
        want = reference_varlen(q.float(), k.float(), v.float(), cu_seqlens, cu_seqlens, longest, longest)
    return bool(torch.allclose(got.float(), want, atol=2e-2, rtol=2e-2))

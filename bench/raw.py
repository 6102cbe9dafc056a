"""The raw limit: sentence-transformers on the same cores (or GPU), with no server in between.

For each precision: ``SentenceTransformer.encode`` at each candidate batch size over the first texts
of the corpus (the sweep), then at the best batch size over the whole corpus (the limit), and the latency of one 10-word query through ``encode`` (median of 50).
The float32 model also produces the reference vectors for the correctness gate. CPU used by other
processes meanwhile is measured; a disturbed full-corpus timing is repeated (the best one is kept).
On a GPU (``--device cuda``, bench/gpu.py) every timing is bracketed by ``torch.cuda.synchronize()``.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

LATENCY_SAMPLES = 50
DISTURBED_CORES = 0.1  # other processes using more than this during a timing: it is disturbed
RETRIES_IF_DISTURBED = 2


def normalised(vectors: np.ndarray) -> np.ndarray:
    """Unit rows: the gates compare directions, whatever each server's normalisation."""
    result: np.ndarray = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    return result


def _disturbed(timing: Timing) -> str:
    return f"  [other processes used {timing.other_cores:.2f} cores]" if timing.other_cores > 0.05 else ""


@dataclass
class RawResult:
    precision: str
    best_batch_size: int
    items_per_s: float
    tokens_per_s: float
    items_per_s_by_batch: dict[int, float] = field(default_factory=dict)  # on the sweep subset
    single_query_p50_ms: float = 0.0
    single_query_p95_ms: float = 0.0
    other_cores: float = 0.0  # the rest of the machine during the full-corpus timing


@dataclass
class Reference:
    """float32 sentence-transformers vectors (L2-normalised) for the correctness gate."""

    sample: np.ndarray  # one row per corpus index in Corpus.check_sample
    retrieval_queries: np.ndarray
    retrieval_passages: np.ndarray


PRECISIONS = ("float32", "bfloat16", "bfloat16-mixed")  # the CPU run's variants
DEVICE_PRECISIONS = ("float32", "float16", "bfloat16")  # whole-model casts, for --device runs


class RawModel:
    """A sentence-transformers model on ``device`` at one of ``PRECISIONS`` or ``DEVICE_PRECISIONS``.
    ``bfloat16`` and ``float16`` cast the whole model; ``bfloat16-mixed`` is what our server runs
    for bfloat16 on a CPU with bf16 hardware (linear weights in bf16 under autocast, the rest
    float32), so the two are compared at the same precision."""

    def __init__(self, folder: Path, precision: str, device: str = "cpu") -> None:
        import torch
        from sentence_transformers import SentenceTransformer

        from sie.adapters.runtime.transformer import linear_weights_to

        dtypes = {"bfloat16": torch.bfloat16, "float16": torch.float16}
        dtype = dtypes.get(precision, torch.float32)
        self.device = device
        self.model = SentenceTransformer(str(folder), device=device, model_kwargs={"dtype": dtype})
        self.model.eval()
        self.autocast = precision == "bfloat16-mixed"
        if self.autocast:
            linear_weights_to(self.model, torch.bfloat16)

    def synchronize(self) -> None:
        """Waits for the GPU's queued work, so a timing ends when the work does, not when it was queued."""
        import torch

        if self.device.startswith("cuda"):
            torch.cuda.synchronize(self.device)

    def encode(self, texts: Sequence[str], batch_size: int) -> np.ndarray:
        import torch

        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.autocast):
            vectors = self.model.encode(
                list(texts), batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False
            ).astype(np.float32)
        return normalised(vectors)


@dataclass(frozen=True)
class Timing:
    items_per_s: float
    tokens_per_s: float
    other_cores: float  # cores the rest of the machine used meanwhile (interference)


def throughput(model: RawModel, texts: list[str], tokens: int, batch_size: int) -> Timing:
    from bench.procs import machine_busy_seconds, own_cpu_seconds

    model.encode(texts[: batch_size * 2], batch_size)  # warm-up: allocator, kernels, thread pool
    model.synchronize()
    busy0, own0 = machine_busy_seconds(), own_cpu_seconds()
    start = time.perf_counter()
    model.encode(texts, batch_size)
    model.synchronize()
    elapsed = time.perf_counter() - start
    other = max(0.0, (machine_busy_seconds() - busy0) - (own_cpu_seconds() - own0)) / elapsed
    return Timing(len(texts) / elapsed, tokens / elapsed, other)


def _single_query_ms(model: RawModel, queries: list[str]) -> tuple[float, float]:
    for query in queries[:5]:
        model.encode([query], 1)
    samples = []
    for i in range(LATENCY_SAMPLES):
        start = time.perf_counter()
        model.encode([queries[i % len(queries)]], 1)
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(0.95 * (len(samples) - 1))]


def measure(
    folder: Path,
    texts: list[str],
    text_tokens: list[int],
    queries: list[str],
    precision: str,
    batch_sizes: Sequence[int],
    sweep_items: int,
    log: Any = print,
    device: str = "cpu",
) -> tuple[RawResult, RawModel]:
    """Sweep the batch sizes on the first ``sweep_items`` texts, then time the best one over the whole
    corpus; then single-query latency. Returns the result and the loaded model."""
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    model = RawModel(folder, precision, device)
    sweep = texts[:sweep_items]
    sweep_tokens = sum(text_tokens[:sweep_items])
    by_batch: dict[int, float] = {}
    for batch_size in batch_sizes:
        timing = throughput(model, sweep, sweep_tokens, batch_size)
        by_batch[batch_size] = timing.items_per_s
        log(
            f"  raw {precision:8s} batch {batch_size:4d} ({len(sweep)} texts): "
            f"{timing.items_per_s:8.1f} items/s{_disturbed(timing)}"
        )
    best = max(by_batch, key=by_batch.__getitem__)
    timing = throughput(model, texts, sum(text_tokens), best)
    for _ in range(RETRIES_IF_DISTURBED):
        if timing.other_cores <= DISTURBED_CORES:
            break
        log(f"  raw {precision:8s} full corpus disturbed{_disturbed(timing)}; measuring again")
        again = throughput(model, texts, sum(text_tokens), best)
        timing = again if again.items_per_s > timing.items_per_s else timing
    log(
        f"  raw {precision:8s} batch {best:4d} ({len(texts)} texts): {timing.items_per_s:8.1f} items/s, "
        f"{timing.tokens_per_s:.0f} tokens/s{_disturbed(timing)}"
    )
    p50, p95 = _single_query_ms(model, queries)
    log(f"  raw {precision:8s} single 10-word query: p50 {p50:.2f} ms, p95 {p95:.2f} ms")
    result = RawResult(precision, best, timing.items_per_s, timing.tokens_per_s, by_batch, p50, p95)
    result.other_cores = timing.other_cores
    return result, model


def reference(model: RawModel, sample: list[str], queries: list[str], passages: list[str]) -> Reference:
    return Reference(model.encode(sample, 32), model.encode(queries, 32), model.encode(passages, 32))

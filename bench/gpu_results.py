"""What a device run (``--device cuda``) produced, per model shape, and the GPU issue's targets as
ratios with met / not met.

The targets (one GPU, corpus of 4096 texts of 5-200 words, everything in one run):

- our server, float16, 32 concurrent requests of 32 items: >= 3x raw sentence-transformers float16
  at its best batch size, and >= 4000 items/s on the base shape (>= 8000 on the MiniLM shape);
- single-item requests 64 at once: >= 15x the throughput of one request at a time, and >= 3000
  items/s on the MiniLM shape;
- one 10-word query at concurrency 1: p50 <= the raw single forward (same precision) + 2 ms;
- vectors: min cosine to raw float32 >= 0.9999 (float16 and bfloat16), and a text alone gives the
  vector it gets inside a batch (also held to min cosine >= 0.9999; bit-identical ones are counted).

A target whose measurement is missing (a server that did not start, a raw precision not run) is
reported as not met, with no value: a missing number must not read as a pass.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Final

from bench.flops import EncoderDims, peak_fraction
from bench.raw import RawResult
from bench.results import Ratio
from bench.stats import CellResult, CellSpec

QUERY_SDK: Final = CellSpec("sdk", 1, 1, "queries")  # the latency target, through our SDK
QUERY_HTTP: Final = CellSpec("http", 1, 1, "queries")  # the same through the minimal client
SINGLE: Final = CellSpec("http", 1, 1)
BATCHED: Final = CellSpec("http", 32, 32)
MANY_SINGLE: Final = CellSpec("http", 64, 1)
CELLS: Final = (QUERY_SDK, QUERY_HTTP, SINGLE, BATCHED, MANY_SINGLE)

TARGET_VS_RAW_FLOAT16: Final = 3.0
TARGET_BATCHED_ITEMS_S: Final = {"base": 4000.0, "minilm": 8000.0}
TARGET_SINGLE_SCALING: Final = 15.0
TARGET_MANY_SINGLE_ITEMS_S: Final = {"minilm": 3000.0}
TARGET_LATENCY_OVERHEAD_MS: Final = 2.0
TARGET_MIN_COSINE: Final = 0.9999
THROUGHPUT_TARGET_PRECISION: Final = "float16"


@dataclass
class Agreement:
    """Our server's vectors for the check texts against raw float32 sentence-transformers."""

    texts: int
    min_cos_alone: float  # each text in a request of its own
    min_cos_batched: float  # the same texts in requests of 64
    min_cos_alone_vs_batched: float
    identical: int  # texts whose vector alone is bit-identical to their batched one


@dataclass
class ServerResult:
    precision: str  # what was asked (SIE_DEFAULT_COMPUTE_PRECISION)
    effective_precision: str | None = None  # what the server's log says it loaded
    startup_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    gpu_memory_idle_mb: float | None = None
    gpu_memory_peak_mb: float | None = None
    gpu_memory_how: str = "n/a"
    agreement: Agreement | None = None
    cells: list[CellResult] = field(default_factory=list)
    error: str = ""

    def cell(self, spec: CellSpec) -> CellResult | None:
        return next((c for c in self.cells if c.spec == spec), None)

    def to_json(self) -> dict[str, Any]:
        data = {k: v for k, v in asdict(self).items() if k != "cells"}
        data["cells"] = [c.to_json() for c in self.cells]
        return data


@dataclass
class ShapeResult:
    shape: str
    model_id: str
    dims: EncoderDims
    flops_per_token: dict[str, float]  # pool ("corpus", "queries") -> FLOPs per token
    raw: dict[str, RawResult] = field(default_factory=dict)
    raw_min_cos: dict[str, float] = field(default_factory=dict)  # precision -> vs raw float32
    servers: list[ServerResult] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "shape": self.shape,
            "model_id": self.model_id,
            "dims": asdict(self.dims),
            "non_embedding_params": self.dims.non_embedding_params,
            "flops_per_token": self.flops_per_token,
            "raw": {k: asdict(v) for k, v in self.raw.items()},
            "raw_min_cos_to_float32": self.raw_min_cos,
            "servers": [s.to_json() for s in self.servers],
        }


@dataclass
class DeviceRun:
    config: dict[str, Any]
    machine: dict[str, Any]
    corpus: dict[str, Any]
    peak_tflops: float | None
    shapes: list[ShapeResult] = field(default_factory=list)
    targets: list[Ratio] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def peak_fraction(self, shape: ShapeResult, tokens_per_s: float, pool: str = "corpus") -> float | None:
        return peak_fraction(tokens_per_s, shape.flops_per_token[pool], self.peak_tflops)

    def to_json(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "machine": self.machine,
            "corpus": self.corpus,
            "peak_tflops": self.peak_tflops,
            "shapes": [s.to_json() for s in self.shapes],
            "targets": [asdict(r) for r in self.targets],
            "failures": self.failures,
            "passed": not self.failures,
        }


def at_least(name: str, value: float | None, target: float | None) -> Ratio:
    if target is None:
        return Ratio(name, value, "", None)
    return Ratio(name, value, f">= {target:g}", value is not None and value >= target)


def at_most(name: str, value: float | None, target: float) -> Ratio:
    return Ratio(name, value, f"<= {target:g} ms", value is not None and value <= target)


def _div(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _items(cell: CellResult | None) -> float | None:
    return cell.items_per_s if cell is not None and cell.items else None


def _throughput(shape: ShapeResult, server: ServerResult) -> list[Ratio]:
    """Held to targets at float16 only; other precisions print the same ratios for information."""
    held = server.precision == THROUGHPUT_TARGET_PRECISION
    label = f"{shape.shape} {server.precision}"
    raw16 = shape.raw.get("float16")
    batched, single, many = (_items(server.cell(s)) for s in (BATCHED, SINGLE, MANY_SINGLE))
    return [
        at_least(
            f"{label}: 32x32 items/s / raw float16 best batch",
            _div(batched, raw16.items_per_s if raw16 else None),
            TARGET_VS_RAW_FLOAT16 if held else None,
        ),
        at_least(
            f"{label}: 32x32 items/s", batched, TARGET_BATCHED_ITEMS_S.get(shape.shape) if held else None
        ),
        at_least(
            f"{label}: 64x1 items/s / 1x1 items/s",
            _div(many, single),
            TARGET_SINGLE_SCALING if held else None,
        ),
        at_least(
            f"{label}: 64x1 items/s", many, TARGET_MANY_SINGLE_ITEMS_S.get(shape.shape) if held else None
        ),
    ]


def _latency(shape: ShapeResult, server: ServerResult) -> Ratio:
    """Against the raw forward at the precision the server actually ran (a bfloat16 request falls
    back to float16 on a GPU older than compute capability 8.0)."""
    ran = server.effective_precision or server.precision
    raw = shape.raw.get(ran) or shape.raw.get(server.precision)
    query = server.cell(QUERY_SDK)
    overhead = query.p50_ms - raw.single_query_p50_ms if query and query.requests and raw else None
    name = (
        f"{shape.shape} {server.precision}: sdk 10-word p50 - raw {raw.precision if raw else ran} single (ms)"
    )
    return at_most(name, overhead, TARGET_LATENCY_OVERHEAD_MS)


def _agreement(shape: ShapeResult, server: ServerResult) -> list[Ratio]:
    label = f"{shape.shape} {server.precision}"
    agreement = server.agreement
    to_float32 = min(agreement.min_cos_alone, agreement.min_cos_batched) if agreement else None
    alone_batched = agreement.min_cos_alone_vs_batched if agreement else None
    return [
        at_least(f"{label}: min cosine to raw float32 (alone and batched)", to_float32, TARGET_MIN_COSINE),
        at_least(f"{label}: min cosine alone vs batched", alone_batched, TARGET_MIN_COSINE),
    ]


def compute_targets(run: DeviceRun) -> list[Ratio]:
    ratios: list[Ratio] = []
    for shape in run.shapes:
        for server in shape.servers:
            ratios += _throughput(shape, server)
            ratios.append(_latency(shape, server))
            ratios += _agreement(shape, server)
    return ratios


def correctness_failures(run: DeviceRun) -> list[str]:
    """Servers or cells that did not run, and vector targets not met: these make the exit status
    non-zero. Speed targets are reported, not gated (they are what the run is for)."""
    failures = [
        f"{shape.shape} {server.precision}: {server.error}"
        for shape in run.shapes
        for server in shape.servers
        if server.error
    ]
    failures += [
        f"{r.name}: {'n/a' if r.value is None else f'{r.value:.6f}'} (target {r.target})"
        for r in run.targets
        if "cosine" in r.name and r.met is False
    ]
    return failures

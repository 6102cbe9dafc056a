"""What a run produced, in one structure: raw limits, per-server cells and gates, ratios, targets."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from bench.correctness import GateResult
from bench.paired import Round, median_ratio
from bench.raw import RawResult
from bench.stats import CellResult, CellSpec

SATURATED = CellSpec("sdk", 16, 32)
SATURATED_JSON = CellSpec("json", 16, 32)
QUERY_SDK = CellSpec("sdk", 1, 1, "queries")
QUERY_JSON = CellSpec("json", 1, 1, "queries")

TARGET_VS_RAW_SAME = 0.95
TARGET_VS_INFINITY = 2.0
TARGET_VS_RAW_FLOAT32 = 1.5
TARGET_LATENCY_OVERHEAD_MS = 2.0
TARGET_IDLE_RSS_MB = 700.0


@dataclass
class ServerRun:
    name: str  # "sie" or "infinity"
    label: str  # e.g. "sie float32"
    notes: list[str]
    startup_s: float
    idle_rss_mb: float
    peak_rss_mb: float = 0.0
    settled_rss_mb: float = 0.0  # after the whole run and SETTLE_S without requests
    cells: list[CellResult] = field(default_factory=list)
    gates: list[GateResult] = field(default_factory=list)

    def cell(self, spec: CellSpec) -> CellResult | None:
        return next((c for c in self.cells if c.spec == spec), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "label": self.label,
            "notes": self.notes,
            "startup_s": self.startup_s,
            "idle_rss_mb": self.idle_rss_mb,
            "peak_rss_mb": self.peak_rss_mb,
            "settled_rss_mb": self.settled_rss_mb,
            "cells": [c.to_json() for c in self.cells],
            "gates": [asdict(g) | {"passed": g.passed} for g in self.gates],
        }


@dataclass
class Ratio:
    name: str
    value: float | None  # None when a side is missing
    target: str  # e.g. ">= 0.95", "<= 2.0 ms", "" when informational
    met: bool | None


@dataclass
class RunResult:
    config: dict[str, Any]
    machine: dict[str, Any]
    corpus: dict[str, Any]
    raw: dict[str, RawResult]
    servers: list[ServerRun] = field(default_factory=list)
    rounds: list[Round] = field(default_factory=list)
    ratios: list[Ratio] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def server(self, name: str) -> ServerRun | None:
        return next((s for s in self.servers if s.name == name), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "machine": self.machine,
            "corpus": self.corpus,
            "raw": {k: asdict(v) for k, v in self.raw.items()},
            "servers": [s.to_json() for s in self.servers],
            "rounds": [asdict(r) for r in self.rounds],
            "ratios": [asdict(r) for r in self.ratios],
            "failures": self.failures,
            "passed": not self.failures,
        }


def _div(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _at_least(name: str, value: float | None, target: float | None) -> Ratio:
    if target is None:
        return Ratio(name, value, "", None)
    return Ratio(name, value, f">= {target:g}", None if value is None else value >= target)


def same_precision(run: RunResult, precision: str) -> str:
    """The raw variant that computes what our server computes: on a CPU with bf16 hardware our
    bfloat16 is mixed precision (src/sie/adapters/dense_torch.py); without it, float32."""
    if precision == "bfloat16" and "bfloat16-mixed" in run.raw:
        return "bfloat16-mixed"
    return "float32"


def _throughput_ratio(run: RunResult, numerator: str, denominator: str) -> float | None:
    """``numerator``'s saturated items/s over ``denominator``'s (a server name or a raw precision):
    the median of the paired rounds when the run has them, else the single timings of the run."""
    if run.rounds:
        return median_ratio(run.rounds, numerator, denominator)

    def items_per_s(name: str) -> float | None:
        server = run.server(name)
        if server is not None:
            cell = server.cell(SATURATED_JSON if name == "infinity" else SATURATED)
            return cell.items_per_s if cell else None
        raw = run.raw.get(name)
        return raw.items_per_s if raw else None

    return _div(items_per_s(numerator), items_per_s(denominator))


def compute_ratios(run: RunResult, precision: str) -> list[Ratio]:
    ours = run.server("sie")
    infinity = run.server("infinity")
    same_key = same_precision(run, precision)
    same = run.raw.get(same_key)
    how = f" (median of {len(run.rounds)} paired rounds)" if run.rounds else ""
    ratios = [
        _at_least(
            f"ours sdk c=16 b=32 / raw {same_key} (same precision){how}",
            _throughput_ratio(run, "sie", same_key),
            TARGET_VS_RAW_SAME,
        ),
        _at_least(
            f"ours sdk c=16 b=32 / raw float32 (fastest-path target){how}",
            _throughput_ratio(run, "sie", "float32"),
            TARGET_VS_RAW_FLOAT32,
        ),
    ]
    if precision == "bfloat16" and "bfloat16" in run.raw and ours is not None:
        cell = ours.cell(SATURATED)
        ratios.append(
            _at_least(
                "ours sdk c=16 b=32 / raw bfloat16 (whole model cast; less accurate; one timing each)",
                _div(cell.items_per_s if cell else None, run.raw["bfloat16"].items_per_s),
                None,
            )
        )
    for variant in run.servers:
        if variant.name.startswith("sie with "):
            ratios.append(
                _at_least(
                    f"ours sdk c=16 b=32 / ours {variant.name[4:]} (same cell){how}",
                    _throughput_ratio(run, "sie", variant.name),
                    None,
                )
            )
    if infinity is not None:
        inf_cell = infinity.cell(SATURATED_JSON)
        inf_items = inf_cell.items_per_s if inf_cell else None
        ours_json = ours.cell(SATURATED_JSON) if ours else None
        ratios.append(
            _at_least(
                f"ours sdk c=16 b=32 / Infinity json c=16 b=32{how}",
                _throughput_ratio(run, "sie", "infinity"),
                TARGET_VS_INFINITY,
            )
        )
        ratios.append(
            _at_least(
                "ours json c=16 b=32 / Infinity json c=16 b=32 (one timing each)",
                _div(ours_json.items_per_s if ours_json else None, inf_items),
                None,
            )
        )
    for spec in (QUERY_SDK, QUERY_JSON):
        cell = ours.cell(spec) if ours else None
        if cell is None or same is None:
            continue
        overhead = cell.p50_ms - same.single_query_p50_ms
        ratios.append(
            Ratio(
                f"ours {spec.client} c=1 10-word p50 - raw {same_key} single forward (ms)",
                overhead,
                f"<= {TARGET_LATENCY_OVERHEAD_MS:g} ms" if spec.client == "sdk" else "",
                overhead <= TARGET_LATENCY_OVERHEAD_MS if spec.client == "sdk" else None,
            )
        )
    if ours is not None:
        default_model = run.config.get("model") == "sentence-transformers/all-MiniLM-L6-v2"
        ratios.append(
            Ratio(
                "ours idle RSS after preload (MB)",
                ours.idle_rss_mb,
                f"<= {TARGET_IDLE_RSS_MB:g} MB" if default_model else "",
                ours.idle_rss_mb <= TARGET_IDLE_RSS_MB if default_model else None,
            )
        )
    return ratios

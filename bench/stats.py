"""The numbers of one load cell, and how they are derived from raw samples."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class CellSpec:
    client: str  # "sdk" (msgpack) or "json"
    concurrency: int
    batch: int  # items per request
    pool: str = "corpus"  # "corpus" or "queries" (the 10-word query set)

    @property
    def key(self) -> str:
        pool = "" if self.pool == "corpus" else f" {self.pool}"
        return f"{self.client} c={self.concurrency} b={self.batch}{pool}"


@dataclass
class CellResult:
    server: str
    spec: CellSpec
    requests: int
    items: int  # answered (failed requests carry none)
    tokens: int
    elapsed_s: float  # first timed send to last answer (see load.py)
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    errors: int
    server_cpu_s: float  # server process tree's user+system while the cell ran
    bench_cpu_s: float  # this process (the load generator) meanwhile
    other_cpu_s: float  # the rest of the machine meanwhile (noise from other work)
    statuses: dict[int, int] = field(default_factory=dict)  # non-2xx answers seen in the cell
    error_sample: str = ""

    @property
    def items_per_s(self) -> float:
        return self.items / self.elapsed_s

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.elapsed_s

    @property
    def non_2xx(self) -> int:
        return sum(self.statuses.values())

    @property
    def server_cores(self) -> float:
        """Average cores the server kept busy while the cell ran."""
        return self.server_cpu_s / self.elapsed_s

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["spec"] = asdict(self.spec) | {"key": self.spec.key}
        data["statuses"] = {str(k): v for k, v in self.statuses.items()}
        data.update(
            items_per_s=self.items_per_s, tokens_per_s=self.tokens_per_s, server_cores=self.server_cores
        )
        return data


def percentiles_ms(latencies_s: list[float]) -> tuple[float, float, float, float]:
    """p50, p95, p99 and max in milliseconds (linear interpolation); zeros when there is no sample."""
    if not latencies_s:
        return 0.0, 0.0, 0.0, 0.0
    values = np.asarray(latencies_s) * 1000.0
    p50, p95, p99 = np.percentile(values, [50, 95, 99])
    return float(p50), float(p95), float(p99), float(values.max())

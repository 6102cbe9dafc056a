"""Every Prometheus metric the server exports, declared in one place on a registry the app owns.

Names follow the public SIE (``sie_requests_total``, ``sie_request_duration_seconds``,
``sie_batch_size``...), so its dashboards and alerts read ours unchanged.
"""

from __future__ import annotations

from enum import StrEnum

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from sie.observability.gpus import gpu_metrics
from sie.observability.labels import LabelledChildren

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


class SkipReason(StrEnum):
    """Why a queue worker settled a work item without running it: the only values of
    ``sie_pull_loop_skipped_total``'s label, whatever a message holds."""

    MALFORMED = "malformed"  # not a work item (bad bytes, types, nesting): terminated, never redelivered
    EXPIRED = "expired"  # its deadline had passed: acked unanswered, nobody waits for it
    OUT_OF_TIME = "out_of_time"  # a planned retry would land past its deadline or MAX_DELIVER: answered


class Metrics(LabelledChildren):
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        super().__init__()
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "sie_requests_total",
            "Requests answered, by model, endpoint and HTTP status.",
            ["model", "endpoint", "status"],
            registry=r,
        )
        self.request_duration = Histogram(
            "sie_request_duration_seconds",
            "Request latency by phase: total (the front end), queue, tokenize, inference, postprocess (the engine).",
            ["model", "endpoint", "phase"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.batch_size = Histogram(
            "sie_batch_size", "Items per forward batch.", ["model"], buckets=_BATCH_BUCKETS, registry=r
        )
        self.batch_tokens = Histogram(
            "sie_gpu_batch_tokens",
            "Tokens per forward batch (before padding).",
            ["model"],
            buckets=tuple(b * 64 for b in _BATCH_BUCKETS),
            registry=r,
        )
        self.tokens = Counter(
            "sie_tokens_processed_total", "Tokens run through the model.", ["model"], registry=r
        )
        self.queue_depth = Gauge(
            "sie_queue_depth", "Items queued or running, per model.", ["model"], registry=r
        )
        self.in_flight = Gauge(
            "sie_requests_in_flight",
            "HTTP requests being answered (probes and /metrics aside); after SIGTERM, what the drain waits for.",
            registry=r,
        )
        self.model_loaded = Gauge(
            "sie_model_loaded", "1 while the model is loaded.", ["model", "device"], registry=r
        )
        self.gpu_memory_used = Gauge(
            "sie_gpu_memory_used_bytes",
            "Device memory in use (CUDA), per device.",
            ["device", "gpu"],
            registry=r,
        )
        self.gpu_memory_total = Gauge(
            "sie_gpu_memory_total_bytes",
            "Device memory in all (CUDA), per device.",
            ["device", "gpu"],
            registry=r,
        )

        self.pull_skipped = Counter(
            "sie_pull_loop_skipped_total",
            "Queue mode: work items settled without running them, by reason (malformed, expired, out_of_time).",
            ["reason"],
            registry=r,
        )
        for reason in SkipReason:
            self.pull_skipped.labels(reason.value)

    def render(self) -> bytes:
        # Read at scrape time, and only where torch already runs CUDA (``gpus.gpu_metrics``).
        for gpu in gpu_metrics(0.0):
            labels = (gpu["device"], gpu["gpu_type"])
            self.gpu_memory_used.labels(*labels).set(gpu["memory_used_bytes"])
            self.gpu_memory_total.labels(*labels).set(gpu["memory_total_bytes"])
        return generate_latest(self.registry)

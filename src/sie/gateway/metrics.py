"""The gateway's Prometheus metrics (the public gateway's names), the autoscaler's inputs among them:
``sie_gateway_pending_demand`` (scale from zero), ``sie_gateway_worker_queue_depth`` and
``sie_gateway_active_lease_gpus``. Gauges of cluster state are set from the worker table, the demand
and the pools when ``/metrics`` is scraped."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.types import ASGIApp, Receive, Scope, Send

from sie.gateway.workers import WorkerTable
from sie.http.metrics import classify, run_recording_status
from sie.observability.labels import LabelledChildren

OTHER: Final = "other"


class AdvisoryIgnored(StrEnum):
    """Why a ``MAX_DELIVERIES`` advisory changed nothing: ``sie_gateway_dlq_advisories_ignored_total``."""

    UNREADABLE = "unreadable"  # not the advisory's JSON, or its subject names another stream
    NOT_A_WORK_STREAM = "not_a_work_stream"  # names a stream that is no pool's work stream
    UNKNOWN_CONSUMER = "unknown_consumer"  # names a consumer the stream does not have


class InboxSkip(StrEnum):
    """Why the inbox dropped a result: ``sie_gateway_queue_inbox_skips_total``'s only label values."""

    UNDECODABLE = "undecodable"  # not a work result
    MISMATCHED = "mismatched"  # its subject, request id and work item id disagree (or no such item)
    LATE = "late"  # its request was answered or timed out already
    DUPLICATE = "duplicate"  # a second answer for one item (a redelivery): the first stands


_LATENCY = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class GatewayMetrics(LabelledChildren):
    def __init__(self) -> None:
        super().__init__()
        r = self.registry = CollectorRegistry()
        self.requests = Counter(
            "sie_gateway_requests_total",
            "Requests answered.",
            ["endpoint", "status", "machine_profile"],
            registry=r,
        )
        self.latency = Histogram(
            "sie_gateway_request_latency_seconds",
            "Request latency at the gateway.",
            ["endpoint", "machine_profile"],
            buckets=_LATENCY,
            registry=r,
        )
        self.provisioning = Counter(
            "sie_gateway_provisioning_responses_total",
            "Requests told to come back while capacity starts (202).",
            ["machine_profile"],
            registry=r,
        )
        self.rejected = Counter(
            "sie_gateway_rejected_requests_total",
            "Requests refused by the gateway, by reason.",
            ["machine_profile", "bundle", "reason"],
            registry=r,
        )
        self.pending_demand = Gauge(
            "sie_gateway_pending_demand",
            "1 while requests wait for a lane no worker serves (scale from zero).",
            ["machine_profile", "bundle", "pool"],
            registry=r,
        )
        self.workers = Gauge("sie_gateway_workers", "Workers known from heartbeats.", ["status"], registry=r)
        self.worker_queue_depth = Gauge(
            "sie_gateway_worker_queue_depth",
            "Items queued on each worker (its heartbeat).",
            ["worker", "machine_profile", "bundle"],
            registry=r,
        )
        self.model_workers = Gauge(
            "sie_gateway_model_workers", "Workers holding each model loaded.", ["model"], registry=r
        )
        self.active_lease_gpus = Gauge(
            "sie_gateway_active_lease_gpus",
            "GPUs held by active pool leases.",
            ["machine_profile", "bundle"],
            registry=r,
        )
        self.publish_seconds = Histogram(
            "sie_gateway_queue_publish_seconds",
            "Time to publish a request's items (JetStream acks included).",
            ["operation"],
            buckets=_LATENCY,
            registry=r,
        )
        self.items_published = Counter(
            "sie_gateway_queue_items_published", "Work items published.", ["operation"], registry=r
        )
        self.result_wait = Histogram(
            "sie_gateway_queue_result_wait_seconds",
            "Time from publication to a request's last result.",
            ["operation"],
            buckets=_LATENCY,
            registry=r,
        )
        self.inbox_skips = Counter(
            "sie_gateway_queue_inbox_skips_total",
            "Work results the gateway's inbox dropped, by reason.",
            ["reason"],
            registry=r,
        )
        for skip in InboxSkip:
            self.inbox_skips.labels(skip.value)
        self.payload_offloads = Counter(
            "sie_gateway_queue_payload_offloads_total", "Items passed through the payload store.", registry=r
        )
        self.dlq_events = Counter(
            "sie_gateway_dlq_events_total",
            "Work items that reached max_deliver, copied to the dead-letter stream.",
            ["stream", "consumer"],
            registry=r,
        )
        self.dlq_republish_failures = Counter(
            "sie_gateway_dlq_republish_failures_total",
            "Dead letters the dead-letter stream refused (the item is answered and removed all the same).",
            ["stream", "consumer"],
            registry=r,
        )
        self.dlq_ignored = Counter(
            "sie_gateway_dlq_advisories_ignored_total",
            "MAX_DELIVERIES advisories acted on not at all, by reason.",
            ["reason"],
            registry=r,
        )
        for ignored in AdvisoryIgnored:
            self.dlq_ignored.labels(ignored.value)
        self.pool_events = Counter(
            "sie_gateway_pool_events_total", "Pool lifecycle events.", ["event"], registry=r
        )
        self.nats_connected = Gauge("sie_gateway_nats_connected", "1 while connected to NATS.", registry=r)
        self.config_epoch = Gauge(
            "sie_gateway_config_epoch", "The sie-config epoch this gateway has applied.", registry=r
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)


class ProfileLabel:
    """The ``machine_profile`` label of a value a caller chose (a header): a profile of
    ``SIE_GATEWAY_CONFIGURED_GPUS`` (in its configured spelling) or one a live worker announced, else
    ``other``; absent stays ``absent``. A caller can never add a series: labels are the operator's."""

    def __init__(self, configured: list[str], workers: WorkerTable) -> None:
        self._configured: dict[str, str] = {}
        for name in configured:  # the first spelling of a name wins, as the list is read
            self._configured.setdefault(name.lower(), name)
        self._workers = workers

    def configured(self, profile: str) -> str | None:
        """The configured spelling of ``profile``, matched case-insensitively (``l4`` also finds
        ``l4-spot``); None when no configured profile is it. Routing canonicalises with this too."""
        lowered = profile.lower()
        return self._configured.get(lowered) or self._configured.get(f"{lowered}-spot")

    def __call__(self, value: str | None, absent: str = "") -> str:
        if not value:
            return absent
        profile = value.rpartition("/")[2]  # ``pool/profile`` names a profile too
        found = self.configured(profile)
        if found is not None:
            return found
        return profile if profile in self._workers.announced_profiles() else OTHER


class RequestCounting:
    """``sie_gateway_requests_total`` and ``sie_gateway_request_latency_seconds`` for every inference
    request, counted at the ASGI edge so every outcome (202, 4xx raised by the checks, 5xx) counts once."""

    def __init__(self, app: ASGIApp, metrics: GatewayMetrics, profile: Callable[[str | None], str]) -> None:
        self.app = app
        self.metrics = metrics
        self.profile = profile

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        target = classify(scope.get("path", "")) if scope["type"] == "http" else None
        if target is None:
            await self.app(scope, receive, send)
            return
        endpoint = target[0]
        header = None
        for key, value in scope.get("headers", []):
            if key == b"x-sie-machine-profile":
                header = value.decode("latin-1")
        profile = self.profile(header)

        def record(status: int, seconds: float) -> None:
            metrics = self.metrics
            metrics.labelled(metrics.requests, endpoint, str(status), profile).inc()
            metrics.labelled(metrics.latency, endpoint, profile).observe(seconds)

        await run_recording_status(self.app, scope, receive, send, record)

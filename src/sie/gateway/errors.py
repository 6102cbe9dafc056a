"""The gateway's own refusals, each naming its wire code (``sie.errors.RULES`` says the rest): why a
request cannot go anywhere yet, or went and came back without an answer."""

from __future__ import annotations

from typing import Any, Final

from sie.errors import SieError
from sie.queue.contract import INLINE_THRESHOLD_BYTES
from sie.wire.errors import ErrorCode, error_envelope

BACKLOG_RETRY_AFTER_S: Final = 5  # the public gateway's answer to backpressure


class Provisioning(SieError):
    """No worker serves the lane yet; the autoscaler has been told. Clients of sie-sdk 0.7 and later
    read it as 503 ``PROVISIONING``; older ones get the public gateway's 202 (``inference``)."""

    code = ErrorCode.PROVISIONING

    def __init__(self, pool: str | None, profile: str | None, bundle: str, wait_s: int = 120) -> None:
        where = (f" in pool '{pool}'" if pool else "") + (f" on '{profile}'" if profile else "")
        super().__init__(f"No worker serves bundle '{bundle}'{where}")
        self.pool = pool
        self.profile = profile
        self.bundle = bundle
        self.wait_s = wait_s

    def __str__(self) -> str:
        return f"{self.args[0]}; capacity is being provisioned, retry after {self.wait_s}s"

    @property
    def retry_after_s(self) -> int:
        return self.wait_s  # the gateway's setting (SIE_GATEWAY_PROVISIONING_RETRY_AFTER_S)


class GpuNotConfigured(SieError):
    """A machine profile outside ``SIE_GATEWAY_CONFIGURED_GPUS``: answered in the public gateway's
    shape, which is no envelope."""

    code = ErrorCode.GPU_NOT_CONFIGURED

    def __init__(self, profile: str, configured: list[str]) -> None:
        super().__init__(
            f"Machine profile '{profile}' is not configured on this cluster; configured: {', '.join(configured)}"
        )
        self.profile = profile
        self.configured = configured

    def body(self, message: str) -> dict[str, Any]:
        return {
            "status": "gpu_not_configured",
            "gpu": self.profile,
            "configured_gpu_types": self.configured,
            "message": message,
        }


class QueueUnreachable(SieError):
    """NATS has not answered yet (the gateway serves before it joins the cluster)."""

    code = ErrorCode.QUEUE_FULL


class PublishFailed(SieError):
    """JetStream refused an item (a full stream, or no connection); nothing of the request runs late:
    the items published before it are answered into a collector nobody reads."""

    code = ErrorCode.QUEUE_FULL

    def __init__(self, reason: str) -> None:
        super().__init__(f"Queue publish failed: {reason}")


class StreamBacklog(SieError):
    """A pool's work stream holds more items than ``SIE_GATEWAY_MAX_STREAM_PENDING``: the workers are
    behind, and more items would only wait out their deadlines there."""

    code = ErrorCode.QUEUE_FULL

    def __init__(self, pool: str, depth: int, limit: int) -> None:
        super().__init__(
            f"Queue publish failed: backpressure: pool '{pool}' has {depth} items waiting, over "
            f"SIE_GATEWAY_MAX_STREAM_PENDING ({limit}); retry shortly"
        )
        self.pool = pool
        self.depth = depth

    @property
    def retry_after_s(self) -> int:
        return BACKLOG_RETRY_AFTER_S


class ItemTooLarge(SieError):
    """An item whose work item passes a NATS message, with no payload store to carry it: a queue payload
    that cannot travel, the public cluster's ``PAYLOAD_TOO_LARGE``."""

    code = ErrorCode.PAYLOAD_TOO_LARGE

    def __init__(self, index: int) -> None:
        super().__init__(
            f"Item {index} is over {INLINE_THRESHOLD_BYTES} bytes and no payload store is configured "
            "(SIE_PAYLOAD_STORE_URL)"
        )
        self.index = index


class NoAnswer(SieError):
    """No worker answered in time: the workers are still loading the model, or busy."""

    code = ErrorCode.MODEL_LOADING

    def __init__(self, model: str, timeout_s: float) -> None:
        super().__init__(
            f"Model '{model}' did not answer within {timeout_s:g}s; it may be loading. Retry shortly."
        )


class PoolNotFound(SieError):
    code = ErrorCode.POOL_NOT_FOUND

    def __init__(self, name: str) -> None:
        super().__init__(f"Pool '{name}' not found")


class BundleConflict(SieError):
    """A ``bundle:/org/model`` path naming a bundle that does not serve the model: the public gateway's
    409 ``{message, compatible_bundles}``, with the native envelope beside it for our clients."""

    code = ErrorCode.BUNDLE_CONFLICT

    def __init__(self, model: str, bundle: str, compatible: list[str]) -> None:
        super().__init__(
            f"Bundle '{bundle}' does not serve model '{model}'. Compatible bundles: {compatible}"
        )
        self.bundle = bundle
        self.compatible = compatible

    def details(self) -> dict[str, Any]:
        return {"bundle": self.bundle, "compatible_bundles": self.compatible}

    def body(self, message: str) -> dict[str, Any]:
        native = error_envelope(self.code, message, **self.details())
        return {"message": message, "compatible_bundles": self.compatible, **native}


WORKER_CODES: Final = frozenset(ErrorCode) - {ErrorCode.POOL_NOT_FOUND}
"""What an inference route of the gateway may answer: its own refusals, the request checks', and
whatever code a worker answered an item with."""

"""Wire error codes and the ``{"detail": {"code", "message"}}`` envelope the public SIE answers with."""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class ErrorCode(StrEnum):
    INVALID_INPUT = "INVALID_INPUT"
    MODEL_NOT_FOUND = "MODEL_NOT_FOUND"
    MODEL_NOT_SERVED = "MODEL_NOT_SERVED"  # ours: a catalogued family this release does not run
    MODEL_NOT_LOADED = "MODEL_NOT_LOADED"
    MODEL_LOADING = "MODEL_LOADING"
    MODEL_LOAD_FAILED = "MODEL_LOAD_FAILED"
    LORA_LOADING = "LORA_LOADING"
    INFERENCE_ERROR = "INFERENCE_ERROR"
    QUEUE_FULL = "QUEUE_FULL"
    INTERNAL_ERROR = "INTERNAL_ERROR"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    # Input past a bound: the body limit (413), a text past the model's window under
    # ``options.overflow_policy: error`` (400); the public SDK raises ``InputTooLongError`` on the 400.
    INPUT_TOO_LONG = "INPUT_TOO_LONG"
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"  # a queue payload that cannot travel (the public cluster's)
    # A gateway's own answers: scale from zero (the public SDK retries it), a machine profile the
    # cluster does not run, and its auth and pool refusals.
    PROVISIONING = "PROVISIONING"
    GPU_NOT_CONFIGURED = "GPU_NOT_CONFIGURED"
    UNAUTHORIZED = "UNAUTHORIZED"
    FORBIDDEN = "FORBIDDEN"
    POOL_NOT_FOUND = "POOL_NOT_FOUND"
    BUNDLE_CONFLICT = "BUNDLE_CONFLICT"  # a ``bundle:/model`` path whose bundle does not serve the model
    # A generation under a ``strict`` grammar whose finished output does not parse or match.
    MODEL_OUTPUT_PARSE_ERROR = "MODEL_OUTPUT_PARSE_ERROR"
    # Ours: a generation past its profile's ``first_chunk_timeout_s``, ``inter_chunk_timeout_s`` (a
    # stream) or ``overall_timeout_s``; the public server documents the 504 and names no code.
    GENERATION_TIMEOUT = "GENERATION_TIMEOUT"


class ConfigErrorCode(StrEnum):
    """``sie-config``'s refusals, in the public service's words: ``{"detail": {"error": <code>, ...}}``."""

    INVALID_MODEL_ID = "invalid_model_id"
    MODEL_NOT_FOUND = "model_not_found"
    BUNDLE_NOT_FOUND = "bundle_not_found"
    PARSE_ERROR = "parse_error"
    VALIDATION_ERROR = "validation_error"
    CONTENT_CONFLICT = "content_conflict"
    BUNDLE_CONFLICT = "bundle_conflict"
    MISSING_FIELD = "missing_field"
    INVALID_MODEL_SPEC = "invalid_model_spec"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    IDEMPOTENCY_MISMATCH = "idempotency_mismatch"
    IDEMPOTENT_INFLIGHT_CANCELLED = "idempotent_inflight_cancelled"
    NATS_UNAVAILABLE = "nats_unavailable"
    MODEL_ID_MISMATCH = "model_id_mismatch"  # a PUT whose body names another model than its path
    CONFIG_STORE_REQUIRED = "config_store_required"  # a DELETE on a service without a store


def error_envelope(code: str, message: str, **extra: Any) -> dict[str, Any]:
    """The body of every native-endpoint error; extras (e.g. ``attempts``) sit beside code and message."""
    return {"detail": {"code": code, "message": message, **extra}}


def openai_error_envelope(
    message: str, code: str, error_type: str = "invalid_request_error"
) -> dict[str, Any]:
    """The OpenAI-style body used by ``/v1/embeddings``, so the ``openai`` client raises its own errors."""
    return {"error": {"message": message, "type": error_type, "param": None, "code": code}}

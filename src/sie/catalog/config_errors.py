"""The config API's refusals, in the public sie-config's words: each names its code
(``ConfigErrorCode``). sie-config answers them ``{"detail": {"error": <code>, ...fields}}``; the
gateway, which serves the API's reads from its catalogue, in its own envelope."""

from __future__ import annotations

from typing import Any

from sie.errors import SieError
from sie.wire.errors import ConfigErrorCode


class ConfigRefused(SieError):
    """A refusal whose body is its ``fields`` (``message`` last, when it has one)."""

    code = ConfigErrorCode.VALIDATION_ERROR

    def __init__(self, message: str | None = None, **fields: Any) -> None:
        super().__init__(message or self.code.value)
        self.fields = fields if message is None else {**fields, "message": message}

    def details(self) -> dict[str, Any]:
        return self.fields


class InvalidModelId(ConfigRefused):
    code = ConfigErrorCode.INVALID_MODEL_ID


class ConfigNotFound(ConfigRefused):
    code = ConfigErrorCode.MODEL_NOT_FOUND


class BundleNotFound(ConfigRefused):
    code = ConfigErrorCode.BUNDLE_NOT_FOUND


class ParseError(ConfigRefused):
    code = ConfigErrorCode.PARSE_ERROR


class ConfigInvalid(ConfigRefused):
    """422 ``validation_error``: ``details`` is ``[{"loc"?, "message"}]``."""

    code = ConfigErrorCode.VALIDATION_ERROR

    def __init__(self, details: list[dict[str, Any]]) -> None:
        super().__init__(None, details=details)

    def __str__(self) -> str:
        return "; ".join(str(d["message"]) for d in self.fields["details"])


def invalid(message: str) -> ConfigInvalid:
    return ConfigInvalid([{"message": message}])


class ProfileConflict(ConfigRefused):
    code = ConfigErrorCode.CONTENT_CONFLICT

    def __init__(self, model_id: str, profiles: list[str]) -> None:
        super().__init__(
            f"Profile(s) {profiles} on model '{model_id}' already exist with different content. "
            "Config API is append-only.",
            model_id=model_id,
            conflicting_profiles=profiles,
        )


class FieldConflict(ConfigRefused):
    code = ConfigErrorCode.CONTENT_CONFLICT

    def __init__(self, model_id: str, fields: list[str]) -> None:
        super().__init__(
            f"Top-level field(s) {fields} already exist with different values. Config API is append-only; "
            "mutating existing metadata is not supported via this endpoint.",
            model_id=model_id,
            conflicting_fields=fields,
        )


class UnknownModel(ConfigRefused):
    code = ConfigErrorCode.MODEL_NOT_FOUND

    def __init__(self, model: str) -> None:
        super().__init__(f"Model not found: {model}", model=model)


class BundleConflict(ConfigRefused):
    code = ConfigErrorCode.BUNDLE_CONFLICT

    def __init__(self, model: str, bundle: str, compatible: list[str]) -> None:
        super().__init__(
            f"Bundle '{bundle}' does not support model '{model}'. Compatible bundles: {compatible}",
            model=model,
            bundle=bundle,
            compatible_bundles=compatible,
        )


class MissingField(ConfigRefused):
    code = ConfigErrorCode.MISSING_FIELD


class InvalidModelSpec(ConfigRefused):
    code = ConfigErrorCode.INVALID_MODEL_SPEC


class BodyTooLarge(ConfigRefused):
    code = ConfigErrorCode.PAYLOAD_TOO_LARGE


class IdempotencyMismatch(ConfigRefused):
    code = ConfigErrorCode.IDEMPOTENCY_MISMATCH


class InflightCancelled(ConfigRefused):
    code = ConfigErrorCode.IDEMPOTENT_INFLIGHT_CANCELLED


class NatsUnavailable(ConfigRefused):
    code = ConfigErrorCode.NATS_UNAVAILABLE


class ModelIdMismatch(ConfigRefused):
    """A PUT whose body's ``sie_id`` is not the model its path names."""

    code = ConfigErrorCode.MODEL_ID_MISMATCH


class StoreRequired(ConfigRefused):
    """A DELETE on a service without a store: the models dir's files are the image's and stay."""

    code = ConfigErrorCode.CONFIG_STORE_REQUIRED

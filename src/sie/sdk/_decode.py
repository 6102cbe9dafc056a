"""Reading what the server sent back: result bodies into numpy-backed dicts, error bodies into exceptions.

Pure functions of an ``httpx.Response`` (already fully read), so both clients and the tests share them.
Arrays arrive in msgpack-numpy's map layout and become ``np.ndarray`` through
``sie.wire.arrays.object_hook``, which refuses object and structured dtypes (no pickle from a peer).
"""

from __future__ import annotations

import re
from typing import Any, Final, NoReturn, cast

import httpx
import msgpack
import numpy as np

from sie.sdk._errors import (
    InputTooLongError,
    ModelLoadFailedError,
    ProvisioningError,
    RequestError,
    ServerError,
)
from sie.sdk._retry import parse_retry_after
from sie.sdk._types import (
    EncodeResult,
    Entity,
    ExtractItemError,
    ExtractResult,
    ModelInfo,
    RequestMetadata,
    RequestUsage,
    ScoreEntry,
    ScoreResult,
)
from sie.wire.arrays import object_hook
from sie.wire.errors import ErrorCode

ERROR_CODE_HEADER: Final = "X-SIE-Error-Code"
_SERVED_BY_VALUES: Final = frozenset({"local", "remote"})
_USAGE_HEADERS: Final = {
    "input_tokens": "X-SIE-Units-Input-Tokens",
    "images": "X-SIE-Units-Images",
    "content_input_tokens": "X-SIE-Units-Content-Input-Tokens",
}
_UNPACK_ERRORS: Final = (ValueError, TypeError, msgpack.UnpackException)


def _is_json(response: httpx.Response) -> bool:
    return "json" in response.headers.get("content-type", "")


def decode_body(response: httpx.Response, owner: str) -> dict[str, Any]:
    """The body as a dict; a body that is not one is the server breaking the contract (RequestError)."""
    try:
        if _is_json(response):
            data = response.json()
        else:
            data = msgpack.unpackb(response.content, raw=False, object_hook=object_hook)
    except _UNPACK_ERRORS:
        data = None
    if not isinstance(data, dict):
        raise RequestError(
            f"Malformed {owner} response (status={response.status_code}, {len(response.content)} bytes)",
            status_code=response.status_code,
        )
    return data


def _error_payload(response: httpx.Response) -> Any:
    """The error object of a body: ``{"detail": ...}`` from the worker, ``{"error": ...}`` from gateways."""
    try:
        data = response.json() if _is_json(response) else msgpack.unpackb(response.content, raw=False)
    except _UNPACK_ERRORS:
        return None
    if not isinstance(data, dict):
        return None
    return data["error"] if "error" in data else data.get("detail")


def error_code(response: httpx.Response) -> str | None:
    """The wire error code: the ``X-SIE-Error-Code`` header if present, else the body's ``code``."""
    header = response.headers.get(ERROR_CODE_HEADER)
    if header:
        return str(header)
    payload = _error_payload(response)
    code = payload.get("code") if isinstance(payload, dict) else None
    if not isinstance(code, str):
        return None
    return ErrorCode.PROVISIONING if code == "provisioning" else code


def _attempts(value: object) -> int:
    try:
        return max(int(value), 1) if isinstance(value, int | float | str) else 1
    except (ValueError, OverflowError):
        return 1


def raise_for_error(response: httpx.Response, model: str | None) -> None:
    """Raise the SDK error for a final non-2xx answer (and for a 2xx that is not 200-like)."""
    status = response.status_code
    if 200 <= status < 300 and status != 202:
        return
    if status < 400:
        raise RequestError(f"Unexpected HTTP {status} from the server", status_code=status)
    _raise_http_error(response, model)


def _raise_http_error(response: httpx.Response, model: str | None) -> NoReturn:
    status = response.status_code
    payload = _error_payload(response)
    fields = payload if isinstance(payload, dict) else {}
    if isinstance(payload, dict):
        message = str(payload.get("message", payload))
    elif payload is not None:
        message = str(payload)
    else:
        message = response.text or f"HTTP {status}"
    code = error_code(response)
    param = fields.get("param") if isinstance(fields.get("param"), str) else None
    retry_after = parse_retry_after(response.headers)
    if status == 502 and code == ErrorCode.MODEL_LOAD_FAILED:
        error_class = fields.get("error_class")
        raise ModelLoadFailedError(
            str(fields.get("message") or f"Model '{model}' failed to load"),
            model=model,
            error_class=str(error_class) if error_class is not None else None,
            permanent=bool(fields.get("permanent", True)),
            attempts=_attempts(fields.get("attempts", 1)),
            param=param,
        )
    if status == 503 and code == ErrorCode.PROVISIONING:
        raise ProvisioningError(message, retry_after=retry_after, param=param)
    if status >= 500:
        raise ServerError(message, code, status, param=param, retry_after=retry_after)
    if status == 400 and code == ErrorCode.INPUT_TOO_LONG:  # the 413 of a body stays a RequestError
        raise InputTooLongError(message, model=model, param=param)
    raise RequestError(message, code, status, param=param)


def _array(value: Any, what: str) -> np.ndarray:
    """An ndarray from msgpack-numpy, or from the plain lists of a JSON answer."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, list):
        return np.asarray(value)
    raise RequestError(f"Malformed encode response: {what} is a {type(value).__name__}, not an array")


def request_metadata(headers: httpx.Headers) -> RequestMetadata | None:
    """``runtime_instance_id`` (64 hex), ``served_by`` and ``usage`` from the headers, when
    well-formed; a malformed meter is left out alone."""
    metadata: RequestMetadata = {}
    instance = headers.get("X-SIE-Runtime-Instance")
    if instance and re.fullmatch(r"[0-9a-f]{64}", instance):
        metadata["runtime_instance_id"] = instance
    served_by = headers.get("X-SIE-Served-By")
    if served_by in _SERVED_BY_VALUES:
        metadata["served_by"] = served_by
    usage = _request_usage(headers)
    if usage:
        metadata["usage"] = usage
    return metadata or None


def _request_usage(headers: httpx.Headers) -> RequestUsage:
    usage: RequestUsage = {}
    for key, header in _USAGE_HEADERS.items():
        value = headers.get(header)
        # Canonical unsigned decimals only, within 64 bits: "+1", " 1", "01" or "1e3" is no meter.
        if value and re.fullmatch(r"0|[1-9][0-9]{0,19}", value) and int(value) < 1 << 64:
            usage[key] = int(value)  # type: ignore[literal-required]
    return usage


def encode_results(data: dict[str, Any]) -> list[EncodeResult]:
    """One result per item: the vectors unwrapped from their ``{dims, dtype, values}`` envelopes."""
    model, timing = data.get("model"), data.get("timing")
    results: list[EncodeResult] = []
    for item in _items(data, "encode"):
        result: EncodeResult = {}
        if "id" in item:
            result["id"] = item["id"]
        if item.get("dense") is not None:
            result["dense"] = _array(item["dense"].get("values"), "dense.values")
        if item.get("sparse") is not None:
            sparse = item["sparse"]
            result["sparse"] = {
                "indices": _array(sparse.get("indices"), "sparse.indices"),
                "values": _array(sparse.get("values"), "sparse.values"),
            }
        if item.get("multivector") is not None:
            result["multivector"] = _array(item["multivector"].get("values"), "multivector.values")
        if isinstance(model, str) and model:
            result["model"] = model
        if timing:
            result["timing"] = timing
        results.append(result)
    return results


def score_result(data: dict[str, Any]) -> ScoreResult:
    try:
        scores = [ScoreEntry(item_id=s["item_id"], score=s["score"], rank=s["rank"]) for s in data["scores"]]
        result = ScoreResult(model=data["model"], scores=scores)
    except (KeyError, TypeError) as exc:
        raise RequestError(f"Malformed score response: missing or bad {exc}") from None
    if data.get("query_id") is not None:
        result["query_id"] = data["query_id"]
    if data.get("usage") is not None:
        result["usage"] = data["usage"]
    return result


def extract_results(data: dict[str, Any]) -> list[ExtractResult]:
    """One result per item; the four lists are always present so callers can iterate without checks."""
    model = data.get("model")
    results: list[ExtractResult] = []
    for item in _items(data, "extract"):
        try:
            entities = [_entity(entity) for entity in item.get("entities") or []]
        except (KeyError, TypeError, AttributeError) as exc:
            raise RequestError(f"Malformed extract response: bad entity ({exc})") from None
        result = ExtractResult(
            entities=entities,
            relations=list(item.get("relations") or []),
            classifications=list(item.get("classifications") or []),
            objects=list(item.get("objects") or []),
        )
        if item.get("id") is not None:
            result["id"] = item["id"]
        if item.get("data"):
            result["data"] = item["data"]
        if item.get("error") is not None:
            result["error"] = _item_error(item["error"])
        if isinstance(model, str) and model:
            result["model"] = model
        results.append(result)
    return results


def _item_error(raw: Any) -> ExtractItemError:
    """A failed item's ``{code, message}``; one that is not two non-blank strings (a broken peer's)
    reads as the public SDK reads it, ``INTERNAL_ERROR``, rather than failing the whole response."""
    code = raw.get("code") if isinstance(raw, dict) else None
    message = raw.get("message") if isinstance(raw, dict) else None
    if isinstance(code, str) and code.strip() and isinstance(message, str) and message.strip():
        return ExtractItemError(code=code, message=message)
    return ExtractItemError(code="INTERNAL_ERROR", message="Malformed extraction item error")


def _entity(raw: dict[str, Any]) -> Entity:
    """Offsets and boxes are spelled out as ``None`` when absent (text spans have no box, and so on)."""
    return Entity(
        text=raw["text"],
        label=raw["label"],
        score=raw["score"],
        start=raw.get("start"),
        end=raw.get("end"),
        bbox=raw.get("bbox"),
    )


def _items(data: dict[str, Any], owner: str) -> list[dict[str, Any]]:
    items = data.get("items")
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise RequestError(f"Malformed {owner} response: 'items' is not a list of objects")
    return items


def check_count(received: int, expected: int, model: str, owner: str) -> None:
    """Results are positional, so a short list would pair vectors with the wrong inputs: refuse it.

    A ``ServerError`` with no status, as the public SDK's ``IncompleteBatchError`` (its subclass) is.
    """
    if received != expected:
        raise ServerError(
            f"{owner.capitalize()} response for {model!r} has {received} result(s) for {expected} item(s)",
            code=f"{owner.upper()}_RESULT_COUNT_MISMATCH",
        )


def model_list(response: httpx.Response) -> list[ModelInfo]:
    """``GET /v1/models``: the server's ``models`` list, as sent."""
    raise_for_error(response, None)
    models = decode_body(response, "models").get("models")
    if not isinstance(models, list):
        raise RequestError("Malformed models response: 'models' is not a list")
    return models


def model_info(response: httpx.Response, model: str) -> ModelInfo:
    """``GET /v1/models/{model}``: one model's info, as sent (404 becomes RequestError MODEL_NOT_FOUND)."""
    raise_for_error(response, model)
    return cast(ModelInfo, decode_body(response, "model"))

"""The write routes of ``sie-config``: POST (append), PUT (replace) and DELETE of a model's config,
with the public service's statuses, bodies, ``Idempotency-Key`` and audit lines. What a write does
under the service's write lock is ``writer``'s; the read routes are ``api``'s.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
import re
import time
from collections.abc import Callable, Coroutine
from typing import Any, Final

import msgspec
import yaml
from starlette.requests import Request
from starlette.responses import Response

from sie.catalog.config_errors import (
    ConfigInvalid,
    IdempotencyMismatch,
    InflightCancelled,
    InvalidModelId,
    ModelIdMismatch,
    NatsUnavailable,
    ParseError,
    StoreRequired,
)
from sie.control.auth import require_write
from sie.control.configs import schema_errors
from sie.control.idempotency import Answer, Evicted, KeyMismatch, OwnerFailed
from sie.control.state import ControlState, state_of
from sie.control.store import ConfigStore, storable
from sie.control.writer import delete, replace, write

audit = logging.getLogger("sie.audit")

MODEL_ID: Final = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._/:@-]*$")


def _json_response(body: Any, status: int = 200) -> Response:
    return Response(msgspec.json.encode(body), status_code=status, media_type="application/json")


def check_model_id(model_id: str) -> None:
    if ".." in model_id or "\\" in model_id or not MODEL_ID.fullmatch(model_id):
        raise InvalidModelId("Model ID contains invalid characters.")
    # The gateway reads ``/v1/configs/models/{id}/status`` as the acknowledgement view of ``id``.
    if model_id == "status" or model_id.endswith("/status"):
        raise InvalidModelId(
            "Model ID must not end with '/status' (reserved for the gateway status endpoint)."
        )


Work = Callable[[], Coroutine[Any, Any, tuple[int, dict[str, Any]]]]


async def _once(
    request: Request, state: ControlState, event: str, body_hash: str, size: int, work: Work
) -> Response:
    """``work`` run at most once per ``Idempotency-Key`` (a replay gets the first answer, a waiting
    duplicate the first one's refusal) and to its end even if the client goes away: once the epoch
    moved, the model and the deltas must follow. Each answer is audited."""
    started = time.monotonic()
    key = request.headers.get("Idempotency-Key")
    if key:
        replay = await _claim(state, key, body_hash)
        if replay is not None:
            return replay
    try:
        status, answer = await asyncio.shield(asyncio.create_task(work()))
    except BaseException as exc:
        if key:
            state.idempotency.abandon(key, exc)
        raise
    encoded = msgspec.json.encode(answer)
    if key:
        state.idempotency.finish(key, Answer(status, encoded, body_hash))
    audit.info(
        json.dumps(
            {
                "event": event,
                "method": request.method,
                "endpoint": request.url.path,
                "status": status,
                "model": answer["model_id"],
                "latency_ms": round((time.monotonic() - started) * 1000, 2),
                "body_bytes": size,
            }
        )
    )
    return Response(encoded, status_code=status, media_type="application/json")


def _require_nats(state: ControlState) -> None:
    if state.publisher is not None and not state.publisher.connected:
        raise NatsUnavailable("NATS not connected -- cannot distribute config changes.")


def _router_id(state: ControlState) -> str:
    return state.publisher.router_id if state.publisher is not None else "standalone"


async def add_model(request: Request) -> Response:
    state = state_of(request)
    require_write(request, state.tokens)
    _require_nats(state)
    body = await request.body()  # at most MAX_BODY_BYTES: the app's BodyLimit refuses more unread
    body_hash = hashlib.sha256(body).hexdigest()
    return await _once(
        request, state, "config.add_model", body_hash, len(body), functools.partial(_add, state, body)
    )


async def replace_model(request: Request) -> Response:
    """PUT: the model's config replaced by the body (``control.replace``)."""
    state = state_of(request)
    require_write(request, state.tokens)
    model_id: str = request.path_params["model_id"]
    check_model_id(model_id)
    _require_nats(state)
    body = await request.body()
    # The key's cache is the service's, so the target is part of what a replay must match.
    body_hash = hashlib.sha256(b"PUT\0" + model_id.encode() + b"\0" + body).hexdigest()
    work = functools.partial(_replace, state, model_id, body)
    return await _once(request, state, "config.replace_model", body_hash, len(body), work)


async def delete_model(request: Request) -> Response:
    """DELETE: the API's config of the model removed; a models-dir config of it is served again."""
    state = state_of(request)
    require_write(request, state.tokens)
    model_id: str = request.path_params["model_id"]
    check_model_id(model_id)
    store = state.store
    if store is None:
        raise StoreRequired(
            "Model deletion requires a durable ConfigStore; filesystem model files are immutable."
        )
    body_hash = hashlib.sha256(b"DELETE\0" + model_id.encode()).hexdigest()
    work = functools.partial(_delete, state, store, model_id)
    return await _once(request, state, "config.delete_model", body_hash, 0, work)


async def _claim(state: ControlState, key: str, body_hash: str) -> Response | None:
    try:
        replay = await state.idempotency.claim(key, body_hash)
    except KeyMismatch:
        raise IdempotencyMismatch("Idempotency-Key reused with different payload.") from None
    except OwnerFailed:
        raise InflightCancelled(
            "The prior in-flight request with this Idempotency-Key was cancelled before it completed. "
            "Retry the request to execute it.",
            idempotency_key=key,
        ) from None
    except Evicted:
        return _json_response(
            {
                "error": "idempotent_replay_evicted",
                "idempotency_key": key,
                "message": "A prior request with this Idempotency-Key completed successfully, but its cached "
                "response was evicted. The write was applied exactly once; query GET "
                "/v1/configs/models/{id} to see the current state.",
            }
        )
    if replay is None:
        return None
    return Response(replay.body, status_code=replay.status, media_type="application/json")


def _mapping(body: bytes) -> dict[str, Any]:
    """A body's YAML mapping, every field one the schema knows with a value of its type."""
    try:
        config = yaml.safe_load(body.decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ParseError(f"Invalid YAML: {exc}") from exc
    if not isinstance(config, dict):
        raise ParseError("Expected YAML mapping at top level")
    details = schema_errors(config)
    if details:
        raise ConfigInvalid(details)
    return config


def _check_storable(model_id: str) -> None:
    check_model_id(model_id)
    reason = storable(model_id)
    if reason is not None:
        raise InvalidModelId(reason)


def _parse(body: bytes) -> dict[str, Any]:
    config = _mapping(body)
    model_id = config.get("sie_id")
    if model_id:
        _check_storable(str(model_id))
    return config


async def _add(state: ControlState, body: bytes) -> tuple[int, dict[str, Any]]:
    plan, warnings = await write(state, _parse(body))
    registry = state.registry
    answer = {
        "model_id": plan.model_id,
        "created_profiles": plan.created,
        "existing_profiles_skipped": plan.skipped,
        "warnings": warnings,
        "routable_bundles_by_profile": {
            name: registry.model_bundles(plan.model_id, [name]) for name in plan.created
        },
        "router_id": _router_id(state),
    }
    return (201 if plan.created else 200), answer


async def _replace(state: ControlState, model_id: str, body: bytes) -> tuple[int, dict[str, Any]]:
    config = _mapping(body)
    named = config.get("sie_id")
    if named and named != model_id:
        raise ModelIdMismatch(f"Body sie_id {named!r} does not match path model id {model_id!r}.")
    if not named:
        config["sie_id"] = model_id
    _check_storable(model_id)
    change, warnings = await replace(state, config)
    answer = {
        "model_id": model_id,
        "replaced": change.changed,
        "unchanged": not change.changed,
        "affected_bundles": change.bundles,
        "warnings": warnings,
        "router_id": _router_id(state),
    }
    return 200, answer


async def _delete(state: ControlState, store: ConfigStore, model_id: str) -> tuple[int, dict[str, Any]]:
    done = await delete(state, store, model_id)
    answer = {
        "model_id": model_id,
        "deleted": done.deleted,
        "unchanged": not done.deleted,
        "fallback": "filesystem" if done.deleted and done.fallback else None,
        "affected_bundles": done.bundles,
        "epoch": state.epoch,
        # A delta can only add: followers learn of a removal from the epoch and the export.
        "distribution": "epoch_export",
    }
    return 200, answer

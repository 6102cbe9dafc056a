"""The HTTP API of ``sie-config``, route for route and body for body the public service's.

Errors are the public service's FastAPI bodies, ``{"detail": ...}``: a ``{"error": <code>, ...}`` map
for config errors (``catalog.config_errors``), a plain string for auth errors (its own tests read
``detail.error``); the HTTP edge renders them (``sie.http.errors``, the ``CONFIG`` envelope).

Writes are serialized by one lock, and so is the export, so a follower never gets an epoch ahead of the
models it is shown; the write routes are ``write_api``'s, what a write does inside the lock is
``writer``'s. Every body is at most
``MAX_BODY_BYTES``: the app's ``BodyLimit`` refuses a longer one before it is read.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any, Final

import msgspec
import yaml
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from sie.catalog.bundles import parse_model_spec
from sie.catalog.config_errors import (
    BundleNotFound,
    ConfigNotFound,
    InvalidModelSpec,
    MissingField,
    ParseError,
)
from sie.control.auth import require_read
from sie.control.configs import dump_yaml
from sie.control.state import state_of
from sie.control.write_api import add_model, check_model_id, delete_model, replace_model

MAX_BODY_BYTES: Final = 1_048_576
YAML_TYPE: Final = "application/x-yaml"


def _json(body: Any, status: int = 200) -> Response:
    return Response(msgspec.json.encode(body), status_code=status, media_type="application/json")


async def list_models(request: Request) -> Response:
    state = state_of(request)
    require_read(request, state.tokens)
    registry = state.registry
    models = [
        {
            "model_id": name,
            "profiles": profiles,
            "source": "api" if model_id in registry.api_ids else "filesystem",
        }
        for name, model_id, profiles in registry.serving_ids()
    ]
    return _json({"models": models})


async def get_model(request: Request) -> Response:
    state = state_of(request)
    model_id: str = request.path_params["model_id"]
    require_read(request, state.tokens)
    check_model_id(model_id)
    found = state.registry.lookup(model_id)
    if found is None:
        raise ConfigNotFound(f"Model '{model_id}' does not exist in the catalog.", model_id=model_id)
    text = await asyncio.to_thread(state.store.read_model, found) if state.store is not None else None
    text = text or state.registry.baseline_text(found) or dump_yaml(state.registry.config(found) or {})
    return Response(text, media_type=YAML_TYPE)


async def resolve(request: Request) -> Response:
    state = state_of(request)
    require_read(request, state.tokens)
    body = await request.body()
    try:
        data = msgspec.json.decode(body) if body else {}
    except msgspec.DecodeError as exc:
        raise ParseError(f"Invalid JSON: {exc}") from exc
    spec = data.get("model", "") if isinstance(data, dict) else ""
    if not spec:
        raise MissingField("'model' field is required")
    try:
        bundle, model = parse_model_spec(spec)
    except ValueError as exc:
        raise InvalidModelSpec(str(exc)) from exc
    resolved, compatible = state.registry.resolve(model, bundle or data.get("bundle"))
    found = state.registry.lookup(model) or model
    # A variant (``id:profile``) is served as a model of its own whose default is that profile.
    variant = model.lower() != found.lower()
    profiles = ["default"] if variant else sorted((state.registry.config(found) or {}).get("profiles") or {})
    return _json(
        {"model": model, "resolved_bundle": resolved, "compatible_bundles": compatible, "profiles": profiles}
    )


async def list_bundles(request: Request) -> Response:
    state = state_of(request)
    require_read(request, state.tokens)
    bundles = [
        {
            "bundle_id": b.name,
            "engine": b.engine,
            "priority": b.priority,
            "adapter_count": len(b.adapters),
            "source": "filesystem",
        }
        for b in state.registry.bundles
    ]
    return _json({"bundles": bundles})


async def get_bundle(request: Request) -> Response:
    state = state_of(request)
    bundle_id: str = request.path_params["bundle_id"]
    require_read(request, state.tokens)
    bundle = state.registry.bundle(bundle_id)
    if bundle is None:
        raise BundleNotFound(None, bundle_id=bundle_id)
    data = {
        "name": bundle.name,
        "engine": bundle.engine,
        "priority": bundle.priority,
        "source": "filesystem",
        "adapters": sorted(bundle.adapters),
    }
    return Response(yaml.safe_dump(data, default_flow_style=False), media_type=YAML_TYPE)


async def epoch(request: Request) -> Response:
    state = state_of(request)
    require_read(request, state.tokens)
    return _json(
        {
            "epoch": state.epoch,
            "bundles_hash": state.registry.bundles_hash(),
            "bundle_config_hashes_hash": state.hashes_hash(),
        }
    )


async def export(request: Request) -> Response:
    state = state_of(request)
    require_read(request, state.tokens, export=True)
    registry = state.registry
    async with state.write_lock:
        models = []
        stored = state.store is not None
        for model_id in registry.ids():
            config = registry.config(model_id) or {}
            # Without a store the public service dumps every config and knows no API source.
            text = (registry.baseline_text(model_id) if stored else None) or dump_yaml(config)
            models.append(
                {
                    "model_id": model_id,
                    "model_config": config,
                    "raw_yaml": text,
                    "affected_bundles": registry.model_bundles(model_id),
                    "pool": "default",
                    "source": "api" if stored and model_id in registry.api_ids else "filesystem",
                }
            )
        snapshot = {
            "snapshot_version": 1,
            "epoch": state.epoch,
            "generated_at": datetime.now(UTC).isoformat(),
            "bundle_config_hashes": {b.name: state.bundle_hash(b.name) for b in registry.bundles},
            # Every model is in the default pool (this release's schema has no ``pool`` field); a
            # bundle without models has no pools.
            "bundle_pool_config_hashes": {
                b.name: {"default": h} if (h := state.bundle_hash(b.name)) else {} for b in registry.bundles
            },
            "bundle_adapters": {b.name: state.bundle_adapters(b.name) for b in registry.bundles},
            "models": models,
        }
    return _json(snapshot)


_PREFIX: Final = "/v1/configs"
ROUTES: Final = [
    Route(f"{_PREFIX}/models", list_models, methods=["GET"]),
    Route(f"{_PREFIX}/models", add_model, methods=["POST"]),
    Route(f"{_PREFIX}/models/{{model_id:path}}", get_model, methods=["GET"]),
    Route(f"{_PREFIX}/models/{{model_id:path}}", replace_model, methods=["PUT"]),
    Route(f"{_PREFIX}/models/{{model_id:path}}", delete_model, methods=["DELETE"]),
    Route(f"{_PREFIX}/resolve", resolve, methods=["POST"]),
    Route(f"{_PREFIX}/bundles", list_bundles, methods=["GET"]),
    Route(f"{_PREFIX}/bundles/{{bundle_id}}", get_bundle, methods=["GET"]),
    Route(f"{_PREFIX}/epoch", epoch, methods=["GET"]),
    Route(f"{_PREFIX}/export", export, methods=["GET"]),
]

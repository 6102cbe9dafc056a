"""The gateway's read side of the config API, from the catalogue it routes with (its models dir with
sie-config's models laid over it), and the acknowledgement view: which workers run a model's config.

Writes are sie-config's alone. A worker "acknowledges" a model when the ``bundle_config_hash`` its
heartbeat reports for its bundle equals the hash the gateway computes for that bundle from its own
catalogue: both hash the same configs the same way (``engine.bundles.bundle_config_hash``), so equal
hashes mean the worker serves exactly the configs the gateway routes by.
"""

from __future__ import annotations

from typing import Any

import msgspec
import yaml
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sie.catalog.bundles import Bundle, bundle_config_hash, parse_model_spec
from sie.catalog.catalog import CatalogEntry
from sie.catalog.config_errors import BundleConflict, BundleNotFound, UnknownModel
from sie.catalog.errors import InvalidInput, ModelNotFound
from sie.gateway.state import GatewayState, state_of

STATUS_SUFFIX = "/status"


def _entries(state: GatewayState, model_id: str) -> list[CatalogEntry]:
    """The catalogue entries (one per profile) of ``model_id``, matched case-insensitively."""
    lowered = model_id.lower()
    return [e for e in state.admission.catalog.entries() if e.config.sie_id.lower() == lowered]


def _bundles(state: GatewayState, entries: list[CatalogEntry]) -> list[Bundle]:
    return [b for b in state.bundles if any(b.serves(e) for e in entries)]


def _source(state: GatewayState, sie_id: str) -> str:
    follower = state.follower
    return "config-service" if follower is not None and sie_id in follower.configs else "filesystem"


async def list_models(request: Request) -> Response:
    state = state_of(request)
    by_model: dict[str, list[str]] = {}
    for entry in state.admission.catalog.entries():
        by_model.setdefault(entry.config.sie_id, []).append(entry.profile.name)
    models = [
        {"model_id": sie_id, "profiles": sorted(profiles), "source": "gateway-registry"}
        for sie_id, profiles in sorted(by_model.items())
    ]
    return JSONResponse({"models": models})


async def get_model(request: Request) -> Response:
    state = state_of(request)
    model_id: str = request.path_params["model_id"]
    if model_id.endswith(STATUS_SUFFIX) and _entries(state, model_id.removesuffix(STATUS_SUFFIX)):
        return JSONResponse(model_status(state, model_id.removesuffix(STATUS_SUFFIX)))
    entries = _entries(state, model_id)
    if not entries:
        raise ModelNotFound(model_id)
    sie_id = entries[0].config.sie_id
    data = {
        "sie_id": sie_id,
        "source": _source(state, sie_id),
        "bundles": [b.name for b in _bundles(state, entries)],
    }
    return Response(yaml.safe_dump(data, default_flow_style=False), media_type="application/x-yaml")


def model_status(state: GatewayState, model_id: str) -> dict[str, Any]:
    entries = _entries(state, model_id)
    sie_id = entries[0].config.sie_id
    catalog = state.admission.catalog
    bundles = []
    for bundle in _bundles(state, entries):
        expected = bundle_config_hash(catalog, bundle)
        eligible = state.workers.serving(bundle.name, None, None)
        acked = sorted(w.name for w in eligible if w.heartbeat.bundle_config_hash == expected)
        pending = sorted(w.name for w in eligible if w.heartbeat.bundle_config_hash != expected)
        bundles.append(
            {
                "bundle_id": bundle.name,
                "expected_bundle_config_hash": expected,
                "total_eligible_workers": len(eligible),
                "acked_workers": acked,
                "pending_workers": pending,
                "acked": bool(eligible) and not pending,
            }
        )
    follower = state.follower
    return {
        "model_id": sie_id,
        "config_epoch": (follower.epoch or 0) if follower is not None else 0,
        "all_bundles_acked": bool(bundles) and all(b["acked"] for b in bundles),
        "no_bundles": not bundles,
        "bundles": bundles,
        "source": _source(state, sie_id),
    }


async def list_bundles(request: Request) -> Response:
    state = state_of(request)
    bundles = [
        {
            "bundle_id": b.name,
            "priority": b.priority,
            "adapter_count": len(b.adapters),
            "source": "filesystem",
            "connected_workers": len(state.workers.serving(b.name, None, None)),
        }
        for b in state.bundles
    ]
    return JSONResponse({"bundles": bundles})


async def get_bundle(request: Request) -> Response:
    state = state_of(request)
    name = request.path_params["bundle_id"]
    bundle = next((b for b in state.bundles if b.name == name), None)
    if bundle is None:
        raise BundleNotFound(f"Bundle '{name}' not found", bundle_id=name)
    data = {
        "name": bundle.name,
        "priority": bundle.priority,
        "source": "filesystem",
        "adapters": sorted(bundle.adapters),
    }
    return Response(yaml.safe_dump(data, default_flow_style=False), media_type="application/x-yaml")


async def resolve(request: Request) -> Response:
    state = state_of(request)
    try:
        data = msgspec.json.decode(await request.body() or b"{}")
        bundle, model = parse_model_spec(str(data.get("model", "")))
    except (msgspec.DecodeError, ValueError, AttributeError) as exc:
        raise InvalidInput(f"Invalid request: {exc}") from exc
    bundle = bundle or data.get("bundle")
    entries = _entries(state, model.rpartition(":")[0] if ":" in model else model)
    compatible = [b.name for b in _bundles(state, entries)]
    if not compatible:
        raise UnknownModel(model)
    if bundle is not None and bundle not in compatible:
        raise BundleConflict(model, bundle, compatible)
    profiles = sorted(e.profile.name for e in entries)
    return JSONResponse(
        {
            "model": model,
            "resolved_bundle": bundle or compatible[0],
            "compatible_bundles": compatible,
            "profiles": profiles,
        }
    )


ROUTES = [
    Route("/v1/configs/models", list_models),
    Route("/v1/configs/models/{model_id:path}", get_model),
    Route("/v1/configs/bundles", list_bundles),
    Route("/v1/configs/bundles/{bundle_id}", get_bundle),
    Route("/v1/configs/resolve", resolve, methods=["POST"]),
]

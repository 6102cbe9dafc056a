"""``GET /v1/models`` and ``/v1/models/{model}``: what is configured and in which state (JSON only)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from sie.catalog.errors import ModelNotFound
from sie.errors import RULES
from sie.http.openapi import error_responses, struct_response
from sie.http.parts import model_path
from sie.server.api.native import EngineDep
from sie.server.remote import router_of
from sie.server.status import model_info
from sie.wire import codec
from sie.wire.responses import ModelInfo, ModelList

router = APIRouter(tags=["models"])


def _json(value: object) -> Response:
    return Response(codec.encode_json(value), media_type=codec.JSON)


STRUCTS = (ModelList, ModelInfo)
"""The bodies these routes document (``openapi_docs.install`` turns them into components)."""


@router.get("/v1/models", responses={200: struct_response(ModelList)})
async def list_models(engine: EngineDep, request: Request) -> Response:
    """Every servable id, including ``{sie_id}:{profile}`` variants."""
    pool = router_of(request).pool
    return _json(ModelList([model_info(slot, pool) for slot in engine.slots()]))


@router.get(
    model_path("/v1/models"),
    responses={200: struct_response(ModelInfo), **error_responses([RULES[ModelNotFound.code]])},
)
async def get_model(model: str, engine: EngineDep, request: Request) -> Response:
    """One model's entry; an id that is not served answers 404 ``MODEL_NOT_FOUND``."""
    engine.require(model)
    slot = next(s for s in engine.slots() if s.entry.name == model)
    return _json(model_info(slot, router_of(request).pool))

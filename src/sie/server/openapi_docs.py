"""``/openapi.json`` of the server: FastAPI's document of its own routes (health, models, status),
with the inference ``PostRoute``s, their msgspec components and the error envelopes merged in by the
shared half (``sie.http.openapi``), which also gives ``/docs`` real bodies for JSON and msgpack.

The errors documented are the codes the server's routes can answer: the request checks'
(``sie.catalog.errors``) and the engine's (``sie.engine.errors``). FastAPI's own routes get theirs
through ``error_responses`` in their decorators. FastAPI adds a 422 to every operation with parameters;
it is dropped where nothing can fail FastAPI's validation (only string path parameters, no body),
since no such route ever sends it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from sie.catalog import errors as catalog_errors
from sie.engine import errors as engine_errors
from sie.errors import ErrorRule
from sie.http.openapi import add_example, add_routes, codes_raised_in, operations, ref_of, rules_for
from sie.http.routes import PostRoute

_VALIDATION_COMPONENTS: Final = ("HTTPValidationError", "ValidationError")


def server_rules() -> list[ErrorRule]:
    """Every code the server's inference routes may answer."""
    return rules_for(codes_raised_in(catalog_errors, engine_errors))


def _drop_unsent_422(schema: dict[str, Any]) -> None:
    """FastAPI documents 422 wherever a route has parameters; with only string path parameters and no
    body there is nothing its validation can refuse, so the 422 is never sent and is removed."""
    for op in operations(schema["paths"]):
        params = op.get("parameters", [])
        can_fail = "requestBody" in op or any(
            p["in"] != "path" or p["schema"].get("type") != "string" for p in params
        )
        if not can_fail:
            op.get("responses", {}).pop("422", None)
    if ref_of(_VALIDATION_COMPONENTS[0]) not in json.dumps(schema["paths"]):
        for name in _VALIDATION_COMPONENTS:  # the 422 body and the one component it refers to
            schema.get("components", {}).get("schemas", {}).pop(name, None)


def install(
    app: FastAPI,
    version: str,
    routes: Sequence[PostRoute],
    structs: Sequence[type] = (),
    example_model: str | None = None,
) -> None:
    """Replace ``app.openapi`` with one that adds ``routes``, the msgspec components (the routes'
    structs and ``structs``) and the error envelopes."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title, version=version, routes=app.routes, description=app.description
            )
            add_routes(schema, routes, server_rules(), structs)
            _drop_unsent_422(schema)
            if example_model is not None:
                add_example(schema, example_model)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

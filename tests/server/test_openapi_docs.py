"""The document's error answers come from the one error table, for every declared route.

The e2e schemathesis run checks the document against a live server; these check the contract that
makes it generic: a route added as a ``PostRoute`` gets every status of the codes the server answers
(``server_rules``: the request checks' and the engine's, and the catch-all 500) in its envelope without
anyone listing them, and no 422 that nothing sends.
"""

from __future__ import annotations

import json

import pytest

from sie.gateway.inference import ROUTES as GATEWAY_ROUTES
from sie.http.errors import http_of, http_variants
from sie.http.routes import PostRoute
from sie.server.api import encode, openai_compat, score_extract
from sie.server.app import create_app
from sie.server.openapi_docs import server_rules
from sie.settings.server import Settings

ROUTES = (*encode.ROUTES, *score_extract.ROUTES, *openai_compat.ROUTES)
RULES = server_rules()


@pytest.fixture(scope="module")
def document() -> dict:
    return create_app(Settings()).openapi()


def _op(document: dict, route: PostRoute) -> dict:
    path = route.path.replace(":model_id", "")
    return document["paths"][path]["post"]


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.path)
def test_every_rule_is_documented_in_the_routes_envelope(document, route: PostRoute) -> None:
    responses = _op(document, route)["responses"]
    variants = [http for rule in RULES for http in http_variants(rule)]
    statuses = {http.openai.status if route.openai_errors else http.status for http in variants}
    assert set(responses) == {"200", *map(str, statuses)}
    envelope = "OpenAIErrorResponse" if route.openai_errors else "ErrorResponse"
    for status in statuses:
        assert envelope in json.dumps(responses[str(status)]["content"]["application/json"])


def test_native_codes_and_retry_after_follow_the_table(document) -> None:
    responses = _op(document, encode.ROUTES[0])["responses"]
    for rule in RULES:
        answer = responses[str(http_of(rule).status)]
        codes = answer["content"]["application/json"]["schema"]["properties"]["detail"]["properties"]
        assert rule.code.value in codes["code"]["enum"]
        if rule.retry_after_s:
            assert "Retry-After" in answer["headers"]


def test_input_too_long_is_documented_at_both_its_statuses(document) -> None:
    """A window overflow is a 400, a body past the limit a 413: one code, both documented."""
    responses = _op(document, encode.ROUTES[0])["responses"]
    for status in ("400", "413"):
        detail = responses[status]["content"]["application/json"]["schema"]["properties"]["detail"]
        assert "INPUT_TOO_LONG" in detail["properties"]["code"]["enum"]
    assert "PAYLOAD_TOO_LARGE" not in json.dumps(responses)


def test_no_422_and_no_validation_components(document) -> None:
    text = json.dumps(document)
    assert '"422"' not in text
    assert "HTTPValidationError" not in text


def test_fastapi_routes_document_what_they_send(document) -> None:
    get_model = document["paths"]["/v1/models/{model}"]["get"]["responses"]
    assert set(get_model) == {"200", "404"}
    assert get_model["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ModelInfo"
    }
    assert set(document["paths"]["/readyz"]["get"]["responses"]) == {"200", "503"}
    for name in ("ModelInfo", "ModelList", "ErrorResponse", "OpenAIErrorResponse"):
        assert name in document["components"]["schemas"]


def test_model_path_parameters_carry_a_served_id(document) -> None:
    for path in ("/v1/encode/{model}", "/v1/models/{model}"):
        params = next(iter(document["paths"][path].values()))["parameters"]
        (param,) = [p for p in params if p["in"] == "path"]
        assert "/" in param["example"]


# Every route that reads X-SIE-Remote, as the public document declares it (the generative and audio
# routes it also lists are not served here).
READS_REMOTE = {
    "/v1/encode/{model}",
    "/v1/score/{model}",
    "/v1/extract/{model}",
    "/v1/embeddings",
    "/v1/rerank",
}


def test_the_remote_request_header_is_declared_where_it_is_read(document) -> None:
    for path, item in document["paths"].items():
        for op in item.values():
            headers = [p for p in op.get("parameters", []) if p["in"] == "header"]
            if path not in READS_REMOTE:
                assert headers == [], path
                continue
            (header,) = headers
            assert (header["name"], header["required"], header["schema"]) == (
                "X-SIE-Remote",
                False,
                {"type": "string", "enum": ["forbid"]},  # any other value is refused 400
            )
            assert "`forbid`" in header["description"] and "X-SIE-Served-By" in header["description"]


def test_the_gateway_declares_no_remote_header() -> None:
    """The gateway reads no X-SIE-Remote (no queue worker serves a remote profile)."""
    assert all(route.headers == () for route in GATEWAY_ROUTES)

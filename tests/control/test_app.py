"""sie-config in process (``httpx.ASGITransport``, no NATS): its refusals in the public service's
FastAPI bodies from the HTTP edge, its document, and the refusal to start open in production."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from sie.control.app import create_app
from sie.control.auth import OpenInProduction
from sie.settings.common import PACKAGED_MODELS_DIR
from sie.settings.control import ConfigServiceSettings

CATALOGUE = "sentence-transformers__all-MiniLM-L6-v2.yaml"
ADMIN = "admin-secret"


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    models = tmp_path / "models"
    models.mkdir()
    (models / CATALOGUE).write_text((PACKAGED_MODELS_DIR / CATALOGUE).read_text())
    settings = ConfigServiceSettings(models_dir=str(models), admin_token=ADMIN)
    transport = httpx.ASGITransport(app=create_app(settings))
    async with httpx.AsyncClient(transport=transport, base_url="http://config") as c:
        yield c


async def test_refusals_are_the_public_services_bodies(client: httpx.AsyncClient) -> None:
    missing = await client.get("/v1/configs/models")
    assert (missing.status_code, missing.json()) == (401, {"detail": "Missing Authorization header"})
    admin = {"Authorization": f"Bearer {ADMIN}"}
    unknown = await client.get("/v1/configs/models/nobody/here", headers=admin)
    assert unknown.status_code == 404 and unknown.json()["detail"]["error"] == "model_not_found"
    bad = await client.post("/v1/configs/models", content=b"sie_id: [", headers=admin)
    assert bad.status_code == 400 and bad.json()["detail"]["error"] == "parse_error"
    invalid = await client.post("/v1/configs/models", content=b"sie_id: a/b\nbogus: 1\n", headers=admin)
    assert invalid.status_code == 422 and invalid.json()["detail"]["error"] == "validation_error"
    assert "x-sie-error-code" not in invalid.headers
    nowhere = await client.get("/v1/nothing")
    assert (nowhere.status_code, nowhere.json()) == (404, {"detail": "Not Found"})


async def test_the_document_lists_every_route(client: httpx.AsyncClient) -> None:
    paths = (await client.get("/openapi.json")).json()["paths"]
    assert set(paths["/v1/configs/models"]) == {"get", "post"}
    assert "/v1/configs/models/{model_id}" in paths and "/v1/configs/export" in paths
    assert "content_conflict" in paths["/v1/configs/models"]["post"]["responses"]["default"]["description"]


@pytest.mark.parametrize(("variable", "value"), [("SIE_DEPLOYMENT_ENV", "prod"), ("SIE_ENV", "Production")])
def test_an_open_service_does_not_start_in_production(monkeypatch, variable: str, value: str) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(OpenInProduction, match="SIE_ADMIN_TOKEN"):
        create_app(ConfigServiceSettings())
    create_app(ConfigServiceSettings(config_read_token="read-only"))  # a read-only service may start
    monkeypatch.delenv(variable)
    create_app(ConfigServiceSettings())  # open on a laptop

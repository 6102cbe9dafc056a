"""``SIE_UPSTREAM_NAMES`` on sie-config, in process: a written remote profile naming an upstream the
list lacks is refused 422 with the public service's message, on POST and PUT alike; one it lists is
stored; with the variable unset nothing is checked. A local profile never is."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from sie.control.app import create_app
from sie.settings.control import ConfigServiceSettings

ADMIN = {"Authorization": "Bearer admin-secret"}


def hosted(sie_id: str, upstream: str) -> str:
    return (
        f"sie_id: {sie_id}\nremote_backed: true\nrouting: {{policy: remote_only}}\n"
        "tasks: {encode: {dense: {dim: 8}}}\nprofiles:\n  default:\n"
        "    adapter_path: sie_server.adapters.remote.openai:OpenAIUpstreamAdapter\n"
        "    max_batch_tokens: 1024\n"
        f"    adapter_options: {{loadtime: {{upstream: {upstream}, upstream_model: org/model}}}}\n"
    )


async def _client(tmp_path: Path, names: str | None) -> httpx.AsyncClient:
    models = tmp_path / "models"
    models.mkdir(exist_ok=True)
    settings = ConfigServiceSettings(models_dir=str(models), admin_token="admin-secret", upstream_names=names)
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(settings)), base_url="http://config"
    )


@pytest.fixture
async def checked(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with await _client(tmp_path, " hosted , other,") as client:
        yield client


async def test_a_remote_profile_on_an_undeclared_upstream_is_refused_422(checked: httpx.AsyncClient):
    refused = await checked.post("/v1/configs/models", content=hosted("org/a", "elsewhere"), headers=ADMIN)
    assert refused.status_code == 422, refused.text
    assert refused.json() == {
        "detail": {
            "error": "validation_error",
            "details": [{"message": "Profile 'default' of 'org/a' names an undefined upstream 'elsewhere'"}],
        }
    }
    assert (await checked.get("/v1/configs/models/org/a", headers=ADMIN)).status_code == 404
    replaced = await checked.put(
        "/v1/configs/models/org/a", content=hosted("org/a", "elsewhere"), headers=ADMIN
    )
    assert replaced.status_code == 422 and "undefined upstream 'elsewhere'" in replaced.text


async def test_a_declared_upstream_is_stored(checked: httpx.AsyncClient):
    added = await checked.post("/v1/configs/models", content=hosted("org/b", "hosted"), headers=ADMIN)
    assert added.status_code == 201, added.text
    assert added.json()["created_profiles"] == ["default"]
    replaced = await checked.put("/v1/configs/models/org/b", content=hosted("org/b", "other"), headers=ADMIN)
    assert replaced.status_code == 200, replaced.text


async def test_unset_checks_nothing(tmp_path: Path):
    async with await _client(tmp_path, None) as client:
        added = await client.post("/v1/configs/models", content=hosted("org/c", "anything"), headers=ADMIN)
    assert added.status_code == 201, added.text

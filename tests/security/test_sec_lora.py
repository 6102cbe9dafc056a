"""``options.lora_id`` under hostile input, and failed loads told without internals (audit H3, L2).

A request names a LoRA its model declares, or a folder name in the operator's LoRA root: never a
path, never a Hub id of its own choosing. Each hostile id below has a real PEFT LoRA waiting where the
old lookup would have found it (the models' folder's parent, ``$HOME``, an absolute folder, the models'
weight cache) and a Hub stand-in on loopback that records every request: a refusal that reads or
downloads anything shows up as a load, a log line or a Hub request. Answers name the id and the
allowed LoRAs, never a folder, a cache or a Hub URL; the log keeps the detail.

The server runs in process on the packaged MiniLM weights; the gateway on a real ``nats-server``.
Requests go through ``httpx.ASGITransport``.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import pytest_asyncio

from sie.gateway.app import create_app as create_gateway
from sie.server.app import create_app as create_server
from sie.settings.gateway import GatewaySettings
from sie.settings.server import Settings
from tests import builders
from tests.adapters.test_lora import merged_mean
from tests.conftest import running_nats
from tests.hub import Hub, running_hub
from tests.inprocess import served

MODEL = "test/minilm-lora"
ABSENT = "test/absent"
HUB_LORA = "someorg/declared-hub-lora"  # declared by a profile, in no cache: only the Hub has it
CACHED = "someorg/undeclared-lora"  # undeclared, but a real LoRA in the models' weight cache
TEXTS = ["a short query", "LoRA adapters change a few projections of every layer of the encoder."]

pytestmark = pytest.mark.asyncio(loop_scope="module")


@dataclass(frozen=True)
class World:
    base: Path
    models: Path
    cache: Path
    root: Path
    home: Path
    loras: dict[str, Path]  # the real LoRAs a declared name runs: "inroot" (root), "declared" (profile)

    def private(self) -> list[str]:
        """Every server-side folder an answer must not show."""
        return [str(p) for p in (self.base, self.models, self.cache, self.root, self.home)]


def _yaml(minilm_dir: Path, declared: Path) -> str:
    """MiniLM with two LoRA profiles, in the public schema: one runs a folder, one a Hub id."""
    return f"""
sie_id: {MODEL}
weights_path: "{minilm_dir}"
tasks:
  encode:
    dense: {{dim: 384}}
max_sequence_length: 256
profiles:
  default:
    max_batch_tokens: 8192
    adapter_path: "sie.adapters.dense_torch:TorchDenseEncoder"
    adapter_options: {{runtime: {{normalize: true}}}}
  tuned:
    extends: default
    adapter_options: {{runtime: {{normalize: true, lora_id: "{declared}"}}}}
  hubbed:
    extends: default
    adapter_options: {{runtime: {{normalize: true, lora_id: "{HUB_LORA}"}}}}
"""


ABSENT_YAML = f"""
sie_id: {ABSENT}
hf_id: test/absent-weights
tasks:
  encode:
    dense: {{dim: 384}}
profiles:
  default:
    max_batch_tokens: 8192
    adapter_path: "sie.adapters.dense_torch:TorchDenseEncoder"
"""


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, minilm_dir: Path) -> World:
    base = tmp_path_factory.mktemp("lora-world")
    models, cache, root, home = (base / n for n in ("models", "cache", "root", "home"))
    models.mkdir()
    root.mkdir()
    loras = {
        "inroot": builders.lora(minilm_dir, root / "inroot", 1, ["query", "value"]),
        "declared": builders.lora(minilm_dir, base / "declared", 2, ["query", "key", "value", "dense"]),
    }
    decoy = builders.lora(minilm_dir, base / "decoy", 3, ["value", "dense"])
    # Where each hostile id pointed before: `../x` (from the models' folder), `~`, an absolute folder,
    # an undeclared Hub id's snapshot in the models' weight cache.
    for where in (base / "x", home, base / "outside", cache / "models--someorg--undeclared-lora/snapshots/a"):
        shutil.copytree(decoy, where)
    (models / "lora-model.yaml").write_text(_yaml(minilm_dir, loras["declared"]))
    (models / "absent.yaml").write_text(ABSENT_YAML)
    return World(base, models, cache, root, home, loras)


@pytest.fixture(scope="module")
def hub(world: World) -> Iterator[Hub]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HOME", str(world.home))  # `~` names a real LoRA
        with running_hub(patch) as hub:
            yield hub


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(world: World, hub: Hub) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(
        models_dir=str(world.models),
        local_cache=world.cache,
        lora_root=world.root,
        preload_models=MODEL,
        hot_reload=False,
        default_compute_precision="float32",
    )
    async with served(create_server(settings), "http://server") as client:
        yield client


async def encode(client: httpx.AsyncClient, model: str = MODEL, **options: Any) -> httpx.Response:
    body: dict[str, Any] = {"items": [{"text": t} for t in TEXTS]}
    if options:
        body["params"] = {"options": options}
    return await client.post(f"/v1/encode/{model}", json=body, headers={"Accept": "application/json"})


async def settled(client: httpx.AsyncClient, model: str = MODEL, **options: Any) -> httpx.Response:
    """The first answer that is not "loading, retry shortly"."""
    deadline = time.monotonic() + 60
    while (response := await encode(client, model, **options)).status_code == 503:
        assert response.json()["detail"]["code"] in ("LORA_LOADING", "MODEL_LOADING"), response.text
        assert time.monotonic() < deadline, response.text
        await asyncio.sleep(0.1)
    return response


def vectors(response: httpx.Response) -> np.ndarray:
    assert response.status_code == 200, response.text
    return np.array([item["dense"]["values"] for item in response.json()["items"]])


def reference(minilm_dir: Path, lora: Path | None) -> np.ndarray:
    pooled = merged_mean(minilm_dir, lora, TEXTS)
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def assert_no_internals(text: str, world: World, hub: Hub) -> None:
    for secret in [*world.private(), hub.url, "snapshots", "models--", "tried"]:
        assert secret not in text, f"{secret!r} in {text!r}"


HOSTILE = ["/etc", "~", "~/", "../x", "./../x", "..", ".", "inroot/../../x", "someorg/not-cached", CACHED]


@pytest.mark.parametrize("lora_id", HOSTILE)
async def test_a_path_or_an_undeclared_id_is_refused_before_anything_is_read(
    server: httpx.AsyncClient, world: World, hub: Hub, caplog: pytest.LogCaptureFixture, lora_id: str
) -> None:
    caplog.set_level(logging.INFO)
    assert (await settled(server)).status_code == 200  # the model is loaded: only the LoRA is at stake
    first = await encode(server, lora_id=lora_id)
    assert first.status_code == 400, first.text  # at once: no load started (that would be a 503)
    detail = first.json()["detail"]
    assert detail["code"] == "INVALID_INPUT"
    message = detail["message"]
    assert f"'{lora_id}'" in message and MODEL in message
    assert "Allowed:" in message and HUB_LORA in message  # the declared LoRA a request may name
    assert_no_internals(message, world, hub)
    await asyncio.sleep(0.3)  # a load started in the background would have answered by now
    again = await encode(server, lora_id=lora_id)
    assert (again.status_code, again.json()["detail"]["message"]) == (400, message)
    assert not [r for r in caplog.records if "LoRA" in r.getMessage() and lora_id in r.getMessage()]
    assert hub.asked == []


async def test_the_outside_folder_by_absolute_path_is_refused(
    server: httpx.AsyncClient, world: World, hub: Hub
) -> None:
    outside = str(world.base / "outside")
    response = await encode(server, lora_id=outside)
    assert response.status_code == 400, response.text
    message = response.json()["detail"]["message"]
    assert f"'{outside}'" in message and "Allowed:" in message and HUB_LORA in message
    assert_no_internals(message.replace(outside, "<the id>"), world, hub)


async def test_declared_loras_load_and_change_the_output(
    server: httpx.AsyncClient, world: World, minilm_dir: Path
) -> None:
    base = vectors(await settled(server))
    np.testing.assert_allclose(base, reference(minilm_dir, None), atol=2e-5)
    in_root = vectors(await settled(server, lora_id="inroot"))  # a folder name in the LoRA root
    np.testing.assert_allclose(in_root, reference(minilm_dir, world.loras["inroot"]), atol=2e-5)
    profile = vectors(await settled(server, f"{MODEL}:tuned"))  # the profile's own LoRA folder
    np.testing.assert_allclose(profile, reference(minilm_dir, world.loras["declared"]), atol=2e-5)
    assert not np.allclose(in_root, base, atol=1e-3) and not np.allclose(profile, base, atol=1e-3)


async def test_a_declared_hub_lora_is_not_downloaded_unless_the_operator_allows_it(
    server: httpx.AsyncClient, world: World, hub: Hub, caplog: pytest.LogCaptureFixture
) -> None:
    response = await settled(server, lora_id=HUB_LORA)
    assert response.status_code == 400, response.text
    message = response.json()["detail"]["message"]
    assert message.startswith(f"LoRA '{HUB_LORA}' for model '{MODEL}' failed to load (NOT_FOUND): ")
    assert_no_internals(message, world, hub)
    assert hub.asked == []
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "SIE_LORA_HF_FALLBACK" in logged  # the operator's log says why and what to set


async def test_a_name_missing_from_the_root_is_refused_naming_the_allowed_ones(
    server: httpx.AsyncClient, world: World, hub: Hub
) -> None:
    response = await settled(server, lora_id="no-such-lora")
    assert response.status_code == 400, response.text
    message = response.json()["detail"]["message"]
    assert "'no-such-lora'" in message and MODEL in message
    assert "Allowed:" in message and HUB_LORA in message and "inroot" in message
    assert_no_internals(message, world, hub)
    assert hub.asked == []


async def test_a_failed_model_load_tells_the_client_its_class_not_the_loaders_text(
    server: httpx.AsyncClient, world: World, hub: Hub, caplog: pytest.LogCaptureFixture
) -> None:
    response = await settled(server, ABSENT)
    assert response.status_code == 502, response.text
    detail = response.json()["detail"]
    assert (detail["code"], detail["error_class"], detail["permanent"]) == (
        "MODEL_LOAD_FAILED",
        "NOT_FOUND",
        True,
    )
    message = detail["message"]
    assert message == (
        f"Model '{ABSENT}' failed to load (NOT_FOUND): its weights are in none of the places this "
        "server is configured to look. The server's log has the detail."
    )
    assert_no_internals(message, world, hub)
    info = (await server.get(f"/v1/models/{ABSENT}")).json()
    assert info["last_error"]["code"] == "MODEL_LOAD_FAILED" and info["last_error"]["message"] in message
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert str(world.cache / "models--test--absent-weights" / "snapshots") in logged  # the detail stays


async def test_the_gateway_refuses_a_path_before_publishing(
    world: World, tmp_path_factory: pytest.TempPathFactory
) -> None:
    with running_nats(tmp_path_factory.mktemp("nats")) as nats:
        settings = GatewaySettings(
            models_dir=str(world.models), nats_url=nats.url, gateway_request_timeout=1.0
        )
        async with served(create_gateway(settings), "http://gateway", timeout=5) as client:
            for lora_id in ("/etc", "~", "../x", "someorg/not-cached"):
                response = await encode(client, lora_id=lora_id)
                assert response.status_code == 400, response.text
                detail = response.json()["detail"]
                assert detail["code"] == "INVALID_INPUT" and HUB_LORA in detail["message"]

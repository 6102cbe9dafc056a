"""The public gateway's file watching, as the public chart sets it (``SIE_GATEWAY_HOT_RELOAD=true``,
``SIE_GATEWAY_POLLING_WATCHER=true``): a real ``sie-gateway`` over a real nats-server serves a model
YAML and a bundle YAML added to its folders, drops a deleted one, and keeps what it serves while a YAML
does not parse; a gateway without the variable keeps what it read at start. The chart's other gateway
variables that have no use here (``SIE_GATEWAY_ENABLE_POOLS=false``, ``SIE_MULTI_ROUTER``,
``SIE_GATEWAY_MACHINE_PROFILES``) are each answered with one warning line."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import MODELS_DIR, running_nats
from tests.e2e.cluster import Gateway, run_gateway

BUNDLES = Path(MODELS_DIR).parent / "bundles"
MINILM_YAML = "sentence-transformers__all-MiniLM-L6-v2.yaml"


def folders(root: Path) -> tuple[Path, Path]:
    models, bundles = root / "models", root / "bundles"
    models.mkdir(parents=True)
    bundles.mkdir()
    shutil.copy(MODELS_DIR / MINILM_YAML, models)
    shutil.copy(BUNDLES / "default.yaml", bundles)
    return models, bundles


def model_ids(gateway: Gateway) -> set[str]:
    response = gateway.client.get("/v1/configs/models")
    assert response.status_code == 200, response.text
    return {m["model_id"] for m in response.json()["models"]}


def bundle_ids(gateway: Gateway) -> set[str]:
    return {b["bundle_id"] for b in gateway.client.get("/v1/configs/bundles").json()["bundles"]}


def wait_until(check: Callable[[], bool], gateway: Gateway, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"the change never took effect:\n{gateway.log()}"
        time.sleep(0.1)


def copy_of_minilm(sie_id: str) -> str:
    text = (MODELS_DIR / MINILM_YAML).read_text()
    return text.replace("sie_id: sentence-transformers/all-MiniLM-L6-v2", f"sie_id: {sie_id}", 1)


@pytest.fixture(scope="module")
def nats_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_nats(tmp_path_factory.mktemp("hot-reload-nats")) as server:
        yield server.url


def test_the_chart_s_watching_gateway_serves_folder_changes(nats_url: str, tmp_path: Path) -> None:
    models, bundles = folders(tmp_path)
    env = {
        "SIE_NATS_URL": nats_url,
        "SIE_MODELS_DIR": str(models),
        "SIE_BUNDLES_DIR": str(bundles),
        "SIE_GATEWAY_HOT_RELOAD": "true",
        "SIE_GATEWAY_POLLING_WATCHER": "true",
    }
    with run_gateway(tmp_path / "gateway", env) as gateway:
        assert model_ids(gateway) == {"sentence-transformers/all-MiniLM-L6-v2"}
        wait_until(lambda: "for config changes (polling)" in gateway.log(), gateway)

        (models / "added.yaml").write_text(copy_of_minilm("test/hot-added"))
        wait_until(lambda: "test/hot-added" in model_ids(gateway), gateway)

        extra = (BUNDLES / "default.yaml").read_text().replace("name: default", "name: hot-bundle", 1)
        (bundles / "hot-bundle.yaml").write_text(extra.replace("default: true\n", "", 1))
        wait_until(lambda: "hot-bundle" in bundle_ids(gateway), gateway)

        (models / "broken.yaml").write_text("sie_id: [unclosed\n")
        wait_until(lambda: "does not parse; keeping the models being served" in gateway.log(), gateway)
        assert model_ids(gateway) == {"sentence-transformers/all-MiniLM-L6-v2", "test/hot-added"}

        (models / "broken.yaml").unlink()
        (models / "added.yaml").unlink()
        wait_until(lambda: model_ids(gateway) == {"sentence-transformers/all-MiniLM-L6-v2"}, gateway)
        assert "hot-bundle" in bundle_ids(gateway)


def test_without_the_variable_the_folders_are_read_once_and_moot_ones_warn_once(
    nats_url: str, tmp_path: Path
) -> None:
    models, bundles = folders(tmp_path)
    env = {
        "SIE_NATS_URL": nats_url,
        "SIE_MODELS_DIR": str(models),
        "SIE_BUNDLES_DIR": str(bundles),
        "SIE_GATEWAY_ENABLE_POOLS": "false",
        "SIE_MULTI_ROUTER": "true",
        "SIE_GATEWAY_MACHINE_PROFILES": '{"l4": {"gpu": "l4"}}',
    }
    with run_gateway(tmp_path / "gateway", env) as gateway:
        (models / "added.yaml").write_text(copy_of_minilm("test/not-watched"))
        time.sleep(2.5)  # past the watcher's one-second debounce, had there been one
        assert model_ids(gateway) == {"sentence-transformers/all-MiniLM-L6-v2"}
        log = gateway.log()
        # Pools stay on: the variable's false changes nothing the API answers.
        assert gateway.client.get("/v1/pools").status_code == 200
    assert "for config changes" not in log
    for name, why in (
        ("SIE_GATEWAY_ENABLE_POOLS", "pools are always on in this gateway"),
        ("SIE_MULTI_ROUTER", "every gateway reads and writes the pools in the NATS key-value bucket"),
        ("SIE_GATEWAY_MACHINE_PROFILES", "the machine profiles this cluster runs are"),
    ):
        (line,) = [line for line in log.splitlines() if f"{name}: no effect here" in line]
        assert why in line

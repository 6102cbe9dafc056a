"""The config control plane end to end: ``sie-config`` → NATS deltas / epoch polling → a running
``sie-gateway`` and two ``sie-server`` queue workers, with a real ``nats-server``.

Worker ``w2`` reaches NATS through a relay the test can cut: its partition is its own, so the other
worker and the gateway keep getting deltas while it misses them, and what it then learns it can only
have learnt by polling sie-config's epoch.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import yaml

from sie.catalog.model_config import ModelConfig
from sie.settings.common import PACKAGED_BUNDLES_DIR, PACKAGED_MODELS_DIR
from tests.conftest import running_nats
from tests.e2e.cluster import (
    ConfigService,
    Gateway,
    TcpProxy,
    run_config_service,
    run_gateway,
    run_worker,
    worker_env,
)
from tests.e2e.conftest import MINILM, Server

API_MODEL = "tests/minilm-api"
W2_POLL_MS = 2000


def model_yaml(sie_id: str, weights: Path, profiles: dict[str, Any] | None = None) -> str:
    """A config for the packaged MiniLM's weights under another id: what a user adds at run time."""
    default = {
        "max_batch_tokens": 16384,
        "adapter_path": "sie.adapters.dense_torch:TorchDenseEncoder",
        "adapter_options": {"runtime": {"pooling": "mean", "normalize": True}},
    }
    config = {
        "sie_id": sie_id,
        "weights_path": str(weights),
        "tasks": {"encode": {"dense": {"dim": 384}}},
        "max_sequence_length": 256,
        "profiles": profiles if profiles is not None else {"default": default},
    }
    return yaml.safe_dump(config, sort_keys=False)


@dataclass
class Cluster:
    config: ConfigService
    gateway: Gateway
    w1: Server
    w2: Server
    w2_link: TcpProxy
    store: Path


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("control")
    store = root / "config-store"
    with running_nats(root) as nats:
        config_env = {
            "SIE_NATS_URL": nats.url,
            "SIE_CONFIG_STORE_DIR": str(store),
            "SIE_CONFIG_RESTORE": "true",
            "POD_NAME": "sie-config-0",
        }
        with run_config_service(root / "config", config_env) as config:
            config.wait_nats()
            follow = {"SIE_CONFIG_SERVICE_URL": config.url}
            link = TcpProxy(nats.port)
            # w1 and the gateway poll rarely: what reaches them in seconds came as a delta.
            w1_env = {**worker_env(nats.url, "w1"), **follow, "SIE_WORKER_CONFIG_POLL_INTERVAL_MS": "600000"}
            w2_env = {
                **worker_env(f"nats://127.0.0.1:{link.port}", "w2"),
                **follow,
                "SIE_WORKER_CONFIG_POLL_INTERVAL_MS": str(W2_POLL_MS),
                "SIE_WORKER_CONFIG_FULL_EXPORT_INTERVAL_MS": "0",
            }
            gateway_env = {
                "SIE_NATS_URL": nats.url,
                "SIE_HEALTH_PUBLISH_INTERVAL_MS": "500",
                **follow,
                "SIE_GATEWAY_CONFIG_POLL_INTERVAL_MS": "600000",
            }
            with (
                run_worker(root / "w1", w1_env) as w1,
                run_worker(root / "w2", w2_env) as w2,
                run_gateway(root / "gateway", gateway_env) as gateway,
            ):
                gateway.wait_for_workers(2, [MINILM])
                yield Cluster(config, gateway, w1, w2, link, store)


def wait_until(what: str, check: Any, timeout_s: float, log: str = "") -> float:
    """Seconds until ``check()`` is true; fails after ``timeout_s``."""
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < timeout_s, f"{what} within {timeout_s} s\n{log}"
        time.sleep(0.1)
    return time.monotonic() - started


def serves(server: Server | Gateway, model: str) -> bool:
    response = server.client.get("/v1/models")
    return response.status_code == 200 and model in {m["name"] for m in response.json()["models"]}


def everywhere(cluster: Cluster, model: str) -> bool:
    return all(serves(s, model) for s in (cluster.gateway, cluster.w1, cluster.w2))


def acked(gateway: Gateway, model: str) -> bool:
    response = gateway.client.get(f"/v1/configs/models/{model}/status")
    return response.status_code == 200 and bool(response.json()["all_bundles_acked"])


ENCODE_SCRIPT = """
import json, sys
import numpy as np
from sie_sdk import SIEClient
from sie_sdk.types import Item

url, calls = sys.argv[1], json.loads(sys.argv[2])
out = {}
with SIEClient(url, timeout_s=120) as client:
    for name, model, options in calls:
        result = client.encode(model, [Item(text="the control plane adds models at run time")], options=options)
        out[name] = np.asarray(result[0]["dense"], dtype=np.float64).tolist()
print(json.dumps(out))
"""


def test_a_posted_config_reaches_the_running_gateway_and_workers_and_the_public_sdk_encodes_with_it(
    cluster: Cluster, minilm_dir: Path, run_public_sdk: Any
) -> None:
    gateway = cluster.gateway
    missing = gateway.client.post(f"/v1/encode/{API_MODEL}", json={"items": [{"text": "x"}]})
    assert missing.status_code == 404 and missing.json()["detail"]["code"] == "MODEL_NOT_FOUND"

    added = cluster.config.post(model_yaml(API_MODEL, minilm_dir))
    assert added.status_code == 201, added.text
    assert added.json()["created_profiles"] == ["default"]
    assert added.json()["routable_bundles_by_profile"] == {"default": ["default"]}
    wait_until(
        "the config on the gateway and both workers",
        lambda: everywhere(cluster, API_MODEL),
        30,
        gateway.log(),
    )
    wait_until("both workers acknowledge it", lambda: acked(gateway, API_MODEL), 30, gateway.log())
    status = gateway.client.get(f"/v1/configs/models/{API_MODEL}/status").json()
    assert status["source"] == "config-service" and status["config_epoch"] >= 1
    assert status["bundles"][0]["acked_workers"] == ["w1", "w2"]
    assert delta_brought(gateway.log(), API_MODEL)
    assert delta_brought(cluster.w1.log(), API_MODEL)

    # A profile appended later reaches them the same way; its option (no normalization) shows.
    unnormalized = {
        "unnormalized": {
            "extends": "default",
            "adapter_options": {"runtime": {"pooling": "mean", "normalize": False}},
        }
    }
    appended = cluster.config.post(model_yaml(API_MODEL, minilm_dir, unnormalized))
    assert appended.status_code == 201, appended.text
    assert appended.json()["created_profiles"] == ["unnormalized"]
    variant = f"{API_MODEL}:unnormalized"
    wait_until("the new profile everywhere", lambda: everywhere(cluster, variant), 30, gateway.log())

    calls = [
        ["packaged", MINILM, None],
        ["added", API_MODEL, None],
        ["added_unnormalized", API_MODEL, {"profile": "unnormalized"}],
    ]
    got = run_public_sdk(ENCODE_SCRIPT, gateway.url, json.dumps(calls))
    packaged, added_vector, raw = (np.asarray(got[k]) for k in ("packaged", "added", "added_unnormalized"))
    assert cosine(added_vector, packaged) > 1 - 1e-6  # the same weights under the new id
    assert np.linalg.norm(added_vector) == pytest.approx(1.0, abs=1e-5)
    assert abs(np.linalg.norm(raw) - 1.0) > 0.01 and cosine(raw, packaged) > 1 - 1e-6


def delta_brought(log: str, model: str) -> bool:
    """Whether a config delta set off the fetch of sie-config's export that brought ``model`` (a
    delta's own body is never applied: ``sie.catalog.follower``)."""
    return any("after a config delta" in line and model in line for line in log.splitlines())


def cosine(a: Any, b: Any) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_a_delta_missed_while_a_worker_is_off_nats_is_recovered_by_epoch_polling(
    cluster: Cluster, minilm_dir: Path
) -> None:
    model = "tests/minilm-missed"
    lost = "disconnected from NATS"
    seen = cluster.w2.log().count(lost)
    cluster.w2_link.cut()
    try:
        wait_until("w2 to notice it lost NATS", lambda: cluster.w2.log().count(lost) > seen, 30)
        added = cluster.config.post(model_yaml(model, minilm_dir))
        assert added.status_code == 201, added.text
        wait_until("w1 gets the delta", lambda: serves(cluster.w1, model), 10, cluster.w1.log())
        # w2 heard nothing on NATS; its next epoch poll (every 2 s) finds the epoch moved.
        took = wait_until(
            "w2 recovers it by polling", lambda: serves(cluster.w2, model), W2_POLL_MS / 1000 + 5
        )
        assert took <= W2_POLL_MS / 1000 + 5
        assert not delta_brought(cluster.w2.log(), model)
    finally:
        cluster.w2_link.restore()
    # Back on NATS, w2 serves the model through the gateway like w1.
    wait_until("both acknowledge", lambda: acked(cluster.gateway, model), 30, cluster.gateway.log())


def test_sie_config_killed_mid_burst_loses_no_answered_write_and_its_epoch_never_goes_back(
    cluster: Cluster, minilm_dir: Path
) -> None:
    service = cluster.config
    before = service.client.get("/v1/configs/epoch").json()["epoch"]
    answered: dict[str, int] = {}  # model id -> status of a 2xx answer
    epochs: list[int] = [before]
    stop = threading.Event()

    def post(worker: int) -> None:
        with httpx.Client(base_url=service.url, timeout=10) as client:
            for i in range(200):
                if stop.is_set():
                    return
                model = f"tests/burst-{worker}-{i}"
                try:
                    response = client.post(
                        "/v1/configs/models", content=model_yaml(model, minilm_dir).encode()
                    )
                    seen = client.get("/v1/configs/epoch")
                except httpx.TransportError:
                    return  # the service is gone: this post may or may not have landed
                if response.status_code in (200, 201):
                    answered[model] = response.status_code
                if seen.status_code == 200:
                    epochs.append(seen.json()["epoch"])

    threads = [threading.Thread(target=post, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    wait_until("a few answered writes", lambda: len(answered) >= 20, 60, service.log())
    service.kill()
    stop.set()
    for thread in threads:
        thread.join(timeout=30)
    assert answered and all(status == 201 for status in answered.values())

    # Nothing half-written: every model file in the store is a whole config of its own id.
    stored = sorted((cluster.store / "models").glob("*.yaml"))
    for path in stored:
        config = ModelConfig.model_validate(yaml.safe_load(path.read_text()))
        assert path.name == config.sie_id.replace("/", "__") + ".yaml"
    on_disk = {p.name.removesuffix(".yaml").replace("__", "/") for p in stored}
    assert set(answered) <= on_disk

    service.start()
    service.wait_nats()
    after = service.client.get("/v1/configs/epoch").json()["epoch"]
    assert after >= max(epochs) and after >= before + len(answered)
    listed = {m["model_id"] for m in service.client.get("/v1/configs/models").json()["models"]}
    assert set(answered) <= listed
    # The cluster converges on them (the gateway by the epoch it polls; make it poll now by posting
    # one more config, whose delta carries an epoch past what the gateway holds).
    last = cluster.config.post(model_yaml("tests/after-restart", minilm_dir))
    assert last.status_code == 201, last.text
    everything = {*answered, "tests/after-restart"}
    wait_until(
        "the gateway and workers serve every answered write",
        lambda: all(everywhere(cluster, model) for model in everything),
        60,
        cluster.gateway.log(),
    )


def test_our_gateway_and_worker_follow_the_public_sie_config(
    tmp_path: Path, minilm_dir: Path, public_config_command: list[str]
) -> None:
    """The public ``sie-config`` 0.10.1 as the writer: its export, its deltas (producer
    ``sie-config-public``, trusted by the default ``sie-config`` prefix) and its epoch drive ours."""
    model = "tests/from-the-public-writer"
    with running_nats(tmp_path) as nats:
        writer_env = {
            "SIE_NATS_URL": nats.url,
            "SIE_BUNDLES_DIR": str(PACKAGED_BUNDLES_DIR),
            "SIE_MODELS_DIR": str(PACKAGED_MODELS_DIR),
            "SIE_CONFIG_STORE_DIR": str(tmp_path / "store"),
            "POD_NAME": "sie-config-public",
        }
        with run_config_service(tmp_path / "config", writer_env, public_config_command) as writer:
            writer.wait_nats()
            follow = {"SIE_CONFIG_SERVICE_URL": writer.url}
            worker = {**worker_env(nats.url, "w1"), **follow}
            gateway_env = {"SIE_NATS_URL": nats.url, "SIE_HEALTH_PUBLISH_INTERVAL_MS": "500", **follow}
            with (
                run_worker(tmp_path / "w1", worker) as w1,
                run_gateway(tmp_path / "gateway", gateway_env) as gateway,
            ):
                gateway.wait_for_workers(1, [MINILM])
                added = writer.post(model_yaml(model, minilm_dir))
                assert added.status_code == 201, added.text
                wait_until(
                    "the gateway and worker serve it",
                    lambda: serves(gateway, model) and serves(w1, model),
                    30,
                )
                assert delta_brought(gateway.log(), model)
                wait_until("the worker acknowledges it", lambda: acked(gateway, model), 30, gateway.log())
                vectors = []
                for name in (MINILM, model):
                    response = gateway.client.post(
                        f"/v1/encode/{name}",
                        json={"items": [{"text": "a config from the public writer"}]},
                        headers={"accept": "application/json"},
                    )
                    assert response.status_code == 200, response.text
                    vectors.append(np.asarray(response.json()["items"][0]["dense"]["values"]))
                assert cosine(vectors[0], vectors[1]) > 1 - 1e-6

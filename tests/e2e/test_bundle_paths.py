"""Bundles in a real cluster: ``nats-server``, our ``sie-config``, a gateway and two queue workers, one
per bundle (``default``, and ``extra``, which also runs the dense torch family).

- A model path ``bundle:/org/model`` sends the work to that bundle's worker; a bundle that does not
  serve the model is refused 409 with ``compatible_bundles`` (the public gateway's answer), through
  the public ``sie-sdk`` too.
- ``PUT /v1/configs/models/{id}`` replaces a config and ``DELETE`` removes it: the gateway and both
  workers converge on each (a request sees the new config, then the model is gone).
- A config of a family this release does not run is accepted into the bundle that lists it, and the
  gateway and the workers answer a request for it 400 ``MODEL_NOT_SERVED`` naming the family.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from sie.settings.common import PACKAGED_BUNDLES_DIR
from tests.conftest import running_nats
from tests.e2e.cluster import ConfigService, Gateway, run_config_service, run_gateway, run_worker, worker_env
from tests.e2e.conftest import MINILM, Server
from tests.e2e.test_control_plane import model_yaml, serves, wait_until

EXTRA = "name: extra\npriority: 20\nadapters:\n- sie.adapters.dense_torch\n"
# A public family no release here knows, in a bundle of its own (a later public release's, say).
FUTURE = "name: future\npriority: 40\nadapters:\n- sie_server.adapters.hologram.adapter\n"
RERANKER = "BAAI/bge-reranker-base"  # a cross-encoder: in the default bundle only
PUT_MODEL = "tests/minilm-put"
TEXT = {"items": [{"text": "bundles pick the workers"}]}
JSON = {"accept": "application/json"}


@dataclass
class Cluster:
    config: ConfigService
    gateway: Gateway
    default: Server
    extra: Server


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("bundles")
    bundles = root / "bundles"
    bundles.mkdir()
    shutil.copy(PACKAGED_BUNDLES_DIR / "default.yaml", bundles / "default.yaml")
    (bundles / "extra.yaml").write_text(EXTRA)
    (bundles / "future.yaml").write_text(FUTURE)
    shared = {"SIE_BUNDLES_DIR": str(bundles)}
    with running_nats(root) as nats:
        config_env = {
            **shared,
            "SIE_NATS_URL": nats.url,
            "SIE_CONFIG_STORE_DIR": str(root / "store"),
            "POD_NAME": "sie-config-0",
        }
        with run_config_service(root / "config", config_env) as config:
            config.wait_nats()
            follow = {**shared, "SIE_CONFIG_SERVICE_URL": config.url}
            # A removal and a model of a bundle a process does not serve reach it by epoch polling
            # alone (no delta says either): every second here, not the default 30 s a test waited.
            gateway_env = {
                "SIE_NATS_URL": nats.url,
                "SIE_HEALTH_PUBLISH_INTERVAL_MS": "500",
                "SIE_GATEWAY_CONFIG_POLL_INTERVAL_MS": "1000",
                **follow,
            }
            workers = {**follow, "SIE_WORKER_CONFIG_POLL_INTERVAL_MS": "1000"}
            with (
                run_worker(root / "wd", {**worker_env(nats.url, "wd"), **workers}) as default,
                run_worker(
                    root / "wx", {**worker_env(nats.url, "wx"), **workers, "SIE_BUNDLE": "extra"}
                ) as extra,
                run_gateway(root / "gateway", gateway_env) as gateway,
            ):
                gateway.wait_for_workers(2, [MINILM])
                yield Cluster(config, gateway, default, extra)


def encode(server: Gateway | Server, path: str) -> httpx.Response:
    return server.client.post(f"/v1/encode/{path}", json=TEXT, headers=JSON)


def vector(response: httpx.Response) -> np.ndarray:
    assert response.status_code == 200, response.text
    return np.asarray(response.json()["items"][0]["dense"]["values"], dtype=np.float64)


def test_a_bundle_path_sends_the_work_to_that_bundles_workers(cluster: Cluster) -> None:
    gateway = cluster.gateway
    plain, pinned_default, pinned_extra = (
        encode(gateway, MINILM),
        encode(gateway, f"default:/{MINILM}"),
        encode(gateway, f"EXTRA:/{MINILM}"),  # a bundle name matches in any case
    )
    assert plain.headers["x-sie-worker"] == "wd"  # the first bundle by priority
    assert pinned_default.headers["x-sie-worker"] == "wd"
    assert pinned_extra.headers["x-sie-worker"] == "wx"
    assert pinned_extra.json()["model"] == MINILM  # answered as the model, without the bundle
    np.testing.assert_allclose(vector(pinned_extra), vector(plain), atol=1e-5)


def test_a_bundle_that_does_not_serve_the_model_is_a_409_listing_those_that_do(cluster: Cluster) -> None:
    gateway = cluster.gateway
    refused = encode(gateway, f"gpu:/{MINILM}")
    assert refused.status_code == 409
    body = refused.json()
    assert body["compatible_bundles"] == ["default", "extra"]
    assert "gpu" in body["message"] and body["detail"]["code"] == "BUNDLE_CONFLICT"
    assert refused.headers["x-sie-error-code"] == "BUNDLE_CONFLICT"
    score = {"query": {"text": "q"}, "items": [{"text": "a"}]}
    only_default = gateway.client.post(f"/v1/score/extra:/{RERANKER}", json=score, headers=JSON)
    assert only_default.status_code == 409 and only_default.json()["compatible_bundles"] == ["default"]
    unknown = encode(gateway, "default:/nobody/here")
    assert unknown.status_code == 404 and unknown.json()["detail"]["code"] == "MODEL_NOT_FOUND"
    empty = encode(gateway, f":/{MINILM}")
    assert empty.status_code == 400 and empty.json()["detail"]["code"] == "INVALID_INPUT"


PUBLIC_SDK_SCRIPT = """
import json, sys
from sie_sdk import SIEClient
from sie_sdk.types import Item

url, model = sys.argv[1], sys.argv[2]
out = {}
with SIEClient(url, timeout_s=120) as client:
    result = client.encode("extra:/" + model, [Item(text="bundles pick the workers")])
    out["dims"] = len(result[0]["dense"])
    try:
        client.encode("gpu:/" + model, [Item(text="x")])
        out["refused"] = None
    except Exception as exc:
        out["refused"] = [type(exc).__name__, getattr(exc, "status_code", None), getattr(exc, "code", None)]
print(json.dumps(out))
"""


def test_the_public_sdk_sends_bundle_paths(cluster: Cluster, run_public_sdk: Any) -> None:
    got = run_public_sdk(PUBLIC_SDK_SCRIPT, cluster.gateway.url, MINILM)
    assert got["dims"] == 384
    assert got["refused"] == ["RequestError", 409, "BUNDLE_CONFLICT"]


def everywhere(cluster: Cluster, model: str) -> bool:
    return all(serves(s, model) for s in (cluster.gateway, cluster.default, cluster.extra))


def nowhere(cluster: Cluster, model: str) -> bool:
    return not any(serves(s, model) for s in (cluster.gateway, cluster.default, cluster.extra))


def put(config: ConfigService, text: str) -> httpx.Response:
    return config.client.put(
        f"/v1/configs/models/{PUT_MODEL}", content=text.encode(), headers=config.auth_headers()
    )


def test_put_and_delete_converge_on_the_gateway_and_the_workers(cluster: Cluster, minilm_dir: Path) -> None:
    gateway, config = cluster.gateway, cluster.config
    created = put(config, model_yaml(PUT_MODEL, minilm_dir))
    assert created.status_code == 200 and created.json()["replaced"] is True, created.text
    assert created.json()["affected_bundles"] == ["default", "extra"]
    wait_until("the put config everywhere", lambda: everywhere(cluster, PUT_MODEL), 30, gateway.log())
    normalized = vector(encode(gateway, f"extra:/{PUT_MODEL}"))
    assert np.linalg.norm(normalized) == pytest.approx(1.0, abs=1e-5)

    # Replaced wholesale: the same id, normalization off; a POST of it would be a 409.
    raw = {
        "default": {"max_batch_tokens": 16384, "adapter_path": "sie.adapters.dense_torch:TorchDenseEncoder"}
    }
    raw["default"]["adapter_options"] = {"runtime": {"pooling": "mean", "normalize": False}}
    assert config.post(model_yaml(PUT_MODEL, minilm_dir, raw)).status_code == 409
    replaced = put(config, model_yaml(PUT_MODEL, minilm_dir, raw))
    assert replaced.status_code == 200 and replaced.json()["replaced"] is True, replaced.text

    def unnormalized(path: str) -> bool:
        response = encode(gateway, path)
        return response.status_code == 200 and abs(np.linalg.norm(vector(response)) - 1.0) > 0.01

    for bundle in ("default", "extra"):
        wait_until(
            f"the replaced config on the {bundle} worker",
            lambda b=bundle: unnormalized(f"{b}:/{PUT_MODEL}"),
            60,
        )
    again = put(config, model_yaml(PUT_MODEL, minilm_dir, raw))
    assert again.json()["unchanged"] is True

    deleted = config.client.delete(f"/v1/configs/models/{PUT_MODEL}", headers=config.auth_headers())
    assert deleted.status_code == 200, deleted.text
    assert json.loads(deleted.text)["deleted"] is True
    wait_until("the model gone everywhere", lambda: nowhere(cluster, PUT_MODEL), 30, gateway.log())
    gone = encode(gateway, PUT_MODEL)
    assert gone.status_code == 404 and gone.json()["detail"]["code"] == "MODEL_NOT_FOUND"


def foreign_yaml(sie_id: str, adapter_path: str) -> str:
    config = {
        "sie_id": sie_id,
        "hf_id": "acme/weights",
        "tasks": {"encode": {"dense": {"dim": 8}}},
        "profiles": {"default": {"adapter_path": adapter_path, "max_batch_tokens": 4096}},
    }
    return json.dumps(config)  # JSON is YAML


@pytest.mark.parametrize(
    ("sie_id", "adapter_path", "bundle", "family"),
    [
        ("tests/asr", "sie_server.adapters.whisper.adapter:WhisperAdapter", "default", "Whisper"),
        ("tests/hologram", "sie_server.adapters.hologram.adapter:HologramAdapter", "future", "does not know"),
    ],
)
def test_a_family_we_do_not_run_is_accepted_into_its_bundle_and_refused_per_request(
    cluster: Cluster, sie_id: str, adapter_path: str, bundle: str, family: str
) -> None:
    added = cluster.config.post(foreign_yaml(sie_id, adapter_path))
    assert added.status_code == 201, added.text
    assert added.json()["routable_bundles_by_profile"] == {"default": [bundle]}

    def refused(server: Server | Gateway) -> bool:
        return encode(server, sie_id).status_code == 400

    wait_until("the gateway knows it", lambda: refused(cluster.gateway), 30, cluster.gateway.log())
    for server in (cluster.gateway, cluster.default):
        wait_until("it is known", lambda s=server: refused(s), 30)
        answer = encode(server, sie_id)
        assert answer.json()["detail"]["code"] == "MODEL_NOT_SERVED"
        assert family in answer.json()["detail"]["message"]
    assert "No module named 'sie_server" not in cluster.default.log()  # refused by family, never imported
